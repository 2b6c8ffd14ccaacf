package window

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// A window's history, replayed from its ledger for the status API's
// timeline. The ledger keeps each message's append (its version and
// time) and the re-admissions, but not the window as it stood after each
// turn, nor when each reference was made: the Layout is a pure function
// of the ledger, so the history lays the window out again, turn by turn,
// and reads it between turns.

// HistoryStep is one change of a window's ledger, replayed: a turn (an
// append: Version is set) or a re-admission (Readmit is set).
type HistoryStep struct {
	// Version and Time are the append's (Time zero for messages appended
	// before engram kept it); zero for a re-admission, whose version and
	// time the ledger does not keep.
	Version int64
	Time    time.Time
	// Messages and Tokens are what the append added, Tokens as counted
	// when appended.
	Messages, Tokens int
	// Readmit is the re-admission's run of places, ReadmitRef the
	// reference it brought back (empty when the layout no longer holds a
	// run there: a message under it forgotten since).
	Readmit    *store.WindowReadmit
	ReadmitRef string
	// Used is what the window showed after the step: as Status.Used.
	Used int
	// Evicted are the references the step made: runs behind a marker
	// after it that were not before it (a run joined to an earlier one is
	// a new reference, which takes the earlier over).
	Evicted []Ref
}

// History replays a window's ledger as its Layout lays it out now, step
// by step: each turn, each re-admission, what the window showed after it
// and the references it made. It returns the window's current settings
// and head with the steps, oldest first; ErrNotFound if there is no such
// window.
//
// The layout uses the window's current settings: if they changed (a
// model switch or a new limit lays the window out anew), the steps before
// the change are as the current settings would have laid them out, not
// as they were shown then. References of messages with no content are
// not written to the store, and not reported. The cost is that of
// rebuilding the layout (what Status does once per version: every message
// read with its content) plus one look at the segments per step.
func (m *Manager) History(ctx context.Context, key store.WindowKey) (Settings, store.Window, []HistoryStep, error) {
	_, s, err := m.settings(ctx, key)
	if err != nil {
		return s, store.Window{}, nil, err
	}
	w, items, readmits, err := m.eng.Store().WindowLedger(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return s, w, nil, fmt.Errorf("no window for agent %q of session %q (open it first): %w", key.AgentID, key.SessionID, store.ErrNotFound)
	}
	if err != nil {
		return s, w, nil, err
	}
	msgs, err := m.messages(ctx, items)
	if err != nil {
		return s, w, nil, err
	}
	lo := &laidOut{items: items, version: w.Version, created: w.CreatedAt, markers: map[string]string{}}
	if lo.layout, err = m.newLayout(key, s, lo); err != nil {
		return s, w, nil, err
	}
	// before are the runs behind markers after the last step, by places
	// in the layout; a run's reference ID is a function of its places, so
	// the places name it and the ID (a hash of the run's entries) is
	// computed for new runs only.
	before := map[[2]int]bool{}
	var steps []HistoryStep
	observe := func(st HistoryStep) {
		now := map[[2]int]bool{}
		for _, seg := range lo.layout.Segments() {
			if seg.Kind == Kept {
				continue
			}
			at := [2]int{seg.From, seg.To}
			now[at] = true
			if before[at] || !hasContent(items[seg.From:seg.To]) {
				continue
			}
			st.Evicted = append(st.Evicted, Ref{ID: lo.refID(key, lo.layout.Messages(), seg.From, seg.To), Marker: seg.Marker,
				From: items[seg.From].Pos, To: items[seg.To-1].Pos + 1, Messages: seg.To - seg.From, Tokens: seg.Tokens})
		}
		before = now
		st.Used = lo.layout.Tokens()
		steps = append(steps, st)
	}
	// As laidOutAt: the re-admissions made before the item at place next
	// was appended are taken back before it.
	r := 0
	readmit := func(n, next int) {
		for ; r < len(readmits) && readmits[r].At <= next; r++ {
			rd := readmits[r]
			from := searchPos(items[:n], rd.From)
			to := searchPos(items[:n], rd.To)
			st := HistoryStep{Readmit: &rd}
			if from < to && lo.layout.readmitRecorded(from, to) == nil {
				st.ReadmitRef = lo.refID(key, lo.layout.Messages(), from, to)
			}
			observe(st)
		}
	}
	for i := 0; i < len(msgs); {
		readmit(i, items[i].Pos)
		st := HistoryStep{Version: items[i].Append, Time: items[i].Time}
		for ; i < len(msgs) && items[i].Append == st.Version; i++ {
			if err := lo.layout.Append(msgs[i]); err != nil {
				return s, w, nil, fmt.Errorf("window %s: lay out message %d: %w", key, items[i].Pos, err)
			}
			st.Messages++
			st.Tokens += items[i].Tokens
		}
		observe(st)
	}
	readmit(len(items), int(^uint(0)>>1))
	return s, w, steps, nil
}

// searchPos is the index of the first item at place pos or after.
func searchPos(items []store.WindowItem, pos int) int {
	i, _ := slices.BinarySearchFunc(items, pos, func(it store.WindowItem, p int) int { return cmp.Compare(it.Pos, p) })
	return i
}

// hasContent reports whether any of items holds stored content: a
// reference is written only for runs that do.
func hasContent(items []store.WindowItem) bool {
	for _, it := range items {
		if len(it.EntryIDs) > 0 {
			return true
		}
	}
	return false
}
