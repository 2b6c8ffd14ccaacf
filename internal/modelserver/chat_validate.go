package modelserver

import (
	"fmt"
	"slices"
	"strings"
)

// chatUnparsable is the API's message for a body that is not a JSON
// object (and, as the API answers it, for a model that is not a string).
const chatUnparsable = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. " +
	"The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, " +
	"please contact us through our help center at help.openai.com.)"

// chatOrphanTool is the API's message for a tool message that answers no
// call, misspelling and all.
const chatOrphanTool = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'." //nolint:misspell // the API's spelling

// chatRoles are the message roles the API accepts, in the order its
// message lists them.
var chatRoles = []string{"system", "assistant", "user", "function", "tool", "developer"}

// chatPartTypes are the content part types the API accepts, in the order
// its message lists them.
var chatPartTypes = []string{"text", "image_url", "input_audio", "refusal", "audio", "file"}

// validateChat checks a chat request the way the API does and returns the
// invalid_request_error it would answer, or nil.
//
// The rules are the API's own, with its wording, parameter and code as
// clients have recorded them: a model and a non-empty list of messages;
// known roles and content part types; content a string or a list of
// parts, null only for an assistant message with tool calls (the API
// answers other null content "Invalid value for 'content': expected a
// string, got null."); stream_options only with stream; functions with
// names; and tool pairing: an assistant message's tool calls are each
// answered by a tool message, with its tool_call_id, before the next
// message that is not a tool message, and a tool message answers a call
// of the assistant message before it.
func validateChat(r *ChatRequest) *chatError {
	if r.Model == "" {
		return &chatError{msg: "you must provide a model parameter"}
	}
	if _, ok := r.Raw["messages"]; !ok || r.Messages == nil {
		return &chatError{"Missing required parameter: 'messages'.", "messages", "missing_required_parameter"}
	}
	if len(r.Messages) == 0 {
		return &chatError{"Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.", "messages", "empty_array"}
	}
	if _, ok := r.Raw["stream_options"]; ok && string(r.Raw["stream_options"]) != "null" && !r.Stream {
		return &chatError{msg: "The 'stream_options' parameter is only allowed when 'stream' is enabled.", param: "stream_options"}
	}
	for i, t := range r.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		switch {
		case t.Type == "":
			return &chatError{fmt.Sprintf("Missing required parameter: '%s.type'.", at), at + ".type", "missing_required_parameter"}
		case t.Type != "function" && t.Type != "custom":
			return &chatError{fmt.Sprintf("Invalid value: '%s'. Supported values are: 'function' and 'custom'.", t.Type), at + ".type", "invalid_value"}
		case t.Type == "function" && t.Function == nil:
			return &chatError{fmt.Sprintf("Missing required parameter: '%s.function'.", at), at + ".function", "missing_required_parameter"}
		case t.Type == "function" && t.Function.Name == "":
			return &chatError{fmt.Sprintf("Missing required parameter: '%s.function.name'.", at), at + ".function.name", "missing_required_parameter"}
		}
	}
	for i, m := range r.Messages {
		if e := validateChatMessage(m, i); e != nil {
			return e
		}
	}
	return validateChatToolPairs(r.Messages)
}

func validateChatMessage(m ChatMessage, i int) *chatError {
	at := fmt.Sprintf("messages[%d]", i)
	switch {
	case m.Role == "":
		return &chatError{fmt.Sprintf("Missing required parameter: '%s.role'.", at), at + ".role", "missing_required_parameter"}
	case !slices.Contains(chatRoles, m.Role):
		return &chatError{fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s', and '%s'.", m.Role,
			strings.Join(chatRoles[:len(chatRoles)-1], "', '"), chatRoles[len(chatRoles)-1]), at + ".role", "invalid_value"}
	case m.Role == "tool" && m.ToolCallID == "":
		return &chatError{fmt.Sprintf("Missing required parameter: '%s.tool_call_id'.", at), at + ".tool_call_id", "missing_required_parameter"}
	case m.NullContent && (m.Role != "assistant" || len(m.ToolCalls) == 0):
		return &chatError{msg: "Invalid value for 'content': expected a string, got null.", param: fmt.Sprintf("messages.[%d].content", i)}
	}
	for j, p := range m.Content {
		pat := fmt.Sprintf("%s.content[%d].type", at, j)
		switch {
		case p.Type == "":
			return &chatError{fmt.Sprintf("Missing required parameter: '%s'.", pat), pat, "missing_required_parameter"}
		case !slices.Contains(chatPartTypes, p.Type):
			return &chatError{fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s', and '%s'.", p.Type,
				strings.Join(chatPartTypes[:len(chatPartTypes)-1], "', '"), chatPartTypes[len(chatPartTypes)-1]), pat, "invalid_value"}
		}
	}
	for j, c := range m.ToolCalls {
		cat := fmt.Sprintf("%s.tool_calls[%d]", at, j)
		switch {
		case c.ID == "":
			return &chatError{fmt.Sprintf("Missing required parameter: '%s.id'.", cat), cat + ".id", "missing_required_parameter"}
		case c.Type == "":
			return &chatError{fmt.Sprintf("Missing required parameter: '%s.type'.", cat), cat + ".type", "missing_required_parameter"}
		case c.Type == "function" && c.Function.Name == "":
			return &chatError{fmt.Sprintf("Missing required parameter: '%s.function.name'.", cat), cat + ".function.name", "missing_required_parameter"}
		}
	}
	return nil
}

// validateChatToolPairs checks that every tool call is answered by a tool
// message right after its assistant message, and that every tool message
// answers one. These two refusals name the message as messages.[N].role,
// the API's older notation, with no code; a conversation that ends with
// unanswered calls names messages.
func validateChatToolPairs(msgs []ChatMessage) *chatError {
	var pending []string // calls of the last assistant message not yet answered
	calls := map[string]bool{}
	unanswered := func(param string) *chatError {
		return &chatError{msg: "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. " +
			"The following tool_call_ids did not have response messages: " + strings.Join(pending, ", "), param: param}
	}
	inCalls := false // the messages since the last assistant message with tool calls are all tool messages
	for i, m := range msgs {
		if m.Role == "tool" {
			if !inCalls {
				return &chatError{msg: chatOrphanTool, param: fmt.Sprintf("messages.[%d].role", i)}
			}
			if !calls[m.ToolCallID] {
				return &chatError{msg: fmt.Sprintf("Invalid parameter: 'tool_call_id' of '%s' not found in 'tool_calls' of previous message.", m.ToolCallID),
					param: fmt.Sprintf("messages.[%d].tool_call_id", i)}
			}
			pending = slices.DeleteFunc(pending, func(id string) bool { return id == m.ToolCallID })
			continue
		}
		if len(pending) > 0 {
			return unanswered(fmt.Sprintf("messages.[%d].role", i))
		}
		inCalls = m.Role == "assistant" && len(m.ToolCalls) > 0
		pending, calls = nil, map[string]bool{}
		for _, c := range m.ToolCalls {
			pending = append(pending, c.ID)
			calls[c.ID] = true
		}
	}
	if len(pending) > 0 {
		return unanswered("messages")
	}
	return nil
}
