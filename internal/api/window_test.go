package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/pictest"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/window"
)

func raws(msgs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		out[i] = json.RawMessage(m)
	}
	return out
}

// TestDecodeMessages: the three formats decode to the same messages; a
// refused message is a *MessageError with its index, an *InputError.
func TestDecodeMessages(t *testing.T) {
	text := func(role window.Role, s string, shape *window.Shape) window.Message {
		return window.Message{Role: role, Blocks: []window.Block{{Type: window.BlockText, Text: s}}, Shape: shape}
	}
	for _, c := range []struct {
		format string
		in     []string
		want   []window.Message
	}{
		{"", []string{`{"role":"user","content":"hi"}`}, []window.Message{text(window.RoleUser, "hi", &window.Shape{Plain: true})}},
		{"engram", []string{`{"role":"assistant","blocks":[{"type":"text","text":"hi"}],"pinned":true,"tokens":99}`},
			[]window.Message{{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockText, Text: "hi"}}, Pinned: true}}},
		{"anthropic", []string{`{"role":"user","content":"hi"}`}, []window.Message{text(window.RoleUser, "hi", &window.Shape{Vendor: "anthropic", Plain: true})}},
		{"openai", []string{`{"role":"developer","content":"be brief"}`},
			[]window.Message{text(window.RoleSystem, "be brief", &window.Shape{Vendor: "openai", Plain: true, Developer: true})}},
	} {
		got, err := api.DecodeMessages(c.format, raws(c.in...))
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: mismatch (-want +got):\n%s", c.format, diff)
		}
	}
	many := make([]string, api.MaxAppendMessages+1)
	for i := range many {
		many[i] = `{"role":"user","content":"x"}`
	}
	for _, c := range []struct {
		format string
		in     []string
		index  int // -1: not about one message
		want   string
	}{
		{"xml", []string{`{}`}, -1, `format "xml": want engram (the default), anthropic or openai`},
		{"engram", many, -1, "1001 messages in one append; at most 1000"},
		{"engram", []string{`{"role":"user","content":"ok"}`, `{"role":"user"}`}, 1, "message 1: no content and no blocks"},
		{"engram", []string{`{"role":"user","content":"x","blocks":[{"type":"text","text":"y"}]}`}, 0, "give content or blocks, not both"},
		{"engram", []string{`{"role":"user","content":"x"} {}`}, 0, "more than one JSON value"},
		{"engram", []string{`{"role":"user","blocks":[{"type":"tool_result","text":"x"}]}`}, 0, "a tool result needs the id of its call"},
		{"anthropic", []string{`"hi"`}, 0, "anthropic message: not a JSON object"},
		{"anthropic", []string{`{"role":"user","content":[{"type":"text","text":5}]}`}, 0, "a text block needs its text, a string"},
		{"engram", []string{`{"role":"user","blocks":[{"type":"weird","text":"x"}]}`}, 0, `type "weird" is not text, tool_use or tool_result`},
		{"openai", []string{`{"role":"assistant","content":null,"tool_calls":[{"type":"function"}]}`}, 0, "a tool call without an id"},
		{"engram", []string{`{"role":"user","content":"` + strings.Repeat("x", api.MaxMessageBytes) + `"}`}, 0, "a message may take at most 8388608 (8 MiB)"},
		{"anthropic", []string{"{\"role\":\"user\",\"content\":\"bad \xff\xfe\"}"}, 0, "not UTF-8: a message must be UTF-8 JSON text (invalid bytes at byte 30)"},
		{"anthropic", []string{`{"role":"user","content":"lone \ud800 x"}`}, 0, "escape at byte 31 is half of a UTF-16 surrogate pair"},
		{"openai", []string{`{"role":"user","content":"a \\ then \udc00"}`}, 0, "half of a UTF-16 surrogate pair"},
		{"engram", []string{`{"role":"user","blocks":[{"type":"text","text":"shown","raw":{"type":"text","text":"other"}}]}`}, 0, "has raw (a vendor's form"},
		{"engram", []string{`{"role":"user","blocks":[{"type":"text","text":"t","input":{"a":1}}]}`}, 0, "input is a tool call's"},
		{"engram", []string{`{"role":"user","content":"first","content":"second"}`}, 0, `the member "content" is given twice in one object (again at byte 33)`},
		{"anthropic", []string{`{"role":"user","content":[{"type":"text","text":"a","te\u0078t":"b"}]}`}, 0, `the member "text" is given twice`},
		{"openai", []string{`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
			0, `the member "id" is given twice`},
		// encoding/json matches names in any case: "Content" overwrote
		// "content", and was taken for it alone.
		{"engram", []string{`{"role":"user","content":"lower","Content":"upper"}`}, 0, `unknown field "Content" (the field is "content")`},
		{"engram", []string{`{"ROLE":"user","content":"x"}`}, 0, `unknown field "ROLE" (the field is "role")`},
		{"engram", []string{`{"role":"user","blocks":[{"type":"text","text":"lower","Text":"upper"}]}`}, 0, `blocks: unknown field "Text" (the field is "text")`},
		{"engram", []string{`{"role":"user","content":"x","shape":{"Plain":true}}`}, 0, `shape: unknown field "Plain" (the field is "plain")`},
	} {
		_, err := api.DecodeMessages(c.format, raws(c.in...))
		var ie *api.InputError
		var me *api.MessageError
		switch {
		case err == nil || !strings.Contains(err.Error(), c.want):
			t.Errorf("%s %.60s: %v, want %q", c.format, c.in, err, c.want)
		case !errors.As(err, &ie):
			t.Errorf("%s %.60s: %T is not an InputError", c.format, c.in, err)
		case c.index >= 0 && (!errors.As(err, &me) || me.Index != c.index):
			t.Errorf("%s %.60s: %v, want a MessageError of message %d", c.format, c.in, err, c.index)
		}
	}
	// What context --json writes reads back: a message with no content
	// too (an Anthropic "content": [], written as "blocks": []), which was
	// refused.
	for _, in := range []string{`{"role":"user","content":[]}`, `{"role":"assistant","content":[{"type":"text","text":"hi"}]}`} {
		msgs, err := api.DecodeMessages("anthropic", raws(in))
		if err != nil {
			t.Fatal(err)
		}
		out, err := api.EncodeMessage(api.FormatEngram, msgs[0])
		if err != nil {
			t.Fatal(err)
		}
		back, err := api.DecodeMessages("engram", raws(string(out)))
		if err != nil || !cmp.Equal(back, msgs, cmpopts.EquateEmpty()) {
			t.Errorf("%s as engram's %s read back: %+v, %v", in, out, back, err)
		}
	}
	// A pair is a character; an escaped backslash before a u is not an
	// escape.
	msgs, err := api.DecodeMessages("anthropic", raws(`{"role":"user","content":"a smile \ud83d\ude00 and C:\\udir"}`))
	if err != nil || msgs[0].Blocks[0].Text != "a smile 😀 and C:\\udir" {
		t.Errorf("a surrogate pair and an escaped backslash: %+v, %v", msgs, err)
	}
}

// TestWindowOps_Isolation: a caller opens and appends to windows of its
// own session only; it reads any.
func TestWindowOps_Isolation(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.New(sqlitetest.Open(t, sqlite.Options{}), engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	alice := &api.Ops{Eng: eng, Agent: "a1", Session: func() string { return "alice" }}
	bob := &api.Ops{Eng: eng, Agent: "b1", Session: func() string { return "bob" }}
	if _, _, err := alice.WindowOpen(ctx, api.WindowOpenIn{Limit: 8000}); err != nil {
		t.Fatal(err)
	}
	var ie *api.IsolationError
	if _, _, err := bob.WindowOpen(ctx, api.WindowOpenIn{Session: "alice", Limit: 8000}); !errors.As(err, &ie) {
		t.Errorf("bob opens a window in alice's session: %v", err)
	}
	msg := raws(`{"role":"user","content":"hi"}`)
	if _, _, err := bob.WindowAppend(ctx, api.WindowAppendIn{Session: "alice", Agent: "a1", Messages: msg}); !errors.As(err, &ie) {
		t.Errorf("bob appends to alice's window: %v", err)
	}
	if _, _, err := alice.WindowAppend(ctx, api.WindowAppendIn{Messages: msg}); err != nil {
		t.Fatal(err)
	}
	w, _, err := bob.WindowStatus(ctx, api.WindowIn{Session: "alice"})
	if err != nil || w.Agent != "a1" || w.Messages != 1 {
		t.Errorf("bob reads alice's window: %+v, %v", w, err)
	}
}

// FuzzDecodeMessage: any input is refused with an *InputError, or decodes
// to a message a window takes, which written back in its format decodes
// to the same message. JSON inside a message (a call's input, a block
// kept raw, a vendor's other fields) comes back as the same JSON value:
// encoding/json compacts what it embeds (the content store keeps the
// bytes, which retrieve_context and the text forms give).
func FuzzDecodeMessage(f *testing.F) {
	f.Add(`{"role":"user","content":"hi"}`, "engram")
	f.Add(`{"role":"assistant","blocks":[{"type":"tool_use","id":"c1","name":"read","input":{"path": "x.go"}}]}`, "engram")
	f.Add(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"out","is_error":true},{"type":"image","source":{}}]}`, "anthropic")
	f.Add(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}],"refusal":null}`, "openai")
	f.Add(`{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"x"}]}`, "openai")
	f.Fuzz(func(t *testing.T, raw, format string) {
		m, err := api.DecodeMessage(format, []byte(raw))
		if err != nil {
			var ie *api.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("%q (%s): %T %v is not an InputError", raw, format, err, err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("%q (%s) decoded to a message a window refuses: %v", raw, format, err)
		}
		out, err := api.EncodeMessage(format, m)
		if err != nil {
			t.Fatalf("%q (%s) does not write back: %v", raw, format, err)
		}
		again, err := api.DecodeMessage(format, out)
		if err != nil {
			t.Fatalf("%q (%s) written back as %s does not decode: %v", raw, format, out, err)
		}
		if diff := cmp.Diff(sameJSON(m), sameJSON(again)); diff != "" {
			t.Fatalf("%q (%s) written back as %s decodes to another message (-first +again):\n%s", raw, format, out, diff)
		}
	})
}

// sameJSON returns m with the JSON it embeds written one way: the same
// value, whatever its spacing and escapes.
func sameJSON(m window.Message) window.Message {
	c := func(r json.RawMessage) json.RawMessage {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.UseNumber()
		var v any
		if len(r) == 0 || dec.Decode(&v) != nil {
			return r
		}
		b, _ := json.Marshal(v)
		return b
	}
	m.Blocks = slices.Clone(m.Blocks)
	for i := range m.Blocks {
		m.Blocks[i].Input, m.Blocks[i].Raw = c(m.Blocks[i].Input), c(m.Blocks[i].Raw)
	}
	if m.Shape != nil && m.Shape.Extra != nil {
		sh := *m.Shape
		sh.Extra = map[string]json.RawMessage{}
		for k, v := range m.Shape.Extra {
			sh.Extra[k] = c(v)
		}
		m.Shape = &sh
	}
	return m
}

// TestEncodeMessage_NoBlocks: a message with no content reads back with
// blocks [], never null, however it was made.
func TestEncodeMessage_NoBlocks(t *testing.T) {
	for _, m := range []window.Message{{Role: window.RoleUser}, {Role: window.RoleUser, Blocks: []window.Block{}}} {
		raw, err := api.EncodeMessage(api.FormatEngram, m)
		if err != nil || !strings.Contains(string(raw), `"blocks":[]`) {
			t.Errorf("%+v: %s, %v", m, raw, err)
		}
	}
}

// TestWindowOpen_UnknownRole: a role engram does not know opens the
// window with the default role's policy, and the answer says so; a known
// role's says nothing.
func TestWindowOpen_UnknownRole(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.New(sqlitetest.Open(t, sqlite.Options{}), engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	o := &api.Ops{Eng: eng, Agent: "a1", Session: func() string { return "s" }}
	out, text, err := o.WindowOpen(ctx, api.WindowOpenIn{Agent: "typo", Limit: 8000, Role: "pentester"})
	if err != nil || out.Strategy != string(window.Recency) || !strings.Contains(out.Notice, `role "pentester" is not one engram knows`) || !strings.Contains(text, out.Notice) {
		t.Errorf("an unknown role: %+v, %q, %v", out, text, err)
	}
	out, _, err = o.WindowOpen(ctx, api.WindowOpenIn{Agent: "eng", Limit: 8000, Role: "Engineer"})
	if err != nil || out.Notice != "" || out.HandoffAt == 0 {
		t.Errorf("a known role: %+v, %v", out, err)
	}
}

// TestWindowContext_Media: a window's messages as text show a pasted
// picture as a placeholder, what the user wrote beside it as it is; the
// messages in JSON keep its bytes.
func TestWindowContext_Media(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.New(sqlitetest.Open(t, sqlite.Options{}), engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	o := &api.Ops{Eng: eng, Agent: "a1", Session: func() string { return "s" }}
	if _, _, err := o.WindowOpen(ctx, api.WindowOpenIn{Limit: 8000}); err != nil {
		t.Fatal(err)
	}
	data := pictest.NoisePNGBase64(64, 48)
	msg := `{"role":"user","content":[{"type":"text","text":"why is the button grey?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + data + `"}}]}`
	if _, _, err := o.WindowAppend(ctx, api.WindowAppendIn{Format: "anthropic", Messages: raws(msg)}); err != nil {
		t.Fatal(err)
	}
	out, text, err := o.WindowContext(ctx, api.WindowContextIn{Format: "anthropic"})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`[image] {"type":"image","source":{"type":"base64","media_type":"image/png","data":"[image: image/png, 64×48, %d KB of base64, sha256 `, (len(data)+500)/1000)
	if !strings.Contains(text, "why is the button grey?\n") || !strings.Contains(text, want) || !strings.Contains(text, "; whole in the messages' JSON]") ||
		strings.Contains(text, data[100:140]) {
		t.Errorf("the window's text:\n%.2000s", text)
	}
	if len(out.Items) != 1 || !bytes.Contains(out.Items[0].Message, []byte(data)) {
		t.Errorf("the messages in JSON lost the picture: %+v", out.Items)
	}
}
