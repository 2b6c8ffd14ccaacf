package window

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/store"
)

// A SegmentKind says how a window shows a segment's messages.
type SegmentKind uint8

// Segment kinds.
const (
	// Kept messages are shown whole.
	Kept SegmentKind = iota + 1
	// Evicted messages are shown as one reference marker.
	Evicted
	// Clipped messages, too large for the window, are shown as a marker
	// and an excerpt of their head and tail.
	Clipped
)

// A Segment is a run of messages, msgs[From:To], that a window shows one
// way: whole units (see Units) kept, or evicted behind one reference.
type Segment struct {
	Kind     SegmentKind
	From, To int
	// Tokens is what the messages take whole.
	Tokens int
	// Marker is the reference marker shown for Evicted and Clipped
	// segments, and MarkerTokens its size.
	Marker       string
	MarkerTokens int
	// Excerpt is what a Clipped segment shows of its messages.
	Excerpt Excerpt
	// Digest holds the parts of the window's digest shown before an
	// Evicted segment's marker: lines of evicted tool results, each part
	// chosen by one eviction (see Layout.evict).
	Digest []Excerpt
}

// shown is what the segment takes in the window.
func (s *Segment) shown() int {
	if s.Kind == Kept {
		return s.Tokens
	}
	return s.MarkerTokens + s.Excerpt.Tokens + s.digest()
}

// digest is what the segment's digest parts take.
func (s *Segment) digest() int {
	n := 0
	for _, e := range s.Digest {
		n += e.Tokens
	}
	return n
}

// An Excerpt is text a window keeps verbatim from messages it does not
// show whole: each line of Text is part of one of the messages Sources.
type Excerpt struct {
	Text   string
	Tokens int
	// Sources are the messages quoted, in order.
	Sources []int
	// lines are a digest part's lines, in order, so that a
	// re-admission can take out those of the messages it brings back.
	lines []lineRef
}

// MinBudget is the smallest budget a Layout takes: room for a few
// markers, which a window of any conversation can be reduced to.
const MinBudget = 256

// Options are what Layout needs beside the policy.
type Options struct {
	// Policy is the window's policy; its zero fields are PolicyFor's
	// default's.
	Policy Policy
	// Budget is the most tokens the window shows (Limits.Budget).
	Budget int
	// Count counts the tokens of a text in the window's encoding: markers
	// and excerpts are counted with it. Required.
	Count func(string) int
	// RefID names the reference standing for msgs[from:to]. Nil names it
	// "ref-<from>-<to>"; the decisions depend on it only through the
	// marker's size.
	RefID func(from, to int) string
	// Place is the place, from 1, that a marker names for message i: its
	// place in the window's ledger. Nil is i+1.
	Place func(i int) int
}

// A Layout is a window over one conversation: its messages, and how it
// shows them under its budget. Append adds a message and evicts when the
// window crosses its threshold; Pieces is what the window shows. A Layout
// is a pure function of its options and the messages appended: the same
// messages give the same layout, byte for byte, so that a store-backed
// window that appends the same messages makes the same decisions. It is
// not safe for concurrent use.
type Layout struct {
	o     Options
	msgs  []Message
	units []Unit
	segs  []Segment
	ix    *index
	// calls and answered are the tool calls made and answered so far.
	calls, answered map[string]bool
	// stay counts the messages that may never go (see evictable) before
	// each place: stay[i] of msgs[:i].
	stay []int
	// begun: a message other than a system prompt was appended; a system
	// message after it may be evicted.
	begun bool
	// evictions counts the times the window evicted.
	evictions int
	// hold are messages a re-admission brings back, which its eviction
	// may not take (msgs[hold[0]:hold[1]]; none when empty).
	hold [2]int
	// joined are the entity counts of references joinRefs made, by
	// their messages' span: the next join into one adds to its count.
	joined map[[2]int]*entityCount
}

// NewLayout returns an empty window with options o.
func NewLayout(o Options) (*Layout, error) {
	def := PolicyFor(DefaultRole)
	p := &o.Policy
	if p.Strategy == "" {
		p.Strategy = def.Strategy
	}
	if p.Evict == 0 && p.Target == 0 {
		p.Evict, p.Target = def.Evict, def.Target
	}
	if p.MaxRefTokens == 0 {
		p.MaxRefTokens = DefaultMaxRefTokens
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if o.Budget < MinBudget {
		return nil, fmt.Errorf("%w: a budget of %d tokens (the least is %d)", ErrInvalidSettings, o.Budget, MinBudget)
	}
	if o.Count == nil {
		return nil, fmt.Errorf("%w: no token counter", ErrInvalidSettings)
	}
	if o.RefID == nil {
		o.RefID = func(from, to int) string { return fmt.Sprintf("ref-%d-%d", from, to) }
	}
	return &Layout{o: o, ix: newIndex(), calls: map[string]bool{}, answered: map[string]bool{}, stay: []int{0}}, nil
}

// Append adds the conversation's next message and lays the window out
// again: past its threshold, the window evicts (see Evict). A message that
// breaks the conversation (a result without its call, a call id used
// twice) is refused and the window left as it was.
func (l *Layout) Append(m Message) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if err := l.pair(&m, len(l.msgs)); err != nil {
		return err
	}
	msgs := append(l.msgs, m)
	// Only the last unit, if a call in it waits, can take the new
	// message; the units before it stay as they are.
	from, k := len(msgs)-1, len(l.units)
	if k > 0 && l.units[k-1].Open {
		from, k = l.units[k-1].From, k-1
	}
	tail, err := Units(msgs[from:])
	if err != nil {
		return err // pair let through what Units refuses: a bug
	}
	for i := range tail {
		tail[i].From, tail[i].To = tail[i].From+from, tail[i].To+from
	}
	l.msgs, l.units = msgs, append(l.units[:k], tail...)
	n := l.stay[len(l.stay)-1]
	if !evictable(msgs[len(msgs)-1:], l.o.Policy, !l.begun) {
		n++
	}
	l.begun = l.begun || m.Role != RoleSystem
	l.stay = append(l.stay, n)
	for _, b := range m.Blocks {
		switch b.Type {
		case BlockToolUse:
			l.calls[b.ID] = true
		case BlockToolResult:
			l.answered[b.ToolUseID] = true
		}
	}
	l.ix.add(len(msgs)-1, &msgs[len(msgs)-1])
	l.resegment()
	l.clipNewest()
	if n := l.Tokens(); n > l.high() || n > l.o.Budget {
		l.evict()
	}
	return nil
}

