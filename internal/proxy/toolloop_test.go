package proxy_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

const loopTask = "Fix the failing parser test in ./parser."

// loopSteps is the script of a tool loop of n steps: each a word and a
// command, then a last answer.
func loopSteps(n int) []modelserver.Step {
	var steps []modelserver.Step
	for i := range n {
		if i%3 == 1 {
			steps = append(steps, modelserver.Reply(modelserver.Text(fmt.Sprintf("Step %d.", i)),
				modelserver.ToolUse("Write", map[string]any{"file_path": fmt.Sprintf("/p/f%d.go", i), "content": loopWrite(i)})))
			continue
		}
		steps = append(steps, modelserver.Reply(modelserver.Text(fmt.Sprintf("Step %d.", i)),
			modelserver.ToolUse("Bash", map[string]any{"command": fmt.Sprintf("go test ./pkg%d", i)})))
	}
	return append(steps, modelserver.Say("Fixed."))
}

// loopWrite is the file step i writes: a call of over 300 tokens, which
// a tool loop's window clips.
func loopWrite(i int) string {
	return strings.Repeat(fmt.Sprintf("func F%d() int { return %d }\n", i, i), 60)
}

// loopResult is the output of step i's command: lines a digest can keep.
func loopResult(i int) string {
	var b strings.Builder
	for k := range 30 {
		fmt.Fprintf(&b, "=== RUN TestParse%d_%d\n    parser_test.go:%d: case %d of pkg%d passes\n", i, k, 10+k, k, i)
	}
	fmt.Fprintf(&b, "--- FAIL: TestParse%d (0.01s): want token IDENT at 3:%d\n", i, i)
	return b.String()
}

// toolLoop drives a Claude Code-like tool loop of n steps through f,
// restarting the proxy with restarts[k] before request k when it has
// one. It returns the bodies sent upstream.
func toolLoop(t *testing.T, f *fixture, n int, restarts map[int]proxy.Options) [][]byte {
	t.Helper()
	history := []json.RawMessage{json.RawMessage(`{"role":"user","content":[{"type":"text","text":` + fmt.Sprintf("%q", loopTask) + `}]}`)}
	for i := 0; i <= n; i++ {
		if o, ok := restarts[i]; ok {
			f.p.Wait()
			o.Anthropic, o.OpenAI = f.up.URL(), f.up.URL()
			cat, err := tokens.NewCatalog()
			if err != nil {
				t.Fatal(err)
			}
			p, err := proxy.New(f.eng, window.NewManager(f.eng, cat), o)
			if err != nil {
				t.Fatal(err)
			}
			f.p = p
			f.front = httptest.NewServer(p)
			t.Cleanup(f.front.Close)
		}
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You are a coding agent.",
			"tools": []any{map[string]any{"name": "Bash", "input_schema": map[string]any{"type": "object"}},
				map[string]any{"name": "Write", "input_schema": map[string]any{"type": "object"}}},
			"messages": history})
		resp := f.post(t, string(body), map[string]string{"X-Engram-Session": "loop"})
		answer := anthropicAnswer(t, resp, i)
		history = append(history, answer)
		var a struct {
			Content []struct{ Type, ID string }
		}
		_ = json.Unmarshal(answer, &a)
		for _, b := range a.Content {
			if b.Type == "tool_use" {
				res, _ := json.Marshal(map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": b.ID, "content": loopResult(i)}}})
				history = append(history, res)
			}
		}
		f.p.Wait()
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	for _, r := range f.up.Requests(modelserver.KindMain) {
		bodies = append(bodies, r.Body)
	}
	return bodies
}

// TestProxy_ClippedCallStaysClipped: a call of the agent's that the
// window clips (tool_loop: one over 300 tokens, a file written) goes
// whole with its result, as the turn's own, and clipped from the next
// request on. The proxy took the window to hold the messages up to its
// last item's place: when that item was the marker of the call clipped,
// the call's result seemed one the window did not hold, and the next
// request sent the call and its result whole again, over what the
// window had laid out.
func TestProxy_ClippedCallStaysClipped(t *testing.T) {
	const n = 6
	f := newFixture(t, proxy.Options{Limit: 6000}, loopSteps(n)...)
	bodies := toolLoop(t, f, n, nil)
	for w := 1; w < n; w += 3 { // the steps of loopSteps that write a file
		content := loopWrite(w)
		for i, b := range bodies {
			var req struct {
				Messages []struct {
					Content []struct {
						Type  string          `json:"type"`
						Input json.RawMessage `json:"input"`
					} `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(b, &req); err != nil {
				t.Fatal(err)
			}
			whole := false
			for _, m := range req.Messages {
				for _, c := range m.Content {
					var in struct{ Content string }
					if c.Type == "tool_use" && json.Unmarshal(c.Input, &in) == nil && in.Content == content {
						whole = true
					}
				}
			}
			// Request w+1 carries the call's result: the turn's own.
			if want := i == w+1; whole != want {
				t.Errorf("request %d upstream shows step %d's write whole: %v, want %v", i, w, whole, want)
			}
		}
	}
}

// TestProxy_ToolLoopRestart: a proxy restarted in a tool loop, its
// windows read back from the store, sends upstream what a proxy that ran
// throughout sends, byte for byte; so does one that an older engram ran
// with the default role until then (its windows laid out anew as
// tool_loop's when the proxy first opens them), from the restart on. The
// task is in every request upstream.
func TestProxy_ToolLoopRestart(t *testing.T) {
	const n = 24
	opts := proxy.Options{Limit: 6000}
	want := toolLoop(t, newFixture(t, opts, loopSteps(n)...), n, nil)
	for _, at := range []int{5, 11, 17} {
		got := toolLoop(t, newFixture(t, opts, loopSteps(n)...), n, map[int]proxy.Options{at: opts})
		same(t, fmt.Sprintf("restarted before request %d", at), got, want, at)
		older := proxy.Options{Limit: 6000, Role: window.DefaultRole}
		got = toolLoop(t, newFixture(t, older, loopSteps(n)...), n, map[int]proxy.Options{at: opts})
		same(t, fmt.Sprintf("the default role's until request %d", at), got, want, at)
	}
	for i, b := range want {
		if !strings.Contains(string(b), loopTask) {
			t.Errorf("request %d upstream lost the task", i)
		}
	}
}

// same checks that requests from from on are want's, byte for byte.
func same(t *testing.T, what string, got, want [][]byte, from int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d requests upstream, want %d", what, len(got), len(want))
	}
	for i := from; i < len(want); i++ {
		if string(got[i]) != string(want[i]) {
			t.Errorf("%s: request %d upstream differs from the live proxy's:\n%s\nlive:\n%s", what, i, got[i], want[i])
			return
		}
	}
}
