package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

// TestDerivedWrite_Synchronous: a derived write commits at
// synchronous=NORMAL, and the writer connection is back at FULL after it,
// whether it committed or failed, so that no other write goes unsynced.
func TestDerivedWrite_Synchronous(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "d.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	const normal, full = 1, 2
	level := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) int {
		t.Helper()
		var n int
		if err := q.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := level(s.w); got != full {
		t.Fatalf("writer at synchronous=%d before, want FULL (%d)", got, full)
	}
	failed := errors.New("the write failed")
	for _, want := range []error{nil, failed} {
		during := 0
		err := s.write(store.Derived(ctx), func(tx *sql.Tx) error {
			during = level(tx)
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO blobs (name, data, created_at) VALUES ('x', x'01', 1)`); err != nil {
				return err
			}
			return want
		})
		if !errors.Is(err, want) {
			t.Fatalf("derived write: %v, want %v", err, want)
		}
		if during != normal {
			t.Errorf("derived write at synchronous=%d, want NORMAL (%d)", during, normal)
		}
		if got := level(s.w); got != full {
			t.Errorf("writer at synchronous=%d after a derived write (error %v), want FULL (%d)", got, want, full)
		}
		during = 0
		if err := s.write(ctx, func(tx *sql.Tx) error { during = level(tx); return nil }); err != nil {
			t.Fatal(err)
		}
		if during != full {
			t.Errorf("the next write at synchronous=%d, want FULL (%d)", during, full)
		}
	}
}
