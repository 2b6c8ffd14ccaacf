package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// TestSnapshotBodiesOnce: a body shared by turns of two windows is stored
// once, and goes when the last snapshot that has it goes.
func TestSnapshotBodiesOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	st := sqlitetest.OpenPath(t, path, sqlite.Options{})
	keys := []store.WindowKey{{SessionID: "s1", AgentID: "a"}, {SessionID: "s1", AgentID: "b"}}
	body := []byte(`[{"role":"user","blocks":[{"type":"text","text":"the same context"}]}]`)
	for _, k := range keys {
		if _, err := st.PutWindow(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := st.PutSnapshot(ctx, store.WindowSnapshot{WindowKey: k, Body: body, Report: []byte(`{}`)}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	count := func(q string) int {
		t.Helper()
		var n int
		if err := db.QueryRow(q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if b, s := count(`SELECT count(*) FROM snapshot_bodies`), count(`SELECT count(*) FROM window_snapshots`); b != 1 || s != 6 {
		t.Fatalf("%d bodies for %d snapshots, want 1 for 6", b, s)
	}
	// Keeping one snapshot per window leaves the body; a new body with
	// keep 1 in both windows takes it away.
	other := []byte(`[{"role":"user","blocks":[{"type":"text","text":"another context"}]}]`)
	for _, k := range keys {
		if _, err := st.PutSnapshot(ctx, store.WindowSnapshot{WindowKey: k, Body: body, Report: []byte(`{}`)}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if b, s := count(`SELECT count(*) FROM snapshot_bodies`), count(`SELECT count(*) FROM window_snapshots`); b != 1 || s != 2 {
		t.Fatalf("keeping one each: %d bodies for %d snapshots, want 1 for 2", b, s)
	}
	for _, k := range keys {
		if _, err := st.PutSnapshot(ctx, store.WindowSnapshot{WindowKey: k, Body: other, Report: []byte(`{}`)}, 1); err != nil {
			t.Fatal(err)
		}
	}
	var hash string
	if err := db.QueryRow(`SELECT hash FROM snapshot_bodies`).Scan(&hash); err != nil || hash != store.ID(other) || count(`SELECT count(*) FROM snapshot_bodies`) != 1 {
		t.Fatalf("the body left: %s, %v; want only %s", hash, err, store.ID(other))
	}
}
