package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/harness"
	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/httpapi"
	"github.com/engramhq/engram/internal/mcpserver"
)

func (a *app) mcpCmd() *cobra.Command {
	var (
		opts              mcpserver.Options
		printConfig       string
		httpURL, tokenEnv string
		follow            string
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve engram to an agent over MCP (stdio)",
		Long: `Serve the project's engram to one agent over the Model Context Protocol on
standard input and output, as agent harnesses start MCP servers: tools to
search code and history, read files, expand context references, record what
the agent sees, and use the shared memory (briefing, recall, record_pattern,
record_failure, ...), a briefing resource and a start_session prompt. Logs go
to standard error, never to standard output.

The connection's session is --session (or $ENGRAM_SESSION, else the client's
name and the start time) and its agent --agent (or $ENGRAM_AGENT, else
mcp@SESSION, registered on first use): its writes go to that session only.
With --harness claude-code|codex (what engram hooks install configures), the
server follows the harness's hooks: each call writes in the session the
hooks last registered for the harness that started this server, as the
hooks' agent, although the harness does not tell its MCP servers its
session.

--print-config claude-code|codex|cursor prints the snippet that registers
engram with that client (claude is an alias of claude-code): a stdio server
the client starts. For Claude Code and Codex it is the server as engram
hooks install writes it (with --harness), so that installing the hooks
later finds it in place: Claude Code's for the project's .mcp.json,
Codex's for the user's config.toml (engram's block, whose server finds
the project from Codex's directory), which also approves engram's tools,
which codex exec cannot ask about, and passes engram's variables
(ENGRAM_DATA_DIR, ...) to the server. With --http URL, the
snippet names the MCP endpoint of a running engram serve instead, with the
server's token (engram token), or with --token-env VAR a reference to the
variable that holds it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if printConfig != "" {
				return a.printMCPConfig(printConfig, httpURL, tokenEnv)
			}
			if httpURL != "" || tokenEnv != "" {
				return usagef("--http and --token-env go with --print-config")
			}
			ctx := cmd.Context()
			eng, err := a.engine(ctx, false)
			if err != nil {
				return err
			}
			if opts.Session == "" {
				opts.Session = a.getenv("ENGRAM_SESSION")
			}
			if opts.Agent == "" {
				opts.Agent = a.getenv("ENGRAM_AGENT")
			}
			switch follow {
			case "":
			case hook.ClaudeCode, hook.Codex:
				st := eng.Store()
				opts.Follow = func(ctx context.Context) (string, string, bool) {
					session, ok, err := hook.FollowSession(ctx, st, follow)
					if err != nil {
						a.log.Warn("cannot find the hooks' session", "harness", follow, "err", err)
					}
					if err != nil || !ok {
						return "", "", false
					}
					return session, hook.AgentOf(follow, session, ""), true
				}
			default:
				return usagef("--harness: %q is not claude-code or codex", follow)
			}
			opts.Version, _ = versionInfo()
			opts.Logger = a.log
			opts.Structured = a.cfg.MCP.Structured
			if opts.Windows, err = a.windowManager(eng); err != nil {
				return err
			}
			srv := mcpserver.New(eng, opts)
			a.log.Info("engram mcp serving on stdio", "project", a.cfg.Project, "store", a.cfg.Store.Path)
			return srv.Run(ctx, mcpserver.StdioTransport(a.stdin, a.stdout, a.log))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Session, "session", "", "the session this connection writes to (default $ENGRAM_SESSION)")
	f.StringVar(&opts.Agent, "agent", "", "the agent writing (default $ENGRAM_AGENT, else mcp@SESSION)")
	f.StringVar(&follow, "harness", "", "write in the session the harness's engram hooks registered (claude-code or codex), as their agent; until they have, as --session says")
	f.StringVar(&opts.Model, "model", "", "the model the agent runs on, recorded with its writes")
	f.StringVar(&printConfig, "print-config", "", "print the MCP configuration for claude-code, codex or cursor, and exit")
	f.StringVar(&httpURL, "http", "", "with --print-config: engram serve's URL, such as http://127.0.0.1:7411, instead of a stdio server")
	f.StringVar(&tokenEnv, "token-env", "", "with --print-config --http: name the variable holding the token instead of the token")
	return cmd
}

// clients are the harnesses --print-config knows, by the names it takes.
var clients = map[string]string{"claude-code": "claude-code", "claude": "claude-code", "codex": "codex", "cursor": "cursor"}

// printMCPConfig prints the snippet that registers engram with a client:
// a stdio server it starts, or with httpURL the MCP endpoint of a running
// engram serve, with the operator's token (or, with tokenEnv, a reference
// to the variable that holds it).
func (a *app) printMCPConfig(client, httpURL, tokenEnv string) error {
	name, ok := clients[client]
	if !ok {
		return usagef("--print-config: %q is not one of claude-code (or claude), codex, cursor", client)
	}
	if httpURL != "" {
		return a.printHTTPConfig(name, httpURL, tokenEnv)
	}
	bin := a.engramCommand()
	switch name {
	case "claude-code":
		// Claude Code's .mcp.json (project scope), also what
		// `claude mcp add-json engram '<json>'` takes: the server as engram
		// hooks install claude-code writes it there, so that a later
		// install takes it for its own rather than for an edited one.
		return a.printHarnessMCP(harness.ClaudeCode, hooksFlags{}, bin)
	case "cursor":
		// Cursor's .cursor/mcp.json.
		return writeJSON(a.stdout, map[string]any{"mcpServers": map[string]any{"engram": map[string]any{
			"command": bin, "args": []string{"mcp", "--project", a.cfg.Project}}}})
	default:
		// The user's ~/.codex/config.toml: engram's block as engram hooks
		// install codex --user writes it (the variables that name engram's
		// store, the approval of its tools), whose server finds the project
		// from Codex's directory, since the file serves every project.
		return a.printHarnessMCP(harness.Codex, hooksFlags{user: true}, bin)
	}
}

// printHarnessMCP prints engram's MCP server for h as engram hooks install
// writes it at the scope of f.
func (a *app) printHarnessMCP(h harness.Harness, f hooksFlags, bin string) error {
	text, err := a.harnessOptions(h, f, bin).MCPConfig()
	if err != nil {
		return err
	}
	_, err = io.WriteString(a.stdout, text)
	return err
}

// printHTTPConfig prints a client's snippet for engram serve's MCP
// endpoint at url.
func (a *app) printHTTPConfig(client, url, tokenEnv string) error {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return usagef("--http: %q is not an http or https URL, such as http://127.0.0.1:7411/mcp", url)
	}
	if !strings.HasSuffix(url, "/mcp") {
		url = strings.TrimSuffix(url, "/") + "/mcp"
	}
	bearer := "Bearer ${" + tokenEnv + "}"
	if tokenEnv == "" {
		tok, err := httpapi.LoadToken(a.tokenFile())
		if err != nil {
			return err
		}
		bearer = "Bearer " + tok
		if client != "codex" {
			fmt.Fprintf(a.stderr, "this snippet holds engram's token (from %s): keep the file out of version control, or print it with --token-env ENGRAM_TOKEN\n", a.tokenFile())
		}
	}
	switch client {
	case "claude-code":
		// Claude Code expands ${VAR} in .mcp.json.
		return writeJSON(a.stdout, map[string]any{"mcpServers": map[string]any{"engram": map[string]any{
			"type": "http", "url": url, "headers": map[string]string{"Authorization": bearer}}}})
	case "cursor":
		if tokenEnv != "" {
			bearer = "Bearer ${env:" + tokenEnv + "}"
		}
		return writeJSON(a.stdout, map[string]any{"mcpServers": map[string]any{"engram": map[string]any{
			"url": url, "headers": map[string]string{"Authorization": bearer}}}})
	default:
		// Codex takes the token from a variable only.
		env := tokenEnv
		if env == "" {
			env = "ENGRAM_TOKEN"
			fmt.Fprintln(a.stderr, "Codex reads the token from a variable: export ENGRAM_TOKEN=$(engram token) before starting it")
		}
		fmt.Fprintf(a.stdout, "[mcp_servers.engram]\nurl = %q\nbearer_token_env_var = %q\n%s", url, env, harness.CodexApproval)
		return nil
	}
}

// engramCommand returns the command a client should start for engram:
// this executable when it is installed, else engram on the PATH. A binary
// of go run or go test lives in a temporary directory that is deleted
// when it exits, so its path would not last; then the command is engram,
// with a note on installing it.
func (a *app) engramCommand() string {
	if bin, ok := a.installedEngram(); ok {
		return bin
	}
	why := "engram is not installed"
	for _, p := range a.engramsOnPath() {
		if transient(p) {
			why = fmt.Sprintf("the engram found, %s, is in a temporary directory (where go run and go test build), so it is not taken for installed", p)
			break
		}
	}
	fmt.Fprintln(a.stderr, "note: "+why+", and this configuration starts the command engram, which the client must find on its PATH:\n"+
		"  go install ./cmd/engram    (from the repository; installs into $(go env GOPATH)/bin, which must be on PATH)\n"+
		"  or: make build && mkdir -p ~/.local/bin && cp bin/engram ~/.local/bin/")
	return "engram"
}

// installedEngram returns the path of an installed engram, as
// engramCommand finds it, without a word when there is none.
func (a *app) installedEngram() (string, bool) {
	if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "engram" && !transient(exe) {
		return exe, true
	}
	for _, p := range a.engramsOnPath() {
		if !transient(p) {
			return p, true
		}
	}
	return "engram", false
}

// engramsOnPath returns the executable files named engram in the
// directories of PATH, in its order, each by its absolute path.
func (a *app) engramsOnPath() []string {
	var out []string
	for _, dir := range filepath.SplitList(a.getenv("PATH")) {
		p := filepath.Join(dir, "engram")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 && filepath.IsAbs(p) {
			out = append(out, p)
		}
	}
	return out
}

// transient reports whether path lies in a temporary directory, where go
// run and go test build their binaries.
func transient(path string) bool {
	if strings.Contains(filepath.ToSlash(path), "/go-build") {
		return true
	}
	tmp, err := filepath.EvalSymlinks(os.TempDir())
	if err != nil {
		tmp = os.TempDir()
	}
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	rel, err := filepath.Rel(tmp, path)
	return err == nil && !strings.HasPrefix(rel, "..")
}
