package modelserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ClaudeTimeout bounds one run of the CLI; a scripted session takes about
// a second.
const ClaudeTimeout = 90 * time.Second

// ClaudeCode runs the real Claude Code CLI offline against a Server, in a
// fresh HOME and project directory.
type ClaudeCode struct {
	Bin  string
	Home string
	Dir  string // the project, the CLI's working directory
	Env  []string
}

// NewClaudeCode prepares a run of the CLI that ENGRAM_TEST_CLAUDE names,
// against srv, or skips the test when it names none. In -p mode Claude
// Code 2.1.121 applies the project's .claude/settings.json (permissions,
// hooks) and .mcp.json without the workspace being trusted, even with no
// ~/.claude.json at all; the HOME made here marks the project trusted
// (hasTrustDialogAccepted) anyway, as an interactive run would need.
func NewClaudeCode(t testing.TB, srv *Server) *ClaudeCode {
	t.Helper()
	bin := os.Getenv("ENGRAM_TEST_CLAUDE")
	if bin == "" {
		t.Skip("ENGRAM_TEST_CLAUDE does not name a Claude Code binary " +
			"(npm install @anthropic-ai/claude-code@2.1.121 puts one in node_modules/.bin/claude; .ci/run does)")
	}
	c := &ClaudeCode{Bin: bin, Home: t.TempDir(), Dir: t.TempDir()}
	trust := map[string]any{
		"hasCompletedOnboarding": true,
		"projects": map[string]any{c.Dir: map[string]any{
			"hasTrustDialogAccepted":        true,
			"hasCompletedProjectOnboarding": true,
		}},
	}
	WriteJSON(t, filepath.Join(c.Home, ".claude.json"), trust)
	c.Env = []string{
		"HOME=" + c.Home,
		"PATH=" + os.Getenv("PATH"),
		"SHELL=/bin/bash",
		"LANG=C.UTF-8",
		"TMPDIR=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + srv.URL(),
		"ANTHROPIC_API_KEY=sk-ant-test-dummy",
		// Offline: no update checks, telemetry, error reports or other
		// traffic to Anthropic's own hosts.
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		// An MCP server (engram mcp, built with -race, on a loaded
		// machine) may take longer to start than Claude Code's default
		// wait; without it the model's first call finds no such tool.
		"MCP_TIMEOUT=120000",
	}
	return c
}

// Run runs the CLI in the project with args and returns its stdout; an
// error carries its stderr.
func (c *ClaudeCode) Run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return runCLI("claude", c.Bin, c.Dir, c.Env, ClaudeTimeout, args)
}

// runCLI runs a harness's CLI in dir with env and no input, for at most
// timeout, and returns its stdout; an error carries its stderr.
func runCLI(name, bin, dir string, env []string, timeout time.Duration, args []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader("")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out), nil
}

// Result is the last line of --output-format json.
type Result struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	IsError   bool   `json:"is_error"`
	Result    string `json:"result"`
	SessionID string `json:"session_id"`
	NumTurns  int    `json:"num_turns"`
}

// Prompt runs claude -p with the prompt and args, with JSON output, and
// returns the result.
func (c *ClaudeCode) Prompt(t testing.TB, prompt string, args ...string) Result {
	t.Helper()
	out, err := c.Run(t, append([]string{"-p", prompt, "--output-format", "json"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var res Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("claude -p %q: output is not a JSON result: %v\n%s", prompt, err, out)
	}
	if res.IsError {
		t.Fatalf("claude -p %q: error result: %s", prompt, out)
	}
	return res
}

func WriteJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ToolResult is the text of the tool_result answering the last tool_use
// the model sent, from the request that carries it.
func ToolResult(t testing.TB, r *Request) string {
	t.Helper()
	u := r.Params.LastUser()
	if u == nil {
		t.Fatalf("request %d has no user message", r.Seq)
	}
	for _, b := range u.Content {
		if b.Type == "tool_result" {
			return b.ResultText()
		}
	}
	t.Fatalf("request %d: last user message has no tool_result: %s", r.Seq, r.Body)
	return ""
}
