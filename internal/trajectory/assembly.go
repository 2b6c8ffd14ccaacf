package trajectory

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// Names of engram's assembly in reports: with the pre-fetch, and without.
const (
	AssemblyName           = "engram assembly"
	AssemblyNoPrefetchName = "engram assembly, no pre-fetch"
)

// Assembly replays runs through engram's turn assembly (internal/assemble)
// over store-backed windows: each run is a window of the role
// window.ToolLoopRole in Engine's store (or a store of its own, Open), fed
// the run a step at a time as
// a harness appends them, and each context is the turn the Assembler
// builds for the step, with or without engram's pre-fetch. An Assembly's
// strategies may run on many goroutines; each makes a window of its own.
type Assembly struct {
	// Engine is the store's engine: counting in o200k_base, as the runs'
	// counts are, and keeping secrets, so that every message is stored as
	// given. With no embedder, the pre-fetch is lexical.
	Engine *engine.Engine
	// Open, if set, makes each run's strategy a store of its own instead
	// (an engine as Engine is, and what closes it), so that a run's
	// pre-fetch scores its words against its own run's alone, whichever
	// runs are replayed beside it, and a replay gives the same rows every
	// time. The strategy closes it when its run is done (Close).
	Open func() (*engine.Engine, func() error, error)
	// Catalog and Config make each window's Manager (window.NewManager,
	// Manager.Configure).
	Catalog *tokens.Catalog
	Config  window.Config
	// Limit is the context limit of a window, with 1 token reserved for
	// the response and 1 of safety, whose budget is budget tokens after
	// the Manager's margin: the assembly's budget is the replay's, with
	// nothing reserved beyond, as the baselines reserve nothing.
	Limit func(budget int) int

	// windows counts the windows opened, to give each a session of its
	// own.
	windows atomic.Int64
}

// Specs returns engram's assembly at each budget of window.MinBudget or
// more (a window takes no less): with the pre-fetch (AssemblyName) at each
// budget, then without it (AssemblyNoPrefetchName). ctx bounds every
// store call the strategies make: a Strategy's methods take no context,
// since every other strategy is pure.
func (a *Assembly) Specs(ctx context.Context, budgets ...int) []Spec {
	var specs []Spec
	for _, retrieve := range []bool{true, false} {
		name := AssemblyName
		if !retrieve {
			name = AssemblyNoPrefetchName
		}
		for _, b := range budgets {
			if b < window.MinBudget {
				continue
			}
			specs = append(specs, Spec{Name: name, Budget: b, New: func(budget int) Strategy { return a.New(ctx, budget, retrieve) }})
		}
	}
	return specs
}

// New returns the assembly of one run at budget, with engram's pre-fetch
// when retrieve is set: the run is mapped onto the window's messages as
// NewWindow maps it (each action a tool call "call-<index>", its
// observation the call's result, the task pinned) and appended a step at
// a time: the system prompt and the task, then each action with its
// observation. Before each turn the Assembler assembles the step (the
// window's newest message a tool's result: no message of the request's),
// the pre-fetch within the window's own session, which holds only the
// messages given so far. The window counts the messages' tokens itself
// (its count, unlike NewWindow's, cannot be given): 4 tokens of framing a
// message more than the counts file, and the tool's name for a call, so
// that the assembly packs a little less than its budget as the replay
// counts it.
//
// The turn maps back onto blocks: the system prompt and the messages
// shown whole are kept (each checked to be the run's message at its place
// in the window's ledger, which is its index in the run), each marker
// stands for the places it names, and all other text (the history's
// excerpts and summaries, the arc, the pre-fetch) is Text. A turn the
// Assembler cannot build within the budget (the system prompt and the
// step alone pass it) is ErrNoContext.
func (a *Assembly) New(ctx context.Context, budget int, retrieve bool) Strategy {
	s := &assembly{ctx: ctx, retrieve: retrieve, enc: tokens.MustGet(tokens.O200kBase)}
	// The session names the window in the pre-fetch's sources: letters
	// only, so that it holds no needle (a number, a path, a long name). In
	// a store of its own, every run's is the same.
	n := int64(1)
	eng := a.Engine
	if a.Open != nil {
		var err error
		if eng, s.close, err = a.Open(); err != nil {
			s.err = err
			return s
		}
	} else {
		n = a.windows.Add(1)
	}
	s.key = store.WindowKey{SessionID: "run-" + letters(n), AgentID: "agent"}
	s.err = s.open(a, eng, budget)
	return s
}

// Close waits for the Assembler's work in the background and closes the
// run's store, if it has one of its own (Assembly.Open).
func (s *assembly) Close() error {
	if s.asm != nil {
		s.asm.Wait()
	}
	if s.close == nil {
		return nil
	}
	c := s.close
	s.close = nil
	return c()
}

