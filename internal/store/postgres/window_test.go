package postgres_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/storetest"
)

// A window opened and appended to through two servers at once loses
// nothing, never interleaves a turn, and numbers its versions without a
// gap, with an evictor evicting as it goes.
func TestWindow_TwoServers(t *testing.T) {
	ss := servers(t, 2)
	ctx := t.Context()
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			if _, err := s.PutWindow(ctx, key, []byte("{}")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	w0, err := ss[0].Window(ctx, key)
	if err != nil || w0.Version != 2 {
		t.Fatalf("after two servers opened it: %+v, %v", w0, err)
	}
	// Keeps six messages in the window, evicting the oldest one by one.
	evict := func(st store.WindowState) ([]store.Eviction, error) {
		var evs []store.Eviction
		for _, it := range st.Live[:max(0, len(st.Live)-6)] {
			evs = append(evs, store.Eviction{From: it.Pos, To: it.Pos + 1, Ref: store.Reference{ID: "r-" + strconv.Itoa(it.Pos),
				Type: store.RefConversation, SessionID: key.SessionID, AgentID: key.AgentID, ContentIDs: it.EntryIDs}})
		}
		return evs, nil
	}
	const writers, appends, per = 4, 8, 3
	for w := range writers {
		s := ss[w%len(ss)]
		wg.Go(func() {
			for a := range appends {
				var app store.WindowAppend
				for i := range per {
					text := fmt.Sprintf("writer %d append %d message %d", w, a, i)
					e := storetest.Entry(key.SessionID, key.AgentID, store.UserPrompt, text)
					app.Entries = append(app.Entries, e)
					app.Items = append(app.Items, store.WindowItem{Form: []byte(`{}`), EntryIDs: []string{store.ID(e.Content)}, Tokens: 5})
				}
				if _, _, _, err := s.AppendWindow(ctx, key, app, evict); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	w, items, _, err := ss[1].WindowLedger(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != writers*appends*per || w.Version != w0.Version+writers*appends {
		t.Fatalf("%d items at version %d; want %d at %d", len(items), w.Version, writers*appends*per, w0.Version+writers*appends)
	}
	live := 0
	for i := 0; i < len(items); i += per {
		if i > 0 && items[i].Append != items[i-1].Append+1 {
			t.Errorf("item %d: append %d after %d", i, items[i].Append, items[i-1].Append)
		}
		for j := range per {
			if it := items[i+j]; it.Pos != i+j || it.Append != items[i].Append {
				t.Fatalf("item %d: pos %d, append %d: a turn was interleaved (its first: %d)", i+j, it.Pos, it.Append, items[i].Append)
			}
		}
	}
	for _, it := range items {
		if it.RefID == "" {
			live++
		} else if it.RefID != "r-"+strconv.Itoa(it.Pos) {
			t.Errorf("item %d under %s", it.Pos, it.RefID)
		}
	}
	if live != 6 {
		t.Errorf("%d items in the window, want 6", live)
	}
}

// A body dropped by one window's keep while another window's snapshot
// refers to it anew, through another server, stays: each window keeps
// one snapshot, of two bodies in turn, so that each drops the body the
// other may be taking up.
func TestSnapshot_SharedBodyKeep(t *testing.T) {
	ss := servers(t, 2)
	ctx := t.Context()
	keys := []store.WindowKey{{SessionID: "s", AgentID: "a"}, {SessionID: "s", AgentID: "b"}}
	for _, k := range keys {
		if _, err := ss[0].PutWindow(ctx, k, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 200
	var wg sync.WaitGroup
	for w, key := range keys {
		s := ss[w]
		wg.Go(func() {
			for i := range rounds {
				body := fmt.Appendf(nil, `[{"n":%d}]`, (i+w)%2)
				snap, err := s.PutSnapshot(ctx, store.WindowSnapshot{WindowKey: key, Body: body, Report: []byte("{}")}, 1)
				if err != nil {
					t.Error(err)
					return
				}
				// Only this goroutine drops this window's snapshots.
				if _, err := s.SnapshotAt(ctx, key, snap.Seq); err != nil {
					t.Errorf("round %d: the snapshot just put: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
