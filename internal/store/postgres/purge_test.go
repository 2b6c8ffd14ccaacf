package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestForget_WhileWriting forgets sessions on one server while two others
// store the same content in other sessions: every write and every purge
// succeeds (a purge that removes content a writer found stored makes the
// writer run again, not fail), and the totals agree with the rows.
func TestForget_WhileWriting(t *testing.T) {
	url := database(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(context.Background(), url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	purger, writers := open(), []*postgres.Store{open(), open()}
	ctx := context.Background()
	content := func(k int) string { return fmt.Sprintf("shared content number %d", k%5) }
	deadline := time.Now().Add(2 * time.Second)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w, s := range writers {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				e := storetest.Entry(fmt.Sprintf("w%d", i%7), fmt.Sprint(w), store.ToolResult, content(i))
				if _, err := s.PutEntries(ctx, []store.Entry{e}); err != nil {
					fail(err)
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; time.Now().Before(deadline); i++ {
			session := fmt.Sprintf("f%d", i)
			var es []store.Entry
			for k := range 5 {
				es = append(es, storetest.Entry(session, "p", store.ToolResult, content(k)))
			}
			if _, err := purger.PutEntries(ctx, es); err != nil {
				fail(err)
			}
			for _, id := range []string{session, fmt.Sprintf("w%d", i%7)} {
				_, err := purger.Forget(ctx, store.ForgetRequest{Sessions: []string{id}, Actor: "tester"})
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					fail(err)
				}
			}
		}
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	st, err := purger.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// What is left: the content of the sessions not forgotten last.
	var left int64
	for k := range 5 {
		id := store.ID([]byte(content(k)))
		occ, err := purger.Occurrences(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(occ) == 0 {
			t.Errorf("entry %s is stored with no occurrence", id)
		}
		left++
	}
	if st.Entries != left || st.Chunks != left {
		t.Errorf("stats count %d entries and %d chunks, the store holds %d", st.Entries, st.Chunks, left)
	}
}
