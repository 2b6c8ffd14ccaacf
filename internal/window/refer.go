package window

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/engramhq/engram/internal/store"
)

// Units returns the Layout's messages split into units (see Units): where
// anything that shows them otherwise may cut.
func (l *Layout) Units() []Unit { return l.units }

// Span is the marker of msgs[from:to] as one evicted run, as the window
// would show it: what a caller that shows those messages another way (a
// turn's compacted history) stands in their place.
func (l *Layout) Span(from, to int) Segment {
	s := Segment{Kind: Evicted, From: from, To: to, Tokens: l.sum(from, to)}
	l.mark(&s)
	return s
}

// Refer returns markers standing for the window's messages [from, to)
// (indexes in Messages' order), which expand as any window's: one marker
// for each run of whole units of at most maxTokens (zero: the policy's
// MaxRefTokens; a unit larger than that is a run of its own). from and to
// must fall between units (a tool call stays with its results). The
// references' IDs name the runs of the ledger (store.RunRefID): nothing
// is written, and the same run always gets the same ID.
func (m *Manager) Refer(ctx context.Context, key store.WindowKey, from, to, maxTokens int) ([]Item, error) {
	w, s, err := m.settings(ctx, key)
	if err != nil {
		return nil, err
	}
	return m.refer(ctx, key, w, s, from, to, maxTokens)
}

// refer is Refer at the head w with settings s.
func (m *Manager) refer(ctx context.Context, key store.WindowKey, w store.Window, s Settings, from, to, maxTokens int) ([]Item, error) {
	defer m.lock(key)()
	lo, err := m.laidOutAt(ctx, key, s, w)
	if err != nil {
		return nil, err
	}
	l := lo.layout
	if from < 0 || to > len(l.msgs) || from > to {
		return nil, fmt.Errorf("%w: messages %d to %d of a window of %d", ErrInvalid, from, to, len(l.msgs))
	}
	if from == to {
		return nil, nil
	}
	units := l.Units()
	k, startOK := slices.BinarySearchFunc(units, from, func(u Unit, at int) int { return cmp.Compare(u.From, at) })
	_, endOK := slices.BinarySearchFunc(units, to, func(u Unit, at int) int { return cmp.Compare(u.To, at) })
	if !startOK || !endOK {
		return nil, fmt.Errorf("%w: messages %d to %d of window %s cut a tool call from its results", ErrInvalid, from, to, key)
	}
	capTokens := maxTokens
	if capTokens <= 0 {
		capTokens = s.Policy.MaxRefTokens
	}
	if capTokens <= 0 {
		capTokens = DefaultMaxRefTokens
	}
	var out []Item
	for a := from; a < to; {
		b, n := a, 0
		for ; k < len(units) && units[k].From < to; k++ {
			u := units[k]
			t := l.sum(u.From, u.To)
			if b > a && n+t > capTokens {
				break
			}
			b, n = u.To, n+t
		}
		id := l.o.RefID(a, b)
		m.mu.Lock()
		marker, known := m.spans[id]
		m.mu.Unlock()
		if !known {
			marker = l.Span(a, b).Marker
			m.remember(id, marker)
		}
		out = append(out, Item{Pos: lo.items[a].Pos, RefID: id, Marker: marker})
		a = b
	}
	return out, nil
}

// maxSpans bounds the markers Refer made that a Manager remembers.
const maxSpans = 1 << 14

// remember keeps the marker of reference id; past maxSpans the Manager
// forgets the others (a marker asked for again is made again).
func (m *Manager) remember(id, marker string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.spans) >= maxSpans {
		clear(m.spans)
	}
	m.spans[id] = marker
}
