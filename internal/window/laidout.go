package window

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// laidOut is a window laid out by a Layout, as of a version of its
// ledger: the Layout is a pure function of the messages and the
// re-admissions, so any process rebuilds the same one from the ledger,
// and the references it makes are written to the store with the append
// (or re-admission) that makes them.
type laidOut struct {
	version int64
	// created is when the window was made: a window forgotten and opened
	// again starts its versions over, and must not find the old layout.
	created time.Time
	layout  *Layout
	// items are the ledger's items, in the Layout's order.
	items []store.WindowItem
	// next is one past the greatest place the window gave (store.Window's
	// Next): past the last item's when the messages after it were
	// forgotten.
	next int
	// markers are the markers of the references it made, by ID, as the
	// window shows them.
	markers map[string]string
	// used is when the cache last gave it out (see keepLayout).
	used time.Time
}

// maxLayouts bounds the layouts a Manager keeps in memory: a window's
// layout holds its messages and their index (about 3 MiB for 200
// messages of a coding session), and a server or proxy sees windows
// without end. Past it, the layout used least recently is dropped, and
// rebuilt from the ledger if its window comes back.
const maxLayouts = 64

// keepLayout caches lo as key's layout; the caller holds m.mu.
func (m *Manager) keepLayout(key store.WindowKey, lo *laidOut) {
	lo.used = time.Now()
	m.layouts[key] = lo
	if len(m.layouts) <= maxLayouts {
		return
	}
	var oldest store.WindowKey
	var at time.Time
	for k, l := range m.layouts {
		if k != key && (at.IsZero() || l.used.Before(at)) {
			oldest, at = k, l.used
		}
	}
	delete(m.layouts, oldest)
	delete(m.views, oldest) // a view holds its layout
}

// errStale says that another process changed the window between reading
// its layout and writing: the append reads it again and retries.
var errStale = errors.New("window changed meanwhile")

// maxAttempts bounds the attempts of a change to a laid-out window that
// other servers keep changing. A variable for tests.
var maxAttempts = 16

// lock holds the window's lock until the function it returns is called:
// the changes to a window and the reads of its layout that one Manager
// makes are one at a time (other processes' changes are found by the
// window's version). Windows share 64 locks.
func (m *Manager) lock(key store.WindowKey) func() {
	h := fnv.New32a()
	h.Write([]byte(key.SessionID))
	h.Write([]byte{0})
	h.Write([]byte(key.AgentID))
	mu := &m.locks[h.Sum32()%uint32(len(m.locks))]
	mu.Lock()
	return mu.Unlock
}

// laidOutFor returns the window's layout as of its current version, from
// the cache or rebuilt from the ledger: its messages appended in order,
// each re-admission taken where it was made.
func (m *Manager) laidOutFor(ctx context.Context, key store.WindowKey, s Settings) (*laidOut, error) {
	w, err := m.eng.Store().Window(ctx, key)
	if err != nil {
		return nil, err
	}
	return m.laidOutAt(ctx, key, s, w)
}

// laidOutAt is laidOutFor with the window's head as just read: a reader
// that read the settings need not read the head again.
func (m *Manager) laidOutAt(ctx context.Context, key store.WindowKey, s Settings, w store.Window) (*laidOut, error) {
	m.mu.Lock()
	lo := m.layouts[key]
	if lo != nil {
		lo.used = time.Now()
	}
	m.mu.Unlock()
	if lo != nil && lo.version == w.Version && lo.created.Equal(w.CreatedAt) {
		return lo, nil
	}
	lo, err := m.rebuild(ctx, key, s, nil)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.keepLayout(key, lo)
	m.mu.Unlock()
	return lo, nil
}

