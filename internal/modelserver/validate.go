package modelserver

import (
	"fmt"
	"slices"
	"strings"
)

// blockTypes are the content block types the Messages API accepts in a
// request (user and assistant turns, tool_result contents). A request
// with any other type is refused, as the API refuses it.
var blockTypes = []string{
	"text", "image", "document", "search_result",
	"thinking", "redacted_thinking",
	"tool_use", "tool_result", "tool_reference",
	"server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
	"code_execution_tool_result", "bash_code_execution_tool_result",
	"text_editor_code_execution_tool_result", "tool_search_tool_result",
	"mcp_tool_use", "mcp_tool_result", "container_upload",
}

// validate checks a messages request the way the API does and returns
// the message of the invalid_request_error it would answer, or "".
// countOnly relaxes what count_tokens does not need (max_tokens).
//
// The rules are the API's own, with its wording where known: required
// fields, roles, known block types, non-empty content, and tool pairing
// (every tool_use answered in the next message, every tool_result
// answering a tool_use of the previous one). Rules the API does not have
// (strict role alternation, a user first message) are not checked.
func validate(r *MessagesRequest, countOnly bool) string {
	if _, ok := r.Raw["model"]; !ok || r.Model == "" {
		return "model: Field required"
	}
	if !countOnly {
		if _, ok := r.Raw["max_tokens"]; !ok {
			return "max_tokens: Field required"
		}
		if r.MaxTokens < 1 {
			return "max_tokens: Input should be greater than or equal to 1"
		}
	}
	if _, ok := r.Raw["messages"]; !ok {
		return "messages: Field required"
	}
	if len(r.Messages) == 0 {
		return "messages: at least one message is required"
	}
	for i, b := range r.System {
		if b.Type != "text" {
			return fmt.Sprintf("system.%d.type: Input should be 'text'", i)
		}
		if b.Text == "" {
			return "system: text content blocks must be non-empty"
		}
	}
	for i, t := range r.Tools {
		if t.Name == "" {
			return fmt.Sprintf("tools.%d.name: Field required", i)
		}
		if (t.Type == "" || t.Type == "custom") && len(t.InputSchema) == 0 {
			return fmt.Sprintf("tools.%d.custom.input_schema: Field required", i)
		}
	}
	last := len(r.Messages) - 1
	for i, m := range r.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if len(m.Content) == 0 || (m.StringContent && m.Content[0].Text == "") {
			if i == last && m.Role == "assistant" {
				continue
			}
			return fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		for j, b := range m.Content {
			if msg := validateBlock(b, fmt.Sprintf("messages.%d.content.%d", i, j)); msg != "" {
				return msg
			}
			switch {
			case b.Type == "tool_use" && m.Role != "assistant":
				return fmt.Sprintf("messages.%d.content.%d: tool_use blocks can only be in assistant messages", i, j)
			case b.Type == "tool_result" && m.Role != "user":
				return fmt.Sprintf("messages.%d.content.%d: tool_result blocks can only be in user messages", i, j)
			}
		}
		if i == last && m.Role == "assistant" {
			if b := m.Content[len(m.Content)-1]; b.Type == "text" && strings.TrimRight(b.Text, " \t\r\n") != b.Text {
				return "messages: final assistant content cannot end with trailing whitespace"
			}
		}
	}
	return validatePairs(r.Messages)
}

// validateBlock checks one block's type and required fields; at names it.
func validateBlock(b Block, at string) string {
	if b.Type == "" {
		return at + ".type: Field required"
	}
	if !slices.Contains(blockTypes, b.Type) {
		return fmt.Sprintf("%s.type: Input tag '%s' found using 'type' does not match any of the expected tags: %s",
			at, b.Type, "'"+strings.Join(blockTypes, "', '")+"'")
	}
	switch b.Type {
	case "text":
		if b.Text == "" {
			return "messages: text content blocks must be non-empty"
		}
		if strings.TrimSpace(b.Text) == "" {
			return "messages: text content blocks must contain non-whitespace text"
		}
	case "tool_use":
		switch {
		case b.ID == "":
			return at + ".id: Field required"
		case b.Name == "":
			return at + ".name: Field required"
		case len(b.Input) == 0 || b.Input[0] != '{':
			return at + ".input: Input should be a valid dictionary"
		}
	case "tool_result":
		if b.ToolUseID == "" {
			return at + ".tool_use_id: Field required"
		}
		nested, _, err := decodeBlocks(b.Content)
		if err != nil {
			return at + ".content: Input should be a valid string or list"
		}
		for k, c := range nested {
			if msg := validateBlock(c, fmt.Sprintf("%s.content.%d", at, k)); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// validatePairs checks that every tool_use of an assistant message is
// answered by a tool_result in the message right after it, and that every
// tool_result answers a tool_use of the message right before it.
func validatePairs(msgs []Message) string {
	for i, m := range msgs {
		var uses []string
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				uses = append(uses, b.ID)
			}
		}
		var answered []string
		if i+1 < len(msgs) {
			for _, b := range msgs[i+1].Content {
				if b.Type == "tool_result" {
					answered = append(answered, b.ToolUseID)
				}
			}
		}
		var missing []string
		for _, id := range uses {
			if !slices.Contains(answered, id) {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
				"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i, strings.Join(missing, ", "))
		}
		var prev []string
		if i > 0 {
			for _, b := range msgs[i-1].Content {
				if b.Type == "tool_use" {
					prev = append(prev, b.ID)
				}
			}
		}
		for j, b := range m.Content {
			if b.Type == "tool_result" && !slices.Contains(prev, b.ToolUseID) {
				return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
					"Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
			}
		}
	}
	return ""
}
