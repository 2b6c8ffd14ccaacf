package window

import (
	"context"
	"errors"
	"fmt"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// UsesLayout reports whether a policy's windows are laid out by the
// Layout (a digest, clipping, steps kept rather than turns: the policy of
// an agent's tool loop, measured on real runs) rather than by Select.
func UsesLayout(p Policy) bool { return p.Digest > 0 || p.KeepUnits > 0 || p.ClipCallTokens > 0 }

// laidOut is a window laid out by a Layout, as of a version of its
// ledger: the Layout is a pure function of the messages, so any process
// rebuilds the same one from the ledger, and the references it makes are
// written to the store with the append that makes them.
type laidOut struct {
	version int64
	layout  *Layout
	// items are the ledger's items, in the Layout's order.
	items []store.WindowItem
}

// errStale says that another process changed the window between reading
// its layout and writing: the append reads it again and retries.
var errStale = errors.New("window changed meanwhile")

// laidOutFor returns the window's layout as of its current version, from
// the cache or rebuilt from the ledger.
func (m *Manager) laidOutFor(ctx context.Context, key store.WindowKey, s Settings) (*laidOut, error) {
	w, err := m.eng.Store().Window(ctx, key)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	lo := m.layouts[key]
	m.mu.Unlock()
	if lo != nil && lo.version == w.Version {
		return lo, nil
	}
	items, err := m.eng.Store().WindowItems(ctx, key, 0)
	if err != nil {
		return nil, err
	}
	msgs, err := m.messages(ctx, items)
	if err != nil {
		return nil, err
	}
	lo = &laidOut{items: items}
	if lo.layout, err = m.newLayout(key, s, lo); err != nil {
		return nil, err
	}
	for i := range msgs {
		if err := lo.layout.Append(msgs[i]); err != nil {
			return nil, fmt.Errorf("window %s: lay out message %d: %w", key, items[i].Pos, err)
		}
	}
	// The version read before the items may be older than they are; a
	// stale version only makes the next append rebuild.
	lo.version = w.Version
	m.mu.Lock()
	m.layouts[key] = lo
	m.mu.Unlock()
	return lo, nil
}

// newLayout makes the empty Layout of a window, naming references as the
// store does: by window, places and content.
func (m *Manager) newLayout(key store.WindowKey, s Settings, lo *laidOut) (*Layout, error) {
	enc, err := tokens.Get(s.Encoding)
	if err != nil {
		return nil, err
	}
	return NewLayout(Options{Policy: s.Policy, Budget: s.Limits.Budget(), Count: enc.Count,
		RefID: func(from, to int) string { return lo.refID(key, from, to) }})
}

// refID names the reference of the Layout's messages [from, to).
func (lo *laidOut) refID(key store.WindowKey, from, to int) string {
	var ids []string
	for _, it := range lo.items[from:to] {
		ids = append(ids, it.EntryIDs...)
	}
	return refID(key, lo.items[from].Pos, lo.items[to-1].Pos, ids)
}

// appendLaidOut appends to a window of a layout policy: in the store's
// transaction, the Layout takes the new messages and the references of
// its evicted and clipped segments are written. It retries when another
// process appended meanwhile.
func (m *Manager) appendLaidOut(ctx context.Context, key store.WindowKey, s Settings, a store.WindowAppend, msgs []Message, after *Status, due *bool) ([]store.WindowItem, []store.Eviction, error) {
	for attempt := 0; ; attempt++ {
		lo, err := m.laidOutFor(ctx, key, s)
		if err != nil {
			return nil, nil, err
		}
		before := len(lo.items)
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
					if err := lo.layout.Append(msgs[i]); err != nil {
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
			return m.layoutEvictions(key, s, lo, st, after), nil
		}
		w, items, evs, err := m.eng.Store().AppendWindow(ctx, key, a, evict)
		m.mu.Lock()
		if err == nil {
			lo.version = w.Version
			m.layouts[key] = lo
		} else if touched || errors.Is(err, errStale) {
			// The layout took messages the store did not keep, or is old.
			delete(m.layouts, key)
		}
		m.mu.Unlock()
		if errors.Is(err, errStale) && attempt < 4 {
			continue
		}
		if err == nil && len(items) > 0 && before+len(items) != len(lo.items) {
			return nil, nil, fmt.Errorf("window %s: laid out %d messages, the ledger holds %d", key, len(lo.items), before+len(items))
		}
		return items, evs, err
	}
}

// layoutEvictions returns the references the Layout's evicted and
// clipped segments stand for that the store does not hold yet, each
// taking over those it holds within its run, and leaves in *after the
// window's status as the Layout shows it.
func (m *Manager) layoutEvictions(key store.WindowKey, s Settings, lo *laidOut, st store.WindowState, after *Status) []store.Eviction {
	have := map[string]bool{}
	for _, r := range st.Refs {
		have[r.ID] = true
	}
	var evs []store.Eviction
	msgs := lo.layout.Messages()
	live, refs := 0, 0
	for _, seg := range lo.layout.Segments() {
		if seg.Kind == Kept {
			live += seg.To - seg.From
			continue
		}
		refs++
		id := lo.refID(key, seg.From, seg.To)
		if have[id] {
			continue
		}
		from, to := lo.items[seg.From].Pos, lo.items[seg.To-1].Pos+1
		ref := store.Reference{ID: id, Type: store.RefConversation, SessionID: key.SessionID, AgentID: key.AgentID,
			TokensSaved: seg.Tokens, TurnFrom: from + 1, TurnTo: to, CreatedAt: m.now()}
		allTools := true
		for i := seg.From; i < seg.To; i++ {
			ref.ContentIDs = append(ref.ContentIDs, lo.items[i].EntryIDs...)
			t := msgs[i].Type()
			allTools = allTools && (t == store.ToolCall || t == store.ToolResult)
		}
		if len(ref.ContentIDs) == 0 {
			continue // messages with no content: nothing to expand
		}
		if allTools {
			ref.Type = store.RefToolResults
		}
		ev := store.Eviction{Ref: ref, From: from, To: to}
		for _, r := range st.Refs {
			if r.From >= from && r.To <= to {
				ev.Absorb = append(ev.Absorb, r.ID)
			}
		}
		evs = append(evs, ev)
	}
	*after = m.status(key, s, st.Window, live, len(lo.items)-live, lo.layout.Tokens(), refs)
	return evs
}

// laidOutStatus is Status for a window of a layout policy: what its
// Layout shows.
func (m *Manager) laidOutStatus(ctx context.Context, key store.WindowKey, s Settings) (Status, error) {
	lo, err := m.laidOutFor(ctx, key, s)
	if err != nil {
		return Status{}, err
	}
	w, err := m.eng.Store().Window(ctx, key)
	if err != nil {
		return Status{}, err
	}
	w.Version = lo.version
	live, refs := 0, 0
	for _, seg := range lo.layout.Segments() {
		if seg.Kind == Kept {
			live += seg.To - seg.From
		} else {
			refs++
		}
	}
	return m.status(key, s, w, live, len(lo.items)-live, lo.layout.Tokens(), refs), nil
}

// laidOutContext is Context for a window of a layout policy: the pieces
// its Layout shows, its digest's excerpts among them.
func (m *Manager) laidOutContext(ctx context.Context, key store.WindowKey, s Settings) ([]Item, error) {
	lo, err := m.laidOutFor(ctx, key, s)
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