// rebuild lays a window out from its ledger: its messages appended in
// order, each re-admission taken where it was made. With after set, the
// ledger is laid out as the messages after (an append yet to be written,
// which holds a prompt) will leave it: its calls that neither it nor
// after answers are gone (see unpaired).
func (m *Manager) rebuild(ctx context.Context, key store.WindowKey, s Settings, after []Message) (*laidOut, error) {
	w, items, readmits, err := m.eng.Store().WindowLedger(ctx, key)
	if err != nil {
		return nil, err
	}
	// The settings of the ledger as read now: the caller's may be older
	// (read before the window's lock, a settings change since).
	if err := json.Unmarshal(w.Settings, &s); err != nil {
		return nil, fmt.Errorf("window %s: settings: %w", key, err)
	}
	msgs, err := m.messages(ctx, items)
	if err != nil {
		return nil, err
	}
	msgs = unpaired(msgs, after)
	lo := &laidOut{items: items, version: w.Version, created: w.CreatedAt, next: w.Next, markers: map[string]string{}}
	if lo.layout, err = m.newLayout(key, s, lo); err != nil {
		return nil, err
	}
	// readmit takes back the re-admissions made before the item at
	// place next was appended. One whose run the layout no longer evicts
	// as it was (a message forgotten since changed the units, and so the
	// runs, around it) takes back the evicted runs that hold its messages
	// now, so that what was re-admitted stays shown; one that cannot fit
	// is passed over: the layout stays a function of the ledger.
	r := 0
	readmit := func(n, next int) {
		for ; r < len(readmits) && readmits[r].At <= next; r++ {
			from, _ := slices.BinarySearchFunc(items[:n], readmits[r].From, func(it store.WindowItem, pos int) int { return cmp.Compare(it.Pos, pos) })
			to, _ := slices.BinarySearchFunc(items[:n], readmits[r].To, func(it store.WindowItem, pos int) int { return cmp.Compare(it.Pos, pos) })
			if from < to && lo.layout.readmitRecorded(from, to) != nil {
				lo.layout.readmitOver(from, to)
			}
		}
	}
	for i := range msgs {
		readmit(i, items[i].Pos)
		if err := lo.layout.Append(msgs[i]); err != nil {
			return nil, fmt.Errorf("window %s: lay out message %d: %w", key, items[i].Pos, err)
		}
	}
	readmit(len(items), math.MaxInt)
	return lo, nil
}

// forgottenPair stands in a message that held only tool calls or
// results whose other half was forgotten.
const forgottenPair = "[a tool call or its result here was forgotten]"

// unpaired returns the ledger's messages as a window lays them out: less
// the tool calls and results whose other half is gone. An operator's
// forget takes a message out of the ledger whole (a call, with the text
// beside it, or a result); a result left without its call, or a call left
// unanswered when the conversation went on past it (a user's prompt came
// after it, as in a ledger written before appends refused one there, or
// an append's prompt ended it: see forgottenResult), is one no layout
// (nor model) takes, and the window could not be laid out at all. A call
// followed by other messages only (text, other calls, reasoning) waits
// for its result, as the append that wrote them left it. A message
// left with no block says so in a text block (a tool message becomes the
// user's); its size stays the ledger's. A user's message left with no
// result so is a prompt to the layout (Layout.interrupts), and so to
// the calls before it too. msgs is not changed. With after set (messages
// to follow msgs, a prompt among them), every call of msgs that neither
// msgs nor after answers is gone: the conversation goes on past it.
func unpaired(msgs, after []Message) []Message {
	out := msgs
	// without takes from message i the blocks gone says are.
	without := func(i int, gone func(Block) bool) {
		m := out[i]
		if !slices.ContainsFunc(m.Blocks, gone) {
			return
		}
		if len(out) > 0 && &out[0] == &msgs[0] {
			out = slices.Clone(msgs)
		}
		m.Blocks = slices.DeleteFunc(slices.Clone(m.Blocks), gone)
		if len(m.Blocks) == 0 {
			m.Blocks = []Block{{Type: BlockText, Text: forgottenPair}}
			if m.Role == RoleTool {
				m.Role = RoleUser
			}
		}
		out[i] = m
	}
	// First the results whose call no earlier message makes.
	called := map[string]bool{}
	for i := range msgs {
		without(i, func(b Block) bool { return b.Type == BlockToolResult && !called[b.ToolUseID] })
		for _, id := range msgs[i].Calls() {
			called[id] = true
		}
	}
	// Then the calls the conversation went on past. lastPrompt is the
	// last user's prompt, as the layout will see it: a call after it
	// waits for its results, as an append leaves it (Layout.interrupts
	// refuses only a prompt between a call and its results).
	answered := map[string]bool{}
	for _, m := range slices.Concat(msgs, after) {
		for _, id := range m.Results() {
			answered[id] = true
		}
	}
	lastPrompt := -1
	for i := range out {
		if isPrompt(&out[i]) {
			lastPrompt = i
		}
	}
	if after != nil {
		lastPrompt = len(msgs)
	}
	for i := range lastPrompt {
		without(i, func(b Block) bool { return b.Type == BlockToolUse && !answered[b.ID] })
	}
	return out
}

