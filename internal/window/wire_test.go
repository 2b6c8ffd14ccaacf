package window_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

var anthropicMessages = []string{
	`{"role": "user", "content": "Fix the flaky test in internal/queue."}`,
	`{"role": "assistant", "content": [{"type": "thinking", "thinking": "look first", "signature": "abc"}, {"type": "text", "text": "Reading it."}, {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "/repo/internal/queue/queue_test.go", "limit": 200}}]}`,
	`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "package queue\n\nfunc TestDrain(t *testing.T) {}\n"}]}`,
	`{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_02", "name": "Bash", "input": {"command": "go test ./internal/queue"}}, {"type": "tool_use", "id": "toolu_03", "name": "Grep", "input": {"pattern": "Drain"}}]}`,
	`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_02", "content": "FAIL", "is_error": true}, {"type": "tool_result", "tool_use_id": "toolu_03", "content": [{"type": "text", "text": "queue.go:12"}]}, {"type": "text", "text": "also check the docs", "cache_control": {"type": "ephemeral"}}]}`,
	`{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAAAAABX3VL4AAAAEklEQVR4nGJiYGBiYAAEAAD//wAYAAV4jI74AAAAAElFTkSuQmCC"}}, {"type": "text", "text": "ünïcödé ✓ and \u0000 bytes"}]}`,
}

var openaiMessages = []string{
	`{"role": "developer", "content": "You are a careful engineer."}`,
	`{"role": "user", "content": [{"type": "text", "text": "What is in main.go?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAAAAABX3VL4AAAAEklEQVR4nGJiYGBiYAAEAAD//wAYAAV4jI74AAAAAElFTkSuQmCC"}}], "name": "alice"}`,
	`{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"main.go\"}"}}, {"id": "call_2", "type": "function", "function": {"name": "ls", "arguments": "not json {"}}]}`,
	`{"role": "tool", "tool_call_id": "call_2", "content": "main.go\ngo.mod\n"}`,
	`{"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "package main"}]}`,
	`{"role": "assistant", "content": "It is the entry point.", "refusal": null}`,
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

// TestWireRoundTrip: each vendor's messages map onto Message and back to
// the same JSON, directly and through a window's store: appended, evicted
// and expanded.
func TestWireRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		vendor string
		msgs   []string
		from   func([]byte) (window.Message, error)
		to     func(window.Message) ([]byte, error)
	}{
		{window.Anthropic, anthropicMessages, window.FromAnthropic, window.ToAnthropic},
		{window.OpenAI, openaiMessages, window.FromOpenAI, window.ToOpenAI},
	} {
		var msgs []window.Message
		for i, raw := range tc.msgs {
			m, err := tc.from([]byte(raw))
			if err != nil {
				t.Fatalf("%s %d: %v", tc.vendor, i, err)
			}
			back, err := tc.to(m)
			if err != nil {
				t.Fatalf("%s %d: %v", tc.vendor, i, err)
			}
			if !jsonEqual(t, []byte(raw), back) {
				t.Errorf("%s %d round trip:\n in  %s\n out %s", tc.vendor, i, raw, back)
			}
			msgs = append(msgs, m)
		}
		if _, err := window.Units(msgs); err != nil {
			t.Errorf("%s: tool pairs: %v", tc.vendor, err)
		}
		// Through a window: a tiny one evicting early, so that everything but the last
		// turn is evicted, then expanded.
		ctx := context.Background()
		m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
		key := store.WindowKey{SessionID: "s-" + tc.vendor, AgentID: "a"}
		p := window.PolicyFor("")
		p.KeepTurns, p.Evict, p.Target = 0, 0.2, 0.1
		if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 320, Output: 10, Safety: 10, Policy: &p}); err != nil {
			t.Fatal(err)
		}
		evicted := 0
		for _, msg := range msgs {
			res, err := m.Append(ctx, key, []window.Message{msg})
			if err != nil {
				t.Fatalf("%s: append: %v", tc.vendor, err)
			}
			evicted += len(res.Evicted)
		}
		if evicted == 0 {
			t.Fatalf("%s: nothing was evicted from a 320-token window", tc.vendor)
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
			back, err := m.Expand(ctx, it.RefID)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, back...)
		}
		if len(got) != len(tc.msgs) {
			t.Fatalf("%s: %d messages back, want %d", tc.vendor, len(got), len(tc.msgs))
		}
		for i, g := range got {
			out, err := tc.to(g)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, []byte(tc.msgs[i]), out) {
				t.Errorf("%s %d through the store:\n in  %s\n out %s", tc.vendor, i, tc.msgs[i], out)
			}
		}
	}
}

