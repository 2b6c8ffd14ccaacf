package harness

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// Codex's config.toml is edited as text: engram's server is one block
// between two marker lines, appended to the file, so that the rest of the
// file (comments, order, layout) stays byte for byte. The TOML parser
// only checks the file, before and after.

const (
	tomlBegin = "# >>> engram: written by `engram hooks install codex`; `engram hooks uninstall codex` removes it"
	tomlEnd   = "# <<< engram"
)

// tomlBlock is the block Install writes for engram at bin.
func (o Options) tomlBlock(bin string) string {
	args := make([]string, 0, len(o.mcpArgs()))
	for _, a := range o.mcpArgs() {
		args = append(args, tomlString(a))
	}
	return tomlBegin + "\n[mcp_servers.engram]\ncommand = " + tomlString(bin) + "\nargs = [" + strings.Join(args, ", ") + "]\n" +
		codexServerSettings + tomlEnd + "\n"
}

// codexServerSettings follow the server's command in engram's block.
const codexServerSettings = CodexEnvVars + CodexApproval

// CodexEnvVars is the line of a Codex MCP server's table that passes the
// server engram's variables. Codex gives an MCP server it starts only a
// few variables of its own environment (HOME, PATH, ...): engram's name
// where its store and configuration are, as the hooks see them.
const CodexEnvVars = `env_vars = ["ENGRAM_DATA_DIR", "ENGRAM_CONFIG", "ENGRAM_STORE", "ENGRAM_LOG_LEVEL"]
`

// CodexApproval is the line of a Codex MCP server's table that approves
// engram's tools. Codex asks before it calls a tool that is not
// read-only, which `codex exec` cannot ask, so it refused every record_*
// tool: engram's tools write to engram's store alone.
const CodexApproval = `default_tools_approval_mode = "approve"
`

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// codexConfig is what engram reads of a Codex config.toml.
type codexConfig struct {
	MCPServers map[string]struct {
		Command string   `toml:"command"`
		Args    []string `toml:"args"`
	} `toml:"mcp_servers"`
	Features map[string]any `toml:"features"`
	Projects map[string]struct {
		TrustLevel string `toml:"trust_level"`
	} `toml:"projects"`
}

// parseTOML checks a config.toml and reads what engram needs of it.
func parseTOML(path string, data []byte) (codexConfig, error) {
	var c codexConfig
	_, err := toml.Decode(string(data), &c)
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return c, &SyntaxError{path, pe.Position.Line, pe.Position.Col, "invalid TOML: " + pe.Message}
	}
	if err != nil {
		return c, &SyntaxError{path, 1, 1, "unexpected TOML: " + err.Error()}
	}
	return c, nil
}

// findBlock returns the byte range of engram's block in text: from the
// start of its begin line to the end of its end line. end is -1 when the
// begin marker has no end marker after it.
func findBlock(text string) (start, end int, found bool) {
	off := 0
	start = -1
	for line := range strings.SplitAfterSeq(text, "\n") {
		trimmed := strings.TrimRight(line, " \t\r\n")
		switch {
		case start < 0 && trimmed == tomlBegin:
			start = off
		case start >= 0 && trimmed == tomlEnd:
			return start, off + len(line), true
		}
		off += len(line)
	}
	return start, -1, start >= 0
}

// inlineServers reports whether text sets mcp_servers as a top-level key
// (an inline table), before any table header.
func inlineServers(text string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			return false
		}
		for _, k := range []string{"mcp_servers", `"mcp_servers"`, "'mcp_servers'"} {
			if rest, ok := strings.CutPrefix(line, k); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
				return true
			}
		}
	}
	return false
}

// editTOML applies op to engram's block in a Codex config.toml. It
// returns the new text.
func (o Options) editTOML(path string, data []byte, op op) (string, Item, error) {
	item := Item{Name: MCPItem}
	text := string(data)
	if _, err := parseTOML(path, data); err != nil {
		return text, item, err
	}
	start, end, found := findBlock(text)
	rest := text
	var block, bin string
	if found && end > 0 {
		block, rest = text[start:end], text[:start]+text[end:]
		// The block's own server: the first command line in it.
		var c codexConfig
		if _, err := toml.Decode(block, &c); err == nil {
			bin = c.MCPServers["engram"].Command
		}
	}
	restCfg, err := parseTOML(path, []byte(rest))
	_, elsewhere := restCfg.MCPServers["engram"]
	if err != nil {
		elsewhere = false
	}
	mine := found && end > 0 && isEngram(bin) && strings.TrimRight(block, "\r\n")+"\n" == o.tomlBlock(bin)
	leftNote := ", left in place"
	if op == opUninstall {
		leftNote = ": left in place; remove it by hand"
	}
	switch {
	case elsewhere:
		item.State, item.Note = Foreign, "[mcp_servers.engram] is configured outside engram's block"+leftNote
	case found && end < 0:
		item.State, item.Note = Edited, "engram's begin marker has no end marker"+leftNote
	case mine && bin == o.Command:
		item.State = Present
	case mine:
		item.State, item.Note = Present, "runs "+bin
	case found:
		item.State, item.Note = Edited, "engram's block, changed since it was installed"+leftNote
	default:
		item.State = Absent
	}
	switch {
	case op == opInstall && item.State == Absent:
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += o.tomlBlock(o.Command)
		item.State = Added
	case op == opInstall && mine && bin != o.Command:
		text = text[:start] + o.tomlBlock(o.Command) + text[end:]
		item.State, item.Note = Updated, "ran "+bin
	case op == opUninstall && mine && !elsewhere:
		text = rest
		item.State, item.Note = Removed, ""
	}
	if item.State == Added || item.State == Updated {
		c, err := parseTOML(path, []byte(text))
		if err == nil && c.MCPServers["engram"].Command != o.Command {
			err = errors.New("the block does not define it")
		}
		if err == nil && inlineServers(rest) {
			// TOML forbids adding to an inline table; Codex's parser
			// enforces it, the one here does not.
			err = errors.New("mcp_servers is an inline table")
		}
		if err != nil {
			return string(data), item, fmt.Errorf("%s: engram's [mcp_servers.engram] cannot go at the end of this file: %w; not changing it: add it by hand:\n%s", path, err, o.tomlBlock(o.Command))
		}
	}
	return text, item, nil
}
