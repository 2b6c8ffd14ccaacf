package modelserver

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// itemTypes are the input item types the Responses API accepts (those a
// harness sends; the API has more, for hosted tools). A request with any
// other type is refused, as the API refuses it.
var itemTypes = []string{
	"message", "function_call", "function_call_output",
	"custom_tool_call", "custom_tool_call_output",
	"reasoning", "compaction", "item_reference",
	"local_shell_call", "local_shell_call_output",
	"computer_call", "computer_call_output",
	"web_search_call", "image_generation_call",
	"mcp_call", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response",
	// Codex 0.171 sends its tools as the input's first item,
	// {"type": "additional_tools", "role": "developer", "tools": [...]},
	// to its default model (gpt-6.2-sol) instead of in "tools".
	"additional_tools",
}

// partTypes are the content part types of a message, by role: what a
// user, system or developer sends, and what an assistant said.
var (
	inputParts  = []string{"input_text", "input_image", "input_file", "input_audio"}
	outputParts = []string{"output_text", "refusal"}
	// toolOutputParts are those of a function_call_output's or
	// custom_tool_call_output's output given as a list.
	toolOutputParts = []string{"input_text", "input_image", "input_file"}
)

// toolTypes are the tool types the Responses API accepts.
var toolTypes = []string{
	"function", "custom", "namespace", "web_search", "web_search_preview",
	"file_search", "local_shell", "image_generation", "code_interpreter",
	"computer_use_preview", "mcp", "tool_search",
}

// validateResponses checks a responses request the way the API does and
// returns the message of the invalid_request_error it would answer, and
// the parameter it names, or "".
//
// The rules are the API's own, with its wording where known: a model,
// known item, part and tool types (a tool output's parts too, and an
// input_image's picture), message roles, functions with names,
// tool pairing without a stored conversation (every call's output
// answers a call earlier in the input, and every call is answered), and
// reasoning: a reasoning item is followed by the item it produced (the
// model's message or call), and an item the server made after a
// reasoning item (reasoned maps its id to the reasoning's) comes right
// after it.
func validateResponses(r *ResponsesRequest, reasoned map[string]string) (msg, param string) {
	if r.Model == "" {
		return "Missing required parameter: 'model'.", "model"
	}
	if r.MaxOutputTokens < 0 || (r.MaxOutputTokens > 0 && r.MaxOutputTokens < 16) {
		return fmt.Sprintf("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got %d instead.", r.MaxOutputTokens), "max_output_tokens"
	}
	if len(r.Input) == 0 && r.PreviousResponseID == "" {
		return "Missing required parameter: 'input'.", "input"
	}
	if r.PreviousResponseID != "" {
		// The server keeps no conversations (as store: false).
		return fmt.Sprintf("Previous response with id '%s' not found.", r.PreviousResponseID), "previous_response_id"
	}
	for i, t := range r.Tools {
		if msg, param := validateTool(t, fmt.Sprintf("tools[%d]", i)); msg != "" {
			return msg, param
		}
	}
	calls := map[string]bool{}
	answered := map[string]bool{}
	for i, it := range r.Input {
		at := fmt.Sprintf("input[%d]", i)
		if it.Type == "" {
			return fmt.Sprintf("Missing required parameter: '%s.type'.", at), at + ".type"
		}
		if !slices.Contains(itemTypes, it.Type) {
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s'.", it.Type, strings.Join(itemTypes, "', '")), at + ".type"
		}
		switch it.Type {
		case "message":
			var allowed []string
			switch it.Role {
			case "user", "system", "developer":
				allowed = inputParts
			case "assistant":
				allowed = outputParts
			case "":
				return fmt.Sprintf("Missing required parameter: '%s.role'.", at), at + ".role"
			default:
				return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'user', 'assistant', 'system', and 'developer'.", it.Role), at + ".role"
			}
			for j, p := range it.Content {
				if msg, param := validatePart(p, allowed, fmt.Sprintf("%s.content[%d]", at, j)); msg != "" {
					return msg, param
				}
			}
		case "function_call", "custom_tool_call", "local_shell_call", "computer_call":
			if it.CallID == "" {
				return fmt.Sprintf("Missing required parameter: '%s.call_id'.", at), at + ".call_id"
			}
			if it.Type != "local_shell_call" && it.Type != "computer_call" && it.Name == "" {
				return fmt.Sprintf("Missing required parameter: '%s.name'.", at), at + ".name"
			}
			calls[it.CallID] = true
		case "function_call_output", "custom_tool_call_output", "local_shell_call_output", "computer_call_output":
			if it.CallID == "" {
				return fmt.Sprintf("Missing required parameter: '%s.call_id'.", at), at + ".call_id"
			}
			if !calls[it.CallID] {
				return fmt.Sprintf("No tool call found for function call output with call_id %s.", it.CallID), "input"
			}
			if it.Type == "computer_call_output" {
				// Its output is one screenshot, an input_image by another name.
				var shot Part
				if err := json.Unmarshal(it.Output, &shot); err != nil || shot.Type != "computer_screenshot" {
					return fmt.Sprintf("Invalid '%s.output': expected an object of type 'computer_screenshot'.", at), at + ".output"
				}
				shot.Type = "input_image"
				if msg, param := validatePart(shot, []string{"input_image"}, at+".output"); msg != "" {
					return msg, param
				}
			} else if it.Type != "local_shell_call_output" {
				parts, err := it.OutputParts()
				if err != nil {
					return fmt.Sprintf("Invalid type for '%s.output': expected a string or an array of content parts.", at), at + ".output"
				}
				for j, p := range parts {
					if msg, param := validatePart(p, toolOutputParts, fmt.Sprintf("%s.output[%d]", at, j)); msg != "" {
						return msg, param
					}
				}
			}
			answered[it.CallID] = true
		}
	}
	for _, it := range r.Input {
		if (it.Type == "function_call" || it.Type == "custom_tool_call") && !answered[it.CallID] {
			return fmt.Sprintf("No tool output found for function call %s.", it.CallID), "input"
		}
	}
	return validateReasoning(r.Input, reasoned)
}