// pair checks that message i, the conversation's next, keeps the pairing
// of tool calls and results as Units requires of the whole conversation.
func (l *Layout) pair(m *Message, i int) error {
	seen := map[string]bool{}
	for _, b := range m.Blocks {
		switch b.Type {
		case BlockToolUse:
			if l.calls[b.ID] || seen[b.ID] {
				return &PairingError{Message: i, CallID: b.ID, Problem: fmt.Sprintf("tool call id %q is used twice", b.ID)}
			}
			seen[b.ID] = true
		case BlockToolResult:
			switch {
			case !l.calls[b.ToolUseID] && !seen[b.ToolUseID]:
				return &PairingError{Message: i, CallID: b.ToolUseID, Problem: fmt.Sprintf("a result for tool call %q, which no earlier message makes", b.ToolUseID)}
			case l.answered[b.ToolUseID] || seen["answer "+b.ToolUseID]:
				return &PairingError{Message: i, CallID: b.ToolUseID, Problem: fmt.Sprintf("tool call %q is answered twice", b.ToolUseID)}
			}
			seen["answer "+b.ToolUseID] = true
		}
	}
	return nil
}

// interrupts reports a call that m, as the conversation's next message,
// would leave without its result for good: m is a user's prompt (a user's
// message with no tool results), and a call waits with no prompt after
// it. No vendor's API takes a prompt between a call and its results, and
// a call left so would hold the window's units open to its end. Messages
// between a call and its results otherwise (parallel calls, one item each
// in the Responses API; reasoning) are left alone. A call left so in a
// ledger written before this check waits for nothing.
func (l *Layout) interrupts(m *Message) (string, bool) {
	if !isPrompt(m) {
		return "", false
	}
	k := len(l.units)
	if k == 0 || !l.units[k-1].Open {
		return "", false
	}
	for i := len(l.msgs) - 1; i >= l.units[k-1].From; i-- {
		msg := &l.msgs[i]
		if isPrompt(msg) {
			return "", false
		}
		for _, b := range msg.Blocks {
			if b.Type == BlockToolUse && !l.answered[b.ID] {
				return b.ID, true
			}
		}
	}
	return "", false
}

// isPrompt reports whether m is a user's prompt: a user's message that
// carries no tool results.
func isPrompt(m *Message) bool {
	return m.Role == RoleUser && len(m.Results()) == 0
}

// clipNewest clips the newest unit when it is larger than the policy's
// Clip share of the room, or when a call of the agent's in it is larger
// than ClipCallTokens: the window shows a marker and its head and tail
// from the start, within that share (a large call: its head and tail
// within ClipCallTokens, its results whole beside it).
func (l *Layout) clipNewest() {
	p := l.o.Policy
	if p.Clip <= 0 && p.ClipCallTokens <= 0 || len(l.segs) == 0 {
		return
	}
	s := &l.segs[len(l.segs)-1]
	if s.Kind != Kept || !l.evictable(s) {
		return
	}
	_, room := l.room()
	limit := int(p.Clip * float64(room))
	if p.Clip > 0 && s.Tokens > limit {
		c := *s
		c.Kind = Clipped
		l.mark(&c)
		// Clipping makes a large message small. A message no larger
		// than its own marker stays whole, and so does one that fits
		// the room whole when its marker alone would take the share:
		// in a window its system prompt nearly fills, a short prompt
		// clipped was a marker larger than itself, which pushed the
		// window over its budget and the system prompt out.
		if c.MarkerTokens >= s.Tokens || c.MarkerTokens >= limit && s.Tokens <= room {
			return
		}
		c.Excerpt = l.headTail(c.From, c.To, limit-c.MarkerTokens)
		*s = c
		return
	}
	if p.ClipCallTokens <= 0 {
		return
	}
	share := make(map[int]int, s.To-s.From)
	allow, clip := 0, false
	for i := s.From; i < s.To; i++ {
		m := &l.msgs[i]
		share[i] = m.Tokens + 1
		if m.Role == RoleAssistant && m.Tokens > p.ClipCallTokens && hasCall(m) {
			share[i], clip = p.ClipCallTokens, true
		}
		allow += share[i]
	}
	if !clip {
		return
	}
	c := *s
	c.Kind = Clipped
	l.mark(&c)
	if c.MarkerTokens+allow >= s.Tokens {
		return
	}
	c.Excerpt = l.excerpt(c.From, c.To, share, allow)
	*s = c
}

// hasCall reports whether m calls a tool.
func hasCall(m *Message) bool {
	for _, b := range m.Blocks {
		if b.Type == BlockToolUse {
			return true
		}
	}
	return false
}

// Messages returns the conversation appended so far. The caller must not
// change it.
func (l *Layout) Messages() []Message { return l.msgs }

// Segments returns how the window shows the conversation, in order. The
// caller must not change it.
func (l *Layout) Segments() []Segment { return l.segs }

// Evictions reports how many times the window has evicted.
func (l *Layout) Evictions() int { return l.evictions }

// Tokens is what the window shows, in tokens: kept messages, markers,
// excerpts and the digest.
func (l *Layout) Tokens() int {
	n := 0
	for i := range l.segs {
		n += l.segs[i].shown()
	}
	return n
}

