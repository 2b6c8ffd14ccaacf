package window

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/engramhq/engram/internal/secrets"
)

// The vendors' message shapes, mapped onto Message and back without
// loss: what a harness sends a model, a window can hold, and give back
// as the same JSON (equal as JSON values: key order and spacing are the
// encoder's).
//
// Anthropic (Messages API): {"role": "user"|"assistant", "content":
// string or blocks}, blocks of type text, tool_use (id, name, input),
// tool_result (tool_use_id, content as a string or blocks, is_error) and
// any other (image, document, thinking, ...), kept raw. The system prompt
// is the request's "system", a message of RoleSystem here.
//
// OpenAI (Chat Completions): {"role": "system"|"developer"|"user"|
// "assistant"|"tool", "content": string, parts or null, "tool_calls":
// [{"id", "type": "function", "function": {"name", "arguments"}}],
// "tool_call_id"}. A tool message is RoleTool with one tool_result.
//
// OpenAI (Responses API): each item of a request's "input", one Message
// each (see wire_responses.go).

// Shape says how a message's content was written, so that it is written
// back the same way.
type Shape struct {
	// Vendor is "anthropic", "openai" or "responses".
	Vendor string `json:"vendor,omitempty"`
	// Plain: the content was a string, not a list of blocks.
	Plain bool `json:"plain,omitempty"`
	// Null: OpenAI content was null (an assistant message of tool calls).
	Null bool `json:"null,omitempty"`
	// Developer: OpenAI's developer role, held as RoleSystem.
	Developer bool `json:"developer,omitempty"`
	// Extra holds the message's other fields, verbatim (OpenAI "name",
	// "refusal", "audio"; a Responses item's "id" and "status"; anything a
	// vendor adds).
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
	// Item is the type of a Responses item written from its block rather
	// than kept raw: a tool's output whose "output" is a string, held as
	// the block's text (function_call_output, custom_tool_call_output,
	// local_shell_call_output).
	Item string `json:"item,omitempty"`
	// NoType: a Responses message in the short form, without "type".
	NoType bool `json:"no_type,omitempty"`
	// Parts, one per block, say how a Responses message's text parts were
	// written besides their text, where any differs from {"type":
	// "input_text" ("output_text" for the assistant), "text"}; nil when
	// none does.
	Parts []Part `json:"parts,omitempty"`
}

// Vendors.
const (
	Anthropic = "anthropic"
	OpenAI    = "openai"
	// Responses is OpenAI's Responses API.
	Responses = "responses"
)

func wireError(vendor string, format string, args ...any) error {
	return fmt.Errorf("%w: %s message: %s", ErrInvalid, vendor, fmt.Sprintf(format, args...))
}

// rawFields splits a JSON object into its fields.
func rawFields(vendor string, raw []byte) (map[string]json.RawMessage, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return nil, wireError(vendor, "not a JSON object: %s", clip(raw))
	}
	return f, nil
}