// newLayout makes the empty Layout of a window, naming references as the
// store does: by window, places and content.
func (m *Manager) newLayout(key store.WindowKey, s Settings, lo *laidOut) (*Layout, error) {
	enc, err := tokens.Get(s.Encoding)
	if err != nil {
		return nil, err
	}
	return NewLayout(Options{Policy: s.Policy, Budget: s.Limits.Budget(), Count: enc.Count,
		RefID: func(from, to int) string { return lo.refID(key, lo.layout.Messages(), from, to) },
		Place: func(i int) int { return lo.items[i].Pos + 1 }})
}

// refID names the reference of the Layout's messages [from, to) (msgs
// are the Layout's, in its items' order) by the run of the ledger they
// are (store.RunRefID): a marker needs no row to expand, and the same
// run of the same window always gets the same ID.
func (lo *laidOut) refID(key store.WindowKey, msgs []Message, from, to int) string {
	return store.RunRefID(key, allTools(msgs[from:to]), lo.items[from:to])
}

// allTools reports whether msgs are tool calls and results only: their
// reference's type is tool results.
func allTools(msgs []Message) bool {
	for i := range msgs {
		if t := msgs[i].Type(); t != store.ToolCall && t != store.ToolResult {
			return false
		}
	}
	return true
}

// appendLaidOut appends to a window of a layout policy: in the store's
// transaction, the Layout takes the new messages and the references of
// its evicted and clipped segments are written. It retries when another
// process appended meanwhile. With handoff set, the caller holds the
// window's lock and the window must hold no message: it is a new
// instance's, opening with its handoff.
func (m *Manager) appendLaidOut(ctx context.Context, key store.WindowKey, s Settings, a store.WindowAppend, msgs []Message, after *Status, due *bool, handoff bool) ([]store.WindowItem, []Ref, error) {
	if !handoff {
		defer m.lock(key)()
	}
	// ending: the append's prompt ends calls whose results were
	// forgotten, and the window is laid out as it will leave them.
	ending := false
	for attempt := 0; ; attempt++ {
		var (
			lo  *laidOut
			err error
		)
		if ending {
			lo, err = m.rebuild(ctx, key, s, msgs)
		} else {
			lo, err = m.laidOutFor(ctx, key, s)
		}
		if err != nil {
			return nil, nil, err
		}
		before := len(lo.items)
		if handoff && before > 0 {
			return nil, nil, &store.ConflictError{What: "window " + key.String(), Msg: "holds messages already: another handoff opened it"}
		}
		// touched: the layout took some of the messages; done: all.
		touched, done := false, false
		evict := func(st store.WindowState) ([]store.Eviction, error) {
			if st.Version-1 != lo.version {
				return nil, errStale
			}
			if !done {
				touched = true
				shown := lo.layout.Tokens()
				added := 0
				// The new items are the last of those in the window.
				news := st.Live[len(st.Live)-len(msgs):]
				for i := range msgs {
					lo.items = append(lo.items, news[i])
					// A pairing error names the appended message at fault,
					// by its place in the append: the window's place
					// means nothing to the caller.
					if id, ok := lo.layout.interrupts(&msgs[i]); ok {
						if !ending && forgottenResult(lo, news[0].Pos, msgs, id) {
							return nil, errEnding
						}
						return nil, &PairingError{Message: i, CallID: id,
							Problem: fmt.Sprintf("a prompt while tool call %q waits for its result: append the result first (an error result, if the call was interrupted)", id)}
					}
					if err := lo.layout.Append(msgs[i]); err != nil {
						var pe *PairingError
						if errors.As(err, &pe) {
							pe.Message = i
							return nil, pe
						}
						return nil, fmt.Errorf("message %d: %w", i, err)
					}
					added += msgs[i].Tokens
				}
				done = true
				// A checkpoint is due when the messages take the window past
				// one, before it evicts.
				*due = false
				for _, c := range s.Policy.Checkpoints {
					at := int(c * float64(s.Limits.Budget()))
					*due = *due || shown < at && shown+added >= at
				}
			}
			return m.layoutEvictions(key, s, lo, st, after)
		}
		if m.beforeWrite != nil {
			m.beforeWrite()
		}
		w, items, evs, err := m.eng.Store().AppendWindow(ctx, key, a, evict)
		m.settle(key, lo, w, touched, err)
		if errors.Is(err, errEnding) {
			ending = true
			continue
		}
		if retry, err := m.retry(ctx, key, s, err, attempt); retry {
			continue
		} else if err != nil {
			return nil, nil, err
		}
		if len(items) > 0 && before+len(items) != len(lo.items) {
			return nil, nil, fmt.Errorf("window %s: laid out %d messages, the ledger holds %d", key, len(lo.items), before+len(items))
		}
		return items, lo.refs(evs), nil
	}
}

