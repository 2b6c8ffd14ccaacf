package modelserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ResponsesRequest is the body of a POST /v1/responses request (OpenAI's
// Responses API, as Codex sends it), decoded for assertions. Fields the
// server does not look at stay in Raw, byte for byte.
type ResponsesRequest struct {
	Model        string `json:"model"`
	Instructions string `json:"instructions"`
	// Input is the conversation: a plain string becomes one user message.
	Input  []Item          `json:"input"`
	Tools  []ResponsesTool `json:"tools"`
	Stream bool            `json:"stream"`
	// MaxOutputTokens is 0 when the client sets none.
	MaxOutputTokens    int    `json:"max_output_tokens"`
	PreviousResponseID string `json:"previous_response_id"`
	// Raw holds every top-level field of the body.
	Raw map[string]json.RawMessage `json:"-"`
}

// Item is one item of a Responses conversation: a message, a
// function_call and its function_call_output, a custom_tool_call and its
// output, reasoning, or another type, kept in Raw.
type Item struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
	// Role and Content belong to message; content sent as a string
	// becomes one input_text part.
	Role    string `json:"role,omitempty"`
	Content []Part `json:"content,omitempty"`
	// Name, Arguments (JSON text) and CallID belong to function_call;
	// Input to custom_tool_call; CallID and Output to their outputs.
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Input     string `json:"input,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	// Output is a string or a list of content parts.
	Output json.RawMessage `json:"output,omitempty"`
	// Summary and EncryptedContent belong to reasoning (and compaction).
	Summary          []Part `json:"summary,omitempty"`
	EncryptedContent string `json:"encrypted_content,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// Part is a part of a message's content (input_text, output_text,
// input_image, …), of a tool output's, or of a reasoning summary
// (summary_text).
type Part struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// ImageURL (a URL or a data: URL), FileID and Detail (low, high, auto)
	// belong to input_image.
	ImageURL string `json:"image_url,omitempty"`
	FileID   string `json:"file_id,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// UnmarshalJSON accepts a message's content as a string or a list of
// parts, and keeps the item's raw bytes.
func (it *Item) UnmarshalJSON(data []byte) error {
	type plain Item
	var raw struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*it = Item(raw.plain)
	it.Raw = append(json.RawMessage(nil), data...)
	if it.Type == "" && it.Role != "" {
		it.Type = "message" // the API's easy input message
	}
	c := bytes.TrimSpace(raw.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return fmt.Errorf("content: %w", err)
		}
		it.Content = []Part{{Type: "input_text", Text: s}}
	default:
		if err := json.Unmarshal(c, &it.Content); err != nil {
			return fmt.Errorf("content: %w", err)
		}
	}
	return nil
}

// Text is a message's text parts joined by newlines.
func (it Item) Text() string {
	var parts []string
	for _, p := range it.Content {
		if p.Text != "" {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// OutputParts is a function_call_output's (or custom_tool_call_output's)
// output as content parts: a string is one input_text part. An output
// that is neither a string nor a list of parts is an error.
func (it Item) OutputParts() ([]Part, error) {
	o := bytes.TrimSpace(it.Output)
	if len(o) == 0 || string(o) == "null" {
		return nil, nil
	}
	if o[0] == '"' {
		var s string
		if err := json.Unmarshal(o, &s); err != nil {
			return nil, err
		}
		return []Part{{Type: "input_text", Text: s}}, nil
	}
	var parts []Part
	if err := json.Unmarshal(o, &parts); err != nil {
		return nil, err
	}
	return parts, nil
}

// OutputText is a function_call_output's (or custom_tool_call_output's)
// output as text: the string, or its text parts joined by newlines.
func (it Item) OutputText() string {
	o := bytes.TrimSpace(it.Output)
	if len(o) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(o, &s) == nil {
		return s
	}
	var parts []Part
	if json.Unmarshal(o, &parts) != nil {
		return string(o)
	}
	var texts []string
	for _, p := range parts {
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// ResponsesTool is a tool offered to the model: a function (Name,
// Parameters), a custom (freeform) tool, a namespace of tools, or a
// hosted tool (web_search, …) known by its type alone.
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	// Tools are a namespace's.
	Tools []ResponsesTool `json:"tools,omitempty"`
}

// LastUser is the last message with role user, or nil.
func (r *ResponsesRequest) LastUser() *Item {
	for i := len(r.Input) - 1; i >= 0; i-- {
		if it := &r.Input[i]; it.Type == "message" && it.Role == "user" {
			return it
		}
	}
	return nil
}

// UserTexts are the texts of the user messages, in order.
func (r *ResponsesRequest) UserTexts() []string {
	var out []string
	for _, it := range r.Input {
		if it.Type == "message" && it.Role == "user" {
			out = append(out, it.Text())
		}
	}
	return out
}

// FunctionOutput is the output answering the call with callID (a
// function_call_output or custom_tool_call_output), searched from the
// last item back, or false.
func (r *ResponsesRequest) FunctionOutput(callID string) (Item, bool) {
	for i := len(r.Input) - 1; i >= 0; i-- {
		it := r.Input[i]
		if (it.Type == "function_call_output" || it.Type == "custom_tool_call_output") && it.CallID == callID {
			return it, true
		}
	}
	return Item{}, false
}

// LastOutput is the last function or custom tool call output of the
// input, or false.
func (r *ResponsesRequest) LastOutput() (Item, bool) {
	for i := len(r.Input) - 1; i >= 0; i-- {
		if it := r.Input[i]; it.Type == "function_call_output" || it.Type == "custom_tool_call_output" {
			return it, true
		}
	}
	return Item{}, false
}

// HasTool reports whether a tool of that name is offered, in a namespace
// too.
func (r *ResponsesRequest) HasTool(name string) bool {
	var has func([]ResponsesTool) bool
	has = func(ts []ResponsesTool) bool {
		for _, t := range ts {
			if t.Name == name || has(t.Tools) {
				return true
			}
		}
		return false
	}
	return has(r.Tools)
}

// parseResponsesRequest decodes a body already known to be a JSON object.
// A body it cannot decode returns the API's message, which names the
// field whose shape is wrong.
func parseResponsesRequest(body []byte) (*ResponsesRequest, string) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return nil, "We could not parse the JSON body of your request."
	}
	r := &ResponsesRequest{Raw: raw}
	field := func(name string, dst any, want string) string {
		v, ok := raw[name]
		if !ok || string(v) == "null" {
			return ""
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Sprintf("Invalid type for '%s': expected %s.", name, want)
		}
		return ""
	}
	for _, f := range []struct {
		name string
		dst  any
		want string
	}{
		{"model", &r.Model, "a string"},
		{"instructions", &r.Instructions, "a string"},
		{"stream", &r.Stream, "a boolean"},
		{"max_output_tokens", &r.MaxOutputTokens, "an integer"},
		{"previous_response_id", &r.PreviousResponseID, "a string"},
		{"tools", &r.Tools, "an array of tools"},
	} {
		if msg := field(f.name, f.dst, f.want); msg != "" {
			return nil, msg
		}
	}
	if v, ok := raw["input"]; ok && string(v) != "null" {
		v = bytes.TrimSpace(v)
		if len(v) > 0 && v[0] == '"' {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, "Invalid type for 'input': expected a string or an array of input items."
			}
			r.Input = []Item{{Type: "message", Role: "user", Content: []Part{{Type: "input_text", Text: s}}}}
		} else {
			var items []json.RawMessage
			if err := json.Unmarshal(v, &items); err != nil {
				return nil, "Invalid type for 'input': expected a string or an array of input items."
			}
			r.Input = make([]Item, len(items))
			for i, it := range items {
				if err := json.Unmarshal(it, &r.Input[i]); err != nil {
					return nil, fmt.Sprintf("Invalid 'input[%d]': %v.", i, err)
				}
			}
		}
	}
	return r, ""
}