// resegment lays out the messages that came since the last eviction:
// trailing segments that are kept, or that no longer end on a unit (an
// open call has grown), are made again, one kept segment a unit.
func (l *Layout) resegment() {
	endsUnit := func(to int) bool {
		_, ok := slices.BinarySearchFunc(l.units, to, func(u Unit, to int) int { return cmp.Compare(u.To, to) })
		return ok
	}
	for len(l.segs) > 0 {
		s := &l.segs[len(l.segs)-1]
		if s.Kind != Kept && endsUnit(s.To) {
			break
		}
		l.segs = l.segs[:len(l.segs)-1]
	}
	from := 0
	if len(l.segs) > 0 {
		from = l.segs[len(l.segs)-1].To
	}
	k, _ := slices.BinarySearchFunc(l.units, from, func(u Unit, from int) int { return cmp.Compare(u.From, from) })
	for _, u := range l.units[k:] {
		l.segs = append(l.segs, Segment{Kind: Kept, From: u.From, To: u.To, Tokens: l.sum(u.From, u.To)})
	}
}

func (l *Layout) sum(from, to int) int {
	n := 0
	for i := from; i < to; i++ {
		n += l.msgs[i].Tokens
	}
	return n
}

// fixed is what the window can never evict: the system prompt, pinned and
// preserved messages, as they are shown. (Messages a re-admission brings
// back are not: the window makes room for them as for any.)
func (l *Layout) fixed() int {
	n := 0
	for i := range l.segs {
		s := &l.segs[i]
		if !l.held(s) && !l.evictable(s) {
			n += s.shown()
		}
	}
	return n
}

// room is the budget less what the window can never evict; the
// thresholds are shares of it, above the fixed part (see Evict).
func (l *Layout) room() (fixed, room int) {
	fixed = l.fixed()
	return fixed, max(0, l.o.Budget-fixed)
}

func (l *Layout) high() int {
	fixed, room := l.room()
	return fixed + int(l.o.Policy.Evict*float64(room))
}

// evictable reports whether a segment's messages may leave the window:
// none is the system prompt, pinned or of a preserved type, no call waits
// for its result, and a re-admission does not bring them back.
func (l *Layout) evictable(s *Segment) bool {
	if s.To == len(l.msgs) && len(l.units) > 0 && l.units[len(l.units)-1].Open || l.held(s) {
		return false
	}
	return l.stay[s.To]-l.stay[s.From] == 0
}

// evict lays the window out anew past its threshold, in four steps:
//
//  1. What may go leaves, until the window would hold at most the target
//     with its digest's share: by the strategy (the oldest units; whole
//     topics or tasks), all but what the policy keeps (the newest KeepUnits
//     units, steps of the agent, or the last KeepTurns turns); and when
//     the window is still over its budget, those too, oldest first, down
//     to the target, all but the newest unit and, when the window can
//     then end under its threshold (see keepTask: joining the references
//     after it, clipping the newest step), the prompt that opens the
//     newest turn. An evicted unit joins the reference before it when the
//     two are adjacent and hold at most MaxRefTokens together; a
//     reference is one marker, so the markers stay few.
//  2. The digest gains a part, shown before the newest reference's
//     marker: lines of tool results no longer shown whole that hold what
//     the agent learned from them (see chooseDigest), within the policy's
//     Digest share of the room; past it, the digest is chosen again.
//  3. A unit the window cannot show whole (the newest, or a task larger
//     than the budget) is clipped: a marker and its head and tail.
//  4. Nothing is over the budget.
//
// Segments before the first one it changes stay as they were, byte for
// byte: the markers of earlier evictions are a stable prefix for a
// provider's prompt cache.
func (l *Layout) evict() {
	l.evictions++
	p := l.o.Policy
	fixed, room := l.room()
	target := fixed + int(p.Target*float64(room))
	digestShare := int(p.Digest * float64(room))

	// Candidates, oldest first: kept and clipped segments that may go.
	var cand []int
	for i := range l.segs {
		if s := &l.segs[i]; s.Kind != Evicted && l.evictable(s) {
			cand = append(cand, i)
		}
	}
	keep := l.keep(cand)
	digest := 0
	for i := range l.segs {
		digest += l.segs[i].digest()
	}
	shown := l.Tokens() - digest
	goal := target - digestShare
	// Step 1: by the strategy, to the target, then to the budget taking
	// the kept units but the newest, oldest first. By recency, what goes
	// to the target is the oldest candidates, decided in order with the
	// markers' real sizes; by topic or task, whole topics or tasks, chosen
	// before with the markers' sizes estimated.
	chosen := l.byStrategy(cand, keep, shown-goal)
	// The prompt that opens the newest turn, kept by the policy, is the
	// last of the kept units to go over the budget, when the window then
	// ends under its threshold: an agent deep in a tool loop was left with
	// its newest steps and no task. (Kept past the threshold, it would
	// have the window evict again at the next message.) When it does not
	// end under it, keepTask joins the references after the prompt and
	// clips the newest step to bring it there, so long as the step keeps
	// TaskClipFloor of the room; only past that does the prompt go.
	spare := -1
	for _, i := range cand[:max(0, len(cand)-1)] {
		if keep[i] && isPrompt(&l.msgs[l.segs[i].From]) {
			spare = i
		}
	}
	high := l.high()
	out, evicted := l.evictPass(cand, keep, chosen, shown, goal, spare)
	// The digest takes what the budget leaves, but for a window clipped
	// to keep its task, which it would take back over its threshold.
	ceiling := l.o.Budget
	if spare >= 0 && l.shownOf(out) > high {
		task := l.segs[spare].From
		alt, altEvicted := l.evictPass(cand, keep, chosen, shown, goal, -1)
		saved := l.segs
		l.segs = out
		switch {
		case !taskGoes(alt, task) || !l.keepTask(high, task):
			l.segs = saved
			out, evicted = alt, altEvicted
		default:
			ceiling, out = high, l.segs
		}
	}
	l.segs = out

	// Step 3 before 2: what must be clipped takes its room first, the
	// digest what is left of its share.
	l.clip()
	last := -1
	for i := range l.segs {
		if l.segs[i].Kind == Evicted {
			last = i
		}
	}
	if last < 0 || !evicted {
		return
	}
	free := ceiling - l.Tokens()
	part := min(free, digestShare-digest, int(PartMax*float64(digestShare)))
	if part < int(CompactAt*float64(digestShare)) {
		// The parts have filled the share: the digest is chosen again,
		// whole, as one part, to CompactTo of it.
		for i := range l.segs {
			l.segs[i].Digest = nil
		}
		free = ceiling - l.Tokens()
		part = min(free, int(CompactTo*float64(digestShare)))
	}
	if ex := l.chooseDigest(part); ex.Text != "" {
		l.segs[last].Digest = append(l.segs[last].Digest, ex)
	}
}

