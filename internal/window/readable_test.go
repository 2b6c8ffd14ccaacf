package window_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/pictest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

var o200kCount = tokens.MustGet(tokens.O200kBase).Count

// TestBlock_Readable: a tool result or text block in its vendor's form
// (Anthropic's content blocks, OpenAI's parts, a Responses output
// array, a string beside cache_control) reads as the text of its text
// blocks and parts, its pictures as their placeholders, never base64.
func TestBlock_Readable(t *testing.T) {
	png := pictest.NoisePNGBase64(40, 30)
	placeholder := window.FindMedia([]byte(`{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "` + png + `"}}`))[0].Placeholder("")
	anthropic := func(s string) window.Block {
		t.Helper()
		m, err := window.FromAnthropic([]byte(`{"role": "user", "content": [` + s + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		return m.Blocks[0]
	}
	openAI := func(s string) window.Block {
		t.Helper()
		m, err := window.FromOpenAI([]byte(`{"role": "tool", "tool_call_id": "call_1", "content": ` + s + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return m.Blocks[0]
	}
	responses := func(s string) window.Block {
		t.Helper()
		m, err := window.FromResponses([]byte(`{"type": "function_call_output", "call_id": "call_1", "output": ` + s + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return m.Blocks[0]
	}
	cases := []struct {
		name  string
		block window.Block
		want  string
	}{
		{"anthropic string", anthropic(`{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nb"}`), "a\nb"},
		{"anthropic string beside cache_control", anthropic(`{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi", "is_error": false, "cache_control": {"type": "ephemeral"}}`), "hi"},
		{"anthropic blocks", anthropic(`{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "recorded 27e8 (turn 1)"}, ` +
			`{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "` + png + `"}}, ` +
			`{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}, ` +
			`{"type": "search_result", "source": "s", "title": "t", "content": [{"type": "text", "text": "found in src/a.go"}]}, ` +
			`{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain doc"}}, ` +
			`{"type": "text", "text": "last\nlines"}]}`),
			"recorded 27e8 (turn 1)\n" + placeholder + "\nfound in src/a.go\nplain doc\nlast\nlines"},
		{"anthropic text beside cache_control", anthropic(`{"type": "text", "text": "Fix src/x.go", "cache_control": {"type": "ephemeral"}}`), "Fix src/x.go"},
		{"anthropic call", anthropic(`{"type": "text", "text": "t"}`), "t"},
		{"openai string", openAI(`"out"`), "out"},
		{"openai parts", openAI(`[{"type": "text", "text": "one"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,` + png + `"}}, {"type": "text", "text": "two"}]`),
			"one\n" + placeholder + "\ntwo"},
		{"openai null", openAI(`null`), ""},
		{"responses string", responses(`"out"`), "out"},
		{"responses parts", responses(`[{"type": "input_text", "text": "one"}, {"type": "input_image", "image_url": "data:image/png;base64,` + png + `"}, {"type": "output_text", "text": "two"}]`),
			"one\n" + placeholder + "\ntwo"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.block.Readable()
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("Readable of %s (-want +got):\n%s", c.block.Raw, diff)
			}
			if strings.Contains(got, png[:40]) {
				t.Errorf("Readable shows base64: %.200s", got)
			}
		})
	}
	// The placeholder is the same whatever the vendor: one image in all.
	if !strings.Contains(placeholder, "[image: image/png, 40×30,") {
		t.Errorf("placeholder %q", placeholder)
	}
}

// TestLayout_DigestOfRawResults: the digest keeps the line of an
// evicted tool result that the agent went on to use when the result came
// as its vendor's array of content blocks or parts (as an MCP tool's
// does), not only when it came as a string.
func TestLayout_DigestOfRawResults(t *testing.T) {
	const line = "src/lexer/parser_impl.py:12: def parse_tokens(stream):"
	filler := strings.Repeat("unrelated output line\n", 25)
	text := func(s string) string { return fmt.Sprintf("%q", s) }
	forms := []struct {
		name   string
		result func(id, out string) window.Message
	}{
		{"string", func(id, out string) window.Message {
			return window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: id, Text: out}}}
		}},
		{"anthropic blocks", func(id, out string) window.Message {
			m, err := window.FromAnthropic([]byte(`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "` + id + `", "content": [` +
				`{"type": "text", "text": "grep:"}, {"type": "text", "text": ` + text(out) + `}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"openai parts", func(id, out string) window.Message {
			m, err := window.FromOpenAI([]byte(`{"role": "tool", "tool_call_id": "` + id + `", "content": [{"type": "text", "text": ` + text(out) + `}]}`))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"responses output array", func(id, out string) window.Message {
			m, err := window.FromResponses([]byte(`{"type": "function_call_output", "call_id": "` + id + `", "output": [{"type": "input_text", "text": ` + text(out) + `}]}`))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
	}
	count := func(m window.Message) window.Message {
		m.Tokens = 0
		for _, b := range m.Blocks {
			m.Tokens += o200kCount(b.Text) + o200kCount(string(b.Raw)) + o200kCount(string(b.Input))
		}
		return m
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			l, err := window.NewLayout(window.Options{Policy: window.ToolLoopPolicy(), Budget: 400, Count: o200kCount})
			if err != nil {
				t.Fatal(err)
			}
			conv := []window.Message{
				count(textMsg(window.RoleSystem, "You are a coding agent.")),
				count(textMsg(window.RoleUser, "Fix the failing parser test.")),
			}
			step := func(id, command, out string) {
				conv = append(conv,
					count(window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockText, Text: command},
						{Type: window.BlockToolUse, ID: id, Name: "bash", Input: []byte(`{}`)}}}),
					count(f.result(id, out)))
			}
			step("c1", "grep -rn parse_tokens src", line+"\n"+filler)
			step("c2", "cat src/lexer/parser_impl.py", filler+"return stream.read()")
			for k := 3; k < 8; k++ {
				step(fmt.Sprintf("c%d", k), "sed -n 1,20p src/lexer/parser_impl.py", filler)
			}
			for _, m := range conv {
				if err := l.Append(m); err != nil {
					t.Fatal(err)
				}
			}
			if l.Evictions() == 0 {
				t.Fatalf("no eviction at %d of 400 tokens", l.Tokens())
			}
			var digest []string
			for _, s := range l.Segments() {
				for _, e := range s.Digest {
					digest = append(digest, e.Text)
				}
			}
			if !strings.Contains(strings.Join(digest, "\n"), line) {
				t.Errorf("digest %q: want the grep line of the path the agent used", digest)
			}
		})
	}
}

// FuzzReadable: whatever a vendor's tool result holds, reading its text
// does not panic, and a result of text blocks alone reads as their texts.
func FuzzReadable(f *testing.F) {
	f.Add(`[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]`)
	f.Add(`[{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]`)
	f.Add(`[{"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "x"}]}}]`)
	f.Add(`"plain"`)
	f.Add(`[{"type": "search_result", "content": [{"type": "text"}]}, 3, null, [[]]]`)
	f.Fuzz(func(t *testing.T, content string) {
		m, err := window.FromAnthropic([]byte(`{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": ` + content + `}]}`))
		if err != nil || len(m.Blocks) != 1 {
			return
		}
		got := m.Blocks[0].Readable()
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if json.Unmarshal([]byte(content), &parts) != nil || len(parts) == 0 {
			return
		}
		var want []string
		for _, p := range parts {
			if p.Type != "text" || p.Text == nil {
				return
			}
			want = append(want, *p.Text)
		}
		if w := strings.Join(want, "\n"); got != w {
			t.Errorf("Readable of %s = %q, want %q", content, got, w)
		}
	})
}
