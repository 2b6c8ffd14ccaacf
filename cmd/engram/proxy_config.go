package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode"

	"github.com/engramhq/engram/internal/harness"
	"github.com/engramhq/engram/internal/httpapi"
)

// DefaultProxyAddr is where engram proxy listens by default.
const DefaultProxyAddr = "127.0.0.1:7412"

// printProxyConfig prints what wires a harness to engram proxy at addr
// and to engram's MCP server: for Claude Code, shell lines to evaluate;
// for Codex, a config.toml (a profile of its own). Neither holds engram's
// token, only a reference to it, resolved when the shell or Codex runs: a
// printed configuration ends up in dotfiles, scrollback, screenshots and
// issues, and the token opens the store.
func (a *app) printProxyConfig(client, addr string) error {
	name, ok := clients[client]
	if !ok || name == "cursor" {
		return usagef("--print-config: %q is not claude-code (or claude) or codex", client)
	}
	base, err := proxyURL(addr)
	if err != nil {
		return err
	}
	// The command that printed this, for the comments.
	again := "engram proxy --print-config " + client
	if addr != DefaultProxyAddr {
		again += " --addr " + shellQuote(addr)
	}
	// Paths and the address go into comments, which a line break would
	// end: what follows it would be run, or read as TOML.
	for what, v := range map[string]string{"the project's path": a.cfg.Project, "the data directory's path": a.cfg.DataDir} {
		if strings.ContainsFunc(v, unicode.IsControl) {
			return fmt.Errorf("--print-config: %s %q has control characters; a printed configuration cannot name it", what, v)
		}
	}
	ref, err := a.proxyTokenRef()
	if err != nil {
		return err
	}
	bin := a.engramCommand()
	if name == "claude-code" {
		// The server as engram hooks install claude-code writes it into the
		// project's .mcp.json, on one line for a shell variable.
		mcp, err := a.harnessOptions(harness.ClaudeCode, hooksFlags{}, bin).MCPConfig()
		if err != nil {
			return err
		}
		var line bytes.Buffer
		if err := json.Compact(&line, []byte(mcp)); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, `# Claude Code through engram proxy at %[1]s, with engram's MCP server for the
# project %[7]s (run the proxy for it too: the server reads what the proxy stores).
# In the shell that starts Claude Code:
#   eval "$(%[2]s)"
#   claude --mcp-config "$ENGRAM_MCP_CONFIG"
# (or put $ENGRAM_MCP_CONFIG in the project's .mcp.json, as engram hooks install claude-code does).
# engram's token is not in this text: %[3]s
export ANTHROPIC_BASE_URL=%[4]s
export ANTHROPIC_CUSTOM_HEADERS="X-Engram-Token: %[5]s"
ENGRAM_MCP_CONFIG=%[6]s
`, base, again, ref.note, shellQuote(base), ref.shell, shellQuote(line.String()), a.cfg.Project)
		return nil
	}
	// Codex ignores model_provider in a project's .codex/config.toml, so
	// this is the user's: the MCP server as engram hooks install codex
	// --user writes it, which finds the project from Codex's directory.
	mcp, err := a.harnessOptions(harness.Codex, hooksFlags{user: true}, bin).MCPConfig()
	if err != nil {
		return err
	}
	export := "#   export ENGRAM_TOKEN=" + ref.export + "\n"
	if ref.export == "" {
		export = ""
	}
	fmt.Fprintf(a.stdout, `# Codex through engram proxy at %[1]s, with engram's MCP server: a profile (Codex 0.134 or later).
# With the proxy running for the project Codex works in (the server reads what the proxy stores):
#   mkdir -p "${CODEX_HOME:-$HOME/.codex}" && %[2]s > "${CODEX_HOME:-$HOME/.codex}/engram.config.toml"
%[3]s#   codex --profile engram
# Or add it to ~/.codex/config.toml (not a project's: Codex ignores model_provider there),
# model_provider above the file's first [table]. Codex sends its key from $OPENAI_API_KEY as
# before, and engram's token from $ENGRAM_TOKEN, which engram proxy also reads.
model_provider = "engram"

[model_providers.engram]
name = "engram proxy"
base_url = %[4]s
wire_api = "responses"
env_key = "OPENAI_API_KEY"
env_http_headers = { "X-Engram-Token" = "ENGRAM_TOKEN" }

%[5]s`, base, again, export, tomlQuote(base+"/v1"), mcp)
	return nil
}

// proxyURL is the base URL a client on this machine reaches a proxy
// listening on addr by: a wildcard or empty host is reached on loopback.
func proxyURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 ||
		strings.Trim(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:%") != "" {
		return "", usagef("--addr: %q is not host:port, such as %s", addr, DefaultProxyAddr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// tokenRef is how a printed configuration names engram's token without
// holding it.
type tokenRef struct {
	shell  string // inside a double-quoted shell word
	export string // a shell word for export ENGRAM_TOKEN=; "" when it is set
	note   string // says where the token comes from
}

// proxyTokenRef refers to the token engram proxy will require: the
// variable ENGRAM_TOKEN when it is set (engram proxy reads it first), else
// the token file, read when the shell evaluates the line. The file is made
// now if there is none yet, as engram proxy would, so that the reference
// resolves whichever starts first.
func (a *app) proxyTokenRef() (tokenRef, error) {
	if a.getenv("ENGRAM_TOKEN") != "" {
		// Set already: nothing to export.
		return tokenRef{shell: "${ENGRAM_TOKEN}", note: "the header takes it from $ENGRAM_TOKEN, as engram proxy does."}, nil
	}
	file := a.tokenFile()
	if _, err := httpapi.LoadToken(file); err != nil {
		return tokenRef{}, err
	}
	read := "$(cat " + shellQuote(file) + ")"
	return tokenRef{shell: read, export: `"` + read + `"`,
		note: "the header reads it from " + file + " when evaluated."}, nil
}

// shellQuote quotes s as one word for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tomlQuote quotes s as a TOML basic string (JSON's escapes are TOML's).
func tomlQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
