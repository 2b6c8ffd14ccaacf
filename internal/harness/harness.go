package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/hook"
)

// Harness names an agent harness engram installs into.
type Harness string

// The harnesses engram knows.
const (
	ClaudeCode Harness = "claude-code"
	Codex      Harness = "codex"
)

// Harnesses lists the known harnesses in the order status shows them.
var Harnesses = []Harness{ClaudeCode, Codex}

// Scope says whose files an install goes into.
type Scope string

// The scopes.
const (
	// ProjectScope is the project's own files (.claude/settings.json and
	// .mcp.json; .codex/hooks.json and .codex/config.toml), whose commands
	// name the project with --project.
	ProjectScope Scope = "project"
	// UserScope is the user's files under the home directory, for every
	// project; engram finds the project from the harness's working
	// directory.
	UserScope Scope = "user"
)

// Scopes lists the scopes in the order status shows them.
var Scopes = []Scope{ProjectScope, UserScope}

// Events are the hook events engram installs, for both harnesses.
var Events = hook.Events

// DefaultTimeout is how long a harness lets one engram hook run before it
// gives up on it.
const DefaultTimeout = 30 * time.Second

// Options say what to install where. Install, Uninstall and Status take
// the same Options.
type Options struct {
	Harness Harness
	Scope   Scope
	// Project is the project's directory, absolute: where a project
	// scope's files go, and what its commands pass as --project. Required
	// for ProjectScope.
	Project string
	// Home is the user's home directory. Required for UserScope, and for
	// Codex at either scope (its project trust is in the user's config).
	Home string
	// ClaudeConfigDir is Claude Code's $CLAUDE_CONFIG_DIR: where it keeps
	// the user's settings.json and .claude.json. Empty means Home/.claude
	// and Home/.claude.json.
	ClaudeConfigDir string
	// CodexHome is Codex's $CODEX_HOME. Empty means Home/.codex.
	CodexHome string
	// Command is the engram executable the harness runs, best absolute.
	Command string
	// MCPArgs are more arguments for `engram mcp`, after mcp and
	// --project: the identity the server runs with (agent, session
	// naming), once that is decided. Nil adds none.
	MCPArgs []string
	// Timeout is each hook's timeout, whole seconds. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// DryRun computes every change and writes nothing.
	DryRun bool
	// Now stamps backups. Nil means time.Now.
	Now func() time.Time
}

// State is what became of one entry, or where it stands.
type State string

// The states of an entry.
const (
	Added     State = "added"     // Install wrote it
	Updated   State = "updated"   // Install rewrote engram's entry for another engram binary
	Present   State = "installed" // in place as Install writes it
	Removed   State = "removed"   // Uninstall took it out
	Absent    State = "absent"    // not there
	Edited    State = "edited"    // engram's entry, changed since: left in place
	Foreign   State = "foreign"   // not engram's, under engram's name: left in place
	Unchecked State = "unchecked" // the file could not be read; see FileReport.Err
)

// Item is one entry of a file: a hook event's group or the MCP server.
type Item struct {
	// Name is the hook event (SessionStart, ...) or "mcp:engram".
	Name  string `json:"name"`
	State State  `json:"state"`
	// Note says why an entry was left in place, or what it is now.
	Note string `json:"note,omitempty"`
}

// MCPItem is the Name of the MCP server's Item.
const MCPItem = "mcp:engram"

// FileReport is what an operation did, or would do, to one file.
type FileReport struct {
	Harness Harness `json:"harness"`
	Scope   Scope   `json:"scope"`
	Path    string  `json:"path"`
	// Changed is whether the file was (with DryRun: would be) written.
	Changed bool `json:"changed"`
	// Created is whether the file did not exist before; Deleted whether
	// Uninstall removed it, having left it empty.
	Created bool `json:"created,omitempty"`
	Deleted bool `json:"deleted,omitempty"`
	// Backup is the copy made of the file before it was changed.
	Backup string `json:"backup,omitempty"`
	Items  []Item `json:"items"`
	// Err is why Status could not read the file.
	Err string `json:"error,omitempty"`
}

// Report is what an operation did, file by file, with notes for the user
// on what the harness needs besides (trust, approval).
type Report struct {
	Files []FileReport `json:"files"`
	Notes []string     `json:"notes,omitempty"`
}

// Changed reports whether any file changed.
func (r Report) Changed() bool {
	for _, f := range r.Files {
		if f.Changed {
			return true
		}
	}
	return false
}

func (o Options) timeoutSeconds() int {
	t := o.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return max(1, int(t.Round(time.Second)/time.Second))
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o Options) codexHome() string {
	if o.CodexHome != "" {
		return o.CodexHome
	}
	return filepath.Join(o.Home, ".codex")
}

// fileKind is what a file holds and how it is edited.
type fileKind int

const (
	hooksJSON fileKind = iota // {"hooks": {Event: [group...]}}: Claude Code's settings.json, Codex's hooks.json
	mcpJSON                   // {"mcpServers": {"engram": {...}}}: .mcp.json, ~/.claude.json
	mcpTOML                   // [mcp_servers.engram] in Codex's config.toml
)

