package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// An Assembler builds turns' contexts over the windows of a store: each
// layer filled from its source (the window's system prompt and messages,
// the caller's standing instructions and briefing, engram's pre-fetch for
// the turn's message) within what the negotiation gave it.
type Assembler struct {
	Engine  *engine.Engine
	Windows *window.Manager
	// Summarizer makes the rolling summaries of multi-level histories;
	// nil quotes the messages (extractive), with no model.
	Summarizer Summarizer
	// SummaryTimeout bounds the Summarizer's work on one window's
	// summaries (zero: DefaultSummaryTimeout).
	SummaryTimeout time.Duration
	Logger         *slog.Logger
	// OneTurn says the Assembler serves one turn and its process ends (a
	// command): nothing is laid out ahead for the turns to come (see
	// prepare).
	OneTurn bool

	mu sync.Mutex
	// lines caches the tokens of the lines the Assembler shows (the arc's,
	// summaries', markers), which stay the same from turn to turn, by
	// encoding and line; scores the static part of messages' scores.
	lines  map[countKey]int
	scores map[scoreKey]float64
	quotes map[scoreKey]quotedLine
	// pending are the windows a Summarizer works on in the background,
	// failures why its last work on a window failed.
	pending  map[store.WindowKey]bool
	failures map[store.WindowKey]string
	// preparing are the windows whose next zone is laid out in the
	// background (see prepare).
	preparing map[store.WindowKey]bool
	// sums are windows' rolling summaries as last read.
	sums map[store.WindowKey]cachedSummaries
	// purges is the store's purge count when the caches above were
	// last checked: a forget or a redaction, in any process, empties
	// them, so that nothing removed is shown from memory.
	purges uint64
	wg     sync.WaitGroup
}

// countKey is what a count is kept under: the encoding, what was counted
// of the text (see cached's callers), and the text.
type countKey struct {
	enc  *tokens.Encoding
	kind byte
	text string
}

// maxCachedLines bounds the lines an Assembler keeps counted.
const maxCachedLines = 1 << 16

// countLine counts a line of the arc, with its line break.
func (a *Assembler) countLine(enc *tokens.Encoding, line string) int {
	return a.cached(enc, 0, line, func() int { return enc.Count(line) + 1 })
}

// cached returns the count of s that count makes, kept under kind
// between turns.
func (a *Assembler) cached(enc *tokens.Encoding, kind byte, s string, count func() int) int {
	k := countKey{enc, kind, s}
	a.mu.Lock()
	n, ok := a.lines[k]
	a.mu.Unlock()
	if ok {
		return n
	}
	n = count()
	a.mu.Lock()
	if a.lines == nil || len(a.lines) >= maxCachedLines {
		a.lines = map[countKey]int{}
	}
	a.lines[k] = n
	a.mu.Unlock()
	return n
}

// arc is the arc's text within n tokens: its header, then as many of its
// lines as fit, oldest first, each counted once, and the whole counted
// exactly from its lines' counts (countLines).
func (a *Assembler) arc(enc *tokens.Encoding, lines []string, n int) textPart {
	if len(lines) == 0 {
		return textPart{}
	}
	used, k := a.countLine(enc, arcHeader), 0
	for k < len(lines) && used+a.countLine(enc, lines[k]) <= n {
		used += a.countLine(enc, lines[k])
		k++
	}
	parts := append(make([]string, 0, k+1), arcHeader)
	parts = append(parts, lines[:k]...)
	for ; k > 0; k-- {
		if c := a.countLines(enc, parts[:k+1]); c <= n {
			return textPart{strings.Join(parts[:k+1], "\n"), c}
		}
	}
	return textPart{}
}