// validatePart checks a content part at the place at: its type is one of
// allowed, and an input_image names its picture, by a URL or a file id;
// a data: URL holds an image's type and base64, as the API decodes it.
func validatePart(p Part, allowed []string, at string) (msg, param string) {
	if !slices.Contains(allowed, p.Type) {
		return fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s'.", p.Type, strings.Join(allowed, "', '")), at
	}
	if p.Type != "input_image" {
		return "", ""
	}
	if p.ImageURL == "" && p.FileID == "" {
		return fmt.Sprintf("Invalid '%s': an input_image needs an 'image_url' or a 'file_id'.", at), at
	}
	data, ok := strings.CutPrefix(p.ImageURL, "data:")
	if !ok {
		return "", ""
	}
	head, payload, _ := strings.Cut(data, ",")
	mime, isBase64 := strings.CutSuffix(head, ";base64")
	if !strings.HasPrefix(mime, "image/") || !isBase64 {
		return fmt.Sprintf("Invalid '%s.image_url'. Expected a base64-encoded data URL with an image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got %q.", at, "data:"+head), at + ".image_url"
	}
	if _, err := base64.StdEncoding.DecodeString(payload); err != nil {
		return fmt.Sprintf("Invalid '%s.image_url'. Expected a base64-encoded data URL with an image MIME type, but its data is not base64: %v.", at, err), at + ".image_url"
	}
	return "", ""
}

// validateReasoning checks that each reasoning item is followed by the
// item it produced, and that each item the server made after a reasoning
// item follows it, in the API's words.
func validateReasoning(input []Item, reasoned map[string]string) (msg, param string) {
	for i, it := range input {
		if it.Type == "reasoning" && (i+1 == len(input) || !produced(input[i+1])) {
			return fmt.Sprintf("Item '%s' of type 'reasoning' was provided without its required following item.", itemName(it, i)), "input"
		}
		if rs, ok := reasoned[it.ID]; ok && it.ID != "" && (i == 0 || input[i-1].ID != rs) {
			return fmt.Sprintf("Item '%s' of type '%s' was provided without its required 'reasoning' item: '%s'.", it.ID, it.Type, rs), "input"
		}
	}
	return "", ""
}

// produced reports whether it is an item a model produces after its
// reasoning: its message, a call, or more reasoning.
func produced(it Item) bool {
	switch it.Type {
	case "message":
		return it.Role == "assistant"
	case "reasoning":
		return true
	}
	return strings.HasSuffix(it.Type, "_call")
}

// itemName is how an error names item i: its id, else its place.
func itemName(it Item, i int) string {
	if it.ID != "" {
		return it.ID
	}
	return fmt.Sprintf("input[%d]", i)
}

func validateTool(t ResponsesTool, at string) (msg, param string) {
	if t.Type == "" {
		return fmt.Sprintf("Missing required parameter: '%s.type'.", at), at + ".type"
	}
	if !slices.Contains(toolTypes, t.Type) {
		return fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s'.", t.Type, strings.Join(toolTypes, "', '")), at + ".type"
	}
	switch t.Type {
	case "function", "custom", "namespace":
		if t.Name == "" {
			return fmt.Sprintf("Missing required parameter: '%s.name'.", at), at + ".name"
		}
	}
	for i, sub := range t.Tools {
		if msg, param := validateTool(sub, fmt.Sprintf("%s.tools[%d]", at, i)); msg != "" {
			return msg, param
		}
	}
	return "", ""
}