// target is one file an install edits.
type target struct {
	path string
	kind fileKind
	mode os.FileMode // of a new file
}

// files lists the files of o's harness and scope.
func (o Options) files() ([]target, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	switch {
	case o.Harness == ClaudeCode && o.Scope == ProjectScope:
		return []target{
			{filepath.Join(o.Project, ".claude", "settings.json"), hooksJSON, 0o644},
			{filepath.Join(o.Project, ".mcp.json"), mcpJSON, 0o644},
		}, nil
	case o.Harness == ClaudeCode:
		// Claude Code 2.1 keeps user-scope MCP servers in the top-level
		// mcpServers of ~/.claude.json (with $CLAUDE_CONFIG_DIR, in
		// that directory), a file of its own state that it writes 0600.
		dir, state := filepath.Join(o.Home, ".claude"), filepath.Join(o.Home, ".claude.json")
		if o.ClaudeConfigDir != "" {
			dir, state = o.ClaudeConfigDir, filepath.Join(o.ClaudeConfigDir, ".claude.json")
		}
		return []target{
			{filepath.Join(dir, "settings.json"), hooksJSON, 0o644},
			{state, mcpJSON, 0o600},
		}, nil
	case o.Scope == ProjectScope:
		return []target{
			{filepath.Join(o.Project, ".codex", "hooks.json"), hooksJSON, 0o644},
			{filepath.Join(o.Project, ".codex", "config.toml"), mcpTOML, 0o644},
		}, nil
	default:
		return []target{
			{filepath.Join(o.codexHome(), "hooks.json"), hooksJSON, 0o644},
			{filepath.Join(o.codexHome(), "config.toml"), mcpTOML, 0o600},
		}, nil
	}
}

func (o Options) validate() error {
	errs := o.entryErrors()
	homeKnown := filepath.IsAbs(o.Home) || (o.Harness == Codex && filepath.IsAbs(o.CodexHome)) ||
		(o.Harness == ClaudeCode && filepath.IsAbs(o.ClaudeConfigDir))
	if (o.Scope == UserScope || o.Harness == Codex) && !homeKnown {
		errs = append(errs, errors.New("no home directory: set HOME"))
	}
	return errors.Join(errs...)
}

// entryErrors are what is wrong with o for writing engram's entries,
// wherever they go: the harness, the scope, the project and the command.
func (o Options) entryErrors() []error {
	var errs []error
	if o.Harness != ClaudeCode && o.Harness != Codex {
		errs = append(errs, fmt.Errorf("harness %q is not one of claude-code, codex", o.Harness))
	}
	switch o.Scope {
	case ProjectScope:
		if !filepath.IsAbs(o.Project) {
			errs = append(errs, fmt.Errorf("project directory %q is not absolute", o.Project))
		}
	case UserScope:
	default:
		errs = append(errs, fmt.Errorf("scope %q is not one of project, user", o.Scope))
	}
	if o.Command == "" {
		errs = append(errs, errors.New("no engram command"))
	}
	return errs
}

// MCPConfig returns engram's MCP server entry as Install writes it for o's
// harness and scope, for a person or another command to put in place: for
// Claude Code, a file of mcpServers as .mcp.json holds it (which
// claude --mcp-config also takes); for Codex, the config.toml block with
// Install's marker lines, so that Status and Uninstall know it where they
// look. It reads and writes no file, so o needs no home directory.
func (o Options) MCPConfig() (string, error) {
	if err := errors.Join(o.entryErrors()...); err != nil {
		return "", err
	}
	if o.Harness == Codex {
		return o.tomlBlock(o.Command), nil
	}
	doc := obj("mcpServers", obj("engram", o.mcpServer(o.Command)))
	return string(encodeJSON(doc, jsonStyle{indent: "  ", finalNewl: true})), nil
}

// hookCommand is the shell command of event's hook for binary bin.
func (o Options) hookCommand(bin, event string) string {
	args := []string{bin, "hook", string(o.Harness), event}
	if o.Scope == ProjectScope {
		args = append(args, "--project", o.Project)
	}
	return shellJoin(args)
}

// mcpArgs are the arguments of the MCP server's command.
func (o Options) mcpArgs() []string {
	args := []string{"mcp"}
	if o.Scope == ProjectScope {
		args = append(args, "--project", o.Project)
	}
	return append(args, o.MCPArgs...)
}

// shellJoin quotes args for a POSIX shell, which both harnesses run hook
// commands with.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shellSplit splits a command as a POSIX shell would its words, for
// quoting and backslashes only; ok is false for anything more (an
// unterminated quote).
func shellSplit(s string) (words []string, ok bool) {
	var (
		cur     strings.Builder
		inWord  bool
		quote   byte
		escaped bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			cur.WriteByte(c)
			escaped = false
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case quote == '"':
			switch {
			case c == '"':
				quote = 0
			case c == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0:
				i++
				cur.WriteByte(s[i])
			default:
				cur.WriteByte(c)
			}
		case c == '\\':
			escaped, inWord = true, true
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, false
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}

// isEngram reports whether path names an engram executable.
func isEngram(path string) bool {
	base := filepath.Base(path)
	return base == "engram" || base == "engram.exe"
}