// letters writes n > 0 in base 26 with the letters a to z.
func letters(n int64) string {
	var b []byte
	for ; n > 0; n = (n - 1) / 26 {
		b = append([]byte{byte('a' + (n-1)%26)}, b...)
	}
	return string(b)
}

func (s *assembly) open(a *Assembly, eng *engine.Engine, budget int) error {
	s.m = window.NewManager(eng, a.Catalog)
	if err := s.m.Configure(a.Config); err != nil {
		return err
	}
	s.asm = &assemble.Assembler{Engine: eng, Windows: s.m}
	if _, err := eng.Store().Window(s.ctx, s.key); err == nil {
		return fmt.Errorf("window %s is in the store already: an assembly's replay needs a store of its own", s.key)
	}
	st, err := s.m.Open(s.ctx, s.key, window.OpenOptions{Role: window.ToolLoopRole, Limit: a.Limit(budget), Output: 1, Safety: 1})
	if err != nil {
		return fmt.Errorf("window %s: %w", s.key, err)
	}
	if st.Budget != budget {
		return fmt.Errorf("window %s: a budget of %d tokens, not %d", s.key, st.Budget, budget)
	}
	return nil
}

type assembly struct {
	ctx      context.Context
	retrieve bool
	enc      *tokens.Encoding
	key      store.WindowKey
	m        *window.Manager
	asm      *assemble.Assembler
	// close closes the run's own store (Assembly.Open).
	close func() error
	err   error
	mapper
	// given are the run's messages mapped, in order; appended how many of
	// them the window holds.
	given    []window.Message
	appended int
}

func (s *assembly) Add(m Message, _ int) error {
	if s.err != nil {
		return s.err
	}
	// A step is an action and what follows it: the harness appends the
	// one before it first.
	if m.Role == Assistant && len(s.given) > 1 {
		if err := s.flush(); err != nil {
			return err
		}
	}
	wm, err := s.next(len(s.given), m)
	if err != nil {
		return err
	}
	s.given = append(s.given, wm)
	return nil
}

// flush appends the messages given since the last append.
func (s *assembly) flush() error {
	if s.appended == len(s.given) {
		return nil
	}
	res, err := s.m.Append(s.ctx, s.key, s.given[s.appended:])
	if err != nil {
		return fmt.Errorf("window %s: append messages %d to %d: %w", s.key, s.appended, len(s.given)-1, err)
	}
	for j, p := range res.Positions {
		if want := s.appended + j; p != want {
			return fmt.Errorf("window %s: message %d appended at place %d", s.key, want, p)
		}
	}
	s.appended = len(s.given)
	return nil
}

func (s *assembly) Context() ([]Block, error) {
	if s.err != nil {
		return nil, s.err
	}
	if err := s.flush(); err != nil {
		return nil, err
	}
	req := assemble.Request{Key: s.key, Retrieve: s.retrieve, RetrieveSteps: s.retrieve}
	if s.retrieve {
		req.Scope = store.Filter{SessionID: s.key.SessionID}
	}
	turn, err := s.asm.Assemble(s.ctx, req)
	if errors.Is(err, assemble.ErrOverBudget) || errors.Is(err, assemble.ErrNoHistoryRoom) {
		return nil, fmt.Errorf("%w: %w", ErrNoContext, err)
	}
	if err != nil {
		return nil, fmt.Errorf("assemble window %s: %w", s.key, err)
	}
	return turnBlocks(turn, s.given, s.enc)
}

