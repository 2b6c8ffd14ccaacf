package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestWindowAppendKeysExpire: a window keeps an append's key for
// store.AppendKeyTTL; past it, the key goes at the window's next keyed
// append, and the same key is a new append.
func TestWindowAppendKeysExpire(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	st := sqlitetest.OpenPath(t, path, sqlite.Options{})
	key := store.WindowKey{SessionID: "s1", AgentID: "a"}
	if _, err := st.PutWindow(ctx, key, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	keyed := func(k string) store.WindowAppend {
		e := storetest.Entry("s1", "a", store.UserPrompt, "the same message")
		return store.WindowAppend{Key: k, Digest: "d", Entries: []store.Entry{e},
			Items: []store.WindowItem{{Form: []byte(`{"role":"user"}`), EntryIDs: []string{store.ID(e.Content)}, Tokens: 3}}}
	}
	for _, k := range []string{"old", "recent"} {
		if _, _, _, err := st.AppendWindow(ctx, key, keyed(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE window_appends SET created_at = ? WHERE key = 'old'`, time.Now().Add(-store.AppendKeyTTL-time.Minute).UnixNano()); err != nil {
		t.Fatal(err)
	}
	var ae *store.AppendedError
	if _, _, _, err := st.AppendWindow(ctx, key, keyed("recent"), nil); !errors.As(err, &ae) {
		t.Errorf("a key kept an hour: %v, want it replayed", err)
	}
	if _, items, _, err := st.AppendWindow(ctx, key, keyed("old"), nil); err != nil || len(items) != 1 || items[0].Pos != 2 {
		t.Errorf("a key past its day: %+v, %v; want a new append at 2", items, err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM window_appends`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d keys kept, %v; want recent and the new old", n, err)
	}
}