// errEnding says that an append's prompt comes while a call waits whose
// result was forgotten: the window is laid out again as the append will
// leave it, without the call, and the append tried again.
var errEnding = errors.New("a prompt ends calls whose results were forgotten")

// forgottenResult reports whether call id, which a prompt of msgs (an
// append whose first item takes place first) would leave without its
// result, waits for a result that may have been forgotten: the call is
// the ledger's, msgs do not answer it, and a message the window held
// after the call was forgotten (engram forget): after the ledger's last,
// or between the call and the ledger's last (a place after the call the
// ledger no longer holds). A harness that still has the result sends it
// again in its place, and the call waits for it until then; a prompt
// instead ends the call, which the window leaves out as a call whose
// result went.
func forgottenResult(lo *laidOut, first int, msgs []Message, id string) bool {
	for i := range msgs {
		if slices.Contains(msgs[i].Calls(), id) || slices.Contains(msgs[i].Results(), id) {
			return false
		}
	}
	ms := lo.layout.Messages()
	c := len(ms) - 1
	for c >= 0 && !slices.Contains(ms[c].Calls(), id) {
		c--
	}
	if c < 0 {
		return false
	}
	if lo.next > first {
		return true // a message after the ledger's last was forgotten
	}
	// The places after the call's, up to the append's first, that the
	// ledger holds.
	held := 0
	for _, it := range lo.items[c+1:] {
		if it.Pos < first {
			held++
		}
	}
	return first-1-lo.items[c].Pos > held
}

// errRelay says that the references of a window's ledger are not those
// of its layout (its settings changed, or content under them was
// forgotten): the window is laid out anew (relay), and the change tried
// again.
var errRelay = errors.New("the window's references are not its layout's")

// retry reports whether a change to a laid-out window that failed with
// err is to be tried again: when the window changed meanwhile, or its
// ledger had to be laid out anew first (which it does). Otherwise it
// returns err.
func (m *Manager) retry(ctx context.Context, key store.WindowKey, s Settings, err error, attempt int) (bool, error) {
	if attempt >= maxAttempts {
		if errors.Is(err, errStale) {
			// Not the caller's fault nor the server's: a conflict, which
			// the caller may try again (HTTP 409).
			return false, &store.ConflictError{What: "window " + key.String(), Msg: "other servers kept changing it meanwhile; try again", Busy: true}
		}
		return false, err
	}
	switch {
	case errors.Is(err, errStale):
		// Another server's Manager changed the window meanwhile. Its
		// next change may be under way already, and with its layout
		// cached it is faster than this one, which rebuilds its layout
		// from the ledger: without a pause, two servers appending to one
		// window at once starve the slower (the multi-server test of
		// cmd/engram saw 9 attempts in a row fail). A pause of a random
		// few milliseconds, longer each attempt, lets it through.
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(rand.N(time.Duration(attempt+1) * 4 * time.Millisecond)):
		}
		return true, nil
	case errors.Is(err, errRelay):
		if err := m.relay(ctx, key, s); err != nil && !errors.Is(err, errStale) {
			return false, err
		}
		return true, nil
	}
	return false, err
}