// A Request asks for a turn's context.
type Request struct {
	Key store.WindowKey
	// Message is the turn's user message, not in the window yet. Empty:
	// the window's newest message is the turn's, when it is a user's
	// prompt.
	Message string
	// Tools is what the harness sends beside the messages that engram does
	// not see (tool definitions), in tokens: it leaves the budget.
	Tools int
	// Preferences are standing instructions (L1), Briefing what the
	// archivalist knows of the session's subjects (L2); either may be
	// empty.
	Preferences, Briefing string
	// Brief fetches the archivalist's briefing of the window's session
	// for L2 when Briefing is empty: its standard tier (about 500 tokens),
	// or its full one (about 2,000) in a budget of 32,000 or more. A
	// session the archivalist does not know has none.
	Brief bool
	// Retrieve runs engram's pre-fetch for the message (L5), within
	// Scope (zero: the whole store, every session's memory); in a tool
	// loop's step (a tool_loop window's turn with no Message, the newest
	// message a tool's results) only with RetrieveSteps too: on the agent
	// runs of the bench the pre-fetch found less there than the history
	// it took the room of, and cost more, in every form tried
	// (BENCHMARKS.md, "The trajectories through assembly").
	Retrieve      bool
	RetrieveSteps bool
	Scope         store.Filter
	Depth         Depth
}

// A Turn is an assembled context: the messages to send, in order, and how
// the budget went.
type Turn struct {
	Messages []window.Message
	// Budget is what the messages may take; Tokens what they take.
	Budget, Tokens int
	Plan           Plan
	// Layers says what each layer holds, in tokens: within its
	// allocation, but for retrieval, which takes what the layers before it
	// left of theirs too.
	Layers map[string]int
	// History is how the conversation was shown within its allocation:
	// the compaction's strategy and zones.
	History Compaction
	// Briefing says where L2 came from: "request", the archivalist's tier
	// ("standard", "full"), or why there was none.
	Briefing string
	// Retrieval says whether the pre-fetch ran: "on", "off" (not asked
	// for), or why not ("off: a tool loop's step").
	Retrieval string
	// Sources are the entries the pre-fetch quoted or pointed to, by ID:
	// content from outside the window, which a forget of those entries
	// must find in the turn's snapshot.
	Sources []string
}

// Retrieval's reasons.
const (
	RetrievalOn   = "on"
	RetrievalOff  = "off"
	RetrievalStep = "off: a tool loop's step"
)

// prepare lays out, in the background, the recent zone the window's next
// turns will likely show: the one that starts a chunk later, which the
// zone moves to when its oldest chunk leaves it. Laid out from scratch,
// that view would be most of the work of the turn that moves it; laid out
// now, while the model answers, the turns to come add their messages to
// it as to the zone's own (window.Turn.Prepare).
func (a *Assembler) prepare(win *window.Turn, c *conv) {
	v := c.view
	if a.OneTurn || c.loop || v.to == 0 {
		return
	}
	next := -1
	for _, ch := range c.chunkList {
		if ch[0] > v.from {
			next = ch[0]
			break
		}
	}
	if next < 0 || next >= v.to {
		return
	}
	a.mu.Lock()
	if a.preparing == nil {
		a.preparing = map[store.WindowKey]bool{}
	}
	if a.preparing[c.key] {
		a.mu.Unlock()
		return
	}
	key := c.key
	a.preparing[key] = true
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		if err := win.Prepare(next, v.to, v.n); err != nil {
			a.logger().Warn("lay out the next zone of a window ahead", "window", key.String(), "err", err)
		}
		a.mu.Lock()
		delete(a.preparing, key)
		a.mu.Unlock()
	}()
}

// ErrNoHistoryRoom is returned when the budget leaves the history layer
// less than its minimum: its markers are the way back to everything that
// is not shown, so it is never dropped.
var ErrNoHistoryRoom = errors.New("the budget leaves no room for the conversation's history")

// ErrNoTurn is returned when the window has no turn to assemble: nothing
// for the model to answer, or a tool call still waiting for its result.
var ErrNoTurn = errors.New("no turn to assemble")

// checkPurged empties the Assembler's caches when the store was purged
// (engram forget, engram redact) since they were filled: the summaries
// cached may quote what was removed. It returns the purge count, which
// a turn's caching then checks (cacheable).
func (a *Assembler) checkPurged(ctx context.Context) (uint64, error) {
	n, err := a.Engine.Store().Purges(ctx)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n != a.purges {
		a.purges = n
		a.sums, a.quotes, a.scores, a.lines = nil, nil, nil, nil
	}
	return n, nil
}

