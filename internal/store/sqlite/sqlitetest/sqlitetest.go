// Package sqlitetest opens real SQLite stores for other packages' tests.
package sqlitetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/engramhq/engram/internal/store/sqlite"
)

// Open opens a new store with opts in a temporary directory of t. When
// the test ends, the store is checked for integrity and closed; a failure
// of either fails the test.
func Open(t testing.TB, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	return OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), opts)
}

// OpenPath is Open for the store at path, new or not.
func OpenPath(t testing.TB, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.IntegrityCheck(context.Background()); err != nil {
			t.Error(err)
		}
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return st
}
