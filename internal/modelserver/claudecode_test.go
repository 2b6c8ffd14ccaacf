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

// claudeTimeout bounds one run of the CLI; a scripted session takes about
// a second.
const claudeTimeout = 2 * time.Minute

// claudeCode runs the real Claude Code CLI offline against a Server, in a
// fresh HOME and project directory.
type claudeCode struct {
	bin  string
	home string
	dir  string // the project, the CLI's working directory
	env  []string
}

// newClaudeCode prepares a run of the CLI that ENGRAM_TEST_CLAUDE names,
// against srv, or skips the test when it names none. In -p mode Claude
// Code 2.1.121 applies the project's .claude/settings.json (permissions,
// hooks) and .mcp.json without the workspace being trusted, even with no
// ~/.claude.json at all; the HOME made here marks the project trusted
// (hasTrustDialogAccepted) anyway, as an interactive run would need.
func newClaudeCode(t testing.TB, srv *Server) *claudeCode {
	t.Helper()
	bin := os.Getenv("ENGRAM_TEST_CLAUDE")
	if bin == "" {
		t.Skip("ENGRAM_TEST_CLAUDE does not name a Claude Code binary " +
			"(npm install @anthropic-ai/claude-code@2.1.121 puts one in node_modules/.bin/claude; .ci/run does)")
	}
	c := &claudeCode{bin: bin, home: t.TempDir(), dir: t.TempDir()}
	trust := map[string]any{
		"hasCompletedOnboarding": true,
		"projects": map[string]any{c.dir: map[string]any{
			"hasTrustDialogAccepted":        true,
			"hasCompletedProjectOnboarding": true,
		}},
	}
	writeJSON(t, filepath.Join(c.home, ".claude.json"), trust)
	c.env = []string{
		"HOME=" + c.home,
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
	}
	return c
}

// run runs the CLI in the project with args and returns its stdout; an
// error carries its stderr.
func (c *claudeCode) run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), claudeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("claude %s: %w\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out), nil
}

// result is the last line of --output-format json.
type result struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	IsError   bool   `json:"is_error"`
	Result    string `json:"result"`
	SessionID string `json:"session_id"`
	NumTurns  int    `json:"num_turns"`
}

// prompt runs claude -p with the prompt and args, with JSON output, and
// returns the result.
func (c *claudeCode) prompt(t testing.TB, prompt string, args ...string) result {
	t.Helper()
	out, err := c.run(t, append([]string{"-p", prompt, "--output-format", "json"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var res result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("claude -p %q: output is not a JSON result: %v\n%s", prompt, err, out)
	}
	if res.IsError {
		t.Fatalf("claude -p %q: error result: %s", prompt, out)
	}
	return res
}

func writeJSON(t testing.TB, path string, v any) {
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

// toolResult is the text of the tool_result answering the last tool_use
// the model sent, from the request that carries it.
func toolResult(t testing.TB, r *Request) string {
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

// TestClaudeCode runs the real CLI through a scripted session: the model
// reads a file, runs a command and answers from both; a second run resumes
// the session.
func TestClaudeCode(t *testing.T) {
	srv := Start(Options{})
	defer srv.Close()
	cc := newClaudeCode(t, srv)
	notes := filepath.Join(cc.dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("the secret word is PAPAYA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv.Add(
		Call("Read", map[string]any{"file_path": notes}),
		func(r *Request) (Response, error) {
			if got := toolResult(t, r); !strings.Contains(got, "PAPAYA") {
				return Response{}, fmt.Errorf("Read's result lacks the file's content: %q", got)
			}
			return Response{Content: []Block{Text("Now the command."),
				ToolUse("Bash", map[string]any{"command": "echo hello-$((6*7))", "description": "Print a greeting"})}}, nil
		},
		func(r *Request) (Response, error) {
			if got := toolResult(t, r); !strings.Contains(got, "hello-42") {
				return Response{}, fmt.Errorf("Bash's result lacks the command's output: %q", got)
			}
			return Response{Content: []Block{Text("The word is PAPAYA and the command said hello-42.")}}, nil
		},
	)
	res := cc.prompt(t, "Read notes.txt, then run a command.", "--allowedTools", "Read,Bash")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "The word is PAPAYA and the command said hello-42."; res.Result != want {
		t.Errorf("result = %q, want %q", res.Result, want)
	}
	if res.SessionID == "" {
		t.Error("result has no session_id")
	}
	main := srv.Requests(KindMain)
	if len(main) != 3 || srv.Remaining() != 0 {
		t.Fatalf("%d main requests, %d steps left; want 3 and 0", len(main), srv.Remaining())
	}
	for _, r := range main {
		if !r.Params.Stream || !r.Params.HasTool("Read") || !r.Params.HasTool("Bash") {
			t.Errorf("request %d: stream %v, tools Read %v Bash %v; want a streamed request offering both",
				r.Seq, r.Params.Stream, r.Params.HasTool("Read"), r.Params.HasTool("Bash"))
		}
		if got := r.Header.Get("X-Claude-Code-Session-Id"); got != res.SessionID {
			t.Errorf("request %d: X-Claude-Code-Session-Id = %q, want the session's %q", r.Seq, got, res.SessionID)
		}
	}

	// Resumed, the conversation goes on where it ended.
	srv.Add(func(r *Request) (Response, error) {
		if n := len(r.Params.Messages); n < 7 {
			return Response{}, fmt.Errorf("resumed request has %d messages, want the 6 before and the new prompt", n)
		}
		return Response{Content: []Block{Text("Resumed.")}}, nil
	})
	res2 := cc.prompt(t, "Go on.", "--resume", res.SessionID)
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res2.Result != "Resumed." || res2.SessionID != res.SessionID {
		t.Errorf("resumed: result %q session %q, want %q in session %q", res2.Result, res2.SessionID, "Resumed.", res.SessionID)
	}
}