// cacheable reports, under a.mu, whether a turn that began at purge
// count n may fill the caches: not if a purge came since, since what it
// read may be gone.
func (a *Assembler) cacheable(n uint64) bool { return a.purges == n }

// Assemble builds the context of a turn. Nothing is lost: what the
// history layer cannot show whole stands under markers that expand, and a
// context never exceeds the budget (the window's, less the tools).
func (a *Assembler) Assemble(ctx context.Context, req Request) (Turn, error) {
	for try := 0; ; try++ {
		n, err := a.checkPurged(ctx)
		if err != nil {
			return Turn{}, err
		}
		t, err := a.assemble(ctx, req, n)
		if err != nil || try > 0 {
			return t, err
		}
		// A forget or a redaction that ran meanwhile may have removed
		// what the turn read: it is laid out again, once.
		if m, err := a.Engine.Store().Purges(ctx); err != nil || m == n {
			return t, err
		}
	}
}

// assemble is Assemble at purge count purges.
func (a *Assembler) assemble(ctx context.Context, req Request, purges uint64) (Turn, error) {
	// The window is read once: its messages, views and markers are of one
	// head. The markers shown are the way back, and cost no write: their
	// IDs name runs of the window's ledger (store.RunRefID), which expand
	// from it in this process or any other.
	win, err := a.Windows.Turn(ctx, req.Key)
	if err != nil {
		return Turn{}, err
	}
	st, msgs, items, err := win.Messages(ctx)
	if err != nil {
		return Turn{}, err
	}
	enc, err := tokens.Get(st.Settings.Encoding)
	if err != nil {
		return Turn{}, err
	}
	if req.Tools < 0 || req.Tools >= st.Budget {
		return Turn{}, fmt.Errorf("%w: %d tokens of tools in a budget of %d", ErrInvalid, req.Tools, st.Budget)
	}
	budget := st.Budget - req.Tools
	pos := make([]int, len(items))
	for i, it := range items {
		pos[i] = it.Pos
	}
	// The system prompt leads the window; the turn's message ends it, or
	// comes with the request.
	from := 0
	for from < len(msgs) && msgs[from].Role == window.RoleSystem {
		from++
	}
	to := len(msgs)
	// A tool loop's window (ToolLoopRole) keeps the layout measured on the
	// agent runs (window.ToolLoopPolicy) for its history, rather than
	// seed 004's compaction, which is for conversations.
	loop := st.Settings.Role == window.ToolLoopRole
	// tail is the turn's message (L7): the request's, the window's newest
	// prompt, or, in a tool loop, the newest call with its results; the
	// query is what the pre-fetch and the key messages are for.
	var tail []window.Message
	var query string
	step := false
	switch {
	case req.Message != "":
		m := window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockText, Text: req.Message}}}
		m.Tokens = messageTokens(enc, &m)
		tail, query = []window.Message{m}, req.Message
	case to > from && msgs[to-1].Role == window.RoleUser && len(msgs[to-1].Results()) == 0:
		to--
		tail, query = msgs[to:], textOf(&msgs[to])
	case to > from && msgs[to-1].Role == window.RoleUser && loop:
		// A step of a tool loop's window: the window's own layout shows it
		// with the rest (clipped, as the window would, when it is too
		// large); the pre-fetch, when asked for steps, is for what the
		// agent is doing.
		step = true
		for i := to - 1; i >= from && query == ""; i-- {
			if msgs[i].Role == window.RoleAssistant {
				query = strings.TrimSpace(textOf(&msgs[i]))
			}
		}
		for i := from; i < to && query == ""; i++ {
			if msgs[i].Role == window.RoleUser && len(msgs[i].Results()) == 0 {
				query = textOf(&msgs[i])
			}
		}
	case to > from && msgs[to-1].Role == window.RoleUser:
		// A step of a tool loop: the call and its results stay together.
		units, err := window.Units(msgs[from:])
		if err != nil {
			return Turn{}, err
		}
		to = from + units[len(units)-1].From
		tail = msgs[to:]
		for i := to - 1; i >= from && query == ""; i-- {
			if msgs[i].Role == window.RoleUser && len(msgs[i].Results()) == 0 {
				query = textOf(&msgs[i])
			}
		}
	default:
		return Turn{}, fmt.Errorf("%w: no message for the turn: the window's newest message is neither a user's prompt nor a tool's result, and the request gives none", ErrNoTurn)
	}
	retrieval := RetrievalOff
	if req.Retrieve {
		retrieval = RetrievalOn
		if step && !req.RetrieveSteps {
			retrieval = RetrievalStep
		}
	}
	retrieve := retrieval == RetrievalOn
	if unanswered(msgs[from:to]) || unanswered(tail) {
		return Turn{}, fmt.Errorf("%w: the window holds a tool call without its result: append the result before the turn's message", ErrNoTurn)
	}
	last := window.Message{}
	for _, m := range tail {
		last.Tokens += m.Tokens
	}
	s := Situation{Budget: budget, Messages: to - from, MessageTokens: last.Tokens, Depth: req.Depth, Continuing: to > from,
		Available: map[string]int{Entities: 0}}
	for _, m := range msgs[:from] {
		s.IdentityTokens += m.Tokens
	}
	for _, m := range msgs[from:to] {
		s.HistoryTokens += m.Tokens
	}
	prefs := textBlock(enc, req.Preferences)
	s.PreferenceTokens = prefs.tokens
	briefing, briefed, err := a.briefing(ctx, req, budget)
	if err != nil {
		return Turn{}, err
	}
	brief := textBlock(enc, briefing)
	s.Available[Topics] = brief.tokens
	if brief.tokens > 0 {
		s.TopicCount = 1
	}
	if !retrieve {
		s.Available[Retrieval] = 0
	}
	// The arc can hold at most the prompts' first lines.
	if lines := arcLines(msgs[from:to], pos[from:to], nil); len(lines) > 0 {
		s.Available[Arc] = a.countLine(enc, arcHeader)
		for _, l := range lines {
			s.Available[Arc] += a.countLine(enc, l)
		}
	} else {
		s.Available[Arc] = 0
	}
	plan, err := Negotiate(budget, Layers(s))
	if err != nil {
		return Turn{}, err
	}
	t := Turn{Budget: budget, Plan: plan, Layers: map[string]int{}, Briefing: briefed, Retrieval: retrieval}
	// A tool loop's history takes what the other layers may take leaves,
	// less a tenth for the pre-fetch: the same from step to step, so that
	// the window's layout, and the prompt cache's prefix, stay stable.
	alloc, reserve := plan.Tokens(History), budget
	if loop {
		reserve = 0
		if retrieve {
			reserve = budget / 10
		}
		// (4: the framing of a message of its own for what leads the turn,
		// when the step's results are not shown whole to carry it.)
		alloc = budget - s.IdentityTokens - plan.Tokens(Preferences) - plan.Tokens(Topics) - plan.Tokens(Arc) - last.Tokens - reserve - 4
	}
	// A history that fits whole is shown whole; else the view needs the
	// room of a window.
	if to > from && alloc < s.HistoryTokens && alloc < window.MinBudget {
		return Turn{}, fmt.Errorf("%w: %d tokens for it, a window needs %d (budget %d, its fixed layers %d)",
			ErrNoHistoryRoom, alloc, window.MinBudget, budget, s.IdentityTokens+s.MessageTokens)
	}
	// L6 first: the arc names what the history does not show. The
	// compaction counts its markers and text as lines; as messages they
	// cost a little framing more, so a history over its allocation so
	// counted is laid out again to less.
	if to > from {
		c := &conv{key: req.Key, win: win, enc: enc, msgs: msgs, items: items, from: from, to: to, loop: loop, purges: purges}
		if q := terms.Content(query); len(q) > 0 {
			c.query = terms.NewCounter(q)
			uniq := map[string]bool{}
			for _, w := range q {
				uniq[w] = true
			}
			c.qterms = len(uniq)
		}
		for n := alloc; ; {
			h, err := a.history(ctx, c, n)
			if err != nil {
				return Turn{}, err
			}
			t.History = h
			used := 0
			for _, m := range a.historyMessages(enc, h.Items) {
				used += m.Tokens
			}
			over := used - alloc
			if over <= 0 {
				break
			}
			if n-over < window.MinBudget {
				return Turn{}, fmt.Errorf("%w: %d tokens for it, its markers alone take %d (budget %d, its fixed layers %d)",
					ErrNoHistoryRoom, alloc, used, budget, s.IdentityTokens+s.MessageTokens)
			}
			n -= over
		}
		a.prepare(win, c)
	}
	// The system message: the window's, then the preferences and the
	// briefing as blocks of their own, each within its allocation.
	var out []window.Message
	sys := window.Message{Role: window.RoleSystem, Tokens: 4} // the framing messageTokens counts
	if from > 0 {
		out = append(out, msgs[:from-1]...)
		sys = msgs[from-1]
		sys.Blocks = append([]window.Block(nil), sys.Blocks...)
	}
	t.Layers[Identity] = s.IdentityTokens
	for _, part := range []struct {
		layer string
		text  textPart
	}{{Preferences, prefs}, {Topics, brief}} {
		if txt := fitOrCut(enc, part.text, plan.Tokens(part.layer)); txt.text != "" {
			sys.Blocks = append(sys.Blocks, window.Block{Type: window.BlockText, Text: txt.text})
			sys.Tokens += txt.tokens
			t.Layers[part.layer] = txt.tokens
		}
	}
	if len(sys.Blocks) > 0 {
		out = append(out, sys)
	}
	hist := a.historyMessages(enc, t.History.Items)
	for _, m := range hist {
		t.Layers[History] += m.Tokens
	}
	out = append(out, hist...)
	// The turn's message, its context first: the arc of what the history
	// does not show, and what the pre-fetch found (after a tool's results,
	// which must lead their message).
	var final window.Message
	synthetic := false
	switch n := len(out); {
	case len(tail) > 0:
		final = tail[len(tail)-1]
	case n > 0 && out[n-1].Role == window.RoleUser && len(out[n-1].Results()) > 0:
		// A tool loop's step, its results shown whole: what leads the turn
		// follows them.
		final, out = out[n-1], out[:n-1]
	default:
		final, synthetic = window.Message{Role: window.RoleUser, Tokens: 4}, true
	}
	final.Blocks = append([]window.Block(nil), final.Blocks...)
	var lead []window.Block
	if arc := a.arc(enc, arcLines(msgs[from:to], pos[from:to], t.History.shown()), plan.Tokens(Arc)); arc.text != "" {
		lead = append(lead, window.Block{Type: window.BlockText, Text: arc.text})
		t.Layers[Arc] = arc.tokens
		final.Tokens += arc.tokens
	}
	// The pre-fetch runs last, within its allocation and whatever the
	// layers before it left of theirs (a history laid out to its target
	// leaves some): retrieval is what reaches back past the history, so it
	// never repeats what the context shows whole.
	if retrieve {
		shownEntries := map[string]bool{}
		shownPos := t.History.shown()
		for i, it := range items {
			if i < from || shownPos[it.Pos] || (req.Message == "" && i >= to) {
				for _, id := range it.EntryIDs {
					shownEntries[id] = true
				}
			}
		}
		used := final.Tokens
		for _, m := range out {
			used += m.Tokens
		}
		for _, m := range tail[:max(len(tail)-1, 0)] {
			used += m.Tokens
		}
		room := budget - used
		if loop {
			room = min(room, reserve)
		}
		if room > 0 && strings.TrimSpace(query) != "" {
			blk, err := a.Engine.Pack(ctx, query, room, req.Scope, shownEntries)
			if err != nil {
				return Turn{}, fmt.Errorf("pre-fetch: %w", err)
			}
			if r := fit(enc, textBlock(enc, blk.Text), room); r.text != "" {
				lead = append(lead, window.Block{Type: window.BlockText, Text: r.text})
				t.Layers[Retrieval] = r.tokens
				final.Tokens += r.tokens
				for _, in := range slices.Concat(blk.Excerpts, blk.Hints) {
					if !slices.Contains(t.Sources, in.EntryID) {
						t.Sources = append(t.Sources, in.EntryID)
					}
				}
			}
		}
	}
	if len(final.Results()) > 0 {
		final.Blocks = append(final.Blocks, lead...)
	} else {
		final.Blocks = append(lead, final.Blocks...)
	}
	t.Layers[Message] = last.Tokens
	out = append(out, tail[:max(len(tail)-1, 0)]...)
	if !synthetic || len(lead) > 0 {
		out = append(out, final)
	}
	t.Messages = out
	for _, m := range out {
		t.Tokens += m.Tokens
	}
	if t.Tokens > budget {
		return Turn{}, fmt.Errorf("assembled %d tokens over a budget of %d: a bug", t.Tokens, budget)
	}
	return t, nil
}