// relay writes a window's layout to its ledger anew: every item back in
// the window, then the references of the layout's evicted and clipped
// segments.
func (m *Manager) relay(ctx context.Context, key store.WindowKey, s Settings) error {
	lo, err := m.laidOutFor(ctx, key, s)
	if err != nil {
		return err
	}
	evict := func(st store.WindowState) ([]store.Eviction, error) {
		if st.Version-1 != lo.version {
			return nil, errStale
		}
		var after Status
		return m.layoutEvictions(key, s, lo, st, &after)
	}
	w, _, err := m.eng.Store().RelayWindow(ctx, key, evict)
	m.settle(key, lo, w, false, err)
	return err
}

// settle keeps a layout changed by a write in the cache as of the
// window's version after it, or drops the cached layout when the write
// failed after the layout took part of it (touched) or found it old.
func (m *Manager) settle(key store.WindowKey, lo *laidOut, w store.Window, touched bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		lo.version, lo.next = w.Version, w.Next
		m.keepLayout(key, lo)
	} else if touched || errors.Is(err, errStale) {
		delete(m.layouts, key)
		delete(m.views, key)
	}
}

// readmitLaidOut brings a reference's messages back into a laid-out
// window: in the store's transaction, the Layout takes them back and the
// references of what it evicts to make room are written. It retries when
// another process changed the window meanwhile.
func (m *Manager) readmitLaidOut(ctx context.Context, key store.WindowKey, s Settings, ref store.Reference) (AppendResult, error) {
	defer m.lock(key)()
	relaid := false
	for attempt := 0; ; attempt++ {
		lo, err := m.laidOutFor(ctx, key, s)
		if err != nil {
			return AppendResult{}, err
		}
		from, to, id := -1, -1, ref.ID
		for _, seg := range lo.layout.Segments() {
			if seg.Kind != Kept && lo.refID(key, lo.layout.Messages(), seg.From, seg.To) == ref.ID {
				from, to = seg.From, seg.To
			}
		}
		if from < 0 {
			// The layout's items are as of its rebuild: read what the
			// ledger says of them now.
			items, err := m.eng.Store().WindowItems(ctx, key, ref.TurnFrom-1, ref.TurnTo)
			if err != nil {
				return AppendResult{}, err
			}
			if !relaid && slices.ContainsFunc(items, func(it store.WindowItem) bool { return it.RefID == ref.ID }) {
				// The ledger has them under the reference, the layout
				// does not: content under it was forgotten or redacted
				// since, so its run is another's now. Write the layout's
				// references to the ledger, then look again.
				relaid = true
				if err := m.relay(ctx, key, s); err != nil && !errors.Is(err, errStale) {
					return AppendResult{}, err
				}
				continue
			}
			// What is left of the reference's messages, evicted as one
			// run under the reference that now stands for them: that one
			// is re-admitted, so that the marker the agent holds still
			// brings back all it can.
			if from, to, id = lo.runOf(key, ref, items); from < 0 {
				return AppendResult{}, notUnder(items, ref)
			}
		}
		var (
			st      Status
			touched bool
		)
		evict := func(ws store.WindowState) ([]store.Eviction, error) {
			if ws.Version-1 != lo.version {
				return nil, errStale
			}
			if !touched {
				touched = true
				if err := lo.layout.Readmit(from, to); err != nil {
					return nil, err
				}
			}
			return m.layoutEvictions(key, s, lo, ws, &st)
		}
		w, evs, err := m.eng.Store().ReadmitWindow(ctx, key, id, evict)
		m.settle(key, lo, w, touched, err)
		if retry, err := m.retry(ctx, key, s, err, attempt); retry {
			continue
		} else if err != nil {
			return AppendResult{}, err
		}
		res := AppendResult{Status: st, Positions: []int{}, Evicted: lo.refs(evs)}
		for _, it := range lo.items[from:to] {
			res.Positions = append(res.Positions, it.Pos)
		}
		return res, nil
	}
}

