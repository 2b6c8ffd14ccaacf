package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// MessagesRequest is the body of a POST /v1/messages (or count_tokens)
// request, decoded for assertions. Fields the server does not look at stay
// in Raw, byte for byte, as the client sent them.
type MessagesRequest struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	Messages  []Message `json:"messages"`
	// System is the system prompt's text blocks; a plain string becomes
	// one block.
	System []Block `json:"system"`
	Tools  []Tool  `json:"tools"`
	Stream bool    `json:"stream"`
	// Raw holds every top-level field of the body.
	Raw map[string]json.RawMessage `json:"-"`
}

// Message is one turn of a conversation. Content sent as a plain string
// becomes one text block.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
	// StringContent is true when the client sent the content as a string.
	StringContent bool `json:"-"`
}

// UnmarshalJSON accepts content as a string or as a list of blocks.
func (m *Message) UnmarshalJSON(data []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	m.Role = raw.Role
	blocks, isString, err := decodeBlocks(raw.Content)
	if err != nil {
		return fmt.Errorf("content: %w", err)
	}
	m.Content, m.StringContent = blocks, isString
	return nil
}

// Text is the message's text blocks joined by newlines.
func (m Message) Text() string {
	var parts []string
	for _, b := range m.Content {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Tool is a tool definition offered to the model.
type Tool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Block is a content block: in a request (text, tool_use, tool_result,
// thinking, image, ...) and in a scripted reply (text, tool_use). Raw keeps
// a request block as it was sent.
type Block struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// ID, Name and Input belong to tool_use. Namespace, in a reply to a
	// Responses API request, names the namespace of tools Name is in
	// (Codex offers an MCP server's tools as the namespace mcp__SERVER).
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Namespace string          `json:"namespace,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content and IsError belong to tool_result; Content is a
	// string or a list of blocks (ResultText reads either).
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// Thinking and Signature belong to thinking.
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON keeps the block's raw bytes in Raw.
func (b *Block) UnmarshalJSON(data []byte) error {
	type plain Block
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*b = Block(p)
	b.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// ResultText is a tool_result's content as text: the string, or its text
// blocks joined by newlines.
func (b Block) ResultText() string {
	blocks, _, err := decodeBlocks(b.Content)
	if err != nil {
		return ""
	}
	var parts []string
	for _, c := range blocks {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// decodeBlocks reads content that is a string or a list of blocks; null or
// absent content is no blocks.
func decodeBlocks(data json.RawMessage) (blocks []Block, isString bool, err error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || string(data) == "null" {
		return nil, false, nil
	}
	if data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, true, err
		}
		raw, _ := json.Marshal(map[string]string{"type": "text", "text": s})
		return []Block{{Type: "text", Text: s, Raw: raw}}, true, nil
	}
	if err := json.Unmarshal(data, &blocks); err != nil {
		return nil, false, err
	}
	return blocks, false, nil
}

// SystemText is the system prompt's blocks joined by newlines.
func (r *MessagesRequest) SystemText() string {
	parts := make([]string, len(r.System))
	for i, b := range r.System {
		parts[i] = b.Text
	}
	return strings.Join(parts, "\n")
}

// LastUser is the last message with role user, or nil.
func (r *MessagesRequest) LastUser() *Message {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return &r.Messages[i]
		}
	}
	return nil
}

// ToolResult is the tool_result answering the tool_use with id, searched
// from the last message back, or false.
func (r *MessagesRequest) ToolResult(id string) (Block, bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		for _, b := range r.Messages[i].Content {
			if b.Type == "tool_result" && b.ToolUseID == id {
				return b, true
			}
		}
	}
	return Block{}, false
}

// HasTool reports whether a tool of that name is offered.
func (r *MessagesRequest) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// parseRequest decodes a body already known to be a JSON object. Errors
// name the field whose shape is wrong, as the API does.
func parseRequest(body []byte) (*MessagesRequest, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %v", err)
	}
	if raw == nil {
		return nil, fmt.Errorf("invalid JSON body: expected an object")
	}
	r := &MessagesRequest{Raw: raw}
	field := func(name string, dst any, want string) error {
		v, ok := raw[name]
		if !ok || string(v) == "null" {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("%s: Input should be %s", name, want)
		}
		return nil
	}
	if err := field("model", &r.Model, "a valid string"); err != nil {
		return nil, err
	}
	if err := field("max_tokens", &r.MaxTokens, "a valid integer"); err != nil {
		return nil, err
	}
	if err := field("stream", &r.Stream, "a valid boolean"); err != nil {
		return nil, err
	}
	if v, ok := raw["system"]; ok {
		blocks, _, err := decodeBlocks(v)
		if err != nil {
			return nil, fmt.Errorf("system: Input should be a valid string or a list of text blocks")
		}
		r.System = blocks
	}
	if v, ok := raw["messages"]; ok && string(v) != "null" {
		var msgs []json.RawMessage
		if err := json.Unmarshal(v, &msgs); err != nil {
			return nil, fmt.Errorf("messages: Input should be a valid list")
		}
		r.Messages = make([]Message, len(msgs))
		for i, m := range msgs {
			if err := json.Unmarshal(m, &r.Messages[i]); err != nil {
				return nil, fmt.Errorf("messages.%d: %v", i, err)
			}
		}
	}
	if err := field("tools", &r.Tools, "a valid list of tools"); err != nil {
		return nil, err
	}
	return r, nil
}
