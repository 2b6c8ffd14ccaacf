package sqlite_test

import (
	"context"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestPutEntries_ForgottenMeanwhile stores content that is forgotten after
// the write looked it up and before it wrote: the write must store it
// whole, terms included, not take it for stored.
func TestPutEntries_ForgottenMeanwhile(t *testing.T) {
	ctx := context.Background()
	s := sqlitetest.Open(t, sqlite.Options{})
	e := storetest.Entry("s1", "a", store.Note, "a note about tuataras")
	if _, err := s.PutEntries(ctx, []store.Entry{e}); err != nil {
		t.Fatal(err)
	}
	s.SetAfterPrepare(func() {
		s.SetAfterPrepare(nil)
		if _, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"s1"}, Actor: "op"}); err != nil {
			t.Error(err)
		}
	})
	again := e
	again.SessionID = "s2"
	res, err := s.PutEntries(ctx, []store.Entry{again})
	if err != nil {
		t.Fatalf("PutEntries after its content was forgotten meanwhile: %v", err)
	}
	if !res[0].NewContent {
		t.Errorf("result %+v: the content was stored anew", res[0])
	}
	hits, err := s.Search(ctx, store.Query{Text: "tuataras"})
	if err != nil || len(hits) != 1 || hits[0].Occurrence.SessionID != "s2" {
		t.Errorf("Search = %+v, %v", hits, err)
	}
	if st, _ := s.Stats(ctx); st.Entries != 1 || st.ContentBytes != int64(len(e.Content)) {
		t.Errorf("stats = %+v", st)
	}
}