// runOf returns the evicted or clipped run of the layout that holds
// exactly the messages of ref's places the window still has, with its
// reference, if the ledger (items, of those places) has them all under
// it; else -1.
func (lo *laidOut) runOf(key store.WindowKey, ref store.Reference, items []store.WindowItem) (from, to int, id string) {
	byPos := func(it store.WindowItem, pos int) int { return cmp.Compare(it.Pos, pos) }
	a, _ := slices.BinarySearchFunc(lo.items, ref.TurnFrom-1, byPos)
	b, _ := slices.BinarySearchFunc(lo.items, ref.TurnTo, byPos)
	if a >= b || len(items) != b-a {
		return -1, -1, ""
	}
	for _, seg := range lo.layout.Segments() {
		if seg.Kind == Kept || seg.From != a || seg.To != b {
			continue
		}
		id := lo.refID(key, lo.layout.Messages(), a, b)
		for _, it := range items {
			if it.RefID != id {
				return -1, -1, ""
			}
		}
		return a, b, id
	}
	return -1, -1, ""
}

// refs reports the references evictions made, with the markers the
// window shows for them.
func (lo *laidOut) refs(evs []store.Eviction) []Ref {
	out := make([]Ref, 0, len(evs))
	for _, ev := range evs {
		r := Ref{ID: ev.Ref.ID, Marker: lo.markers[ev.Ref.ID], From: ev.From, To: ev.To,
			Messages: ev.Ref.TurnTo - ev.Ref.TurnFrom + 1, Tokens: ev.Ref.TokensSaved}
		if r.Marker == "" {
			r.Marker = ctxref.Render(ctxref.FromReference(ev.Ref))
		}
		out = append(out, r)
	}
	return out
}

// ErrNotEvicted is returned by Readmit for a reference whose messages
// are not evicted under it: in the window already, or under another
// reference, which the error names.
var ErrNotEvicted = errors.New("not evicted under this reference")

// notUnder is the error of a re-admission of a reference that no
// segment of the window stands for: its messages are in the window, or
// under another reference (one that took it over, or, for a reference of
// an assembled context's view, the window's own).
func notUnder(items []store.WindowItem, ref store.Reference) error {
	var under []string
	inWindow := false
	for _, it := range items {
		if it.Pos < ref.TurnFrom-1 || it.Pos >= ref.TurnTo {
			continue
		}
		switch {
		case it.RefID == "":
			inWindow = true
		case !slices.Contains(under, it.RefID):
			under = append(under, it.RefID)
		}
	}
	switch {
	case len(under) == 0 && inWindow:
		return fmt.Errorf("reference %s: its messages are in the window already: %w", ref.ID, ErrNotEvicted)
	case len(under) == 1 && !inWindow:
		return fmt.Errorf("reference %s: its messages are under reference %s: readmit that: %w", ref.ID, under[0], ErrNotEvicted)
	case len(under) > 0:
		return fmt.Errorf("reference %s: its messages are in the window and under references %s (it is a reference of an assembled context's view, laid out apart from the window): readmit those: %w",
			ref.ID, strings.Join(under, ", "), ErrNotEvicted)
	}
	return fmt.Errorf("reference %s: no message of its window is under it: %w", ref.ID, store.ErrNotFound)
}

