package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// testArchiveWriteIsolation writes from many goroutines at once, so that
// writes share batches where a backend group-commits, with every other
// write failing after it appended: the failures leave nothing (not even a
// version) and the others all land.
func testArchiveWriteIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
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

// testArchiveState checks the queries the archivalist's state is read
// with: the newest record per key at a session version, supersession and
// usage beside records, agents, events, and hostile search text.
func testArchiveState(t *testing.T, s store.Store) {
	ctx := context.Background()
	write := func(fn func(tx store.ArchiveTx) error) {
		t.Helper()
		if err := s.ArchiveWrite(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	file := func(key, body string) func(tx store.ArchiveTx) error {
		return func(tx store.ArchiveTx) error {
			sv, err := tx.NextSession("s1")
			if err != nil {
				return err
			}
			return tx.Append(&store.ArchiveRecord{Kind: store.KindFile, SV: sv, SessionID: "s1", Key: key, Body: []byte(body)})
		}
	}
	write(file("a.go", `{"v":1}`)) // sv 1
	write(file("b.go", `{"v":1}`)) // sv 2
	write(file("a.go", `{"v":2}`)) // sv 3
	pref := func(kind store.RecordKind) func(tx store.ArchiveTx) error {
		return func(tx store.ArchiveTx) error {
			sv, err := tx.NextSession("s1")
			if err != nil {
				return err
			}
			return tx.Append(&store.ArchiveRecord{Kind: kind, SV: sv, SessionID: "s1", Key: "k", Body: []byte(`{}`)})
		}
	}
	write(pref(store.KindWant))   // sv 4
	write(pref(store.KindReject)) // sv 5: replaces the want of the same key
	latest := func(upTo uint64) map[string]string {
		t.Helper()
		recs, err := s.ArchiveRecords(ctx, store.RecordQuery{SessionID: "s1", Latest: true, UpToSV: upTo,
			Kinds: []store.RecordKind{store.KindFile, store.KindWant, store.KindReject}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range recs {
			out[string(r.Kind)+":"+r.Key] = string(r.Body)
		}
		return out
	}
	if got := latest(0); len(got) != 3 || got["file:a.go"] != `{"v":2}` || got["reject:k"] == "" {
		t.Errorf("latest state = %v", got)
	}
	if got := latest(2); len(got) != 2 || got["file:a.go"] != `{"v":1}` {
		t.Errorf("state at sv 2 = %v", got)
	}
	if _, err := s.ArchiveRecords(ctx, store.RecordQuery{Latest: true}); err == nil {
		t.Error("Latest without a session was accepted")
	}

	write(func(tx store.ArchiveTx) error {
		for _, id := range []string{"pat-1", "pat-2"} {
			gv, err := tx.NextGlobal()
			if err != nil {
				return err
			}
			if err := tx.Append(&store.ArchiveRecord{ID: id, Kind: store.KindPattern, GV: gv, Category: "error.handling",
				Text: "wrap errors NEAR \"quotes\" (parens) -minus"}); err != nil {
				return err
			}
		}
		if err := tx.Supersede("pat-1", "pat-2"); err != nil {
			return err
		}
		return tx.Use("pat-2", time.Unix(1700000000, 0))
	})
	err := s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error { return tx.Supersede("pat-1", "pat-2") })
	var ce *store.ConflictError
	if !errors.As(err, &ce) {
		t.Errorf("superseding twice: %v", err)
	}
	active, err := s.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindPattern}, Category: "error", Active: true})
	if err != nil || len(active) != 1 || active[0].ID != "pat-2" || active[0].Uses != 1 {
		t.Errorf("active patterns = %+v, %v", active, err)
	}
	all, _ := s.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindPattern}, Newest: true, Limit: 1, Offset: 1})
	if len(all) != 1 || all[0].ID != "pat-1" || all[0].SupersededBy != "pat-2" {
		t.Errorf("offset read = %+v", all)
	}
	for _, q := range []string{`"`, `NEAR(`, `-minus`, `(parens)`, `*`, ``} {
		if _, err := s.ArchiveSearch(ctx, q, nil, 10); err != nil {
			t.Errorf("ArchiveSearch(%q): %v", q, err)
		}
	}

	write(func(tx store.ArchiveTx) error {
		if err := tx.PutAgent(store.ArchiveAgent{ID: "o1", SessionID: "s1", Name: "o1"}); err != nil {
			return err
		}
		return tx.AppendEvent(&store.ArchiveEvent{Type: "agent_register", SessionID: "s1", AgentID: "o1"})
	})
	err = s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error { return tx.PutAgent(store.ArchiveAgent{ID: "o1", SessionID: "s2"}) })
	if !errors.As(err, &ce) {
		t.Errorf("registering an id twice: %v", err)
	}
	if _, err := s.ArchiveAgent(ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown agent: %v", err)
	}
	if ags, err := s.ArchiveAgents(ctx, "s1"); err != nil || len(ags) != 1 {
		t.Errorf("agents = %+v, %v", ags, err)
	}
	if evs, err := s.ArchiveEvents(ctx, -1, 5); err != nil || len(evs) != 1 || evs[0].Type != "agent_register" {
		t.Errorf("events = %+v, %v", evs, err)
	}
	testArchiveCredentials(t, s)
}

// testArchiveCredentials: an agent's credential defaults to itself, keys
// are found by their hash and replaced, and records filter by the
// credential of the agents that wrote them.
func testArchiveCredentials(t *testing.T, s store.Store) {
	ctx := context.Background()
	err := s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
		if err := tx.PutAgent(store.ArchiveAgent{ID: "k1", SessionID: "sk", Name: "k1"}); err != nil {
			return err
		}
		if err := tx.PutAgent(store.ArchiveAgent{ID: "k2", SessionID: "sk", Name: "k2", ParentID: "k1", Credential: "k1"}); err != nil {
			return err
		}
		if err := tx.SetAgentKey("k1", "hash-1"); err != nil {
			return err
		}
		if err := tx.SetAgentKey("k1", "hash-2"); err != nil {
			return err
		}
		if err := tx.SetAgentKey("nobody", "hash-3"); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("key for an unknown agent: %v", err)
		}
		for i, by := range []string{"k1", "k2", "o1"} {
			gv, err := tx.NextGlobal()
			if err != nil {
				return err
			}
			r := store.ArchiveRecord{ID: fmt.Sprintf("ins-%d", gv), Kind: store.KindInsight, GV: gv, SessionID: "sk", AgentID: by,
				Text: fmt.Sprintf("insight %d", i), Body: []byte("{}"), CreatedAt: time.Now()}
			if err := tx.Append(&r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := s.ArchiveAgent(ctx, "k1"); err != nil || a.Credential != "k1" || !a.HasKey {
		t.Errorf("k1 = %+v, %v: want its own credential and a key", a, err)
	}
	if a, err := s.ArchiveAgentByKey(ctx, "hash-2"); err != nil || a.ID != "k1" {
		t.Errorf("agent by key = %+v, %v", a, err)
	}
	for _, h := range []string{"hash-1", ""} {
		if _, err := s.ArchiveAgentByKey(ctx, h); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("agent by key %q: %v, want ErrNotFound", h, err)
		}
	}
	recs, err := s.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindInsight}, Credential: "k1"})
	if err != nil || len(recs) != 2 || recs[0].AgentID != "k1" || recs[1].AgentID != "k2" {
		t.Errorf("records of credential k1 = %+v, %v", recs, err)
	}
}
