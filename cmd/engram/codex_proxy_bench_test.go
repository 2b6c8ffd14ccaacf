package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
)

// BenchmarkCodex_ProxySession is BenchmarkClaudeCode_ProxySession for the
// real Codex (ENGRAM_TEST_CODEX): the same 59 file reads (exec_command
// running cat) and an answer, straight to the scripted model and through
// engram proxy (--window 30000 and 60000) with its windows' own role
// (tool_loop) and the default role's, Codex compacting its own history
// past 60,000 tokens (model_auto_compact_token_limit). It reports what
// reached the model: tokens per main request, their sum, the effective
// tokens with a prompt cache (a Responses request's instructions, tool
// schemas and each input item, as requestBlocks counts a Messages
// request's), Codex's compactions with what they sent, and the requests
// without the task's prompt.
//
//	ENGRAM_TEST_CODEX=… go test ./cmd/engram -run '^$' -bench Codex_ProxySession -benchtime 1x
func BenchmarkCodex_ProxySession(b *testing.B) { runProxySessions(b, codexProxySession) }

// codexTask is the prompt of the Codex session.
const codexTask = "Read the ledgers one by one."

// codexProxySession runs the session straight (role "") or through the
// proxy with its windows of role and size, and measures what reached the
// model.
func codexProxySession(b *testing.B, role string, window int) sessionFigures {
	b.Helper()
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cx := modelserver.NewCodex(b, srv)
	config := filepath.Join(cx.CodexHome, "config.toml")
	toml, err := os.ReadFile(config)
	if err != nil {
		b.Fatal(err)
	}
	toml = append([]byte("model_auto_compact_token_limit = 60000\n"), toml...)
	if err := os.WriteFile(config, toml, 0o644); err != nil {
		b.Fatal(err)
	}
	if role != "" {
		env := append(cx.Env, "ENGRAM_DATA_DIR="+b.TempDir(), "ENGRAM_TOKEN=proxy-bench-token")
		url := startProxyWith(b, env, srv.URL(), []string{"--openai", srv.URL(), "--window", strconv.Itoa(window), "--role", role, "--project", cx.Dir})
		pointCodexAt(b, cx, srv.URL(), url, `http_headers = { "X-Engram-Token" = "proxy-bench-token" }`)
	}
	var steps []modelserver.Step
	for i := range 59 {
		var sb strings.Builder
		for j := 0; sb.Len() < 7000; j++ {
			fmt.Fprintf(&sb, "ledger %d line %d: the quartermaster counts crates of tea and tallow for voyage %d\n", i, j, i*1000+j)
		}
		name := fmt.Sprintf("ledger%02d.txt", i)
		if err := os.WriteFile(filepath.Join(cx.Dir, name), []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		steps = append(steps, modelserver.Reply(modelserver.ToolUse("exec_command", map[string]any{"cmd": "cat " + name})))
	}
	steps = append(steps, modelserver.Say("Read them all."))
	srv.Add(steps...)
	res := cx.Exec(b, codexTask, "--dangerously-bypass-approvals-and-sandbox")
	if err := srv.Err(); err != nil {
		b.Fatal(err)
	}
	if res.Message != "Read them all." {
		b.Fatalf("Codex's last message: %q", res.Message)
	}
	return measureSession(b, srv, func(r modelserver.Request) (bool, []string) {
		task := false
		for _, it := range r.Responses.Input {
			for _, part := range it.Content {
				task = task || it.Role == "user" && strings.Contains(part.Text, codexTask)
			}
		}
		return task, responsesBlocks(b, r.Body)
	})
}

// responsesBlocks are a Responses request's blocks as a prompt cache sees
// them: the instructions, the tool schemas, then each input item.
func responsesBlocks(b *testing.B, body []byte) []string {
	return promptBlocks(b, body, "instructions", "tools", "input")
}