// TaskClipFloor is the least share of the room the newest step keeps
// when it is clipped so that the window can keep its task (see keepTask):
// below it, the prompt goes rather than the step.
const TaskClipFloor = 0.25

// keepTask brings the window down to high tokens and keeps the prompt at
// task (a message's position), when the window would otherwise evict it to
// get there, and reports whether it could. It joins the references
// between the task and the newest step, the newest first (the prefix
// before them stays as it was), and when that is not enough, clips the
// step, so long as the step keeps TaskClipFloor of the room; when it would
// keep less, it reports false, and the caller lays the window out again
// without the task.
//
// In a small room (a harness's system prompt and tool schemas fill most
// of its window) the task and a large tool result did not fit under the
// threshold together, and the task went: an agent with a result and no
// task. (The default role's Clip share clips the newest result at once; a
// tool loop's policy has none.) Deep in such a loop, the markers of its
// references also grew until even a clipped step did not fit beside the
// task, and a re-admission that left the window over its threshold sent
// a task of a dozen tokens away for nothing.
//
// The step is the newest but for a call waiting for its result, which may
// not go: a proxy appends the model's call before the harness sends its
// result, and the window, clipped to its threshold, passes it by the
// call's tokens; the step before the call, clipped already, is clipped
// further.
//
// Only the prompt that opens the newest turn (taskAt) is the task: a
// policy that keeps turns (KeepTurns) keeps the prompts of older turns
// too, and when the user's new prompt came, the one before it was taken
// for the task and the new one, the newest candidate, for the step, and
// clipped to keep the old.
func (l *Layout) keepTask(high, task int) bool {
	if task != l.taskAt() {
		return false
	}
	k := len(l.segs) - 1
	for k >= 0 && l.segs[k].Kind == Kept && !l.evictable(&l.segs[k]) && l.segs[k].From > task {
		k--
	}
	if k < 0 || l.segs[k].From <= task {
		return false
	}
	total := l.Tokens()
	for i := k - 2; i >= 0 && total > high; i-- {
		if a, b := &l.segs[i], &l.segs[i+1]; a.Kind == Evicted && b.Kind == Evicted && a.To == b.From && a.From > task && !l.held(a) && !l.held(b) {
			total += l.join(i)
			k--
		}
	}
	if total <= high {
		return true
	}
	s := &l.segs[k]
	if s.Kind == Evicted || !l.evictable(s) {
		return false
	}
	_, room := l.room()
	c := *s
	c.Kind = Clipped
	l.mark(&c)
	allow := s.shown() - c.MarkerTokens - c.digest() - (total - high)
	if allow < int(TaskClipFloor*float64(room)) {
		return false
	}
	c.Excerpt = l.headTail(c.From, c.To, allow)
	*s = c
	return true
}

// taskGoes reports whether segs evict the message at task.
func taskGoes(segs []Segment, task int) bool {
	for i := range segs {
		if segs[i].From <= task && task < segs[i].To {
			return segs[i].Kind == Evicted
		}
	}
	return false
}

// evictPass is step 1 of evict over the candidates cand: what the
// strategy chose (chosen; by recency, what keep does not hold, while the
// window shows more than goal), and over the budget the kept units too,
// oldest first, all but the newest and spare (none when negative). shown
// is what the window shows but its digest. It returns the segments and
// whether any was evicted.
func (l *Layout) evictPass(cand []int, keep, chosen []bool, shown, goal, spare int) (out []Segment, evicted bool) {
	p := l.o.Policy
	out = make([]Segment, 0, len(l.segs))
	k := 0
	squeeze := false
	// alone are the segments evicted on their own, by their place in
	// out, as they were before.
	alone := map[int]Segment{}
	for i := range l.segs {
		s := l.segs[i]
		if s.Kind == Evicted || !l.evictable(&s) {
			out = append(out, s)
			continue
		}
		toGoal := !keep[i] && shown > goal
		if chosen != nil {
			toGoal = chosen[i]
		}
		// Over the budget, the kept units go too, oldest first, down to
		// the target (one large step, as any eviction), all but the newest.
		squeeze = squeeze || k < len(cand)-1 && shown > l.o.Budget
		go1 := toGoal || squeeze && k < len(cand)-1 && shown > goal && i != spare
		k++
		if !go1 {
			out = append(out, s)
			continue
		}
		was := s
		shown -= s.shown()
		s.Excerpt = Excerpt{}
		s.Digest = nil
		if n := len(out); n > 0 && out[n-1].Kind == Evicted && out[n-1].To == s.From && out[n-1].Tokens+s.Tokens <= p.MaxRefTokens {
			evicted = true
			prev := &out[n-1]
			shown -= prev.MarkerTokens
			prev.To, prev.Tokens = s.To, prev.Tokens+s.Tokens
			l.mark(prev)
			shown += prev.MarkerTokens
			continue
		}
		s.Kind = Evicted
		l.mark(&s)
		shown += s.MarkerTokens
		alone[len(out)] = was
		out = append(out, s)
	}
	// A segment evicted on its own that no later one joined, and whose
	// marker is no smaller than what it showed, stays as it was: a reply
	// of a few words between two prompts the policy preserves took its
	// marker's 30 tokens, and in a small window pushed it over its budget.
	for k, was := range alone {
		if out[k].To == was.To && out[k].shown() >= was.shown() {
			out[k] = was
			continue
		}
		evicted = true
	}
	return out, evicted
}

