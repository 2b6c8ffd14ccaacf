package proxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
)

// responsesItems reads the output items of a streamed Responses answer.
func responsesItems(t *testing.T, resp *http.Response) []json.RawMessage {
	t.Helper()
	var items []json.RawMessage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string          `json:"type"`
			Item json.RawMessage `json:"item"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if ev.Type == "response.output_item.done" {
			items = append(items, ev.Item)
		}
	}
	return items
}

// A Codex-like conversation over the Responses API, streamed, over the
// window's threshold: each request the upstream validates (every
// function_call_output has its call), older runs reach the model as
// markers in a user message item, the developer prompt stays first, and
// every answer is stored as its output items.
func TestProxy_Responses(t *testing.T) {
	var steps []modelserver.Step
	for i := range 20 {
		steps = append(steps, modelserver.Reply(modelserver.Text(fmt.Sprintf("Running step %d.", i)),
			modelserver.ToolUse("exec_command", map[string]any{"cmd": fmt.Sprintf("go test ./pkg%d", i)})))
	}
	steps = append(steps, modelserver.Say("All green."))
	f := newFixture(t, proxy.Options{Limit: 6000}, steps...)
	header := map[string]string{"User-Agent": "codex_exec/0.171.0", "Session-Id": "01a217e5-a3ec-7613-957d-3f824116f400"}
	input := []json.RawMessage{
		json.RawMessage(`{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]}`),
		json.RawMessage(`{"type":"message","role":"user","content":[{"type":"input_text","text":"run the tests of every package"}]}`),
	}
	input = codexTestLoop(t, f, header, map[string]any{"model": "gpt-5-codex",
		"tools":            []any{map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{"type": "object"}}},
		"prompt_cache_key": "01a217e5-a3ec-7613-957d-3f824116f400"}, input, 21)
	reqs := f.up.Requests(modelserver.KindMain)
	last := reqs[len(reqs)-1]
	var sent struct {
		Input []struct {
			Type    string `json:"type"`
			Role    string `json:"role"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"input"`
	}
	if err := json.Unmarshal(last.Body, &sent); err != nil {
		t.Fatal(err)
	}
	if n := len(sent.Input); n >= len(input)-2 {
		t.Fatalf("the last request upstream has %d items of %d: nothing was evicted", n, len(input))
	}
	if last.InputTokens > 6000 {
		t.Errorf("the last request upstream counts %d tokens, over the window's 6,000", last.InputTokens)
	}
	// The task's prompt, which opens the turn, is the last kept unit to
	// go: it stays, and the markers of the steps evicted come after it.
	if len(sent.Input) < 3 || sent.Input[0].Role != "developer" || sent.Input[1].Role != "user" || len(sent.Input[1].Content) == 0 ||
		!strings.Contains(sent.Input[1].Content[0].Text, "run the tests") || len(sent.Input[2].Content) == 0 {
		t.Fatalf("the last request starts %+v", sent.Input[:min(3, len(sent.Input))])
	}
	refs := ctxref.Find(sent.Input[2].Content[0].Text)
	if len(refs) == 0 {
		t.Fatalf("the third item upstream is not the markers: %.300s", sent.Input[2].Content[0].Text)
	}
	f.p.Wait()
	got, err := f.windows.Expand(t.Context(), refs[0].Marker.ID)
	if err != nil || len(got) == 0 {
		t.Fatalf("the first marker expands to %d messages (%v)", len(got), err)
	}
	key := store.WindowKey{SessionID: "01a217e5-a3ec-7613-957d-3f824116f400", AgentID: "codex"}
	f.p.Wait()
	if _, held, _, err := f.windows.Messages(t.Context(), key); err != nil || len(held) != len(input)-1 {
		t.Errorf("the window holds %d messages (%v), want the %d items sent before the last answer", len(held), err, len(input)-1)
	}
	var s proxy.Stats
	for try := 0; try < 100; try++ {
		f.p.Wait()
		if s = f.p.Stats(); s.Answers == 21 {
			break
		}
		time.Sleep(time.Duration(try) * time.Millisecond)
	}
	if s.Requests["responses"] != 21 || s.Virtualized == 0 || s.Answers != 21 || s.FailedOpen != 0 {
		t.Errorf("stats: %+v", s)
	}
	f.p.Wait()
	hits, err := f.eng.Store().TurnRange(t.Context(), key.SessionID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	answers := 0
	for _, e := range hits {
		if e.Type == store.AgentResponse && strings.Contains(string(e.Content), `"output":[`) {
			answers++
		}
	}
	if answers != 21 {
		t.Errorf("%d answers stored as output items, want 21", answers)
	}
}

// A request that continues a conversation the server holds goes upstream
// untouched, and what it lists is stored; the upstream's answer (here the
// scripted server's: it holds no responses) reaches the client verbatim.
func TestProxy_ResponsesStateful(t *testing.T) {
	f := newFixture(t, proxy.Options{Limit: 6000}, modelserver.Say("fine"))
	body := `{"model":"gpt-5-codex","previous_response_id":"resp_123","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"and the docs?"}]}]}`
	resp := f.postTo(t, "/v1/responses", body, map[string]string{"X-Engram-Session": "held"})
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "Previous response with id 'resp_123' not found.") {
		t.Fatalf("%d %s; want the upstream's own 400", resp.StatusCode, b)
	}
	f.p.Wait()
	reqs := f.up.Requests()
	if len(reqs) != 1 || string(reqs[0].Body) != body {
		t.Fatalf("the request upstream is not the request sent: %s", reqs[0].Body)
	}
	f.p.Wait()
	_, held, _, err := f.windows.Messages(t.Context(), store.WindowKey{SessionID: "held", AgentID: "proxy"})
	if err != nil || len(held) != 1 || held[0].Blocks[0].Text != "and the docs?" {
		t.Errorf("the window holds %d messages (%v), want the one listed", len(held), err)
	}
}

