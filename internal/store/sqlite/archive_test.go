package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// TestArchiveWriteFailureIsolation writes from many goroutines at once, so
// that writes share group-committed batches, with every other write
// failing after it has appended: the failures must leave nothing and the
// others must all be there.
func TestArchiveWriteFailureIsolation(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	errBoom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 200)
	for i := range errs {
		wg.Go(func() {
			errs[i] = s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
				gv, err := tx.NextGlobal()
				if err != nil {
					return err
				}
				r := store.ArchiveRecord{ID: fmt.Sprintf("ins-%d", gv), Kind: store.KindInsight, GV: gv, SessionID: "s",
					Key: fmt.Sprint(i), Text: fmt.Sprintf("insight %d", i)}
				if err := tx.Append(&r); err != nil {
					return err
				}
				if i%2 == 1 {
					return errBoom
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (i%2 == 1) != errors.Is(err, errBoom) {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	recs, err := s.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindInsight}})
	if err != nil {
		t.Fatal(err)
	}
	gv, _, err := s.ArchiveVersions(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 100 || gv != 100 {
		t.Fatalf("%d records, global version %d; want 100 and 100 (failed writes must not take versions)", len(recs), gv)
	}
	for i, r := range recs {
		var k int
		if _, err := fmt.Sscan(r.Key, &k); err != nil || k%2 == 1 || r.GV != uint64(i+1) {
			t.Errorf("record %+v", r)
		}
	}
	hits, err := s.ArchiveSearch(ctx, "insight", nil, 1000)
	if err != nil || len(hits) != 100 {
		t.Errorf("full-text rows: %d, %v", len(hits), err)
	}
}