// shownOf is what segments show, their digests included.
func (l *Layout) shownOf(segs []Segment) int {
	n := 0
	for i := range segs {
		n += segs[i].shown()
	}
	return n
}

// The digest grows by a part at each eviction, of at most PartMax of the
// policy's Digest share, until the share left for a new part is under
// CompactAt of it; then the digest is chosen again, whole, as one part of
// CompactTo of the share, so that parts can be added again for a while
// without rewriting it. (Compacting to most of the share rewrites much
// and soon again; measured on the shared trajectories, these rewrite
// least for the recall they keep.)
const (
	CompactAt = 0.1
	CompactTo = 0.4
	PartMax   = 0.5
)

// mark renders the marker of an evicted or clipped segment.
func (l *Layout) mark(s *Segment) {
	s.Marker = ctxref.Render(l.markerOf(s, l.topEntities(s.From, s.To, l.o.Policy.MarkerEntities)))
	s.MarkerTokens = l.o.Count(s.Marker)
}

// markerOf is the marker of a segment: its span, in messages counted
// from 1, its tokens, when its latest message came, the entities its
// assistant messages name most (ents, topEntities of it), and the first
// line of its user prompts as query hints (each as the policy says).
func (l *Layout) markerOf(s *Segment, ents []string) ctxref.Marker {
	m := ctxref.Marker{ID: l.o.RefID(s.From, s.To), Type: store.RefConversation,
		TurnFrom: s.From + 1, TurnTo: s.To, Tokens: s.Tokens}
	if allTools(l.msgs[s.From:s.To]) {
		m.Type = store.RefToolResults // as the reference says (laidOut.refID)
	}
	if l.o.Place != nil {
		m.TurnFrom, m.TurnTo = l.o.Place(s.From), l.o.Place(s.To-1)
	}
	m.Entities = ents
	if l.o.Policy.MarkerTime {
		m.Time = l.msgs[s.To-1].Time
	}
	for i := s.From; i < s.To && len(m.Hints) < l.o.Policy.MarkerHints; i++ {
		if l.msgs[i].opensTurn() {
			if h := firstLine(&l.msgs[i]); h != "" {
				m.Hints = append(m.Hints, h)
			}
		}
	}
	return m
}

// firstLine is the first line of a message's text that is not blank,
// in a block that is not one tagged element a harness adds to the user's
// words (Claude Code's <system-reminder>, Codex's <environment_context>
// message): a marker's hint said "<environment_context>" for the prompt
// it stood for.
func firstLine(m *Message) string {
	for _, b := range m.Blocks {
		text := b.Readable()
		if harnessTag(text) {
			continue
		}
		for line := range strings.SplitSeq(text, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				return line // Render caps it, marking the cut
			}
		}
	}
	return ""
}

// harnessTag reports whether text is one element, <name ...>...</name>,
// as harnesses wrap what they add to a user's message.
func harnessTag(text string) bool {
	t := strings.TrimSpace(text)
	if len(t) < 3 || t[0] != '<' {
		return false
	}
	end := strings.IndexAny(t, " >\n")
	if end < 2 {
		return false
	}
	name := t[1:end]
	word := func(r rune) bool {
		return r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
	}
	if strings.IndexFunc(name, func(r rune) bool { return !word(r) }) >= 0 {
		return false
	}
	return strings.HasSuffix(t, "</"+name+">")
}

// topEntities returns the n entities the assistant named most in
// msgs[from:to], the first named first among equals.
func (l *Layout) topEntities(from, to, n int) []string {
	if n <= 0 {
		return nil
	}
	count := map[string]int{}
	var order []string
	for i := from; i < to; i++ {
		if l.msgs[i].Role != RoleAssistant {
			continue
		}
		for _, e := range l.ix.ents[i] {
			if count[e] == 0 {
				order = append(order, e)
			}
			count[e]++
		}
	}
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(count[b], count[a]) })
	return order[:min(n, len(order))]
}

// clip makes the window fit its budget when evicting could not, in this
// order: the newest segments that may go but the newest message's, then
// adjacent references joined past MaxRefTokens (when there are so many
// that their markers alone overflow), then the newest message's segment
// and pinned and preserved messages, newest first, then the
// system prompt, then any adjacent markers joined, clipped ones included
// (when even the markers of what may not be evicted overflow a budget
// that small), and at last runs joined across what may not be evicted
// (see joinAcross). A segment is clipped (shown as a marker with as much of
// its head and tail as fits; a clipped one again, shorter) only when that
// makes it smaller.
func (l *Layout) clip() {
	for pass := range 5 {
		if pass == 1 || pass == 4 {
			l.joinRefs(pass == 4)
			continue
		}
		for i := len(l.segs) - 1; i >= 0; i-- {
			over := l.Tokens() - l.o.Budget
			if over <= 0 {
				return
			}
			s := &l.segs[i]
			if s.Kind == Evicted || l.held(s) || l.clipPass(s) != pass {
				continue
			}
			c := *s
			before := c.shown()
			c.Kind = Clipped
			l.mark(&c)
			if c.MarkerTokens >= before {
				continue
			}
			c.Excerpt = l.headTail(c.From, c.To, before-over-c.MarkerTokens)
			*s = c
		}
	}
	if l.Tokens() > l.o.Budget {
		l.joinAcross()
	}
}