// layoutEvictions returns the references the Layout's evicted and
// clipped segments stand for that the store does not hold yet, each
// taking over those it holds within its run, and leaves in *after the
// window's status as the Layout shows it.
func (m *Manager) layoutEvictions(key store.WindowKey, s Settings, lo *laidOut, st store.WindowState, after *Status) ([]store.Eviction, error) {
	have := map[string]bool{}
	for _, r := range st.Refs {
		have[r.ID] = true
	}
	// Each reference of the ledger must be one the layout shows, or be
	// within one it shows (which takes it over).
	segs := lo.layout.Segments()
	for _, r := range st.Refs {
		ok := false
		for _, seg := range segs {
			if seg.Kind != Kept && lo.items[seg.From].Pos <= r.From && r.To <= lo.items[seg.To-1].Pos+1 {
				ok = true
				break
			}
		}
		if !ok {
			return nil, fmt.Errorf("%w: reference %s of places %d-%d", errRelay, r.ID, r.From, r.To)
		}
	}
	var evs []store.Eviction
	msgs := lo.layout.Messages()
	live, refs := 0, 0
	for _, seg := range segs {
		if seg.Kind == Kept {
			live += seg.To - seg.From
			continue
		}
		refs++
		id := lo.refID(key, msgs, seg.From, seg.To)
		if have[id] {
			continue
		}
		from, to := lo.items[seg.From].Pos, lo.items[seg.To-1].Pos+1
		ref := store.Reference{ID: id, Type: store.RefConversation, SessionID: key.SessionID, AgentID: key.AgentID,
			TokensSaved: seg.Tokens, TurnFrom: from + 1, TurnTo: to, CreatedAt: m.now()}
		for i := seg.From; i < seg.To; i++ {
			ref.ContentIDs = append(ref.ContentIDs, lo.items[i].EntryIDs...)
		}
		if len(ref.ContentIDs) == 0 {
			continue // messages with no content: nothing to expand
		}
		if allTools(msgs[seg.From:seg.To]) {
			ref.Type = store.RefToolResults
		}
		// The reference's marker is the one the window shows.
		if mk, err := ctxref.Parse(seg.Marker); err == nil {
			ref.Entities, ref.QueryHints = mk.Entities, mk.Hints
		}
		lo.markers[id] = seg.Marker
		ev := store.Eviction{Ref: ref, From: from, To: to}
		for _, r := range st.Refs {
			if r.From >= from && r.To <= to {
				ev.Absorb = append(ev.Absorb, r.ID)
			}
		}
		evs = append(evs, ev)
	}
	*after = m.status(key, s, st.Window, live, len(lo.items)-live, lo.layout.Tokens(), refs, lo.layout.fixed())
	return evs, nil
}

// laidOutStatus is Status for a window of a layout policy: what its
// Layout shows.
func (m *Manager) laidOutStatus(ctx context.Context, key store.WindowKey, s Settings, w store.Window) (Status, error) {
	defer m.lock(key)()
	lo, err := m.laidOutAt(ctx, key, s, w)
	if err != nil {
		return Status{}, err
	}
	w.Version = lo.version
	return m.laidOutStatusOf(key, s, w, lo), nil
}

// laidOutStatusOf is the status of a window as its layout lo shows it.
func (m *Manager) laidOutStatusOf(key store.WindowKey, s Settings, w store.Window, lo *laidOut) Status {
	live, refs := 0, 0
	for _, seg := range lo.layout.Segments() {
		if seg.Kind == Kept {
			live += seg.To - seg.From
		} else {
			refs++
		}
	}
	return m.status(key, s, w, live, len(lo.items)-live, lo.layout.Tokens(), refs, lo.layout.fixed())
}

// laidOutContext is Context for a window of a layout policy: the pieces
// its Layout shows, its digest's excerpts among them.
func (m *Manager) laidOutContext(ctx context.Context, key store.WindowKey, s Settings, w store.Window) ([]Item, error) {
	defer m.lock(key)()
	lo, err := m.laidOutAt(ctx, key, s, w)
	if err != nil {
		return nil, err
	}
	msgs := lo.layout.Messages()
	out := []Item{}
	for _, p := range lo.layout.Pieces() {
		switch p.Kind {
		case PieceMessage:
			msg := msgs[p.From]
			out = append(out, Item{Pos: lo.items[p.From].Pos, Message: &msg})
		case PieceMarker:
			mk, err := ctxref.Parse(p.Text)
			if err != nil {
				return nil, fmt.Errorf("window %s: the layout's marker %q: %w", key, p.Text, err)
			}
			out = append(out, Item{Pos: lo.items[p.From].Pos, RefID: mk.ID, Marker: p.Text})
		case PieceExcerpt:
			out = append(out, Item{Pos: lo.items[p.From].Pos, Excerpt: p.Text})
		}
	}
	return out, nil
}
