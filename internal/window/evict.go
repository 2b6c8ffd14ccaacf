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

// Run is a run of consecutive messages, msgs[From:To], that leaves the
// window as one reference standing for Tokens tokens.
type Run struct {
	From, To int
	Tokens   int
}

// MarkerTokens is what a reference marker is assumed to cost when
// eviction plans how much it frees; the window counts the real marker.
const MarkerTokens = 80

// SelectRecency returns the runs a window over msgs (its messages, oldest
// first, those evicted before already gone) evicts by recency: nothing
// while used, the tokens the window holds, is at most the policy's
// eviction threshold of budget; past it, the oldest units that may go,
// until the window would hold at most the policy's target. Units never
// split (see Units); the system prompt, pinned messages, preserved types,
// the last KeepTurns turns and a call still waiting for its result stay.
// Consecutive units join one run up to MaxRefTokens; a unit larger than
// that is a run of its own.
func SelectRecency(msgs []Message, units []Unit, p Policy, budget, used int) []Run {
	if float64(used) <= p.Evict*float64(budget) {
		return nil
	}
	target := int(p.Target * float64(budget))
	keepFrom := keptTurnsStart(msgs, p.KeepTurns)
	var runs []Run
	var cur *Run
	for _, u := range units {
		if used <= target {
			break
		}
		if u.Open || u.To > keepFrom || !evictable(msgs[u.From:u.To], p) {
			cur = nil // a unit that stays ends the run
			continue
		}
		n := 0
		for _, m := range msgs[u.From:u.To] {
			n += m.Tokens
		}
		if cur != nil && cur.Tokens+n > p.MaxRefTokens {
			cur = nil
		}
		if cur == nil {
			runs = append(runs, Run{From: u.From, To: u.From})
			cur = &runs[len(runs)-1]
			used += MarkerTokens
		}
		cur.To, cur.Tokens = u.To, cur.Tokens+n
		used -= n
	}
	return runs
}

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

// evictable reports whether a unit's messages may all leave the window.
func evictable(msgs []Message, p Policy) bool {
	for i := range msgs {
		m := &msgs[i]
		if m.Role == RoleSystem || m.Pinned || slices.Contains(p.Preserve, m.Type()) {
			return false
		}
	}
	return true
}
