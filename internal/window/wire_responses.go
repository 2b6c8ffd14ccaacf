package window

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// OpenAI's Responses API: a request's "input" is a list of items, and
// each item is one Message here, written back as the same JSON value.
//
//   - message {"type": "message", "role": "user"|"assistant"|"system"|
//     "developer", "content": string or parts, "id", "status"}, or the
//     short form without "type": the role's message (developer is
//     RoleSystem with Shape.Developer). A string content is Shape.Plain.
//     An input_text or output_text part is a text block, its text in
//     Block.Text (what the window indexes and counts); the part's type,
//     where it is not its role's usual one, and its other fields
//     (annotations, logprobs) are in Shape.Parts. Any other part
//     (input_image, input_file, refusal) is a "part:"+type block, raw.
//   - function_call and custom_tool_call {"call_id", "name", "arguments"
//     or "input"}: the assistant's tool call, ID the call_id, the item
//     raw.
//   - function_call_output and custom_tool_call_output {"call_id",
//     "output"}: RoleTool, one tool result for the call_id; a string
//     output is the block's text (Shape.Item the type, Shape.Extra the
//     item's other fields), any other is kept raw with the item.
//   - any other item that names a call_id is a call when its type ends in
//     _call (local_shell_call, computer_call, shell_call,
//     apply_patch_call, tool_search_call: the tool named by the type) and
//     a result when it ends in _output, so that calls and results of the
//     same family pair; every other item (reasoning, web_search_call,
//     image_generation_call, item_reference, compaction, types to come)
//     is one "item:"+type block, raw: the assistant's, or RoleSystem when
//     its "role" is developer (Shape.Developer) or system, as Codex's
//     additional_tools item is.
//
// Item fields other than those are kept in Shape.Extra, verbatim.
//
// Text is held as Block.Text and not also in Block.Raw because a window
// stores one content a block (its Raw if it has one, else its text): what
// it stores is what it indexes, counts, redacts and gives back, so text
// kept raw would come back without Block.Text and be counted as JSON.

