package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// listing counts the times a store's windows are listed.
type listing struct {
	store.Store
	lists int
}

func (l *listing) Windows(ctx context.Context, session string) ([]store.Window, error) {
	l.lists++
	return l.Store.Windows(ctx, session)
}

// TestRunRefs_Kept: RunRefs lists the windows once for the runs of
// windows it knows, again for a window made since, and finds a window
// forgotten and made again under the same key as not holding the run.
func TestRunRefs_Kept(t *testing.T) {
	ctx := context.Background()
	s := &listing{Store: sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{})}
	none := func(store.WindowState) ([]store.Eviction, error) { return nil, nil }
	open := func(key store.WindowKey, text string) string {
		if _, err := s.PutWindow(ctx, key, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		e := storetest.Entry(key.SessionID, key.AgentID, store.UserPrompt, text)
		_, items, _, err := s.AppendWindow(ctx, key, store.WindowAppend{Entries: []store.Entry{e},
			Items: []store.WindowItem{{Form: []byte(`{}`), EntryIDs: []string{store.ID(e.Content)}, Tokens: 3}}}, none)
		if err != nil {
			t.Fatal(err)
		}
		return store.RunRefID(key, false, items)
	}
	a, b := store.WindowKey{SessionID: "s1", AgentID: "claude"}, store.WindowKey{SessionID: "s2", AgentID: "claude"}
	idA := open(a, "the first window's message")
	var c store.RunRefs
	for range 3 {
		if ref, err := c.Resolve(ctx, s, idA); err != nil || ref.SessionID != "s1" {
			t.Fatalf("Resolve(%s) = %+v, %v", idA, ref, err)
		}
	}
	if s.lists != 1 {
		t.Errorf("the windows listed %d times for three reads of one run, want once", s.lists)
	}
	idB := open(b, "the second window's message")
	if ref, err := c.Resolve(ctx, s, idB); err != nil || ref.SessionID != "s2" || s.lists != 2 {
		t.Errorf("a window made since: %+v, %v, listed %d times (want 2)", ref, err, s.lists)
	}
	if _, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"s1"}, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	open(a, "another message under the same key")
	if _, err := c.Resolve(ctx, s, idA); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a run of a window forgotten and made again: %v, want ErrNotFound", err)
	}
}