// A session a request names in its own terms that is no valid ID (a
// prompt_cache_key of 300 bytes) is named by its digest: the conversation
// is still stored.
func TestProxy_LongPromptCacheKey(t *testing.T) {
	f := newFixture(t, proxy.Options{}, modelserver.Say("ok"))
	long := strings.Repeat("k", 300)
	body, _ := json.Marshal(map[string]any{"model": "gpt-5-codex", "store": false, "prompt_cache_key": long,
		"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "hi"}}}}})
	resp := f.postTo(t, "/v1/responses", string(body), map[string]string{"User-Agent": "codex_exec/0.171.0"})
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	f.p.Wait()
	if s := f.p.Stats(); s.FailedOpen != 0 {
		t.Errorf("failed open %d times: the conversation was not stored", s.FailedOpen)
	}
}

// A reasoning model's conversation over the Responses API in a small
// window (the probe's repro: --window 2500): each answer starts with a
// reasoning item (encrypted content) before its function_calls or its
// message, and the window evicts. The upstream refuses, as the API does,
// a reasoning item without the item after it and an item without the
// reasoning before it, so each request upstream must keep them together.
func TestProxy_ResponsesReasoning(t *testing.T) {
	thinking := modelserver.Block{Type: "thinking", Thinking: "Weigh the options.", Signature: "gAAAAB" + strings.Repeat("x", 400)}
	var steps []modelserver.Step
	for i := range 8 {
		steps = append(steps,
			modelserver.Reply(thinking,
				modelserver.ToolUse("exec_command", map[string]any{"cmd": fmt.Sprintf("go test ./pkg%d", i)}),
				modelserver.ToolUse("exec_command", map[string]any{"cmd": fmt.Sprintf("go vet ./pkg%d", i)})),
			modelserver.Reply(thinking, modelserver.Text(fmt.Sprintf("pkg%d is fine.", i))))
	}
	f := newFixture(t, proxy.Options{Limit: 2500}, steps...)
	header := map[string]string{"User-Agent": "codex_exec/0.171.0"}
	input := []json.RawMessage{
		json.RawMessage(`{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]}`),
	}
	send := func(turn int) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "gpt-5-codex", "stream": true, "store": false, "input": input,
			"include":          []string{"reasoning.encrypted_content"},
			"tools":            []any{map[string]any{"type": "function", "name": "exec_command", "parameters": map[string]any{"type": "object"}}},
			"prompt_cache_key": "0199a213-81c0-7800-8aa1-bbab2a035a53"})
		resp := f.postTo(t, "/v1/responses", string(body), header)
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, b)
		}
		input = withOutputs(input, responsesItems(t, resp), func(callID string) string {
			return fmt.Sprintf("ok %s %s", callID, strings.Repeat("PASS a test of the package. ", 30))
		})
	}
	for i := range 8 {
		prompt, _ := json.Marshal(map[string]any{"type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": fmt.Sprintf("check pkg%d", i)}}})
		input = append(input, prompt)
		send(i)
		send(i)
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	f.p.Wait()
	if s := f.p.Stats(); s.Virtualized == 0 {
		t.Errorf("nothing was evicted: %+v", s)
	}
}