// held reports whether a segment holds messages a re-admission brings
// back.
func (l *Layout) held(s *Segment) bool { return s.From < l.hold[1] && l.hold[0] < s.To }

// Readmit brings the messages of an evicted or clipped segment,
// msgs[from:to], back into the window whole, in their places, and evicts
// what the policy says to make room, never them; the digest parts shown
// before its marker move to the reference before it (or after). It is
// refused with ErrNoRoom, the window unchanged, when they cannot fit in
// the budget, or only by clipping what may never go, or by evicting or
// clipping the newest unit. They may be evicted again by later
// evictions, as any message.
func (l *Layout) Readmit(from, to int) error { return l.readmit(from, to, true) }

// readmitRecorded takes back a re-admission the window's ledger records,
// as it was made: ledgers written before re-admissions kept the newest
// unit whole hold some that evicted or clipped it, and a layout is a
// function of its ledger.
func (l *Layout) readmitRecorded(from, to int) error { return l.readmit(from, to, false) }

// readmitOver takes back, as readmitRecorded does, each evicted or
// clipped run that holds some of msgs[from:to]: a re-admission of the
// ledger whose run the layout evicts otherwise now (a message of the
// window forgotten since joined or split its units). A run that cannot
// fit stays evicted.
func (l *Layout) readmitOver(from, to int) {
	var runs [][2]int
	for _, s := range l.segs {
		if s.Kind != Kept && s.From < to && from < s.To {
			runs = append(runs, [2]int{s.From, s.To})
		}
	}
	for _, r := range runs {
		_ = l.readmitRecorded(r[0], r[1])
	}
}

func (l *Layout) readmit(from, to int, keepNewest bool) error {
	// The counts of joined references are of spans this may split or
	// restore: they are made again as joins need them.
	l.joined = nil
	i := slices.IndexFunc(l.segs, func(s Segment) bool { return s.Kind != Kept && s.From == from && s.To == to })
	if i < 0 {
		return fmt.Errorf("%w: messages %d to %d are not under one reference of the window", ErrInvalid, from+1, to)
	}
	// The newest unit stays whole, as an append never evicts it: a
	// re-admission that could only fit by evicting or clipping it is
	// refused.
	latest := l.newestFrom()
	saved, evictions, squeezed := slices.Clone(l.segs), l.evictions, l.squeezed()
	gone, shown := l.evictedFrom(latest, from, to), l.excerptsFrom(latest, from, to)
	for k := range saved {
		saved[k].Digest = slices.Clip(saved[k].Digest)
	}
	digest := l.segs[i].Digest
	var back []Segment
	for _, u := range l.units {
		if u.From >= from && u.To <= to {
			back = append(back, Segment{Kind: Kept, From: u.From, To: u.To, Tokens: l.sum(u.From, u.To)})
		}
	}
	l.segs = slices.Replace(l.segs, i, i+1, back...)
	if len(digest) > 0 {
		j := slices.IndexFunc(l.segs[i+len(back):], func(s Segment) bool { return s.Kind == Evicted })
		if j >= 0 {
			j += i + len(back)
		}
		for k := i - 1; k >= 0; k-- {
			if l.segs[k].Kind == Evicted {
				j = k
				break
			}
		}
		if j >= 0 {
			l.segs[j].Digest = append(slices.Clip(l.segs[j].Digest), digest...)
		}
	}
	l.unquote(from, to)
	l.hold = [2]int{from, to}
	defer func() { l.hold = [2]int{} }()
	if n := l.Tokens(); n > l.high() || n > l.o.Budget {
		l.evict()
	}
	if n := l.Tokens(); n > l.o.Budget || l.squeezed() > squeezed {
		l.segs, l.evictions = saved, evictions
		return fmt.Errorf("%w: messages %d to %d take %d tokens, and the window would hold %d with nothing more it may evict, over its budget of %d",
			ErrNoRoom, from+1, to, l.sum(from, to), n, l.o.Budget)
	}
	if n := l.evictedFrom(latest, from, to) - gone; keepNewest && (n > 0 || l.excerptsFrom(latest, from, to) < shown) {
		l.segs, l.evictions = saved, evictions
		return fmt.Errorf("%w: messages %d to %d take %d tokens, and making room for them would evict or clip the newest messages, which a window keeps as they are shown",
			ErrNoRoom, from+1, to, l.sum(from, to))
	}
	return nil
}

// unquote takes the lines of msgs[from:to], which a re-admission brings
// back whole, out of the digest: a part left with no line goes. The
// segments' parts are replaced, not changed, so that a refused
// re-admission can put back the ones it saved.
func (l *Layout) unquote(from, to int) {
	for i := range l.segs {
		s := &l.segs[i]
		var parts []Excerpt
		changed := false
		for _, e := range s.Digest {
			lines := slices.DeleteFunc(slices.Clone(e.lines), func(r lineRef) bool { return r.Msg >= from && r.Msg < to })
			switch {
			case len(lines) == len(e.lines):
				parts = append(parts, e)
				continue
			case len(lines) > 0:
				parts = append(parts, l.excerptOf(lines))
			}
			changed = true
		}
		if changed {
			s.Digest = parts
		}
	}
}

// newestFrom is the first message of the window's newest unit, which no
// eviction takes.
func (l *Layout) newestFrom() int {
	if len(l.units) == 0 {
		return len(l.msgs)
	}
	return l.units[len(l.units)-1].From
}

// evictedFrom counts the messages from the index first on, but for
// those from from to to, that the window does not show whole: under a
// reference, or clipped.
func (l *Layout) evictedFrom(first, from, to int) int {
	n := 0
	for _, s := range l.segs {
		if s.Kind == Kept {
			continue
		}
		for j := max(s.From, first); j < s.To; j++ {
			if j < from || j >= to {
				n++
			}
		}
	}
	return n
}

