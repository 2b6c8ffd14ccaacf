package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ChatRequest is the body of a POST /v1/chat/completions request (OpenAI's
// Chat Completions API), decoded for assertions. Fields the server does
// not look at stay in Raw, byte for byte.
type ChatRequest struct {
	Model    string        `json:"model"`
	Messages []ChatMessage `json:"messages"`
	Tools    []ChatTool    `json:"tools"`
	Stream   bool          `json:"stream"`
	// IncludeUsage is stream_options.include_usage: the stream ends with
	// a chunk carrying the usage. NoObfuscation is
	// stream_options.include_obfuscation set to false.
	IncludeUsage  bool `json:"-"`
	NoObfuscation bool `json:"-"`
	// Raw holds every top-level field of the body.
	Raw map[string]json.RawMessage `json:"-"`
}

// ChatMessage is one message of a conversation: system, developer, user,
// assistant (with ToolCalls), tool (answering ToolCallID) or the
// deprecated function.
type ChatMessage struct {
	Role string `json:"role"`
	// Content is the content parts; a string becomes one text part, null
	// or absent content none (NullContent tells which).
	Content     []ChatPart `json:"content"`
	NullContent bool       `json:"-"`
	// StringContent is true when the client sent the content as a string.
	StringContent bool           `json:"-"`
	Name          string         `json:"name,omitempty"`
	ToolCalls     []ChatToolCall `json:"tool_calls,omitempty"`
	ToolCallID    string         `json:"tool_call_id,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// ChatPart is a part of a message's content: text, image_url, or another
// type kept in Raw.
type ChatPart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *ChatImageURL `json:"image_url,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// ChatImageURL is an image_url part's image: a URL or a data: URL.
type ChatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// ChatToolCall is a call an assistant message made: a function with its
// arguments as JSON text.
type ChatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function ChatFunctionCall `json:"function"`
}

// ChatFunctionCall is the function a tool call calls.
type ChatFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatTool is a tool offered to the model: a function with a JSON schema
// of its parameters (Function), or a custom tool (Function nil).
type ChatTool struct {
	Type     string        `json:"type"`
	Function *ChatFunction `json:"function,omitempty"`
}

// ChatFunction is a function offered to the model.
type ChatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// UnmarshalJSON keeps the part's raw bytes in Raw.
func (p *ChatPart) UnmarshalJSON(data []byte) error {
	type plain ChatPart
	var v plain
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*p = ChatPart(v)
	p.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// Text is the message's text parts joined by newlines.
func (m ChatMessage) Text() string {
	var parts []string
	for _, p := range m.Content {
		if p.Type == "text" {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// LastUser is the last message with role user, or nil.
func (r *ChatRequest) LastUser() *ChatMessage {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return &r.Messages[i]
		}
	}
	return nil
}

// UserTexts are the texts of the user messages, in order.
func (r *ChatRequest) UserTexts() []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Text())
		}
	}
	return out
}

// SystemText is the text of the system and developer messages, joined by
// newlines.
func (r *ChatRequest) SystemText() string {
	var parts []string
	for _, m := range r.Messages {
		if m.Role == "system" || m.Role == "developer" {
			parts = append(parts, m.Text())
		}
	}
	return strings.Join(parts, "\n")
}

// ToolResult is the tool message answering the tool call with id,
// searched from the last message back, or false. Its Text is the result.
func (r *ChatRequest) ToolResult(id string) (ChatMessage, bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if m := r.Messages[i]; m.Role == "tool" && m.ToolCallID == id {
			return m, true
		}
	}
	return ChatMessage{}, false
}

// LastToolResult is the last tool message, or false.
func (r *ChatRequest) LastToolResult() (ChatMessage, bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if m := r.Messages[i]; m.Role == "tool" {
			return m, true
		}
	}
	return ChatMessage{}, false
}

// HasTool reports whether a function of that name is offered.
func (r *ChatRequest) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Function != nil && t.Function.Name == name {
			return true
		}
	}
	return false
}

// chatError is a refusal of a chat request: the message, and the
// parameter and code the API names (empty is null).
type chatError struct {
	msg, param, code string
}

// jsonKind names the JSON type of v as the API's messages do: "a string",
// "an integer", "an object", ….
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "a decimal number"
	}
	return "an integer"
}

// invalidType is the API's invalid_type refusal of the parameter at param.
func invalidType(param, want string, got json.RawMessage) *chatError {
	return &chatError{fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, jsonKind(got)), param, "invalid_type"}
}