func TestWireBadInput(t *testing.T) {
	for _, tc := range []struct {
		from func([]byte) (window.Message, error)
		raw  string
	}{
		{window.FromAnthropic, `[]`},
		{window.FromAnthropic, `{"role": "tool", "content": "x"}`},
		{window.FromAnthropic, `{"role": "user", "content": 3}`},
		{window.FromAnthropic, `{"role": "user", "content": [{"text": "no type"}]}`},
		{window.FromAnthropic, `{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "y", "input": {}}]}`},
		{window.FromAnthropic, `{"role": "user", "content": [{"type": "text", "text": 5}]}`},
		{window.FromAnthropic, `{"role": "user", "content": [{"type": "text"}]}`},
		{window.FromAnthropic, `{"role": "user", "content": [{"type": "text", "text": null, "cache_control": {"type": "ephemeral"}}]}`},
		{window.FromOpenAI, `{"role": "tool", "content": "no call id"}`},
		{window.FromOpenAI, `{"role": "user", "content": [{"type": "text", "text": 5}]}`},
		{window.FromOpenAI, `{"role": "user", "content": [{"type": "text"}]}`},
		{window.FromOpenAI, `{"role": "user", "content": [{"type": "text", "text": null}]}`},
		{window.FromOpenAI, `{"role": "critic", "content": "x"}`},
		{window.FromOpenAI, `{"role": "assistant", "tool_calls": [{"type": "function"}]}`},
		{window.FromOpenAI, `{"role": "user", "content": "x", "tool_call_id": "c"}`},
	} {
		if _, err := tc.from([]byte(tc.raw)); !errors.Is(err, window.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.raw, err)
		}
	}
}

// TestWireAcrossVendors: a message one vendor's API sent, written in the
// other's form, is that vendor's message or a clear refusal, never the
// first vendor's shapes under the second's name.
func TestWireAcrossVendors(t *testing.T) {
	from := func(f func([]byte) (window.Message, error), raw string) window.Message {
		t.Helper()
		m, err := f([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		m    window.Message
		to   func(window.Message) ([]byte, error)
		want string // the JSON written, or the refusal's words
	}{
		{from(window.FromOpenAI, `{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"main.go\"}"}}]}`),
			window.ToAnthropic, `{"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "main.go"}}]}`},
		{from(window.FromOpenAI, `{"role": "tool", "tool_call_id": "call_1", "content": "package main"}`),
			window.ToAnthropic, `{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "package main"}]}`},
		{from(window.FromOpenAI, `{"role": "user", "content": "hi", "name": "alice"}`),
			window.ToAnthropic, `{"role": "user", "content": "hi"}`},
		{from(window.FromOpenAI, `{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}`),
			window.ToAnthropic, "a block of type image_url from the openai API has no anthropic form: read it in the openai or engram format"},
		{from(window.FromOpenAI, `{"role": "assistant", "content": null, "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "ls", "arguments": "not json {"}}]}`),
			window.ToAnthropic, `tool call "call_2" has no input that is a JSON object`},
		{from(window.FromOpenAI, `{"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "package main"}]}`),
			window.ToAnthropic, "a block of type tool_result from the openai API has no anthropic form"},
		{from(window.FromAnthropic, `{"role": "assistant", "content": [{"type": "text", "text": "Reading."}, {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "a.go"}}]}`),
			window.ToOpenAI, `{"role": "assistant", "content": [{"type": "text", "text": "Reading."}], "tool_calls": [{"id": "toolu_01", "type": "function", "function": {"name": "Read", "arguments": "{\"file_path\": \"a.go\"}"}}]}`},
		{window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "c9", Name: "ls"}}},
			window.ToOpenAI, `{"role": "assistant", "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "ls", "arguments": ""}}]}`},
		{from(window.FromAnthropic, `{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "package a"}]}`),
			window.ToOpenAI, "OpenAI sends each result as a tool message of its own): read it in the anthropic or engram format"},
		{from(window.FromAnthropic, `{"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}]}`),
			window.ToOpenAI, "a block of type thinking from the anthropic API has no openai form"},
		// What OpenAI's message holds outside its content is not left out:
		// a refusal is its text, a legacy function_call has no form.
		{from(window.FromOpenAI, `{"role": "assistant", "content": null, "refusal": "I can't help with that."}`),
			window.ToAnthropic, `{"role": "assistant", "content": [{"type": "text", "text": "I can't help with that."}]}`},
		{from(window.FromOpenAI, `{"role": "assistant", "content": null, "function_call": {"name": "get_weather", "arguments": "{}"}}`),
			window.ToAnthropic, "the openai message's function_call has no anthropic form"},
		// engram's own tool message is the user's turn in Anthropic's shape.
		{window.Message{Role: window.RoleTool, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "x1", Text: "r"}}},
			window.ToAnthropic, `{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x1", "content": "r"}]}`},
	} {
		got, err := tc.to(tc.m)
		switch {
		case strings.HasPrefix(tc.want, "{"):
			if err != nil || !jsonEqual(t, got, []byte(tc.want)) {
				t.Errorf("%+v: %s, %v; want %s", tc.m, got, err, tc.want)
			}
		case !errors.Is(err, window.ErrInvalid) || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%+v: %s, %v; want a refusal saying %q", tc.m, got, err, tc.want)
		}
	}
}
