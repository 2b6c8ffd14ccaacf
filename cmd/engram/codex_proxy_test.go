package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// TestCodex_Proxy runs the real Codex CLI through engram proxy to the
// scripted model over the Responses API, its provider's base URL the
// proxy's and engram's token in the provider's headers: eight commands
// with large outputs in a 24,000-token window. Every request reaches the
// model valid, the later ones with the earlier commands as markers, and
// each output as Codex sent it is in the window's ledger.
func TestCodex_Proxy(t *testing.T) {
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cx := modelserver.NewCodex(t, srv)
	dataDir := t.TempDir()
	env := append(cx.Env, "ENGRAM_DATA_DIR="+dataDir, "ENGRAM_TOKEN=proxy-test-token")
	url := startProxyWith(t, env, srv.URL(), []string{"--openai", srv.URL(), "--window", "24000"})
	pointCodexAt(t, cx, srv.URL(), url, `http_headers = { "X-Engram-Token" = "proxy-test-token" }`)

	const commands = 8
	var steps []modelserver.Step
	for i := range commands {
		// Each call comes after a reasoning item, as a reasoning model's
		// do: Codex sends it back before the call, and the server refuses
		// either without the other, as the API does.
		thinking := modelserver.Block{Type: "thinking", Thinking: fmt.Sprintf("Count from %d.", i*100000), Signature: fmt.Sprintf("gAAAAB-reasoning-%d", i)}
		steps = append(steps, modelserver.Reply(thinking, modelserver.ToolUse("exec_command", map[string]any{"cmd": fmt.Sprintf("seq %d 1 %d", i*100000, i*100000+2500)})))
	}
	markers := 0
	steps = append(steps, func(r *modelserver.Request) (modelserver.Response, error) {
		for _, it := range r.Responses.Input {
			for _, part := range it.Content {
				markers += len(ctxref.Find(part.Text))
			}
		}
		return modelserver.Response{Content: []modelserver.Block{modelserver.Text("Counted them all.")}}, nil
	})
	srv.Add(steps...)
	res := cx.Exec(t, "Count with seq, eight times.", "--dangerously-bypass-approvals-and-sandbox")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Message != "Counted them all." {
		t.Errorf("Codex's last message: %q", res.Message)
	}
	main := srv.Requests(modelserver.KindMain)
	most := 0
	for _, r := range main {
		most = max(most, r.InputTokens)
	}
	reasoning := 0
	for _, it := range main[len(main)-1].Responses.Input {
		if it.Type == "reasoning" {
			reasoning++
		}
	}
	if reasoning == 0 {
		t.Error("the last request holds no reasoning item: Codex no longer sends them back, and the pairing of reasoning goes untested")
	}
	if len(main) != commands+1 || markers == 0 || most > 24000 {
		t.Errorf("%d requests (want %d), the last with %d markers, the largest %d tokens; want markers and all within the window of 24,000", len(main), commands+1, markers, most)
	}
	// Each output, as Codex gave it to the model, is in the window's ledger.
	noSecondWindow(t, dataDir, res.ThreadID, "codex")
	held := windowOf(t, dataDir, store.WindowKey{SessionID: res.ThreadID, AgentID: "codex"})
	outputs := map[string]bool{}
	for _, m := range held {
		for _, b := range m.Blocks {
			if b.Type == window.BlockToolResult {
				outputs[b.Text+string(b.Raw)] = true
			}
		}
	}
	for i := range commands {
		found := false
		for o := range outputs {
			found = found || strings.Contains(o, fmt.Sprintf("\n%d\n", i*100000+2500))
		}
		if !found {
			t.Errorf("the output of command %d is not in the window's ledger", i)
		}
	}
	t.Logf("%d requests, the largest %d tokens, %d markers in the last; the window holds %d messages", len(main), most, markers, len(held))
}
