package window

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role is who a message is from.
type Role string

// The roles. A tool's result is a message of RoleTool in OpenAI's shape;
// in Anthropic's it is a tool_result block of a user message. Both map
// here without loss.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// BlockType is the kind of a content block.
type BlockType string

// The block types. Any other type a vendor sends (images, documents,
// thinking) is kept as it came, in Block.Raw.
const (
	BlockText       BlockType = "text"
	BlockToolUse    BlockType = "tool_use"
	BlockToolResult BlockType = "tool_result"
)

// Block is one content block of a message.
type Block struct {
	Type BlockType `json:"type"`
	// Text is a text block's text, or a tool result's output.
	Text string `json:"text,omitempty"`
	// ID is a tool call's id (tool_use), ToolUseID the id of the call a
	// tool result answers.
	ID        string `json:"id,omitempty"`
	ToolUseID string `json:"tool_use_id,omitempty"`
	// Name and Input are a tool call's tool and arguments.
	Name    string          `json:"name,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`
	IsError bool            `json:"is_error,omitempty"`
	// Raw is a block of another type, byte for byte as the vendor sent it.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// Message is one message of a window: its role and content blocks, its
// size in tokens, and whether eviction must leave it alone.
type Message struct {
	Role   Role    `json:"role"`
	Blocks []Block `json:"blocks"`
	// Tokens is the message's size in the window's encoding.
	Tokens int `json:"tokens"`
	// Pinned messages are never evicted.
	Pinned bool `json:"pinned,omitempty"`
	// Shape says how a vendor wrote the message (see wire.go), so that it
	// is written back the same way; nil for a message made here.
	Shape *Shape `json:"shape,omitempty"`
	// Entities are the names (paths, identifiers) the message mentions,
	// as the window noted them when it was appended; strategies that
	// group messages by subject read them.
	Entities []string `json:"-"`
	// Time is when the message was appended to its window (zero when not
	// known); markers of policies that show it give the latest of theirs.
	Time time.Time `json:"-"`
}

// Calls returns the ids of the tool calls m makes.
func (m *Message) Calls() []string {
	var ids []string
	for _, b := range m.Blocks {
		if b.Type == BlockToolUse {
			ids = append(ids, b.ID)
		}
	}
	return ids
}

// Results returns the ids of the tool calls m answers.
func (m *Message) Results() []string {
	var ids []string
	for _, b := range m.Blocks {
		if b.Type == BlockToolResult {
			ids = append(ids, b.ToolUseID)
		}
	}
	return ids
}

// blockReasoning is a Responses reasoning item, as FromResponses keeps it.
const blockReasoning BlockType = "item:reasoning"

// LeadsNext reports whether m must stay with the message after it: a
// Responses reasoning item. The Responses API refuses a reasoning item
// without the item it produced, which follows it ("Item 'rs_…' of type
// 'reasoning' was provided without its required following item"), and
// that item without its reasoning ("Item 'fc_…' of type 'function_call'
// was provided without its required 'reasoning' item").
func (m *Message) LeadsNext() bool {
	for _, b := range m.Blocks {
		if b.Type == blockReasoning {
			return true
		}
	}
	return false
}

// ErrInvalid marks a message or conversation that a window cannot take,
// and, as ErrInvalidSettings, settings it cannot have.
var ErrInvalid = errors.New("invalid message")

// ErrInvalidSettings marks window settings that cannot be: limits that
// leave no window, a policy, the Manager's defaults, a layout's budget.
// It is an ErrInvalid too, so that a caller refusing a window's input
// refuses its settings alike, but it says that the settings are wrong,
// not a message.
var ErrInvalidSettings error = invalidSettings{}

type invalidSettings struct{}

func (invalidSettings) Error() string        { return "invalid window settings" }
func (invalidSettings) Is(target error) bool { return target == ErrInvalid }

// Validate checks one message on its own: a known role, blocks that carry
// what their type needs, calls only from the assistant, results only from
// the user (Anthropic) or a tool (OpenAI), and a non-negative size.
func (m *Message) Validate() error {
	if !m.Role.Valid() {
		return fmt.Errorf("%w: role %q is not system, user, assistant or tool", ErrInvalid, m.Role)
	}
	if m.Tokens < 0 {
		return fmt.Errorf("%w: %d tokens", ErrInvalid, m.Tokens)
	}
	for i, b := range m.Blocks {
		// A block is a vendor's form (raw) or typed fields, never both: the
		// form is what is written back, and the fields beside it would be
		// lost.
		switch {
		case len(b.Raw) > 0 && (b.Text != "" || len(b.Input) > 0):
			return fmt.Errorf("%w: block %d has raw (a vendor's form, written back as it is) and text or input beside it: send one", ErrInvalid, i)
		case len(b.Input) > 0 && b.Type != BlockToolUse:
			return fmt.Errorf("%w: block %d: input is a tool call's, not a %s block's", ErrInvalid, i, b.Type)
		}
		switch b.Type {
		case BlockText:
		case BlockToolUse:
			if b.ID == "" || b.Name == "" {
				return fmt.Errorf("%w: block %d: a tool call needs an id and a name", ErrInvalid, i)
			}
			if m.Role != RoleAssistant {
				return fmt.Errorf("%w: block %d: a tool call in a %s message (only the assistant calls tools)", ErrInvalid, i, m.Role)
			}
		case BlockToolResult:
			if b.ToolUseID == "" {
				return fmt.Errorf("%w: block %d: a tool result needs the id of its call", ErrInvalid, i)
			}
			if m.Role != RoleUser && m.Role != RoleTool {
				return fmt.Errorf("%w: block %d: a tool result in a %s message", ErrInvalid, i, m.Role)
			}
		case "":
			return fmt.Errorf("%w: block %d has no type", ErrInvalid, i)
		default:
			if len(b.Raw) == 0 {
				return fmt.Errorf("%w: block %d: type %q is not text, tool_use or tool_result, and the block keeps no vendor's form (raw) to write back", ErrInvalid, i, b.Type)
			}
		}
	}
	return nil
}
