package window

import (
	"cmp"
	"context"
	"fmt"
	"maps"
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
// (indexes in Messages' order), with their references stored so that they
// expand as any window's: one marker for each run of whole units of at
// most maxTokens (zero: the policy's MaxRefTokens; a unit larger than
// that is a run of its own). from and to must fall between units (a tool call stays with its
// results). The references' IDs name the window, the places and the
// content, so the same run always gets the same one.
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
		sp, known := m.spans[id]
		m.mu.Unlock()
		if !known {
			seg := l.Span(a, b)
			sp = &span{marker: seg.Marker}
			if ref, ok := m.segmentRef(key, lo, l, seg); ok {
				sp.ref = &ref
			}
			m.remember(id, sp)
		}
		out = append(out, Item{Pos: lo.items[a].Pos, RefID: id, Marker: sp.marker})
		a = b
	}
	return out, nil
}

// maxSpans bounds the references Refer made that a Manager remembers.
const maxSpans = 1 << 14

// span is a run Refer or a Turn's view made a marker for: the marker, and
// its reference until it is stored (nil after).
type span struct {
	marker string
	ref    *store.Reference
}

// remember keeps sp as the span of reference id. Past maxSpans it forgets
// the spans whose references are stored (a marker made again finds its
// reference in the store) before those still waiting for Keep: a turn
// between its markers and its Keep, on another window, must not lose
// them. Only if every span waits are they all forgotten.
func (m *Manager) remember(id string, sp *span) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.spans) >= maxSpans {
		maps.DeleteFunc(m.spans, func(_ string, s *span) bool { return s.ref == nil })
		if len(m.spans) >= maxSpans {
			clear(m.spans)
		}
	}
	m.spans[id] = sp
}

// Keep stores the references of the markers among items that Refer or a
// Turn's views made and the store does not hold yet, in one write.
func (m *Manager) Keep(ctx context.Context, items []Item) error {
	var put []store.Reference
	var ids []string
	m.mu.Lock()
	for _, it := range items {
		if sp := m.spans[it.RefID]; it.RefID != "" && sp != nil && sp.ref != nil {
			put = append(put, *sp.ref)
			ids = append(ids, it.RefID)
		}
	}
	m.mu.Unlock()
	if len(put) == 0 {
		return nil
	}
	if err := m.eng.Store().PutReferences(ctx, put); err != nil {
		return err
	}
	m.mu.Lock()
	for _, id := range ids {
		if sp := m.spans[id]; sp != nil {
			sp.ref = nil // stored
		}
	}
	m.mu.Unlock()
	return nil
}