// fullBriefingBudget is the budget from which a turn fetches the
// archivalist's full briefing rather than its standard one.
const fullBriefingBudget = 32000

// briefing is the text of L2 and where it came from: the request's, or
// the archivalist's briefing of the window's session when the request
// asks for it.
func (a *Assembler) briefing(ctx context.Context, req Request, budget int) (string, string, error) {
	switch {
	case req.Briefing != "":
		return req.Briefing, "request", nil
	case !req.Brief:
		return "", "", nil
	}
	arc, err := a.Engine.Archive(ctx)
	if err != nil {
		return "", "", fmt.Errorf("briefing: %w", err)
	}
	tier := archive.Standard
	if budget >= fullBriefingBudget {
		tier = archive.Full
	}
	b, err := arc.Briefing(ctx, req.Key.SessionID, tier, nil)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", "none: the archivalist knows nothing of the session", nil
	case err != nil:
		return "", "", fmt.Errorf("briefing: %w", err)
	}
	return b.Text, string(tier), nil
}

// historyMessages are the messages of a view: its messages, and each run
// of its markers and excerpts as one user message.
func (a *Assembler) historyMessages(enc *tokens.Encoding, items []window.Item) []window.Message {
	var out []window.Message
	var run []string
	flush := func() {
		if len(run) == 0 {
			return
		}
		m := window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockText, Text: strings.Join(run, "\n")}}}
		m.Tokens = 4 + a.countLines(enc, run) // as messageTokens counts it
		out = append(out, m)
		run = nil
	}
	for _, it := range items {
		if it.Message != nil {
			flush()
			out = append(out, *it.Message)
			continue
		}
		run = append(run, it.Marker+it.Excerpt)
	}
	flush()
	return out
}

