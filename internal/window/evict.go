package window

import (
	"slices"

	"github.com/engramhq/engram/internal/store"
)

// Type is the content type a message is stored as.
func (m *Message) Type() store.ContentType {
	switch {
	case m.Role == RoleSystem:
		return store.Note
	case len(m.Results()) > 0 || m.Role == RoleTool:
		return store.ToolResult
	case len(m.Calls()) > 0:
		return store.ToolCall
	case m.Role == RoleUser:
		return store.UserPrompt
	}
	return store.AgentResponse
}

// opensTurn reports whether m starts a turn: a user's prompt, not a tool's
// result.
func (m *Message) opensTurn() bool { return m.Role == RoleUser && len(m.Results()) == 0 }

// MarkerTokens is what a reference marker is assumed to cost where a
// window plans before it renders one (choosing whole topics or tasks to
// evict); the window counts the real marker.
const MarkerTokens = 80

// keptTurnsStart returns the index of the first message of the last n
// turns, len(msgs) for none.
func keptTurnsStart(msgs []Message, n int) int {
	if n <= 0 {
		return len(msgs)
	}
	seen := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].opensTurn() {
			if seen++; seen == n {
				return i
			}
		}
	}
	return 0
}

// evictable reports whether messages may all leave the window: none is
// pinned, of a type the policy preserves, or a system message that opens
// the conversation (lead: no other message came before). A system message
// in the course of the conversation (a harness's reminder: Codex sends
// its hooks' context as developer messages between a call and its
// result) is history like any other.
func evictable(msgs []Message, p Policy, lead bool) bool {
	for i := range msgs {
		m := &msgs[i]
		if m.Role == RoleSystem && lead || m.Pinned || slices.Contains(p.Preserve, m.Type()) {
			return false
		}
	}
	return true
}