// clip is the start of b for an error message: its first 80 bytes, with
// any secret redacted first (cutting first could leave a key too short to
// be known for one).
func clip(b []byte) string {
	s, _ := secrets.Redact(string(b))
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func isNull(r json.RawMessage) bool {
	return len(r) == 0 || bytes.Equal(bytes.TrimSpace(r), []byte("null"))
}

// FromAnthropic maps an Anthropic message onto a Message.
func FromAnthropic(raw []byte) (Message, error) {
	f, err := rawFields(Anthropic, raw)
	if err != nil {
		return Message{}, err
	}
	m := Message{Shape: &Shape{Vendor: Anthropic}}
	var role string
	if err := json.Unmarshal(f["role"], &role); err != nil {
		return m, wireError(Anthropic, "role is not a string")
	}
	switch role {
	case "user", "assistant", "system":
		m.Role = Role(role)
	default:
		return m, wireError(Anthropic, "role %q is not user or assistant", role)
	}
	content := f["content"]
	delete(f, "role")
	delete(f, "content")
	if len(f) > 0 {
		m.Shape.Extra = f
	}
	var s string
	if err := json.Unmarshal(content, &s); err == nil {
		m.Shape.Plain = true
		m.Blocks = []Block{{Type: BlockText, Text: s}}
		return m, m.Validate()
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(content, &blocks); err != nil {
		return m, wireError(Anthropic, "content is neither a string nor a list of blocks")
	}
	for i, rb := range blocks {
		b, err := anthropicBlock(rb)
		if err != nil {
			return m, fmt.Errorf("block %d: %w", i, err)
		}
		m.Blocks = append(m.Blocks, b)
	}
	return m, m.Validate()
}

// anthropicBlock maps one content block. A block with fields the typed
// form does not hold (cache_control, citations) is kept raw whole, its
// tool ids still read so that calls pair with results.
func anthropicBlock(raw json.RawMessage) (Block, error) {
	f, err := rawFields(Anthropic, raw)
	if err != nil {
		return Block{}, err
	}
	var typ string
	if err := json.Unmarshal(f["type"], &typ); err != nil || typ == "" {
		return Block{}, wireError(Anthropic, "a block without a type: %s", clip(raw))
	}
	str := func(k string) (string, bool) {
		var s string
		err := json.Unmarshal(f[k], &s)
		return s, err == nil
	}
	known := func(keys ...string) bool {
		for k := range f {
			found := false
			for _, want := range keys {
				found = found || k == want
			}
			if !found {
				return false
			}
		}
		return true
	}
	switch typ {
	case "text":
		t, ok := str("text")
		if !ok || isNull(f["text"]) {
			return Block{}, wireError(Anthropic, "a text block needs its text, a string: %s", clip(raw))
		}
		if known("type", "text") {
			return Block{Type: BlockText, Text: t}, nil
		}
	case "tool_use":
		id, _ := str("id")
		name, _ := str("name")
		if known("type", "id", "name", "input") && !isNull(f["input"]) {
			return Block{Type: BlockToolUse, ID: id, Name: name, Input: f["input"]}, nil
		}
		return Block{Type: BlockToolUse, ID: id, Name: name, Raw: raw}, nil
	case "tool_result":
		id, _ := str("tool_use_id")
		var isErr bool
		if e, ok := f["is_error"]; ok && json.Unmarshal(e, &isErr) != nil {
			return Block{}, wireError(Anthropic, "is_error is not a boolean")
		}
		if t, ok := str("content"); ok && known("type", "tool_use_id", "content", "is_error") {
			_, hasErr := f["is_error"]
			if !hasErr || isErr {
				return Block{Type: BlockToolResult, ToolUseID: id, Text: t, IsError: isErr}, nil
			}
		}
		return Block{Type: BlockToolResult, ToolUseID: id, IsError: isErr, Raw: raw}, nil
	}
	return Block{Type: BlockType(typ), Raw: raw}, nil
}

// ToAnthropic writes a Message as an Anthropic message. A message
// another vendor's API sent is written in Anthropic's terms where it has
// them: a tool call with its arguments as input, an OpenAI tool message
// as a user message of its result; what has none (OpenAI's content parts,
// a Responses reasoning item) is refused, and that vendor's other fields
// are left out.
func ToAnthropic(m Message) ([]byte, error) {
	vendor := ""
	if m.Shape != nil {
		vendor = m.Shape.Vendor
	}
	foreign := vendor != "" && vendor != Anthropic
	role := m.Role
	if role == RoleTool {
		role = RoleUser // Anthropic sends tool results in the user's turn
	}
	out := map[string]any{"role": string(role)}
	if m.Shape != nil && !foreign {
		for k, v := range m.Shape.Extra {
			out[k] = v
		}
	}
	if m.Shape != nil && m.Shape.Plain && len(m.Blocks) == 1 && m.Blocks[0].Type == BlockText {
		out["content"] = m.Blocks[0].Text
		return json.Marshal(out)
	}
	blocks := make([]any, 0, len(m.Blocks))
	if foreign {
		// Another vendor's fields that hold what the model saw or said
		// are not left out: a refusal is its text; a call with no id
		// (OpenAI's legacy function_call) or a reference to audio has no
		// Anthropic form.
		for _, k := range []string{"function_call", "audio"} {
			if v, ok := m.Shape.Extra[k]; ok && !isNull(v) {
				return nil, fmt.Errorf("%w: the %s message's %s has no %s form: read it %s", ErrInvalid, vendor, k, Anthropic, readIn(vendor))
			}
		}
		var refusal string
		if v, ok := m.Shape.Extra["refusal"]; ok && json.Unmarshal(v, &refusal) == nil && refusal != "" {
			blocks = append(blocks, map[string]any{"type": "text", "text": refusal})
		}
	}
	for _, b := range m.Blocks {
		switch {
		case foreign && b.Type == BlockToolUse:
			in, err := toolInput(b)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": in})
		case foreign && len(b.Raw) > 0:
			return nil, noForm(vendor, Anthropic, b)
		case len(b.Raw) > 0:
			blocks = append(blocks, b.Raw)
		case b.Type == BlockText:
			blocks = append(blocks, map[string]any{"type": "text", "text": b.Text})
		case b.Type == BlockToolUse:
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": b.Input})
		case b.Type == BlockToolResult:
			r := map[string]any{"type": "tool_result", "tool_use_id": b.ToolUseID, "content": b.Text}
			if b.IsError {
				r["is_error"] = true
			}
			blocks = append(blocks, r)
		default:
			return nil, fmt.Errorf("%w: a %s block with nothing to write", ErrInvalid, b.Type)
		}
	}
	out["content"] = blocks
	return json.Marshal(out)
}

// FromOpenAI maps an OpenAI chat message onto a Message.
func FromOpenAI(raw []byte) (Message, error) {
	f, err := rawFields(OpenAI, raw)
	if err != nil {
		return Message{}, err
	}
	m := Message{Shape: &Shape{Vendor: OpenAI}}
	var role string
	if err := json.Unmarshal(f["role"], &role); err != nil {
		return m, wireError(OpenAI, "role is not a string")
	}
	content, calls, callID := f["content"], f["tool_calls"], f["tool_call_id"]
	for _, k := range []string{"role", "content", "tool_calls", "tool_call_id"} {
		delete(f, k)
	}
	if len(f) > 0 {
		m.Shape.Extra = f
	}
	switch role {
	case "developer":
		m.Role, m.Shape.Developer = RoleSystem, true
	case "system", "user", "assistant", "tool":
		m.Role = Role(role)
	default:
		return m, wireError(OpenAI, "role %q is not system, developer, user, assistant or tool", role)
	}
	var text string
	var parts []json.RawMessage
	switch {
	case isNull(content):
		m.Shape.Null = content != nil
	case json.Unmarshal(content, &text) == nil:
		m.Shape.Plain = true
	case json.Unmarshal(content, &parts) == nil:
	default:
		return m, wireError(OpenAI, "content is neither a string, a list of parts nor null")
	}
	if m.Role == RoleTool {
		var id string
		if err := json.Unmarshal(callID, &id); err != nil || id == "" {
			return m, wireError(OpenAI, "a tool message needs its tool_call_id")
		}
		b := Block{Type: BlockToolResult, ToolUseID: id, Text: text}
		if !m.Shape.Plain {
			b.Raw = content // parts, kept as they came
			if b.Raw == nil {
				b.Raw = json.RawMessage("null")
			}
		}
		m.Blocks = []Block{b}
		return m, m.Validate()
	}
	if callID != nil {
		return m, wireError(OpenAI, "tool_call_id on a %s message", role)
	}
	if m.Shape.Plain {
		m.Blocks = append(m.Blocks, Block{Type: BlockText, Text: text})
	}
	for _, p := range parts {
		var part struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(p, &part); err != nil || part.Type == "" {
			return m, wireError(OpenAI, "a content part without a type: %s", clip(p))
		}
		if part.Type != "text" {
			m.Blocks = append(m.Blocks, Block{Type: BlockType("part:" + part.Type), Raw: p})
			continue
		}
		var txt struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(p, &txt) != nil || txt.Text == nil {
			return m, wireError(OpenAI, "a text part needs its text, a string: %s", clip(p))
		}
		if pf, _ := rawFields(OpenAI, p); len(pf) == 2 {
			m.Blocks = append(m.Blocks, Block{Type: BlockText, Text: *txt.Text})
		} else {
			m.Blocks = append(m.Blocks, Block{Type: BlockType("part:" + part.Type), Raw: p})
		}
	}
	if !isNull(calls) {
		var tcs []json.RawMessage
		if err := json.Unmarshal(calls, &tcs); err != nil {
			return m, wireError(OpenAI, "tool_calls is not a list")
		}
		for _, tc := range tcs {
			var c struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			}
			if err := json.Unmarshal(tc, &c); err != nil || c.ID == "" {
				return m, wireError(OpenAI, "a tool call without an id: %s", clip(tc))
			}
			m.Blocks = append(m.Blocks, Block{Type: BlockToolUse, ID: c.ID, Name: c.Function.Name, Raw: tc})
		}
	} else if calls != nil {
		m.Shape.Extra = withField(m.Shape.Extra, "tool_calls", calls)
	}
	return m, m.Validate()
}

// toolInput is a tool call's input as a JSON object: the block's, or,
// kept raw, an Anthropic tool_use's "input" or the arguments of an OpenAI
// tool call or a Responses function call.
func toolInput(b Block) (json.RawMessage, error) {
	if len(b.Input) > 0 {
		return b.Input, nil
	}
	var c struct {
		Input     json.RawMessage `json:"input"`
		Arguments *string         `json:"arguments"`
		Function  struct {
			Arguments *string `json:"arguments"`
		} `json:"function"`
	}
	_ = json.Unmarshal(b.Raw, &c)
	in := c.Input
	for _, args := range []*string{c.Function.Arguments, c.Arguments} {
		if args != nil {
			in = json.RawMessage(*args)
		}
	}
	var obj map[string]json.RawMessage
	if len(in) == 0 || json.Unmarshal(in, &obj) != nil || obj == nil {
		return nil, fmt.Errorf("%w: tool call %q has no input that is a JSON object to write in another vendor's form", ErrInvalid, b.ID)
	}
	return in, nil
}

// noForm is the error for a block that vendor's API sent raw and format
// has no form for.
func noForm(vendor, format string, b Block) error {
	return fmt.Errorf("%w: a block of type %s from the %s API has no %s form: read it %s", ErrInvalid, strings.TrimPrefix(string(b.Type), "part:"), vendor, format, readIn(vendor))
}

// readIn names the formats that write a message of vendor's as it came.
func readIn(vendor string) string {
	if vendor == "" {
		return "in the engram format"
	}
	return "in the " + vendor + " or engram format"
}

func withField(f map[string]json.RawMessage, k string, v json.RawMessage) map[string]json.RawMessage {
	if f == nil {
		f = map[string]json.RawMessage{}
	}
	f[k] = v
	return f
}

// ToOpenAI writes a Message as an OpenAI chat message. A message another
// vendor's API sent is written in OpenAI's terms where it has them (a
// tool call, its input as the arguments); what has none is refused: an
// Anthropic thinking or image block, and tool results in a user's
// message, which OpenAI sends as tool messages, one a result.
func ToOpenAI(m Message) ([]byte, error) {
	out := map[string]any{}
	sh := m.Shape
	if sh == nil {
		sh = &Shape{}
	}
	foreign := sh.Vendor != "" && sh.Vendor != OpenAI
	if !foreign {
		for k, v := range sh.Extra {
			out[k] = v
		}
	}
	role := string(m.Role)
	if sh.Developer {
		role = "developer"
	}
	out["role"] = role
	if m.Role == RoleTool {
		if len(m.Blocks) != 1 || m.Blocks[0].Type != BlockToolResult {
			return nil, fmt.Errorf("%w: a tool message holds one tool result", ErrInvalid)
		}
		b := m.Blocks[0]
		out["tool_call_id"] = b.ToolUseID
		if len(b.Raw) > 0 {
			out["content"] = b.Raw
		} else {
			out["content"] = b.Text
		}
		return json.Marshal(out)
	}
	var parts []any
	var calls []any
	for _, b := range m.Blocks {
		switch {
		case b.Type == BlockToolUse && len(b.Raw) > 0 && !foreign:
			calls = append(calls, b.Raw)
		case b.Type == BlockToolUse && len(b.Raw) == 0:
			calls = append(calls, map[string]any{"id": b.ID, "type": "function",
				"function": map[string]any{"name": b.Name, "arguments": string(b.Input)}})
		case b.Type == BlockToolUse: // another vendor's, kept raw
			in, err := toolInput(b)
			if err != nil {
				return nil, err
			}
			calls = append(calls, map[string]any{"id": b.ID, "type": "function",
				"function": map[string]any{"name": b.Name, "arguments": string(in)}})
		case foreign && len(b.Raw) > 0:
			return nil, noForm(sh.Vendor, OpenAI, b)
		case len(b.Raw) > 0:
			parts = append(parts, b.Raw)
		case b.Type == BlockText:
			parts = append(parts, map[string]any{"type": "text", "text": b.Text})
		case b.Type == BlockToolResult:
			return nil, fmt.Errorf("%w: a %s message holding tool results has no OpenAI form (OpenAI sends each result as a tool message of its own): read it %s",
				ErrInvalid, m.Role, readIn(sh.Vendor))
		default:
			return nil, fmt.Errorf("%w: a %s block has no OpenAI form", ErrInvalid, b.Type)
		}
	}
	switch {
	case sh.Plain && len(parts) == 1:
		out["content"] = m.Blocks[0].Text
	case sh.Null:
		out["content"] = nil
	case len(parts) > 0:
		out["content"] = parts
	}
	if len(calls) > 0 {
		out["tool_calls"] = calls
	}
	return json.Marshal(out)
}