// excerptsFrom is what the window shows of the messages from the index
// first on that it does not show whole, but for those from from to to:
// the excerpts of clipped ones. A newest unit clipped already may not be
// clipped further, nor put under a reference, to make room.
func (l *Layout) excerptsFrom(first, from, to int) int {
	n := 0
	for _, s := range l.segs {
		if s.Kind != Kept && s.To > first && (s.To <= from || s.From >= to) {
			n += s.Excerpt.Tokens
		}
	}
	return n
}

// squeezed counts the messages that may never go (the system prompt,
// pinned and preserved messages) that the window does not show whole.
func (l *Layout) squeezed() int {
	n := 0
	for i := range l.segs {
		s := &l.segs[i]
		if s.Kind == Kept {
			continue
		}
		for j := s.From; j < s.To; j++ {
			if l.stay[j+1] > l.stay[j] {
				n++
			}
		}
	}
	return n
}

// clipPass is the pass of clip that may clip s: 0 when it may be
// evicted, 2 when it is pinned or preserved, 3 for the system prompt.
func (l *Layout) clipPass(s *Segment) int {
	switch {
	case l.evictable(s) && s.To < len(l.msgs):
		return 0
	case l.evictable(s):
		return 2 // the newest message's, though it starts with a system message
	case l.msgs[s.From].Role == RoleSystem:
		return 3
	}
	// The newest message, which an append never evicts, is clipped only
	// once references are joined: else, in a small window, the markers
	// of many references crowded it out.
	return 2
}

// joinRefs joins adjacent references, the oldest first, while the window
// is over its budget: the last resort when their markers alone overflow
// it. Their digest parts stay, in order. With clipped, clipped segments
// join too, their excerpts dropped.
//
// The window's tokens are counted by what each join changes.
func (l *Layout) joinRefs(clipped bool) {
	joins := func(s *Segment) bool { return s.Kind == Evicted || clipped && s.Kind == Clipped }
	total := l.Tokens()
	for i := 0; i+1 < len(l.segs) && total > l.o.Budget; {
		if a, b := &l.segs[i], &l.segs[i+1]; !joins(a) || !joins(b) || a.To != b.From {
			i++
			continue
		}
		total += l.join(i)
	}
}

// joinAcross joins runs of segments into one reference, the oldest
// first, messages that may never go among them, while the window is over
// its budget: the very last resort, when even what may never go
// overflows a budget that small with the markers between it (short
// preserved prompts, each followed by the marker of a short evicted run,
// which no other pass can join). The system prompt is joined only when
// joining all after it was not enough; a re-admission's messages and the
// newest segment never are. Joins that leave the window no smaller are
// undone.
func (l *Layout) joinAcross() {
	first := 0
	if len(l.segs) > 0 && l.msgs[l.segs[0].From].Role == RoleSystem {
		first = 1
	}
	for ; first >= 0; first-- {
		total := l.Tokens()
		saved := slices.Clone(l.segs)
		start := total
		// Down to the policy's target, not just under the budget: joined
		// just under it, the next message went over again, and every
		// message rewrote the window's prefix after the system prompt.
		low := int(l.o.Policy.Target * float64(l.o.Budget))
		for i := first; i+2 < len(l.segs) && total > low; {
			if l.held(&l.segs[i]) || l.held(&l.segs[i+1]) {
				i++
				continue
			}
			total += l.join(i)
		}
		if total >= start {
			l.segs = saved
		}
		if total <= l.o.Budget {
			return
		}
	}
}

// join joins segs[i+1] into segs[i], as one reference shown by its
// marker: their digest parts stay, in order; their excerpts are dropped.
// It returns what the window shows more (less, when negative).
//
// A run of joins into one reference counts its entities as it grows:
// counted again from scratch at every join, a window of a thousand
// references took seconds, in the write transaction of its append.
func (l *Layout) join(i int) int {
	if l.joined == nil {
		l.joined = map[[2]int]*entityCount{}
	}
	a, b := &l.segs[i], &l.segs[i+1]
	ents := l.joined[[2]int{a.From, a.To}]
	delete(l.joined, [2]int{a.From, a.To})
	if ents == nil {
		ents = &entityCount{count: map[string]int{}}
		ents.add(l, a.From, a.To)
	}
	ents.add(l, b.From, b.To)
	l.joined[[2]int{a.From, b.To}] = ents
	before := a.shown() + b.shown()
	a.Kind, a.Excerpt = Evicted, Excerpt{}
	a.To, a.Tokens = b.To, a.Tokens+b.Tokens
	a.Digest = append(a.Digest, b.Digest...)
	a.Marker = ctxref.Render(l.markerOf(a, ents.top(l.o.Policy.MarkerEntities)))
	a.MarkerTokens = l.o.Count(a.Marker)
	l.segs = slices.Delete(l.segs, i+1, i+2)
	return a.shown() - before
}

// entityCount counts the entities the assistant names in a run of
// messages, as topEntities does, so that a growing run is counted once.
type entityCount struct {
	count map[string]int
	order []string
}

func (c *entityCount) add(l *Layout, from, to int) {
	for i := from; i < to; i++ {
		if l.msgs[i].Role != RoleAssistant {
			continue
		}
		for _, e := range l.ix.ents[i] {
			if c.count[e] == 0 {
				c.order = append(c.order, e)
			}
			c.count[e]++
		}
	}
}

// top is topEntities of the run counted: the n counted most, the first
// counted first among equals, picked without sorting them all.
func (c *entityCount) top(n int) []string {
	var out []string
	for _, e := range c.order {
		k := len(out)
		for k > 0 && c.count[out[k-1]] < c.count[e] {
			k--
		}
		if k < n {
			out = slices.Insert(out, k, e)
			out = out[:min(len(out), n)]
		}
	}
	return out
}