// countLines counts parts joined by line breaks, exactly as enc counts
// the joined text, from counts of the parts kept between turns (a turn's
// markers and excerpts are mostly the last turn's). A piece of text that
// encodings split off never crosses a line break into the next line's
// text unless that starts with white space or a slash (o200k's
// punctuation takes line breaks and slashes after it), so each part with
// its line break counts on its own; where a part starts otherwise, or is
// empty, the whole is counted (TestCountLines holds this to Count).
func (a *Assembler) countLines(enc *tokens.Encoding, parts []string) int {
	n := 0
	for i, p := range parts {
		if i+1 < len(parts) {
			if next := parts[i+1]; next == "" || p == "" || !joinsApart(next) {
				return enc.Count(strings.Join(parts, "\n"))
			}
			n += a.cached(enc, 1, p, func() int { return enc.Count(p + "\n") })
			continue
		}
		n += a.cached(enc, 2, p, func() int { return enc.Count(p) })
	}
	return n
}

// joinsApart reports whether a text after a line break starts a piece of
// its own in the encodings engram counts with: not with white space or a
// slash.
func joinsApart(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return r != '/' && r != utf8.RuneError && !unicode.IsSpace(r)
}

// textPart is a text and its tokens.
type textPart struct {
	text   string
	tokens int
}

