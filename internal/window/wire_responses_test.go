package window_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// codexTestdata holds what Codex 0.171.0 sent a Responses API server, and
// its rollout (see its README).
const codexTestdata = "../hook/testdata/codex-0.171.0"

// responsesItems is a conversation of Responses input items, in order,
// each call before its output: what FromResponses maps them to is in
// TestResponsesMapping.
var responsesItems = []string{
	`{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex, a coding agent."}]}`,
	`{"role": "user", "content": "Fix the flaky test in internal/queue."}`,
	`{"type": "message", "id": "msg_01", "role": "user", "content": [{"type": "input_text", "text": "Here is the failure."}, {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAAAAABX3VL4AAAAEklEQVR4nGJiYGBiYAAEAAD//wAYAAV4jI74AAAAAElFTkSuQmCC", "detail": "auto"}, {"type": "input_file", "file_id": "file-abc", "filename": "log.txt"}]}`,
	`{"type": "reasoning", "id": "rs_01", "summary": [{"type": "summary_text", "text": "Run the test first."}], "encrypted_content": "gAAAAB-opaque"}`,
	`{"type": "function_call", "id": "fc_01", "call_id": "call_01", "name": "exec_command", "arguments": "{\"cmd\":\"go test ./internal/queue\"}", "status": "completed"}`,
	`{"type": "function_call_output", "id": "fco_01", "call_id": "call_01", "output": "--- FAIL: TestDrain (0.01s)\n    queue_test.go:12: timeout\nFAIL\n"}`,
	`{"type": "function_call", "call_id": "call_02", "name": "record", "namespace": "mcp__engram", "arguments": "not json {"}`,
	`{"type": "function_call_output", "call_id": "call_02", "output": [{"type": "input_text", "text": "recorded"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}`,
	`{"type": "custom_tool_call", "id": "ctc_01", "status": "completed", "call_id": "call_03", "name": "apply_patch", "input": "*** Begin Patch\n*** Update File: internal/queue/queue.go\n@@\n-\ttimeout := time.Second\n+\ttimeout := 5 * time.Second\n*** End Patch\n"}`,
	`{"type": "custom_tool_call_output", "call_id": "call_03", "output": "Success. Updated the following files:\nM internal/queue/queue.go\n"}`,
	`{"type": "local_shell_call", "id": "lsh_01", "call_id": "call_04", "status": "completed", "action": {"type": "exec", "command": ["go", "test", "./internal/queue"], "timeout_ms": 120000, "working_directory": "/repo", "env": {}, "user": null}}`,
	`{"type": "local_shell_call_output", "id": "lsh_01", "call_id": "call_04", "output": "ok  \tgithub.com/x/queue\t0.02s\n", "status": "completed"}`,
	`{"type": "local_shell_call", "id": "lsh_02", "call_id": null, "status": "completed", "action": {"type": "exec", "command": ["ls"]}}`,
	`{"type": "local_shell_call_output", "id": "lsh_02", "output": "main.go\n"}`,
	`{"type": "web_search_call", "id": "ws_01", "status": "completed", "action": {"type": "search", "query": "go test flaky timeout"}}`,
	`{"type": "computer_call", "id": "cu_01", "call_id": "call_05", "action": {"type": "click", "x": 10, "y": 20, "button": "left"}, "pending_safety_checks": [], "status": "completed"}`,
	`{"type": "computer_call_output", "call_id": "call_05", "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}}`,
	`{"type": "tool_search_call", "call_id": "call_06", "execution": "client", "arguments": {"query": "calendar"}, "status": "completed"}`,
	`{"type": "tool_search_output", "call_id": "call_06", "execution": "client", "status": "completed", "tools": []}`,
	`{"type": "image_generation_call", "id": "ig_01", "status": "completed", "result": "iVBORw0KGgo="}`,
	`{"type": "message", "id": "msg_02", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "The test timed out; the timeout is 5s now.", "annotations": [{"type": "url_citation", "start_index": 0, "end_index": 8, "url": "https://go.dev", "title": "Go"}], "logprobs": []}]}`,
	`{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]}`,
	`{"type": "message", "role": "assistant", "content": [{"type": "input_text", "text": "an assistant's input_text"}, {"type": "output_text", "text": "and its output_text"}]}`,
	`{"type": "message", "role": "system", "content": "Be brief."}`,
	`{"type": "item_reference", "id": "msg_02"}`,
	`{"type": "compaction", "encrypted_content": "gAAAAB-compacted"}`,
	`{"type": "mcp_approval_response", "approval_request_id": "mcpr_01", "approve": true}`,
	`{"type": "future_thing_output", "data": {"x": 1}}`,
	`{"type": "message", "role": "user", "content": []}`,
	`{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ünïcödé ✓, \u0000 and <b>&amp;</b>"}]}`,
}

