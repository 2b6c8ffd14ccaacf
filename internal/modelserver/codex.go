package modelserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CodexTimeout bounds one run of the CLI; a scripted session takes about
// a second.
const CodexTimeout = 90 * time.Second

// CodexProvider is the name of the model provider NewCodex configures.
const CodexProvider = "modelserver"

// Codex runs the real Codex CLI offline against a Server, in a fresh
// HOME, CODEX_HOME and project directory.
type Codex struct {
	Bin string
	// Home is HOME; CodexHome is $CODEX_HOME (its config.toml, sessions/
	// with the rollouts).
	Home      string
	CodexHome string
	Dir       string // the project, the CLI's working directory (a git repository)
	Env       []string
}

// NewCodex prepares a run of the CLI that ENGRAM_TEST_CODEX names,
// against srv, or skips the test when it names none. CODEX_HOME's
// config.toml selects srv as a custom provider (wire_api "responses", the
// key from MODELSERVER_API_KEY, no retries: a refused request fails the
// run at once) and trusts the project, as Codex needs to read its
// .codex/ (hooks.json, config.toml). Codex 0.171.0 needs no login with
// such a provider.
func NewCodex(t testing.TB, srv *Server) *Codex {
	t.Helper()
	bin := os.Getenv("ENGRAM_TEST_CODEX")
	if bin == "" {
		t.Skip("ENGRAM_TEST_CODEX does not name a Codex binary " +
			"(npm install @openai/codex@0.171.0 puts one in node_modules/.bin/codex; .ci/run does)")
	}
	c := &Codex{Bin: bin, Home: t.TempDir(), Dir: t.TempDir()}
	c.CodexHome = filepath.Join(c.Home, ".codex")
	config := fmt.Sprintf(`model = "gpt-5-codex"
model_provider = %q
check_for_update_on_startup = false

[model_providers.%s]
name = "engram modelserver"
base_url = "%s/v1"
wire_api = "responses"
env_key = "MODELSERVER_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[projects.%q]
trust_level = "trusted"

[analytics]
enabled = false

[otel]
exporter = "none"
`, CodexProvider, CodexProvider, srv.URL(), c.Dir)
	if err := os.MkdirAll(c.CodexHome, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.CodexHome, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	// Codex looks for the project's root by its .git.
	if err := os.Mkdir(filepath.Join(c.Dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Env = []string{
		"HOME=" + c.Home,
		"CODEX_HOME=" + c.CodexHome,
		"PATH=" + os.Getenv("PATH"),
		"SHELL=/bin/bash",
		"LANG=C.UTF-8",
		"TMPDIR=" + t.TempDir(),
		"MODELSERVER_API_KEY=sk-test-dummy",
	}
	return c
}

// Run runs the CLI in the project with args and returns its stdout; an
// error carries its stderr.
func (c *Codex) Run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return runCLI("codex", c.Bin, c.Dir, c.Env, CodexTimeout, args)
}

// CodexResult is what codex exec --json said of a run: the thread (the
// session's id), the agent's last message, the events.
type CodexResult struct {
	ThreadID string
	// Message is the text of the last agent_message item.
	Message string
	// Events are every line of the output, decoded.
	Events []map[string]any
}

// Exec runs codex exec --json with the prompt and args (before the
// prompt), and returns what it said; a turn.failed or error event fails
// the test.
func (c *Codex) Exec(t testing.TB, prompt string, args ...string) CodexResult {
	t.Helper()
	out, err := c.Run(t, append(append([]string{"exec", "--json"}, args...), prompt)...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ParseCodexEvents(out)
	if err != nil {
		t.Fatalf("codex exec %q: %v\n%s", prompt, err, out)
	}
	return res
}

// ParseCodexEvents reads codex exec --json's output: one JSON event per
// line (thread.started, turn.started, item.started, item.completed,
// turn.completed, turn.failed, error).
func ParseCodexEvents(out string) (CodexResult, error) {
	var res CodexResult
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return res, fmt.Errorf("output line is not JSON: %q", line)
		}
		res.Events = append(res.Events, ev)
		switch ev["type"] {
		case "thread.started":
			res.ThreadID, _ = ev["thread_id"].(string)
		case "item.completed":
			if item, _ := ev["item"].(map[string]any); item["type"] == "agent_message" {
				res.Message, _ = item["text"].(string)
			}
		case "turn.failed", "error":
			return res, fmt.Errorf("codex reported %s: %s", ev["type"], line)
		}
	}
	return res, sc.Err()
}

// FunctionOutput is the output of the last tool call the model made, from
// the Responses request that carries it.
func FunctionOutput(t testing.TB, r *Request) string {
	t.Helper()
	if r.Responses == nil {
		t.Fatalf("request %d is not a Responses API request", r.Seq)
	}
	it, ok := r.Responses.LastOutput()
	if !ok {
		t.Fatalf("request %d carries no function_call_output: %.2000s", r.Seq, r.Body)
	}
	return it.OutputText()
}