// headTail is an excerpt of msgs[from:to] of at most allow tokens. The
// allowance is shared among the messages, the smaller ones first, so that
// a short call stays whole beside a huge result; each message then shows
// whole lines from its start, up to half of its share, and from its end,
// a line longer than what is left being cut.
func (l *Layout) headTail(from, to, allow int) Excerpt {
	if allow <= 0 {
		return Excerpt{}
	}
	order := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(l.msgs[a].Tokens, l.msgs[b].Tokens) })
	share := make(map[int]int, len(order))
	left := allow
	for k, i := range order {
		give := min(l.msgs[i].Tokens+1, left/(len(order)-k))
		share[i] = give
		left -= give
	}
	return l.excerpt(from, to, share, allow)
}

// excerpt is an excerpt of msgs[from:to] of at most allow tokens, each
// message showing lines of its head and tail within its share.
func (l *Layout) excerpt(from, to int, share map[int]int, allow int) Excerpt {
	var pieces []string
	var src []int
	for i := from; i < to; i++ {
		n := len(pieces)
		var texts []string
		for _, b := range l.msgs[i].Blocks {
			if t := b.Readable(); t != "" {
				texts = append(texts, t)
			}
		}
		for _, t := range texts {
			pieces = append(pieces, l.headTailText(t, share[i]/len(texts))...)
		}
		if len(pieces) > n {
			src = append(src, i)
		}
	}
	ex := Excerpt{Text: strings.Join(pieces, "\n"), Sources: src}
	ex.Tokens = l.o.Count(ex.Text)
	for ex.Tokens > allow && len(ex.Text) > 0 { // pieces counted apart can differ at their edges
		ex.Text = cutTokens(ex.Text, allow-(ex.Tokens-allow)-1, l.o.Count)
		ex.Tokens = l.o.Count(ex.Text)
	}
	if ex.Text == "" {
		return Excerpt{}
	}
	return ex
}

// headTailText returns lines of text, whole or cut, of at most allow
// tokens counted apart with their line breaks: from the start up to half
// of it, then from the end.
func (l *Layout) headTailText(text string, allow int) []string {
	if allow <= 0 {
		return nil
	}
	if len(text) <= 16*allow && l.o.Count(text)+1 <= allow {
		return []string{text}
	}
	used := 0
	take := func(line string, budget int) (string, bool) {
		if len(line) <= 16*(budget-used) { // else surely too long: cut it
			if n := l.o.Count(line) + 1; used+n <= budget {
				used += n
				return line, true
			}
		}
		cut := cutTokens(line, budget-used-1, l.o.Count)
		if cut == "" {
			return "", false
		}
		used += l.o.Count(cut) + 1
		return cut, true
	}
	var head, tail []string
	lo, hi := 0, len(text) // text[lo:hi] is what is not taken
	for lo < hi {
		end := strings.IndexByte(text[lo:hi], '\n')
		if end < 0 {
			end = hi
		} else {
			end += lo
		}
		line, ok := take(text[lo:end], allow/2)
		if !ok {
			break
		}
		head = append(head, line)
		if len(line) < end-lo {
			lo = end
			break
		}
		lo = end + 1
	}
	for lo < hi {
		start := strings.LastIndexByte(text[lo:hi], '\n') + 1 + lo
		line, ok := take(text[start:hi], allow)
		if !ok {
			break
		}
		tail = append(tail, line)
		if len(line) < hi-start {
			break
		}
		hi = max(lo, start-1)
	}
	slices.Reverse(tail)
	return append(head, tail...)
}

// cutTokens returns the longest prefix of s, cut at a character, of at
// most n tokens.
func cutTokens(s string, n int, count func(string) int) string {
	if n <= 0 {
		return ""
	}
	lo, hi := 0, min(len(s), 16*n) // a token is rarely over 16 bytes
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if count(validPrefix(s, mid)) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return validPrefix(s, lo)
}

// validPrefix returns s[:n] less a character cut in two at its end.
func validPrefix(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// A PieceKind is what a Piece of a window is.
type PieceKind uint8

// Piece kinds.
const (
	// PieceMessage is a message shown whole.
	PieceMessage PieceKind = iota + 1
	// PieceMarker is a reference marker standing for msgs[From:To].
	PieceMarker
	// PieceExcerpt is text kept verbatim from messages not shown whole.
	PieceExcerpt
)

// A Piece is one piece of what a window shows.
type Piece struct {
	Kind PieceKind
	// From and To are the messages shown (one, for PieceMessage) or stood
	// for.
	From, To int
	Text     string
	// Tokens is the item's size: the message's, or its text's.
	Tokens int
	// Sources are the messages an excerpt quotes.
	Sources []int
}

// Pieces returns what the window shows, in order: each segment (a message
// kept; the digest parts and marker of an evicted segment; the marker and
// excerpt of a clipped one).
func (l *Layout) Pieces() []Piece {
	var pieces []Piece
	for i := range l.segs {
		s := &l.segs[i]
		switch s.Kind {
		case Kept:
			for j := s.From; j < s.To; j++ {
				pieces = append(pieces, Piece{Kind: PieceMessage, From: j, To: j + 1, Tokens: l.msgs[j].Tokens})
			}
		default:
			for _, e := range s.Digest {
				pieces = append(pieces, excerptPiece(e))
			}
			pieces = append(pieces, Piece{Kind: PieceMarker, From: s.From, To: s.To, Text: s.Marker, Tokens: s.MarkerTokens})
			if s.Excerpt.Text != "" {
				pieces = append(pieces, excerptPiece(s.Excerpt))
			}
		}
	}
	return pieces
}

func excerptPiece(e Excerpt) Piece {
	return Piece{Kind: PieceExcerpt, From: e.Sources[0], To: e.Sources[len(e.Sources)-1] + 1, Text: e.Text, Tokens: e.Tokens, Sources: e.Sources}
}