// TestResponsesMapping: each item maps onto the message the wire
// conventions say, and back to the same JSON.
func TestResponsesMapping(t *testing.T) {
	text := func(s string) window.Block { return window.Block{Type: window.BlockText, Text: s} }
	item := func(typ string) window.Block { return window.Block{Type: window.BlockType("item:" + typ)} }
	use := func(id, name string) window.Block { return window.Block{Type: window.BlockToolUse, ID: id, Name: name} }
	result := func(id, s string) window.Block {
		return window.Block{Type: window.BlockToolResult, ToolUseID: id, Text: s}
	}
	part := func(typ string) window.Block { return window.Block{Type: window.BlockType("part:" + typ)} }
	raw := func(s string) map[string]json.RawMessage {
		var f map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	want := []struct {
		role   window.Role
		blocks []window.Block
		shape  window.Shape
	}{
		{window.RoleSystem, []window.Block{text("You are Codex, a coding agent.")}, window.Shape{Developer: true}},
		{window.RoleUser, []window.Block{text("Fix the flaky test in internal/queue.")}, window.Shape{Plain: true, NoType: true}},
		{window.RoleUser, []window.Block{text("Here is the failure."), part("input_image"), part("input_file")}, window.Shape{Extra: raw(`{"id": "msg_01"}`)}},
		{window.RoleAssistant, []window.Block{item("reasoning")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{use("call_01", "exec_command")}, window.Shape{}},
		{window.RoleTool, []window.Block{result("call_01", "--- FAIL: TestDrain (0.01s)\n    queue_test.go:12: timeout\nFAIL\n")},
			window.Shape{Item: "function_call_output", Extra: raw(`{"id": "fco_01"}`)}},
		{window.RoleAssistant, []window.Block{use("call_02", "record")}, window.Shape{}},
		{window.RoleTool, []window.Block{result("call_02", "")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{use("call_03", "apply_patch")}, window.Shape{}},
		{window.RoleTool, []window.Block{result("call_03", "Success. Updated the following files:\nM internal/queue/queue.go\n")},
			window.Shape{Item: "custom_tool_call_output"}},
		{window.RoleAssistant, []window.Block{use("call_04", "local_shell")}, window.Shape{}},
		{window.RoleTool, []window.Block{result("call_04", "ok  \tgithub.com/x/queue\t0.02s\n")},
			window.Shape{Item: "local_shell_call_output", Extra: raw(`{"id": "lsh_01", "status": "completed"}`)}},
		{window.RoleAssistant, []window.Block{item("local_shell_call")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{item("local_shell_call_output")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{item("web_search_call")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{use("call_05", "computer")}, window.Shape{}},
		{window.RoleTool, []window.Block{result("call_05", "")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{use("call_06", "tool_search")}, window.Shape{}},
		{window.RoleTool, []window.Block{result("call_06", "")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{item("image_generation_call")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{text("The test timed out; the timeout is 5s now.")}, window.Shape{
			Extra: raw(`{"id": "msg_02", "status": "completed"}`),
			Parts: []window.Part{{Extra: raw(`{"annotations": [{"type": "url_citation", "start_index": 0, "end_index": 8, "url": "https://go.dev", "title": "Go"}], "logprobs": []}`)}}}},
		{window.RoleAssistant, []window.Block{part("refusal")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{text("an assistant's input_text"), text("and its output_text")},
			window.Shape{Parts: []window.Part{{Type: "input_text"}, {}}}},
		{window.RoleSystem, []window.Block{text("Be brief.")}, window.Shape{Plain: true}},
		{window.RoleAssistant, []window.Block{item("item_reference")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{item("compaction")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{item("mcp_approval_response")}, window.Shape{}},
		{window.RoleAssistant, []window.Block{item("future_thing_output")}, window.Shape{}},
		{window.RoleUser, nil, window.Shape{}},
		{window.RoleUser, []window.Block{text("ünïcödé ✓, \u0000 and <b>&amp;</b>")}, window.Shape{}},
	}
	if len(want) != len(responsesItems) {
		t.Fatalf("%d expectations for %d items", len(want), len(responsesItems))
	}
	var msgs []window.Message
	for i, in := range responsesItems {
		m, err := window.FromResponses([]byte(in))
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		msgs = append(msgs, m)
		w := want[i]
		w.shape.Vendor = window.Responses
		if diff := cmp.Diff(w.blocks, m.Blocks, cmpopts.IgnoreFields(window.Block{}, "Raw"), cmpopts.EquateEmpty()); m.Role != w.role || diff != "" {
			t.Errorf("item %d: role %s, want %s; blocks (-want +got):\n%s", i, m.Role, w.role, diff)
		}
		for _, b := range m.Blocks {
			if b.Type != window.BlockText && b.Text == "" && len(b.Raw) == 0 {
				t.Errorf("item %d: a %s block keeps nothing", i, b.Type)
			}
		}
		if diff := cmp.Diff(w.shape, *m.Shape, cmp.Comparer(func(a, b json.RawMessage) bool { return jsonEqual(t, a, b) })); diff != "" {
			t.Errorf("item %d: shape (-want +got):\n%s", i, diff)
		}
		back, err := window.ToResponses(m)
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if !jsonEqual(t, []byte(in), back) {
			t.Errorf("item %d round trip:\n in  %s\n out %s", i, in, back)
		}
	}
	if _, err := window.Units(msgs); err != nil {
		t.Errorf("tool pairs: %v", err)
	}
}

// codexItems returns the input items of a request Codex sent.
func codexItems(t *testing.T, name string) []json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(codexTestdata, "requests", name))
	if err != nil {
		t.Fatal(err)
	}
	var req struct {
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(req.Input) == 0 {
		t.Fatalf("%s: no input items", name)
	}
	return req.Input
}

// TestResponsesCodex: every input item of real Codex 0.171.0 requests, and
// every Responses item of its rollout, maps onto a message and back to the
// same JSON; text parts are text, calls pair with their outputs.
func TestResponsesCodex(t *testing.T) {
	check := func(t *testing.T, items []json.RawMessage) []window.Message {
		t.Helper()
		var msgs []window.Message
		for i, raw := range items {
			m, err := window.FromResponses(raw)
			if err != nil {
				t.Fatalf("item %d: %v", i, err)
			}
			for j, b := range m.Blocks {
				if b.Type != window.BlockText && b.Type != window.BlockToolUse && b.Type != window.BlockToolResult {
					t.Errorf("item %d block %d: a %s block, want text, a call or a result", i, j, b.Type)
				}
				if (b.Type == window.BlockText || b.Type == window.BlockToolResult) && b.Text == "" {
					t.Errorf("item %d block %d: a %s block without its text", i, j, b.Type)
				}
			}
			back, err := window.ToResponses(m)
			if err != nil {
				t.Fatalf("item %d: %v", i, err)
			}
			if !jsonEqual(t, raw, back) {
				t.Errorf("item %d round trip:\n in  %s\n out %s", i, raw, back)
			}
			msgs = append(msgs, m)
		}
		if _, err := window.Units(msgs); err != nil {
			t.Errorf("tool pairs: %v", err)
		}
		return msgs
	}
	for _, name := range []string{"main-first.json", "after-compact-auto.json", "resumed.json", "compact-auto.json"} {
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			msgs := check(t, codexItems(t, name))
			if name == "compact-auto.json" {
				calls, results := 0, 0
				for _, m := range msgs {
					calls += len(m.Calls())
					results += len(m.Results())
				}
				if calls != 1 || results != 1 {
					t.Errorf("%d calls and %d results, want the exec_command call and its output", calls, results)
				}
			}
		})
	}
	t.Run("rollout", func(t *testing.T) {
		paths, err := filepath.Glob(filepath.Join(codexTestdata, "rollouts", "*.jsonl"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no rollout: %v", err)
		}
		f, err := os.Open(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var items []json.RawMessage
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var line struct {
				Type    string          `json:"type"`
				Payload json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if line.Type == "response_item" {
				items = append(items, line.Payload)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if len(items) < 10 {
			t.Fatalf("%d response items in the rollout", len(items))
		}
		check(t, items)
	})
}

// responsesWindow opens a window of limit tokens over a fresh store.
func responsesWindow(t *testing.T, limit int, p *window.Policy) (*window.Manager, store.WindowKey) {
	t.Helper()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s-responses", AgentID: "codex"}
	if _, err := m.Open(t.Context(), key, window.OpenOptions{Limit: limit, Output: 10, Safety: 10, Policy: p}); err != nil {
		t.Fatal(err)
	}
	return m, key
}

func fromResponses(t *testing.T, raw string) window.Message {
	t.Helper()
	m, err := window.FromResponses([]byte(raw))
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return m
}

// TestResponsesThroughWindow: the items, appended to a window that evicts
// all but the last, come back from its context and expansions as the same
// JSON.
func TestResponsesThroughWindow(t *testing.T) {
	ctx := t.Context()
	p := window.PolicyFor("")
	p.KeepTurns, p.Evict, p.Target = 0, 0.2, 0.1
	m, key := responsesWindow(t, 320, &p)
	evicted := 0
	for _, raw := range responsesItems {
		res, err := m.Append(ctx, key, []window.Message{fromResponses(t, raw)})
		if err != nil {
			t.Fatalf("append %s: %v", raw, err)
		}
		evicted += len(res.Evicted)
	}
	if evicted == 0 {
		t.Fatal("nothing was evicted from a 320-token window")
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var got []window.Message
	for _, it := range items {
		if it.Message != nil {
			got = append(got, *it.Message)
			continue
		}
		if it.RefID == "" {
			continue
		}
		back, err := m.Expand(ctx, it.RefID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, back...)
	}
	if len(got) != len(responsesItems) {
		t.Fatalf("%d messages back, want %d", len(got), len(responsesItems))
	}
	for i, g := range got {
		out, err := window.ToResponses(g)
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if !jsonEqual(t, []byte(responsesItems[i]), out) {
			t.Errorf("item %d through the store:\n in  %s\n out %s", i, responsesItems[i], out)
		}
	}
}

// TestResponsesTokens: a window counts a Responses message's text, not
// its JSON: each costs what the same text costs in engram's own form,
// whatever fields its item and parts carry.
func TestResponsesTokens(t *testing.T) {
	ctx := t.Context()
	m, key := responsesWindow(t, 100_000, nil)
	long := strings.Repeat("The queue drains in internal/queue/queue.go; TestDrain waits for it. ", 20)
	pairs := [][2]window.Message{
		{fromResponses(t, fmt.Sprintf(`{"type": "message", "id": "msg_9", "role": "user", "content": [{"type": "input_text", "text": %q}]}`, long)),
			textMsg(window.RoleUser, long)},
		{fromResponses(t, fmt.Sprintf(`{"type": "message", "id": "msg_10", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": %q, "annotations": [], "logprobs": []}]}`, long)),
			textMsg(window.RoleAssistant, long)},
		{fromResponses(t, fmt.Sprintf(`{"role": "developer", "content": %q}`, long)),
			textMsg(window.RoleSystem, long)},
		{fromResponses(t, `{"type": "function_call", "call_id": "call_a", "name": "exec_command", "arguments": "{}"}`),
			{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "call_b", Name: "exec_command", Input: json.RawMessage(`{}`)}}}},
		{fromResponses(t, fmt.Sprintf(`{"type": "function_call_output", "id": "fco_1", "call_id": "call_a", "output": %q}`, long)),
			{Role: window.RoleTool, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "call_b", Text: long}}}},
	}
	var msgs []window.Message
	for _, p := range pairs {
		msgs = append(msgs, p[0], p[1])
	}
	if _, err := m.Append(ctx, key, msgs); err != nil {
		t.Fatal(err)
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]int{}
	for _, it := range items {
		if it.Message == nil {
			t.Fatalf("a 100,000-token window evicted: %+v", it)
		}
		vendor := "engram"
		if it.Message.Shape != nil {
			vendor = it.Message.Shape.Vendor
		}
		b := it.Message.Blocks[0]
		k := fmt.Sprintf("%s %s %s", it.Message.Role, b.Type, vendor)
		if b.Type == window.BlockToolUse {
			continue // a call kept raw counts its item
		}
		tokens[k] = it.Message.Tokens
	}
	for _, k := range []string{"user text", "assistant text", "system text", "tool tool_result"} {
		r, e := tokens[k+" "+window.Responses], tokens[k+" engram"]
		if r == 0 || r != e {
			t.Errorf("%s: %d tokens from a Responses item, %d in engram's form", k, r, e)
		}
	}
	if n := tokens["user text engram"]; n < 200 {
		t.Errorf("%d tokens for %d bytes of text", n, len(long))
	}
}

// TestResponsesEvictsPairs: a Codex-like conversation in a small window:
// whatever it evicts, a function_call and its function_call_output go
// together, behind one marker or both in the window, with the developer
// message Codex puts between them (its hooks' context), which goes as
// history does; the developer message that opens the conversation stays.
func TestResponsesEvictsPairs(t *testing.T) {
	ctx := t.Context()
	p := window.PolicyFor("")
	// Small references, cut wherever a unit ends, not only between turns;
	// the last two turns stay.
	p.KeepTurns, p.MaxRefTokens = 2, 150
	m, key := responsesWindow(t, 2000, &p)
	head := fromResponses(t, `{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent."}]}`)
	if _, err := m.Append(ctx, key, []window.Message{head}); err != nil {
		t.Fatal(err)
	}
	var appended []window.Message
	for i := range 12 {
		out := strings.Repeat(fmt.Sprintf("internal/pkg%d/file.go:%d: a line of output\n", i, i), 12)
		turn := []string{
			fmt.Sprintf(`{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Step %d: test internal/pkg%d."}]}`, i, i),
			fmt.Sprintf(`{"type": "reasoning", "id": "rs_%d", "summary": [], "encrypted_content": "gAAAAB-%d"}`, i, i),
			fmt.Sprintf(`{"type": "function_call", "id": "fc_%d", "call_id": "call_%d", "name": "exec_command", "arguments": "{\"cmd\":\"go test ./internal/pkg%d\"}", "status": "completed"}`, i, i, i),
			`{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<engram-context kind=\"posttooluse\">noted</engram-context>"}]}`,
			fmt.Sprintf(`{"type": "function_call_output", "id": "fco_%d", "call_id": "call_%d", "output": %q}`, i, i, out),
			fmt.Sprintf(`{"type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "pkg%d passes.", "annotations": [], "logprobs": []}]}`, i),
		}
		var msgs []window.Message
		for _, raw := range turn {
			msgs = append(msgs, fromResponses(t, raw))
		}
		if _, err := m.Append(ctx, key, msgs); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		appended = append(appended, msgs...)
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Where each call and each result is: "window", or the reference
	// standing for it.
	callAt, resultAt := map[string]string{}, map[string]string{}
	// reasoningAt is where the reasoning before each call is, by the call's
	// id (rs_N goes before call_N).
	reasoningAt := map[string]string{}
	note := func(where string, msgs []window.Message) {
		for _, msg := range msgs {
			if msg.LeadsNext() {
				var r struct{ ID string }
				if err := json.Unmarshal(msg.Blocks[0].Raw, &r); err != nil {
					t.Fatal(err)
				}
				reasoningAt["call_"+strings.TrimPrefix(r.ID, "rs_")] = where
			}
			for _, id := range msg.Calls() {
				callAt[id] = where
			}
			for _, id := range msg.Results() {
				resultAt[id] = where
			}
		}
	}
	refs := 0
	for _, it := range items {
		switch {
		case it.Message != nil:
			note("window", []window.Message{*it.Message})
		case it.RefID != "":
			refs++
			back, err := m.Expand(ctx, it.RefID)
			if err != nil {
				t.Fatal(err)
			}
			units, err := window.Units(back)
			if err != nil {
				t.Errorf("reference %s separates a call from its output: %v", it.RefID, err)
			}
			for _, u := range units {
				if u.Open {
					t.Errorf("reference %s holds a call without its output: %d-%d", it.RefID, u.From, u.To)
				}
			}
			note(it.RefID, back)
		}
	}
	if refs == 0 {
		t.Fatal("twelve turns in a 2,000-token window evicted nothing")
	}
	if items[0].Message == nil || items[0].Message.Role != window.RoleSystem {
		t.Errorf("the conversation's opening developer message left the window: %+v", items[0])
	}
	if len(callAt) != 12 || len(resultAt) != 12 || len(reasoningAt) != 12 {
		t.Fatalf("%d calls, %d outputs and %d reasoning items found, want 12 of each", len(callAt), len(resultAt), len(reasoningAt))
	}
	evictedPairs := 0
	for id, where := range callAt {
		if resultAt[id] != where {
			t.Errorf("call %s is in %s, its output in %s", id, where, resultAt[id])
		}
		// The Responses API refuses a reasoning item without the item
		// after it, and that item without its reasoning.
		if reasoningAt[id] != where {
			t.Errorf("call %s is in %s, the reasoning before it in %s", id, where, reasoningAt[id])
		}
		if where != "window" {
			evictedPairs++
		}
	}
	if evictedPairs == 0 {
		t.Error("no call was evicted")
	}
	// And the units of what was appended: each call with its output.
	units, err := window.Units(appended)
	if err != nil {
		t.Fatal(err)
	}
	led := 0
	for _, u := range units {
		if !appended[u.From].LeadsNext() {
			continue
		}
		led++
		if calls := appended[u.From+1].Calls(); len(calls) != 1 || u.To-u.From != 4 {
			t.Errorf("the unit of reasoning item %d runs over %d messages, want it, the call after it, the developer message and the call's output", u.From, u.To-u.From)
		}
	}
	if led != 12 {
		t.Errorf("%d units start with a reasoning item, want 12", led)
	}
}

func TestResponsesBadInput(t *testing.T) {
	for _, raw := range []string{
		`[]`,
		`"hi"`,
		`{}`,
		`{"content": "no type, no role"}`,
		`{"type": 3, "role": "user", "content": "x"}`,
		`{"type": "", "role": "user", "content": "x"}`,
		`{"type": null, "role": "user", "content": "x"}`,
		`{"role": "tool", "content": "x"}`,
		`{"type": "message", "role": "critic", "content": "x"}`,
		`{"type": "message", "role": 1, "content": "x"}`,
		`{"type": "message", "role": "user"}`,
		`{"type": "message", "role": "user", "content": null}`,
		`{"type": "message", "role": "user", "content": 3}`,
		`{"type": "message", "role": "user", "content": [{"text": "a part without a type"}]}`,
		`{"type": "message", "role": "user", "content": ["a string part"]}`,
		`{"type": "function_call", "name": "exec_command", "arguments": "{}"}`,
		`{"type": "function_call", "call_id": "call_1", "arguments": "{}"}`,
		`{"type": "function_call", "call_id": "", "name": "exec_command", "arguments": "{}"}`,
		`{"type": "function_call", "call_id": 7, "name": "exec_command", "arguments": "{}"}`,
		`{"type": "custom_tool_call", "call_id": "call_1", "input": "x"}`,
		`{"type": "function_call_output", "output": "x"}`,
		`{"type": "custom_tool_call_output", "call_id": null, "output": "x"}`,
	} {
		if _, err := window.FromResponses([]byte(raw)); !errors.Is(err, window.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", raw, err)
		} else if !strings.Contains(err.Error(), "responses message: ") {
			t.Errorf("%s: %q does not name the vendor", raw, err)
		}
	}
	for _, m := range []window.Message{
		{Role: window.RoleAssistant, Blocks: []window.Block{
			{Type: window.BlockToolUse, ID: "a", Name: "x", Input: json.RawMessage(`{}`)},
			{Type: window.BlockToolUse, ID: "b", Name: "x", Input: json.RawMessage(`{}`)}}},
		{Role: window.RoleTool, Blocks: []window.Block{{Type: window.BlockText, Text: "a tool's text"}}},
		{Role: window.RoleTool, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "a", Raw: json.RawMessage(`[{"type": "text", "text": "x"}]`)}},
			Shape: &window.Shape{Vendor: window.OpenAI}},
	} {
		if b, err := window.ToResponses(m); !errors.Is(err, window.ErrInvalid) {
			t.Errorf("%+v: %s, %v, want ErrInvalid", m, b, err)
		}
	}
}

// TestToResponsesOtherShapes: a message made here or from another vendor
// is written as the Responses item it is.
func TestToResponsesOtherShapes(t *testing.T) {
	for _, tc := range []struct {
		m    window.Message
		want string
	}{
		{textMsg(window.RoleUser, "hi"), `{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}`},
		{textMsg(window.RoleAssistant, "hello"), `{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}`},
		{window.Message{Role: window.RoleSystem, Blocks: []window.Block{{Type: window.BlockText, Text: "be brief"}}, Shape: &window.Shape{Vendor: window.OpenAI, Plain: true, Developer: true, Extra: map[string]json.RawMessage{"name": json.RawMessage(`"x"`)}}},
			`{"type": "message", "role": "developer", "content": "be brief"}`},
		{window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "toolu_1", Name: "Read", Input: json.RawMessage(`{"file_path": "a.go"}`)}}, Shape: &window.Shape{Vendor: window.Anthropic}},
			`{"type": "function_call", "call_id": "toolu_1", "name": "Read", "arguments": "{\"file_path\": \"a.go\"}"}`},
		{window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "toolu_1", Text: "package a"}}, Shape: &window.Shape{Vendor: window.Anthropic}},
			`{"type": "function_call_output", "call_id": "toolu_1", "output": "package a"}`},
	} {
		got, err := window.ToResponses(tc.m)
		if err != nil {
			t.Errorf("%+v: %v", tc.m, err)
			continue
		}
		if !jsonEqual(t, []byte(tc.want), got) {
			t.Errorf("%+v:\n got  %s\n want %s", tc.m, got, tc.want)
		}
		if _, err := window.FromResponses(got); err != nil {
			t.Errorf("%s does not map back: %v", got, err)
		}
	}
}

// FuzzFromResponses: an item FromResponses takes is written back as the
// same JSON, and maps again onto the same message.
func FuzzFromResponses(f *testing.F) {
	for _, s := range responsesItems {
		f.Add(s)
	}
	f.Add(`{"role": "assistant", "content": [{"type": "output_text", "text": "x", "logprobs": null}], "phase": "final"}`)
	f.Add(`{"type": "x_output", "call_id": "c", "output": "s", "type": "x_output"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		m, err := window.FromResponses([]byte(raw))
		if err != nil {
			if !errors.Is(err, window.ErrInvalid) {
				t.Fatalf("%s: %v, not an ErrInvalid", raw, err)
			}
			return
		}
		out, err := window.ToResponses(m)
		if err != nil {
			t.Fatalf("%s: written back: %v", raw, err)
		}
		var v any
		if json.Unmarshal([]byte(raw), &v) == nil && !jsonEqual(t, []byte(raw), out) {
			t.Fatalf("round trip:\n in  %s\n out %s", raw, out)
		}
		again, err := window.FromResponses(out)
		if err != nil {
			t.Fatalf("%s: %s does not map back: %v", raw, out, err)
		}
		out2, err := window.ToResponses(again)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("%s: written %s, then %s (%v)", raw, out, out2, err)
		}
	})
}

// TestResponsesHookMessagesGo: the developer messages Codex sends between
// a call and its output (its hooks' context) do not pin the call in the
// window: it evicts down to its target as for any conversation.
func TestResponsesHookMessagesGo(t *testing.T) {
	ctx := t.Context()
	p := window.PolicyFor("")
	p.KeepTurns = 2
	m, key := responsesWindow(t, 8000, &p)
	head := fromResponses(t, `{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent."}]}`)
	if _, err := m.Append(ctx, key, []window.Message{head}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		out := strings.Repeat(fmt.Sprintf("internal/pkg%d/file.go:%d: a line of output\n", i, i), 30)
		var msgs []window.Message
		for _, raw := range []string{
			fmt.Sprintf(`{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Step %d."}]}`, i),
			fmt.Sprintf(`{"type": "function_call", "call_id": "call_%d", "name": "exec_command", "arguments": "{}"}`, i),
			`{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<engram-context kind=\"posttooluse\">noted</engram-context>"}]}`,
			fmt.Sprintf(`{"type": "function_call_output", "call_id": "call_%d", "output": %q}`, i, out),
		} {
			msgs = append(msgs, fromResponses(t, raw))
		}
		if _, err := m.Append(ctx, key, msgs); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	st, err := m.Status(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Evicted == 0 || st.Used > st.EvictAt {
		t.Errorf("the window uses %d tokens of %d (evicting at %d), %d messages evicted: the calls stayed pinned", st.Used, st.Budget, st.EvictAt, st.Evicted)
	}
}