// turnBlocks maps an assembled turn over a window that holds the messages
// given, each at its index, back onto blocks. A message shown whole must be
// the one given at its place (a wrong place is an error, not a wrong
// score); every other text is counted with enc.
func turnBlocks(t assemble.Turn, given []window.Message, enc *tokens.Encoding) ([]Block, error) {
	out := t.Messages
	n := len(given)
	var blocks []Block
	text := func(s string) {
		if s != "" {
			blocks = append(blocks, Block{Kind: Text, Text: s, Tokens: enc.Count(s)})
		}
	}
	// The window's system prompt leads; what the turn adds to it (standing
	// instructions, a briefing) follows its blocks.
	sys := 0
	for sys < n && given[sys].Role == window.RoleSystem {
		sys++
	}
	if len(out) < sys {
		return nil, fmt.Errorf("a turn of %d messages over a window with %d system messages", len(out), sys)
	}
	for i := range sys {
		extra, err := shownAs(&given[i], &out[i], false)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		blocks = append(blocks, Block{Kind: Kept, Index: i})
		for _, b := range extra {
			text(b.Text)
		}
	}
	// The history, item by item: its markers and texts are sent joined in
	// user messages, each kept apart here, as a window's are.
	next := sys // the first place the history has not covered
	for k, it := range t.History.Items {
		switch {
		case it.Message != nil:
			if it.Pos < 0 || it.Pos >= n {
				return nil, fmt.Errorf("history item %d: message at place %d, of %d given", k, it.Pos, n)
			}
			if extra, err := shownAs(&given[it.Pos], it.Message, false); err != nil || len(extra) > 0 {
				return nil, fmt.Errorf("history item %d: the message at place %d is not message %d as given: %v", k, it.Pos, it.Pos, err)
			}
			blocks = append(blocks, Block{Kind: Kept, Index: it.Pos})
			next = max(next, it.Pos+1)
		case it.Marker != "":
			mk, err := ctxref.Parse(it.Marker)
			if err != nil {
				return nil, fmt.Errorf("history item %d: %w", k, err)
			}
			if mk.TurnFrom < 1 || mk.TurnTo < mk.TurnFrom || mk.TurnTo > n {
				return nil, fmt.Errorf("history item %d: marker %q names turns %d-%d, of %d messages given", k, it.Marker, mk.TurnFrom, mk.TurnTo, n)
			}
			// Turns count from 1: turn p is the message at place p-1.
			covers := make([]int, 0, mk.TurnTo-mk.TurnFrom+1)
			for p := mk.TurnFrom - 1; p < mk.TurnTo; p++ {
				covers = append(covers, p)
			}
			blocks = append(blocks, Block{Kind: Marker, Text: it.Marker, Tokens: enc.Count(it.Marker), Covers: covers})
			next = max(next, mk.TurnTo)
			text(it.Excerpt)
		default:
			text(it.Excerpt)
		}
	}
	// The step: the messages after the history, the last with the arc and
	// the pre-fetch beside it (after a tool's results, before a prompt).
	tail := n - next
	if tail == 0 && len(out) > sys {
		// A tool loop's window shows its step in the history: what leads
		// the turn (the arc, the pre-fetch) ends the last message, after
		// the step's results or in a message of its own.
		lead := 0
		for _, l := range []string{assemble.Arc, assemble.Retrieval} {
			if t.Layers[l] > 0 {
				lead++
			}
		}
		last := out[len(out)-1].Blocks
		if lead > len(last) {
			return nil, fmt.Errorf("the turn's last message has %d blocks, %d led the turn", len(last), lead)
		}
		for _, b := range last[len(last)-lead:] {
			if b.Type != window.BlockText {
				return nil, fmt.Errorf("a %s block where the turn's lead should be", b.Type)
			}
			text(b.Text)
		}
		return blocks, nil
	}
	if tail < 1 || tail > len(out)-sys {
		return nil, fmt.Errorf("the history covers places %d to %d of %d messages given, and the turn ends with %d messages", sys, next-1, n, len(out)-sys)
	}
	for k := range tail {
		i, m := next+k, &out[len(out)-tail+k]
		last := k == tail-1
		extra, err := shownAs(&given[i], m, last)
		if err != nil || len(extra) > 0 && !last {
			return nil, fmt.Errorf("the turn's message %d is not message %d as given: %v", len(out)-tail+k, i, err)
		}
		results := len(given[i].Results()) > 0
		if !results {
			for _, b := range extra {
				text(b.Text)
			}
		}
		blocks = append(blocks, Block{Kind: Kept, Index: i})
		if results {
			for _, b := range extra {
				text(b.Text)
			}
		}
	}
	return blocks, nil
}

// shownAs checks that sent is message m as given, with text blocks added
// after its own (or, when it may lead and m holds no tool result, before
// them), and returns the blocks added.
func shownAs(m, sent *window.Message, lead bool) ([]window.Block, error) {
	if sent.Role != m.Role {
		return nil, fmt.Errorf("role %s, given %s", sent.Role, m.Role)
	}
	if len(sent.Blocks) < len(m.Blocks) {
		return nil, fmt.Errorf("%d blocks, given %d", len(sent.Blocks), len(m.Blocks))
	}
	own, extra := sent.Blocks[:len(m.Blocks)], sent.Blocks[len(m.Blocks):]
	if lead && len(m.Results()) == 0 {
		extra, own = sent.Blocks[:len(sent.Blocks)-len(m.Blocks)], sent.Blocks[len(sent.Blocks)-len(m.Blocks):]
	}
	for j, b := range m.Blocks {
		o := own[j]
		if o.Type != b.Type || o.Text != b.Text || o.ID != b.ID || o.ToolUseID != b.ToolUseID || o.Name != b.Name {
			return nil, fmt.Errorf("block %d differs (%s %.40q, given %s %.40q)", j, o.Type, o.Text, b.Type, b.Text)
		}
	}
	for j, b := range extra {
		if b.Type != window.BlockText {
			return nil, fmt.Errorf("block %d added is a %s", j, b.Type)
		}
	}
	return extra, nil
}
