package trajectory

import (
	"fmt"
	"strconv"

	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// WindowName names engram's window in reports.
const WindowName = "engram window"

// WindowPolicy is the policy of the replay's window: the window
// package's for an agent in a tool loop.
func WindowPolicy() window.Policy { return window.ToolLoopPolicy() }

// Windows returns engram's window at each budget of window.MinBudget or
// more (a window takes no less).
func Windows(budgets ...int) []Spec {
	var specs []Spec
	for _, b := range budgets {
		if b < window.MinBudget {
			continue
		}
		specs = append(specs, Spec{Name: WindowName, Budget: b, New: func(budget int) Strategy { return NewWindow(budget, WindowPolicy()) }})
	}
	return specs
}

// NewWindow returns engram's context window (window.Layout) at budget
// with policy p, over a run mapped onto the window's messages: message 0
// is the system prompt, message 1 the task (pinned: the README keeps it),
// each assistant message a tool call (its text, and a tool_use block with
// the id "call-<index>") and the user message after it that call's
// result, so that the window keeps each action with its observation. The
// window's limits are exactly the budget: the replay reserves nothing for
// the response and keeps no safety margin, as the baselines do not.
// Markers and excerpts are counted with o200k_base, as the runs are.
func NewWindow(budget int, p window.Policy) Strategy {
	enc := tokens.MustGet(tokens.O200kBase)
	l, err := window.NewLayout(window.Options{Policy: p, Budget: budget, Count: enc.Count,
		RefID: func(from, to int) string { return "r" + strconv.Itoa(from) + "-" + strconv.Itoa(to) }})
	return &windowStrategy{l: l, err: err}
}

type windowStrategy struct {
	l   *window.Layout
	err error
	mapper
}

func (s *windowStrategy) Add(m Message, tokens int) error {
	if s.err != nil {
		return s.err
	}
	wm, err := s.next(len(s.l.Messages()), m)
	if err != nil {
		return err
	}
	wm.Tokens = tokens
	return s.l.Append(wm)
}

// mapper maps a run's messages onto a window's, in order (see NewWindow).
type mapper struct {
	// call is the id of the call waiting for its result, "" for none.
	call string
}

// next maps message i of a run.
func (mp *mapper) next(i int, m Message) (window.Message, error) {
	var wm window.Message
	switch {
	case m.Role == System:
		wm.Role = window.RoleSystem
		wm.Blocks = []window.Block{{Type: window.BlockText, Text: m.Content}}
	case m.Role == Assistant:
		if mp.call != "" {
			return wm, fmt.Errorf("message %d: an assistant message before the result of %s", i, mp.call)
		}
		mp.call = "call-" + strconv.Itoa(i)
		wm.Role = window.RoleAssistant
		wm.Blocks = []window.Block{{Type: window.BlockText, Text: m.Content}, {Type: window.BlockToolUse, ID: mp.call, Name: "bash"}}
	case mp.call != "":
		wm.Role = window.RoleUser
		wm.Blocks = []window.Block{{Type: window.BlockToolResult, ToolUseID: mp.call, Text: m.Content}}
		mp.call = ""
	default:
		wm.Role = window.RoleUser
		wm.Blocks = []window.Block{{Type: window.BlockText, Text: m.Content}}
		wm.Pinned = i == 1
	}
	return wm, nil
}

// WindowMessages maps a run's messages onto a window's as the replay's
// window takes them (see NewWindow), for a store-backed window fed the
// same run: each action a tool call, its observation the call's result,
// the task pinned.
func WindowMessages(ms []Message) ([]window.Message, error) {
	var mp mapper
	out := make([]window.Message, len(ms))
	for i, m := range ms {
		var err error
		if out[i], err = mp.next(i, m); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *windowStrategy) Context() ([]Block, error) {
	if s.err != nil {
		return nil, s.err
	}
	pieces := s.l.Pieces()
	blocks := make([]Block, 0, len(pieces))
	for _, it := range pieces {
		switch it.Kind {
		case window.PieceMessage:
			blocks = append(blocks, Block{Kind: Kept, Index: it.From})
		case window.PieceMarker:
			covers := make([]int, 0, it.To-it.From)
			for i := it.From; i < it.To; i++ {
				covers = append(covers, i)
			}
			blocks = append(blocks, Block{Kind: Marker, Text: it.Text, Tokens: it.Tokens, Covers: covers})
		case window.PieceExcerpt:
			blocks = append(blocks, Block{Kind: Excerpt, Text: it.Text, Tokens: it.Tokens, Covers: it.Sources})
		}
	}
	return blocks, nil
}