// Part is how a Responses text part was written besides its text.
type Part struct {
	// Type is the part's type where it is not its role's usual one
	// (output_text for the assistant, input_text for the others).
	Type string `json:"type,omitempty"`
	// Extra holds the part's other fields, verbatim (annotations,
	// logprobs).
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// textPart returns the usual type of a text part of a message of role r.
func textPart(r Role) string {
	if r == RoleAssistant {
		return "output_text"
	}
	return "input_text"
}

// jsonString decodes r if it is a JSON string (not null, which
// json.Unmarshal takes for one).
func jsonString(r json.RawMessage) (string, bool) {
	var s string
	r = bytes.TrimSpace(r)
	if len(r) == 0 || r[0] != '"' || json.Unmarshal(r, &s) != nil {
		return "", false
	}
	return s, true
}

// FromResponses maps an item of an OpenAI Responses request's input onto
// a Message.
func FromResponses(raw []byte) (Message, error) {
	f, err := rawFields(Responses, raw)
	if err != nil {
		return Message{}, err
	}
	m := Message{Shape: &Shape{Vendor: Responses}}
	typ, ok := jsonString(f["type"])
	switch {
	case ok && typ != "":
	case f["type"] != nil:
		return m, wireError(Responses, "type %s is not an item's type", clip(f["type"]))
	case f["role"] != nil:
		typ, m.Shape.NoType = "message", true
	default:
		return m, wireError(Responses, "an item with neither a type nor a role: %s", clip(raw))
	}
	item := json.RawMessage(bytes.Clone(raw))
	callID, hasCall := jsonString(f["call_id"])
	hasCall = hasCall && callID != ""
	switch typ {
	case "message":
		return responsesMessage(m, f)
	case "function_call", "custom_tool_call":
		name, _ := jsonString(f["name"])
		if !hasCall || name == "" {
			return m, wireError(Responses, "a %s needs its call_id and name: %s", typ, clip(raw))
		}
		return responsesCall(m, callID, name, item)
	case "function_call_output", "custom_tool_call_output":
		if !hasCall {
			return m, wireError(Responses, "a %s needs the call_id of its call: %s", typ, clip(raw))
		}
		return responsesOutput(m, f, typ, callID, item)
	}
	switch {
	case hasCall && strings.HasSuffix(typ, "_output"):
		return responsesOutput(m, f, typ, callID, item)
	case hasCall && strings.HasSuffix(typ, "_call"):
		return responsesCall(m, callID, strings.TrimSuffix(typ, "_call"), item)
	}
	// An item a developer or the system speaks is a system message, so
	// that at the conversation's start it stays with the prompt: Codex
	// 0.171 sends its tools to its default model so, as the first item
	// ({"type": "additional_tools", "role": "developer", "tools": [...]}),
	// and a window that evicted it would take the model's tools away.
	m.Role = RoleAssistant
	switch role, _ := jsonString(f["role"]); role {
	case "developer":
		m.Role, m.Shape.Developer = RoleSystem, true
	case "system":
		m.Role = RoleSystem
	}
	m.Blocks = []Block{{Type: BlockType("item:" + typ), Raw: item}}
	return m, m.Validate()
}

// responsesMessage maps a message item, its fields f.
func responsesMessage(m Message, f map[string]json.RawMessage) (Message, error) {
	role, ok := jsonString(f["role"])
	if !ok {
		return m, wireError(Responses, "role is not a string")
	}
	switch role {
	case "developer":
		m.Role, m.Shape.Developer = RoleSystem, true
	case "user", "assistant", "system":
		m.Role = Role(role)
	default:
		return m, wireError(Responses, "role %q is not user, assistant, system or developer", role)
	}
	content := f["content"]
	for _, k := range []string{"type", "role", "content"} {
		delete(f, k)
	}
	if len(f) > 0 {
		m.Shape.Extra = f
	}
	if s, ok := jsonString(content); ok {
		m.Shape.Plain = true
		m.Blocks = []Block{{Type: BlockText, Text: s}}
		return m, m.Validate()
	}
	var parts []json.RawMessage
	if isNull(content) || json.Unmarshal(content, &parts) != nil {
		return m, wireError(Responses, "content is neither a string nor a list of parts")
	}
	shapes := make([]Part, len(parts))
	shaped := false
	for i, p := range parts {
		pf, err := rawFields(Responses, p)
		if err != nil {
			return m, fmt.Errorf("part %d: %w", i, err)
		}
		typ, _ := jsonString(pf["type"])
		if typ == "" {
			return m, wireError(Responses, "a content part without a type: %s", clip(p))
		}
		text, ok := jsonString(pf["text"])
		if !ok || typ != "input_text" && typ != "output_text" {
			m.Blocks = append(m.Blocks, Block{Type: BlockType("part:" + typ), Raw: p})
			continue
		}
		m.Blocks = append(m.Blocks, Block{Type: BlockText, Text: text})
		if typ != textPart(m.Role) {
			shapes[i].Type = typ
		}
		delete(pf, "type")
		delete(pf, "text")
		if len(pf) > 0 {
			shapes[i].Extra = pf
		}
		shaped = shaped || shapes[i].Type != "" || shapes[i].Extra != nil
	}
	if shaped {
		m.Shape.Parts = shapes
	}
	return m, m.Validate()
}

// responsesCall maps a tool call item, kept raw.
func responsesCall(m Message, callID, name string, item json.RawMessage) (Message, error) {
	m.Role = RoleAssistant
	m.Blocks = []Block{{Type: BlockToolUse, ID: callID, Name: name, Raw: item}}
	return m, m.Validate()
}

// responsesOutput maps a tool output item, its fields f: a string output
// is the result's text, anything else keeps the item raw.
func responsesOutput(m Message, f map[string]json.RawMessage, typ, callID string, item json.RawMessage) (Message, error) {
	m.Role = RoleTool
	out, ok := jsonString(f["output"])
	if !ok {
		m.Blocks = []Block{{Type: BlockToolResult, ToolUseID: callID, Raw: item}}
		return m, m.Validate()
	}
	m.Shape.Item = typ
	for _, k := range []string{"type", "call_id", "output"} {
		delete(f, k)
	}
	if len(f) > 0 {
		m.Shape.Extra = f
	}
	m.Blocks = []Block{{Type: BlockToolResult, ToolUseID: callID, Text: out}}
	return m, m.Validate()
}

// isItem reports whether b is written as a Responses item of its own, not
// as a part of a message.
func isItem(b *Block) bool {
	return b.Type == BlockToolUse || b.Type == BlockToolResult || strings.HasPrefix(string(b.Type), "item:")
}

// ToResponses writes a Message as an item of an OpenAI Responses
// request's input. A message that FromResponses made is written back as
// the same JSON value; one made here or from another vendor's shape is
// written as a message item, or as a function_call or
// function_call_output when it is one tool call or result (a message of
// several calls or results has no single item: ErrInvalid).
func ToResponses(m Message) ([]byte, error) {
	sh := m.Shape
	if sh == nil {
		sh = &Shape{}
	}
	own := sh.Vendor == Responses || sh.Vendor == ""
	out := map[string]any{}
	if own {
		for k, v := range sh.Extra {
			out[k] = v
		}
	}
	for i := range m.Blocks {
		if !isItem(&m.Blocks[i]) {
			continue
		}
		if len(m.Blocks) != 1 {
			return nil, fmt.Errorf("%w: a message of %d blocks holding a %s block: a Responses item holds one call, result or item", ErrInvalid, len(m.Blocks), m.Blocks[i].Type)
		}
		return responsesItem(out, sh, &m.Blocks[0])
	}
	if !own || !sh.NoType {
		out["type"] = "message"
	}
	switch {
	case m.Role == RoleSystem && sh.Developer:
		out["role"] = "developer"
	case m.Role == RoleSystem, m.Role == RoleUser, m.Role == RoleAssistant:
		out["role"] = string(m.Role)
	default:
		return nil, fmt.Errorf("%w: a %s message without a tool result has no Responses form", ErrInvalid, m.Role)
	}
	if sh.Plain && len(m.Blocks) == 1 && m.Blocks[0].Type == BlockText {
		out["content"] = m.Blocks[0].Text
		return json.Marshal(out)
	}
	parts := make([]any, 0, len(m.Blocks))
	for i, b := range m.Blocks {
		switch {
		case len(b.Raw) > 0:
			parts = append(parts, b.Raw)
		case b.Type == BlockText:
			p := map[string]any{"type": textPart(m.Role), "text": b.Text}
			if own && i < len(sh.Parts) {
				for k, v := range sh.Parts[i].Extra {
					p[k] = v
				}
				if sh.Parts[i].Type != "" {
					p["type"] = sh.Parts[i].Type
				}
			}
			parts = append(parts, p)
		default:
			return nil, fmt.Errorf("%w: a %s block has no Responses form", ErrInvalid, b.Type)
		}
	}
	out["content"] = parts
	return json.Marshal(out)
}

// responsesItem writes a message of one block that is an item of its own,
// out holding the item's other fields.
func responsesItem(out map[string]any, sh *Shape, b *Block) ([]byte, error) {
	switch {
	case len(b.Raw) > 0 && (sh.Vendor == Responses || strings.HasPrefix(string(b.Type), "item:")):
		return json.Marshal(b.Raw)
	case len(b.Raw) > 0:
		return nil, fmt.Errorf("%w: a %s block kept in %s's form has no Responses form", ErrInvalid, b.Type, sh.Vendor)
	case b.Type == BlockToolUse:
		args := string(b.Input)
		if args == "" {
			args = "{}"
		}
		out["type"], out["call_id"], out["name"], out["arguments"] = "function_call", b.ID, b.Name, args
	case b.Type == BlockToolResult:
		typ := sh.Item
		if typ == "" {
			typ = "function_call_output"
		}
		out["type"], out["call_id"], out["output"] = typ, b.ToolUseID, b.Text
	default:
		return nil, fmt.Errorf("%w: a %s block keeps nothing to write", ErrInvalid, b.Type)
	}
	return json.Marshal(out)
}
