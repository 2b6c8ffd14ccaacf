package window

import (
	"context"
	"fmt"
	"reflect"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// A View is part of a window's conversation laid out to a budget other
// than the window's own: what a turn's assembly gives its history layer.
type View struct {
	// Items are what it shows, in order, as Context's.
	Items []Item
	// Tokens is what they take; Whole what the messages take whole.
	Tokens, Whole int
	// Messages is how many messages it covers, Shown how many of them it
	// shows whole, Refs how many markers stand for the others.
	Messages, Shown, Refs int
}

// Messages returns a window's status and messages, in order, with their
// content, and their items in the ledger (places, stored entries), as of
// one version. The caller must not change them.
func (m *Manager) Messages(ctx context.Context, key store.WindowKey) (Status, []Message, []store.WindowItem, error) {
	t, err := m.Turn(ctx, key)
	if err != nil {
		return Status{}, nil, nil, err
	}
	return t.Messages(ctx)
}

// Turn is a window read once for a turn's assembly: its head and settings
// as of one read, and what Messages, View, LaidOut and Refer do, at that
// head. A turn writes nothing: its markers' references name runs of the
// ledger (store.RunRefID), which expand from it.
type Turn struct {
	m   *Manager
	key store.WindowKey
	w   store.Window
	s   Settings
}

// Turn reads the window's head and settings for a turn.
func (m *Manager) Turn(ctx context.Context, key store.WindowKey) (*Turn, error) {
	w, s, err := m.settings(ctx, key)
	if err != nil {
		return nil, err
	}
	return &Turn{m: m, key: key, w: w, s: s}, nil
}

// Messages is Manager.Messages at the turn's head.
func (t *Turn) Messages(ctx context.Context) (Status, []Message, []store.WindowItem, error) {
	defer t.m.lock(t.key)()
	lo, err := t.m.laidOutAt(ctx, t.key, t.s, t.w)
	if err != nil {
		return Status{}, nil, nil, err
	}
	w := t.w
	w.Version = lo.version
	return t.m.laidOutStatusOf(t.key, t.s, w, lo), lo.layout.Messages(), lo.items, nil
}

// View is Manager.View at the turn's head.
func (t *Turn) View(ctx context.Context, from, to, budget int) (View, error) {
	return t.m.view(ctx, t.key, t.w, t.s, from, to, budget, true)
}

// LaidOut is Manager.LaidOut at the turn's head.
func (t *Turn) LaidOut(ctx context.Context, from, to, budget int) (View, error) {
	return t.m.view(ctx, t.key, t.w, t.s, from, to, budget, false)
}

// Refer is Manager.Refer at the turn's head.
func (t *Turn) Refer(ctx context.Context, from, to, maxTokens int) ([]Item, error) {
	return t.m.refer(ctx, t.key, t.w, t.s, from, to, maxTokens)
}

// View lays out the window's messages [from, to) (indexes in Messages'
// order) to budget tokens, by the window's policy: the same engine as the
// window's, so tool calls stay with their results, nothing is over the
// budget and every message not shown whole stands under a marker. Its
// markers expand as any window's: their IDs name the run of the ledger
// they stand for (store.RunRefID), so a view writes nothing, and the same
// run always gets the same ID. A budget under MinBudget is raised to it;
// when the messages fit whole they are shown whole.
func (m *Manager) View(ctx context.Context, key store.WindowKey, from, to, budget int) (View, error) {
	w, s, err := m.settings(ctx, key)
	if err != nil {
		return View{}, err
	}
	return m.view(ctx, key, w, s, from, to, budget, true)
}

// LaidOut is View as the window lays itself out: messages that fit the
// budget whole are shown whole only while they are under the policy's
// threshold, so that the view evicts when and as the window would (a tool
// loop's history, which a prompt cache reads as the window's).
func (m *Manager) LaidOut(ctx context.Context, key store.WindowKey, from, to, budget int) (View, error) {
	w, s, err := m.settings(ctx, key)
	if err != nil {
		return View{}, err
	}
	return m.view(ctx, key, w, s, from, to, budget, false)
}

// view is View and LaidOut at the head w with settings s.
func (m *Manager) view(ctx context.Context, key store.WindowKey, w store.Window, s Settings, from, to, budget int, wholeIfFits bool) (View, error) {
	defer m.lock(key)()
	lo, err := m.laidOutAt(ctx, key, s, w)
	if err != nil {
		return View{}, err
	}
	msgs := lo.layout.Messages()
	if from < 0 || to > len(msgs) || from > to {
		return View{}, fmt.Errorf("%w: messages %d to %d of a window of %d", ErrInvalid, from, to, len(msgs))
	}
	enc, err := tokens.Get(s.Encoding)
	if err != nil {
		return View{}, err
	}
	whole := 0
	for i := from; i < to; i++ {
		whole += msgs[i].Tokens
	}
	if whole <= budget && wholeIfFits {
		v := View{Items: []Item{}, Tokens: whole, Whole: whole, Messages: to - from, Shown: to - from}
		for i := from; i < to; i++ {
			msg := msgs[i]
			v.Items = append(v.Items, Item{Pos: lo.items[i].Pos, Message: &msg})
		}
		return v, nil
	}
	vc, err := m.viewCache(key, s, lo, enc, from, to, budget)
	if err != nil {
		return View{}, err
	}
	part, l := vc.part, vc.layout
	v := View{Items: []Item{}, Tokens: l.Tokens(), Messages: to - from}
	for i := from; i < to; i++ {
		v.Whole += msgs[i].Tokens
	}
	sub := l.Messages()
	for _, p := range l.Pieces() {
		switch p.Kind {
		case PieceMessage:
			msg := sub[p.From]
			v.Items = append(v.Items, Item{Pos: part.items[p.From].Pos, Message: &msg})
			v.Shown++
		case PieceMarker:
			mk, err := ctxref.Parse(p.Text)
			if err != nil {
				return View{}, fmt.Errorf("window %s: the view's marker %q: %w", key, p.Text, err)
			}
			v.Items = append(v.Items, Item{Pos: part.items[p.From].Pos, RefID: mk.ID, Marker: p.Text})
			v.Refs++
		case PieceExcerpt:
			v.Items = append(v.Items, Item{Pos: part.items[p.From].Pos, Excerpt: p.Text})
		}
	}
	return v, nil
}

// Prepare lays out ahead, off a turn, the view of messages [from, to) at
// budget that a coming turn will likely ask for (the assembler's next
// zone, when the oldest of its chunks leaves it), so that the turn only
// adds what came since, as it does to its own view. It does nothing if
// the window changed since the turn read it, or if the messages fit the
// budget whole.
func (t *Turn) Prepare(from, to, budget int) error {
	defer t.m.lock(t.key)()
	t.m.mu.Lock()
	lo := t.m.layouts[t.key]
	t.m.mu.Unlock()
	if lo == nil || lo.version != t.w.Version || !lo.created.Equal(t.w.CreatedAt) {
		return nil
	}
	msgs := lo.layout.Messages()
	if from < 0 || to > len(msgs) || from >= to {
		return fmt.Errorf("%w: messages %d to %d of a window of %d", ErrInvalid, from, to, len(msgs))
	}
	enc, err := tokens.Get(t.s.Encoding)
	if err != nil {
		return err
	}
	whole := 0
	for i := from; i < to; i++ {
		whole += msgs[i].Tokens
	}
	if whole <= budget {
		return nil
	}
	_, err = t.m.viewCache(t.key, t.s, lo, enc, from, to, budget)
	return err
}

// maxViews is how many views of a window a Manager keeps: a turn's, and
// the next one Prepare laid out.
const maxViews = 2

// viewCache returns the window's view of messages [from, to) at budget,
// laid out: a view kept of the same start and budget, over the same
// layout of the window, takes only the messages since, so that a turn's
// view costs what the turn added; else it is laid out anew. The caller
// holds the window's lock.
func (m *Manager) viewCache(key store.WindowKey, s Settings, lo *laidOut, enc *tokens.Encoding, from, to, budget int) (*viewCache, error) {
	msgs := lo.layout.Messages()
	m.mu.Lock()
	kept := m.views[key]
	m.mu.Unlock()
	var vc *viewCache
	for _, c := range kept {
		// (A layout rebuilt from the ledger, after another process's
		// change, a restart or a forget, makes the view again.)
		if c.lo == lo && c.from == from && c.budget == budget && c.to <= to && reflect.DeepEqual(c.policy, s.Policy) {
			vc = c
			break
		}
	}
	if vc == nil {
		vc = &viewCache{lo: lo, from: from, to: from, budget: budget, policy: s.Policy,
			part: &laidOut{markers: map[string]string{}}}
		part, layout := vc.part, &vc.layout
		var err error
		if vc.layout, err = NewLayout(Options{Policy: s.Policy, Budget: max(budget, MinBudget), Count: enc.Count,
			RefID: func(a, b int) string { return part.refID(key, (*layout).Messages(), a, b) },
			Place: func(i int) int { return part.items[i].Pos + 1 }}); err != nil {
			return nil, err
		}
	}
	// The view is out of the window's views while it changes (an append
	// that fails leaves it half laid out), then leads them.
	m.mu.Lock()
	var others []*viewCache
	for _, c := range m.views[key] {
		if c != vc && c.lo == lo {
			others = append(others, c)
		}
	}
	m.views[key] = others
	m.mu.Unlock()
	for i := vc.to; i < to; i++ {
		vc.part.items = append(vc.part.items, lo.items[i])
		if err := vc.layout.Append(msgs[i]); err != nil {
			return nil, fmt.Errorf("window %s: lay out message %d: %w", key, lo.items[i].Pos, err)
		}
	}
	vc.to = to
	m.mu.Lock()
	m.views[key] = append([]*viewCache{vc}, others[:min(len(others), maxViews-1)]...)
	m.mu.Unlock()
	return vc, nil
}

// viewCache is a window's view: the Layout of its messages
// [from, to) at budget.
type viewCache struct {
	// lo is the window's layout the view was made from.
	lo               *laidOut
	from, to, budget int
	policy           Policy
	part             *laidOut
	layout           *Layout
}
