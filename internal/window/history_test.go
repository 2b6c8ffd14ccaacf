package window_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// stepOf is what a history step says of a change, and what the change
// itself answered: the window's use after it and the references it made.
type stepOf struct {
	Readmit string
	Used    int
	Evicted []string
}

func refIDs(refs []window.Ref) []string {
	ids := []string{}
	for _, r := range refs {
		ids = append(ids, r.ID)
	}
	return ids
}

// TestManagerHistory: the window's history, replayed from its ledger,
// says after each turn and each re-admission what the append or the
// re-admission answered when it was made: the window's use and the
// references made.
func TestManagerHistory(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, _, _, err := m.History(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the history of no window: %v, want ErrNotFound", err)
	}
	p := window.PolicyFor("claude")
	p.KeepTurns = 1
	p.MaxRefTokens = 700 // about a turn a reference
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 4000, Output: 100, Safety: 100, Policy: &p}); err != nil {
		t.Fatal(err)
	}
	var want []stepOf
	var versions []int64
	for i := range 8 {
		res, err := m.Append(ctx, key, exchange(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, stepOf{Used: res.Used, Evicted: refIDs(res.Evicted)})
		versions = append(versions, res.Version)
		if i == 5 {
			ref := firstRef(t, m, key)
			back, err := m.Readmit(ctx, ref.ID)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, stepOf{Readmit: ref.ID, Used: back.Used, Evicted: refIDs(back.Evicted)})
		}
	}
	evicted := 0
	for _, s := range want {
		evicted += len(s.Evicted)
	}
	if evicted < 2 {
		t.Fatalf("eight turns of 636 tokens in a 3,420-token window made %d references, want 2 or more", evicted)
	}
	_, w, steps, err := m.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var got []stepOf
	var gotVersions []int64
	for _, s := range steps {
		got = append(got, stepOf{Readmit: s.ReadmitRef, Used: s.Used, Evicted: refIDs(s.Evicted)})
		if s.Readmit == nil {
			gotVersions = append(gotVersions, s.Version)
			if s.Messages != 4 || s.Time.IsZero() || s.Tokens <= 0 {
				t.Errorf("turn %d: %d messages of %d tokens at %v", s.Version, s.Messages, s.Tokens, s.Time)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("history (-as the changes answered +replayed):\n%s", diff)
	}
	if diff := cmp.Diff(versions, gotVersions); diff != "" {
		t.Errorf("turn versions (-appends +history):\n%s", diff)
	}
	st, err := m.Status(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if w.Version != st.Version || steps[len(steps)-1].Used != st.Used {
		t.Errorf("history ends at version %d, %d used; the window is at %d, %d used", w.Version, steps[len(steps)-1].Used, st.Version, st.Used)
	}
}