func textBlock(enc *tokens.Encoding, s string) textPart {
	s = strings.TrimSpace(s)
	if s == "" {
		return textPart{}
	}
	return textPart{s, enc.Count(s)}
}

// fit cuts a text to at most n tokens at a line, whole lines kept; a text
// whose first line does not fit gives nothing. Lines are counted once
// each, their sum bounding the count of the lines joined (a line break
// does not merge with its neighbours' tokens in the encodings engram
// counts with, and the result is counted again to be sure).
func fit(enc *tokens.Encoding, p textPart, n int) textPart {
	if p.tokens <= n {
		return p
	}
	lines := strings.Split(p.text, "\n")
	used, k := 0, 0
	for k < len(lines) {
		c := enc.Count(lines[k]) + 1
		if used+c > n {
			break
		}
		used += c
		k++
	}
	for ; k > 0; k-- {
		t := strings.Join(lines[:k], "\n")
		if c := enc.Count(t); c <= n {
			return textPart{t, c}
		}
	}
	return textPart{}
}

// fitOrCut is fit, but for a text whose first line alone is over n: that
// line is cut after its last word within n, and "…" marks the cut, so
// that standing instructions or a briefing written as one long line are
// shortened rather than left out.
func fitOrCut(enc *tokens.Encoding, p textPart, n int) textPart {
	if r := fit(enc, p, n); r.text != "" || p.text == "" {
		return r
	}
	line, _, _ := strings.Cut(p.text, "\n")
	var ends []int // where a cut may go: before each space
	for i := 1; i < len(line); i++ {
		if line[i] == ' ' && line[i-1] != ' ' {
			ends = append(ends, i)
		}
	}
	// The longest prefix that fits: counts grow with the prefix.
	k := sort.Search(len(ends), func(i int) bool { return enc.Count(line[:ends[i]]+"…") > n })
	for ; k > 0; k-- {
		t := line[:ends[k-1]] + "…"
		if c := enc.Count(t); c <= n {
			return textPart{t, c}
		}
	}
	return textPart{}
}