// parseChatRequest decodes a body already known to be a JSON object. A
// body whose fields have the wrong shape returns the API's refusal, which
// names the field.
func parseChatRequest(body []byte) (*ChatRequest, *chatError) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return nil, &chatError{msg: chatUnparsable}
	}
	r := &ChatRequest{Raw: raw}
	present := func(name string) (json.RawMessage, bool) {
		v, ok := raw[name]
		return v, ok && string(bytes.TrimSpace(v)) != "null"
	}
	if v, ok := present("model"); ok {
		// The API answers a model that is not a string as a body it
		// could not parse.
		if json.Unmarshal(v, &r.Model) != nil {
			return nil, &chatError{msg: chatUnparsable}
		}
	}
	if v, ok := present("stream"); ok && json.Unmarshal(v, &r.Stream) != nil {
		return nil, invalidType("stream", "a boolean", v)
	}
	if v, ok := present("stream_options"); ok {
		var opts map[string]json.RawMessage
		if json.Unmarshal(v, &opts) != nil {
			return nil, invalidType("stream_options", "an object", v)
		}
		if u, ok := opts["include_usage"]; ok && json.Unmarshal(u, &r.IncludeUsage) != nil {
			return nil, invalidType("stream_options.include_usage", "a boolean", u)
		}
		if o, ok := opts["include_obfuscation"]; ok {
			include := true
			if json.Unmarshal(o, &include) != nil {
				return nil, invalidType("stream_options.include_obfuscation", "a boolean", o)
			}
			r.NoObfuscation = !include
		}
	}
	if v, ok := present("tools"); ok {
		var tools []json.RawMessage
		if json.Unmarshal(v, &tools) != nil {
			return nil, invalidType("tools", "an array of objects", v)
		}
		r.Tools = make([]ChatTool, len(tools))
		for i, t := range tools {
			if jsonKind(t) != "an object" || json.Unmarshal(t, &r.Tools[i]) != nil {
				return nil, invalidType(fmt.Sprintf("tools[%d]", i), "an object", t)
			}
		}
	}
	if v, ok := present("messages"); ok {
		var msgs []json.RawMessage
		if json.Unmarshal(v, &msgs) != nil {
			return nil, invalidType("messages", "an array of objects", v)
		}
		r.Messages = make([]ChatMessage, len(msgs))
		for i, m := range msgs {
			if e := parseChatMessage(m, fmt.Sprintf("messages[%d]", i), &r.Messages[i]); e != nil {
				return nil, e
			}
		}
	}
	return r, nil
}

// parseChatMessage decodes the message at param into m.
func parseChatMessage(data json.RawMessage, param string, m *ChatMessage) *chatError {
	if jsonKind(data) != "an object" {
		return invalidType(param, "an object", data)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return invalidType(param, "an object", data)
	}
	m.Raw = append(json.RawMessage(nil), data...)
	for _, f := range []struct {
		name string
		dst  *string
	}{{"role", &m.Role}, {"name", &m.Name}, {"tool_call_id", &m.ToolCallID}} {
		if v, ok := raw[f.name]; ok && string(v) != "null" && json.Unmarshal(v, f.dst) != nil {
			return invalidType(param+"."+f.name, "a string", v)
		}
	}
	if v, ok := raw["tool_calls"]; ok && string(v) != "null" {
		if json.Unmarshal(v, &m.ToolCalls) != nil {
			return invalidType(param+".tool_calls", "an array of objects", v)
		}
	}
	c := bytes.TrimSpace(raw["content"])
	switch kind := jsonKind(c); kind {
	case "nothing", "null":
		m.NullContent = true
	case "a string":
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return invalidType(param+".content", "one of a string or array of objects", c)
		}
		m.StringContent = true
		raw, _ := json.Marshal(map[string]string{"type": "text", "text": s})
		m.Content = []ChatPart{{Type: "text", Text: s, Raw: raw}}
	case "an array":
		var parts []json.RawMessage
		if err := json.Unmarshal(c, &parts); err != nil {
			return invalidType(param+".content", "one of a string or array of objects", c)
		}
		m.Content = make([]ChatPart, len(parts))
		for j, p := range parts {
			at := fmt.Sprintf("%s.content[%d]", param, j)
			if jsonKind(p) != "an object" {
				return invalidType(at, "an object", p)
			}
			if err := json.Unmarshal(p, &m.Content[j]); err != nil {
				return &chatError{fmt.Sprintf("Invalid '%s': %v.", at, err), at, "invalid_type"}
			}
		}
	default:
		return invalidType(param+".content", "one of a string or array of objects", c)
	}
	return nil
}
