package assemble

import (
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// wireMessage parses a message in a vendor's form as the window does.
func wireMessage(t *testing.T, from func([]byte) (window.Message, error), raw string) window.Message {
	t.Helper()
	m, err := from([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestQuote_RawResults: a summary quotes a tool result that came as an
// array of content blocks or parts (every MCP tool's result from Claude
// Code) by its text, as it quotes one that came as a string, not as a
// bare "result:"; and a prompt sent as a text block with cache_control
// by its text.
func TestQuote_RawResults(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  window.Message
		want string
	}{
		{"string", wireMessage(t, window.FromAnthropic, `{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "recorded 27e826597587 (turn 1)\nsecond line"}]}`),
			"- user: result: recorded 27e826597587 (turn 1) …"},
		{"anthropic blocks", wireMessage(t, window.FromAnthropic, `{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "recorded 27e826597587 (turn 1)\nsecond line"}]}]}`),
			"- user: result: recorded 27e826597587 (turn 1) …"},
		{"anthropic string beside is_error", wireMessage(t, window.FromAnthropic, `{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi", "is_error": false}]}`),
			"- user: result: hi"},
		{"openai parts", wireMessage(t, window.FromOpenAI, `{"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "recorded 27e826597587 (turn 1)\nsecond line"}]}`),
			"- tool: result: recorded 27e826597587 (turn 1) …"},
		{"responses output array", wireMessage(t, window.FromResponses, `{"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "recorded 27e826597587 (turn 1)"}]}`),
			"- tool: result: recorded 27e826597587 (turn 1)"},
		{"prompt beside cache_control", wireMessage(t, window.FromAnthropic, `{"role": "user", "content": [{"type": "text", "text": "Why does handler7 time out?", "cache_control": {"type": "ephemeral"}}]}`),
			"- user: Why does handler7 time out?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, _ := quote(&c.msg); got != c.want {
				t.Errorf("quote = %q, want %q", got, c.want)
			}
		})
	}
}

// TestStaticScore_RawPrompt: a prompt sent as a text block with
// cache_control scores by its words, as the same prompt sent as a
// string does; a key-message zone would otherwise rank it as empty.
func TestStaticScore_RawPrompt(t *testing.T) {
	const prompt = "Why does the upload fail with an error? We decided to fix the retry bug first."
	plain := wireMessage(t, window.FromAnthropic, `{"role": "user", "content": [{"type": "text", "text": "`+prompt+`"}]}`)
	raw := wireMessage(t, window.FromAnthropic, `{"role": "user", "content": [{"type": "text", "text": "`+prompt+`", "cache_control": {"type": "ephemeral"}}]}`)
	if len(raw.Blocks[0].Raw) == 0 {
		t.Fatal("the window keeps a text block with cache_control as its text: the test shows nothing")
	}
	c := &conv{msgs: []window.Message{plain, raw}, items: []store.WindowItem{{EntryIDs: []string{"e1"}}, {EntryIDs: []string{"e2"}}}}
	a := &Assembler{}
	if p, r := a.staticScore(c, 0), a.staticScore(c, 1); p != r || p == 0 {
		t.Errorf("static score of the prompt as a string %v, beside cache_control %v", p, r)
	}
}

// TestRefsOf_RawResult: a model's summary may copy a marker that a tool
// result showed in MCP's blocks (retrieve_context's answer): it is one of
// the messages', not made up.
func TestRefsOf_RawResult(t *testing.T) {
	const marker = `[CTX-REF:conversation | 9 turns 2-10 (608 tokens) | retrieve_context(ref_id="c1f0a9c3.2.10.8e41b")]`
	msgs := []window.Message{wireMessage(t, window.FromAnthropic,
		`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "earlier: `+
			`[CTX-REF:conversation | 9 turns 2-10 (608 tokens) | retrieve_context(ref_id=\"c1f0a9c3.2.10.8e41b\")]"}]}]}`)}
	if err := refsOf("- the upload was fixed, see "+marker, msgs); err != nil {
		t.Errorf("refsOf: %v", err)
	}
}