// messageTokens counts a message as a window does: its texts and a small
// framing overhead.
func messageTokens(enc *tokens.Encoding, m *window.Message) int {
	n := 4
	for _, b := range m.Blocks {
		n += enc.Count(b.Text) + enc.Count(string(b.Input)) + enc.Count(b.Name)
	}
	return n
}

// arcHeader leads the arc.
const arcHeader = "The conversation so far, what the user asked that is no longer shown (oldest first):"

// arcLines are the lines of the conversation's arc, extractive: the first
// line of each user prompt the history does not show whole, oldest first
// (a cut keeps the oldest: the task).
func arcLines(msgs []window.Message, pos []int, shown map[int]bool) []string {
	var lines []string
	for i := range msgs {
		m := &msgs[i]
		if m.Role != window.RoleUser || len(m.Results()) > 0 || shown[pos[i]] {
			continue
		}
		if first := firstLine(textOf(m)); first != "" {
			lines = append(lines, "- "+first)
		}
	}
	return lines
}

// textOf joins a message's text blocks, those kept in their vendor's
// form too (Claude Code's newest prompt, its text block marked with
// cache_control).
func textOf(m *window.Message) string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		if bl.Type == window.BlockText {
			b.WriteString(bl.Readable())
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func firstLine(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// unanswered reports whether a tool call in msgs has no result after it.
func unanswered(msgs []window.Message) bool {
	answered := map[string]bool{}
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, b := range msgs[i].Blocks {
			switch b.Type {
			case window.BlockToolResult:
				answered[b.ToolUseID] = true
			case window.BlockToolUse:
				if !answered[b.ID] {
					return true
				}
			}
		}
	}
	return false
}
