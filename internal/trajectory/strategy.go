package trajectory

import "errors"

// A Strategy builds the contexts of one run. The replay calls Add with the
// run's messages in order, from the system prompt on, and before each
// assistant message t (t ≥ 3) calls Context for the context that would be
// sent then, so that a context is built from messages[:t] only. A Strategy
// is used by one goroutine.
//
// A Strategy that holds resources (a store) also implements io.Closer:
// Replay closes it when its run is done.
type Strategy interface {
	// Add appends the run's next message and its tokens.
	Add(m Message, tokens int) error
	// Context returns the context to send now, blocks in the order sent.
	Context() ([]Block, error)
}

// ErrNoContext is what a Strategy's Context returns, wrapped, when it
// cannot build a context within its budget for the turn: the turn is
// counted in Score.Refused and scored as nothing sent.
var ErrNoContext = errors.New("no context within the budget")

// A Spec names a strategy at a budget.
type Spec struct {
	// Name names the strategy in reports: "recency truncation".
	Name string
	// Budget is the most tokens a context may hold; 0 means no budget.
	Budget int
	// New makes the Strategy of one run, at the budget.
	New func(budget int) Strategy
}

// A Kind is what a Block of a context is.
type Kind uint8

// Kinds of blocks.
const (
	// Kept is a message sent whole.
	Kept Kind = iota + 1
	// Placeholder stands for a message that is not sent (a masked
	// observation), in its place.
	Placeholder
	// Marker is a reference marker ([CTX-REF:…]) standing for evicted
	// messages, which expand back from it.
	Marker
	// Excerpt is text kept verbatim from messages that are not sent whole
	// (lines of evicted observations, or the head and tail of a message
	// too large for the budget). It keeps no message's place: the messages
	// it quotes are in the context only through a marker, if one stands
	// for them.
	Excerpt
	// Text is text sent that is no message, and need not be part of one
	// verbatim: what a turn's assembly writes beside the messages (the
	// arc of the requests no longer shown, a summary's quoted lines with
	// their role and a first line cut short, what the pre-fetch retrieved
	// with its source, lines a window's digest kept, handed over without
	// the messages they come from). It is scored as an excerpt is (string
	// recall, and line recall for the observations' lines it holds whole),
	// but, unlike an excerpt's, its lines are not checked against the
	// messages it quotes: it reframes and cuts them, and does not name
	// them. So the replay cannot prove that it holds nothing of the
	// messages not yet given; the strategy that sends it must build it
	// from messages[:t] alone (the assembly's store holds only the messages
	// given, and its retrieval is kept to the run's own window).
	Text
)

// A Block is one piece of a context.
type Block struct {
	Kind Kind
	// Index is the message kept or stood for (Kept, Placeholder).
	Index int
	// Tokens is what a placeholder, marker, excerpt or text costs. A kept
	// message costs its count from the counts file, whatever Tokens says.
	Tokens int
	// Text is a marker's, an excerpt's or a text's text, as sent. A
	// placeholder's text is not scored.
	Text string
	// Covers are the messages a marker stands for, or those an excerpt's
	// text is taken from: each line of an excerpt is part of one of them,
	// verbatim.
	Covers []int
}

// Reference figures of baselines.py.
const (
	// PlaceholderTokens is what observation masking's placeholder costs:
	// the tokens of "Old environment output: (N lines omitted)".
	PlaceholderTokens = 12
	// KeepObservations is how many of the newest observations observation
	// masking keeps whole.
	KeepObservations = 5
)

// Baselines returns the README's two baselines at each budget, in the
// order of its table: recency truncation at each budget, then observation
// masking of all but the last KeepObservations observations.
func Baselines(budgets ...int) []Spec {
	var specs []Spec
	for _, b := range budgets {
		specs = append(specs, Spec{Name: "recency truncation", Budget: b, New: NewRecency})
	}
	for _, b := range budgets {
		specs = append(specs, Spec{Name: "observation masking (last 5 whole)", Budget: b,
			New: func(budget int) Strategy { return NewMasking(budget, KeepObservations) }})
	}
	return specs
}

// NewRecency returns recency truncation at budget, as baselines.py builds
// it: the system prompt and the task (messages 0 and 1), then the newest
// messages, newest first while they fit the budget with those two, sent in
// order. The first message that does not fit ends the context, even when
// an older one would fit.
func NewRecency(budget int) Strategy { return &baseline{budget: budget} }

// NewMasking returns observation masking at budget, as baselines.py builds
// it: every observation (a user message after the task) but the last keep
// is replaced by a placeholder of PlaceholderTokens, then the messages are
// kept as recency truncation keeps them, a masked one costing its
// placeholder.
func NewMasking(budget, keep int) Strategy { return &baseline{budget: budget, mask: true, keep: keep} }

// baseline is recency truncation, with or without observation masking.
type baseline struct {
	budget int
	mask   bool
	keep   int
	roles  []string
	tokens []int
}

func (s *baseline) Add(m Message, tokens int) error {
	s.roles = append(s.roles, m.Role)
	s.tokens = append(s.tokens, tokens)
	return nil
}

func (s *baseline) Context() ([]Block, error) {
	t := len(s.roles)
	fixed := min(t, 2)
	masked := make([]bool, t)
	if s.mask {
		n := 0 // observations seen, newest first
		for i := t - 1; i >= 2; i-- {
			if s.roles[i] == User {
				n++
				masked[i] = n > s.keep
			}
		}
	}
	cost := func(i int) int {
		if masked[i] {
			return PlaceholderTokens
		}
		return s.tokens[i]
	}
	total := 0
	for i := range fixed {
		total += s.tokens[i]
	}
	from := t // the oldest message kept after the fixed ones
	for i := t - 1; i >= fixed; i-- {
		if total+cost(i) > s.budget {
			break
		}
		total += cost(i)
		from = i
	}
	blocks := make([]Block, 0, fixed+t-from)
	for i := range fixed {
		blocks = append(blocks, Block{Kind: Kept, Index: i})
	}
	for i := from; i < t; i++ {
		if masked[i] {
			blocks = append(blocks, Block{Kind: Placeholder, Index: i, Tokens: PlaceholderTokens})
		} else {
			blocks = append(blocks, Block{Kind: Kept, Index: i})
		}
	}
	return blocks, nil
}

// fullHistory sends every message so far: what every strategy is compared
// with.
type fullHistory struct{ n int }

func (s *fullHistory) Add(Message, int) error {
	s.n++
	return nil
}

func (s *fullHistory) Context() ([]Block, error) {
	blocks := make([]Block, s.n)
	for i := range blocks {
		blocks[i] = Block{Kind: Kept, Index: i}
	}
	return blocks, nil
}