// Stateful requests (previous_response_id) send their instructions every
// turn: the window stores them once, and again only when they change,
// also after the proxy restarts.
func TestProxy_ResponsesStatefulInstructions(t *testing.T) {
	f := newFixture(t, proxy.Options{Limit: 6000})
	send := func(instructions, prompt string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "gpt-5-codex", "previous_response_id": "resp_1", "instructions": instructions,
			"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}}}})
		resp := f.postTo(t, "/v1/responses", string(body), map[string]string{"X-Engram-Session": "stateful"})
		_, _ = io.ReadAll(resp.Body) // the scripted upstream holds no responses: its 400
		f.p.Wait()
	}
	send("Be brief.", "one")
	send("Be brief.", "two")
	send("Be thorough.", "three")
	send("Be thorough.", "four")
	f.p = f.restart(t)
	send("Be thorough.", "five")
	send("Be brief.", "six")
	_, held, _, err := f.windows.Messages(t.Context(), store.WindowKey{SessionID: "stateful", AgentID: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range held {
		got = append(got, string(m.Role)+": "+m.Blocks[0].Text)
	}
	want := []string{"system: Be brief.", "user: one", "user: two", "system: Be thorough.", "user: three", "user: four", "user: five",
		"system: Be brief.", "user: six"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the window holds (-want +got):\n%s", diff)
	}
}

// An X-Engram-Session the store cannot take as a session ID (300 bytes) is
// named by its digest, as a session the harness names is: the
// conversation is stored, and the same header finds the same window.
func TestProxy_LongSessionHeader(t *testing.T) {
	f := newFixture(t, proxy.Options{}, modelserver.Say("one"), modelserver.Say("two"))
	h := map[string]string{"X-Engram-Session": strings.Repeat("s", 300)}
	for i, history := range []string{
		`{"role":"user","content":"first"}`,
		`{"role":"user","content":"first"},{"role":"assistant","content":"one"},{"role":"user","content":"second"}`,
	} {
		resp := f.post(t, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[`+history+`]}`, h)
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		f.p.Wait()
	}
	if s := f.p.Stats(); s.FailedOpen != 0 || s.Restarts != 0 {
		t.Errorf("stats %+v: the conversation was not stored in one window", s)
	}
	sessions, err := f.eng.Store().Windows(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 || !strings.HasPrefix(sessions[0].SessionID, "conv-") {
		t.Fatalf("windows %+v, want one named by the header's digest", sessions)
	}
	_, held, _, err := f.windows.Messages(t.Context(), sessions[0].WindowKey)
	if err != nil || len(held) != 3 {
		t.Errorf("the window holds %d messages (%v), want the 3 of both requests", len(held), err)
	}
}

// withOutputs appends an answer's items to input, each function call
// followed by its output, as output says for its call's ID.
func withOutputs(input, items []json.RawMessage, output func(callID string) string) []json.RawMessage {
	for _, it := range items {
		input = append(input, it)
		var fc struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		}
		_ = json.Unmarshal(it, &fc)
		if fc.Type == "function_call" {
			out, _ := json.Marshal(map[string]any{"type": "function_call_output", "call_id": fc.CallID, "output": output(fc.CallID)})
			input = append(input, out)
		}
	}
	return input
}

// Codex 0.171 sends its default model its tools as the input's first
// item, additional_tools, not in "tools". Over the window's threshold the
// item and the developer prompt after it must stay first in every
// request, byte for byte: a window that evicted them to a marker took the
// model's tools away (seen with the real Codex through engram proxy).
func TestProxy_ResponsesAdditionalTools(t *testing.T) {
	var steps []modelserver.Step
	for i := range 12 {
		steps = append(steps, modelserver.Call("exec_command", map[string]any{"cmd": fmt.Sprintf("go test ./pkg%d", i)}))
	}
	steps = append(steps, modelserver.Say("All green."))
	f := newFixture(t, proxy.Options{Limit: 6000}, steps...)
	var tools []any
	for i := range 8 {
		tools = append(tools, map[string]any{"type": "function", "name": fmt.Sprintf("tool_%d", i),
			"description": strings.Repeat(fmt.Sprintf("Tool %d does one thing well. ", i), 20), "parameters": map[string]any{"type": "object"}})
	}
	additional, err := json.Marshal(map[string]any{"type": "additional_tools", "id": "at_01", "role": "developer",
		"tools": []any{map[string]any{"type": "namespace", "name": "functions", "description": "", "tools": tools}}})
	if err != nil {
		t.Fatal(err)
	}
	developer := json.RawMessage(`{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent."}]}`)
	input := []json.RawMessage{additional, developer,
		json.RawMessage(`{"type":"message","role":"user","content":[{"type":"input_text","text":"run the tests of every package"}]}`),
	}
	header := map[string]string{"User-Agent": "codex_exec/0.171.0"}
	codexTestLoop(t, f, header, map[string]any{"model": "gpt-6.2-sol", "prompt_cache_key": "01a22911-4a3c-7852-9ce5-765e736ad04a"}, input, 13)
	reqs := f.up.Requests(modelserver.KindMain)
	evicted := false
	for i, r := range reqs {
		var sent struct {
			Input []json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(r.Body, &sent); err != nil {
			t.Fatal(err)
		}
		if len(sent.Input) < 2 || string(sent.Input[0]) != string(additional) || string(sent.Input[1]) != string(developer) {
			t.Fatalf("request %d upstream does not start with the tools and the developer prompt: %.300s", i, r.Body)
		}
		evicted = evicted || bytes.Contains(r.Body, []byte("CTX-REF"))
	}
	if !evicted {
		t.Error("no request upstream holds a marker: the window never evicted")
	}
}

// codexTestLoop sends turns streamed, stateless requests as Codex sends
// its tool loop (the body's other fields from fields), each time with the
// answer's items and, for each call, a test run's output of about 250
// tokens added to input; then checks that the upstream refused nothing,
// waits for the proxy to store it all, and returns the input as it grew.
func codexTestLoop(t *testing.T, f *fixture, header map[string]string, fields map[string]any, input []json.RawMessage, turns int) []json.RawMessage {
	t.Helper()
	for i := range turns {
		req := map[string]any{"stream": true, "store": false, "input": input}
		maps.Copy(req, fields)
		body, _ := json.Marshal(req)
		resp := f.postTo(t, "/v1/responses", string(body), header)
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("turn %d: %d %s", i, resp.StatusCode, b)
		}
		input = withOutputs(input, responsesItems(t, resp), func(string) string {
			return fmt.Sprintf("ok pkg%d %s", i, strings.Repeat("PASS a test of the package. ", 40))
		})
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	f.p.Wait()
	return input
}
