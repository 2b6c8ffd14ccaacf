package archive

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// eachBackend runs fn on an archive over a new SQLite store and, when
// ENGRAM_TEST_POSTGRES names a server, over a new PostgreSQL database.
// wrap, if set, wraps the store the archive writes through.
func eachBackend(t *testing.T, wrap func(store.ArchiveStore) store.ArchiveStore, fn func(t *testing.T, a *Archive, st store.ArchiveStore)) {
	t.Run("SQLite", func(t *testing.T) {
		var st store.ArchiveStore = sqlitetest.Open(t, sqlite.Options{})
		if wrap != nil {
			st = wrap(st)
		}
		a, err := New(st, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fn(t, a, st)
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		pg, err := postgres.Open(t.Context(), pgtest.Database(t), postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := pg.Close(); err != nil {
				t.Error(err)
			}
		})
		var st store.ArchiveStore = pg
		if wrap != nil {
			st = wrap(st)
		}
		a, err := New(st, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fn(t, a, st)
	})
}

// globalRecords returns the texts of every global record of the archive.
func globalRecords(t *testing.T, a *Archive) []string {
	t.Helper()
	res, err := a.ReadGlobal(t.Context(), GlobalRead{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res.Records {
		out = append(out, string(r.Kind)+": "+r.Text())
	}
	return out
}

const (
	wrapPattern  = "Wrap errors with context using fmt.Errorf and %w so that callers can still match them with errors.Is."
	neverPattern = "Never wrap errors with fmt.Errorf; return them as they are"
)

// TestAsk_StoresAllOrNothing: the stores of one request commit together
// or not at all. A store that fails when it runs (here a pattern that
// contradicts an active one without naming it, which only the
// transaction can tell) undoes the stores before it, and the error names
// the query that failed and says that nothing was written.
func TestAsk_StoresAllOrNothing(t *testing.T) {
	eachBackend(t, nil, func(t *testing.T, a *Archive, _ store.ArchiveStore) {
		ctx := t.Context()
		h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
		first := ok(t)(h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: wrapPattern}))
		before, err := a.Versions(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		in := `@arch:store:learnings{"insight":"the insight stored before a contradiction"}; ` +
			`@arch:store:files{"path":"internal/x.go","summary":"a file state stored before it"}; ` +
			`@arch:store:pattern{"category":"error.handling","pattern":"` + neverPattern + `"}`
		ans, err := a.Ask(ctx, h, in, AskOptions{})
		var ce *ConflictError
		if !errors.As(err, &ce) || len(ce.Records) != 1 || ce.Records[0] != first.ID {
			t.Fatalf("Ask = %v; want a *ConflictError naming %s", err, first.ID)
		}
		for _, want := range []string{"query 3 of 3", `@arch:store:patterns{"category":"error.handling"`, "contradicts", "nothing was written"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if len(ans) != 0 {
			t.Errorf("Ask answered %+v with its error; nothing was written, so nothing to answer", ans)
		}
		if after, _ := a.Versions(ctx, "s1"); after != before {
			t.Errorf("a refused request moved the versions %+v -> %+v", before, after)
		}
		if got := globalRecords(t, a); len(got) != 1 {
			t.Errorf("the global history holds %q; want only the first pattern", got)
		}
		if s, err := a.ReadSession(ctx, "s1", 0); err != nil || len(s.Files) != 0 {
			t.Errorf("session state %+v, %v; want no file", s.Files, err)
		}
		// The same request without the contradiction writes all three.
		in = strings.Replace(in, neverPattern, "Return errors to the caller rather than logging them", 1)
		ans, err = a.Ask(ctx, h, in, AskOptions{})
		if err != nil || len(ans) != 3 {
			t.Fatalf("Ask = %+v, %v", ans, err)
		}
		for i, want := range []string{"created", "created", "created"} {
			if ans[i].Write == nil || ans[i].Write.Status != want {
				t.Errorf("answer %d wrote %+v; want %s", i, ans[i].Write, want)
			}
		}
		if got := globalRecords(t, a); len(got) != 3 {
			t.Errorf("the global history holds %q; want three records", got)
		}
	})
}

// failingStore is a real store whose archive transactions fail the
// append of the failAt-th record of a transaction (from 1), as a store
// whose disk fills up mid-transaction does.
type failingStore struct {
	store.ArchiveStore
	failAt  int
	appends atomic.Int32
}

var errDiskFull = errors.New("disk full (injected)")

func (s *failingStore) ArchiveWrite(ctx context.Context, fn func(tx store.ArchiveTx) error) error {
	return s.ArchiveStore.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
		n := 0
		return fn(appendHook{tx, func() error {
			if n++; n == s.failAt {
				s.appends.Add(1)
				return errDiskFull
			}
			return nil
		}})
	})
}

type appendHook struct {
	store.ArchiveTx
	before func() error
}

func (t appendHook) Append(r *store.ArchiveRecord) error {
	if err := t.before(); err != nil {
		return err
	}
	return t.ArchiveTx.Append(r)
}

// TestAsk_StoreErrorWritesNothing: a store failing for the store's own
// reason (here its second append in a transaction) leaves nothing of the
// request, and its error is the store's.
func TestAsk_StoreErrorWritesNothing(t *testing.T) {
	var fs *failingStore
	wrap := func(st store.ArchiveStore) store.ArchiveStore {
		fs = &failingStore{ArchiveStore: st, failAt: 2}
		return fs
	}
	eachBackend(t, wrap, func(t *testing.T, a *Archive, _ store.ArchiveStore) {
		ctx := t.Context()
		h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
		_, err := a.Ask(ctx, h, `@arch:store:learnings{"insight":"cache keys name their version"}; @arch:store:decision{"decision":"keep one writer per store"}`, AskOptions{})
		if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), "query 2 of 2") || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("Ask = %v; want the injected error, naming query 2 and saying nothing was written", err)
		}
		if fs.appends.Load() == 0 {
			t.Fatal("the injected failure never ran")
		}
		if got := globalRecords(t, a); len(got) != 0 {
			t.Errorf("the global history holds %q after a failed request", got)
		}
	})
}

// TestAsk_StoresSeeEachOther: later stores of a request see the earlier
// ones, as a second request would: a duplicate merges into the record
// the request created (by its hash, or near by trigrams), a
// contradiction of it is refused, and a recall after a store finds it
// while a recall before it does not.
func TestAsk_StoresSeeEachOther(t *testing.T) {
	eachBackend(t, nil, func(t *testing.T, a *Archive, _ store.ArchiveStore) {
		ctx := t.Context()
		h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
		ans, err := a.Ask(ctx, h, `@arch:recall:patterns?q=wrap errors; `+
			`@arch:store:pattern{"category":"error.handling","pattern":"`+wrapPattern+`"}; `+
			`@arch:store:pattern{"category":"error.handling","pattern":"  `+wrapPattern+`"}; `+
			`@arch:store:pattern{"category":"error.handling","pattern":"Wrap errors with context using fmt.Errorf and %w so that calers can still match them with errors.Is"}; `+
			`@arch:recall:patterns?q=wrap errors`, AskOptions{})
		if err != nil || len(ans) != 5 {
			t.Fatalf("Ask = %+v, %v", ans, err)
		}
		if len(ans[0].Records) != 0 {
			t.Errorf("a recall before the stores found %+v", ans[0].Records)
		}
		id := ans[1].Write.ID
		if ans[1].Write.Status != "created" {
			t.Errorf("first store: %+v", ans[1].Write)
		}
		if w := ans[2].Write; w.Status != "merged" || w.ID != id || w.Merged.Method != "hash" {
			t.Errorf("the same pattern again in the request: %+v; want merged into %s by hash", w, id)
		}
		if w := ans[3].Write; w.Status != "merged" || w.ID != id || w.Merged.Method != "trigram" {
			t.Errorf("a near duplicate in the request: %+v; want merged into %s by trigram", w, id)
		}
		if len(ans[4].Records) != 1 || ans[4].Records[0].ID != id || ans[4].GV != ans[3].GV {
			t.Errorf("a recall after the stores: %+v (gv %d); want %s at gv %d", ans[4].Records, ans[4].GV, id, ans[3].GV)
		}
		uses, err := a.Usage(ctx, []string{id})
		if err != nil || uses[id] != 2 {
			t.Errorf("uses = %v, %v; want 2 merges counted", uses, err)
		}
		// A contradiction of a pattern the same request stores is refused,
		// and the request with it.
		_, err = a.Ask(ctx, h, `@arch:store:pattern{"category":"style.naming","pattern":"Always name receivers with one letter"}; `+
			`@arch:store:pattern{"category":"style.naming","pattern":"Never name receivers with one letter"}`, AskOptions{})
		var ce *ConflictError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "query 2 of 2") {
			t.Errorf("a request contradicting itself: %v; want a conflict at query 2", err)
		}
		if got := globalRecords(t, a); len(got) != 1 {
			t.Errorf("the global history holds %q; want the one pattern", got)
		}
	})
}

// searchFailingStore is a real store whose full-text search of the
// archive fails, as a store that goes away between two statements does.
type searchFailingStore struct{ store.ArchiveStore }

var errSearchDown = errors.New("search down (injected)")

func (searchFailingStore) ArchiveSearch(context.Context, string, []store.RecordKind, int) ([]store.ArchiveHit, error) {
	return nil, errSearchDown
}

// TestAsk_ReadFailingAroundStores: a read that fails before the stores
// of its request commit refuses the request, which writes nothing; one
// that fails after them cannot unwrite them, so it is answered FAILED
// beside the stores' answers.
func TestAsk_ReadFailingAroundStores(t *testing.T) {
	wrap := func(st store.ArchiveStore) store.ArchiveStore { return searchFailingStore{st} }
	eachBackend(t, wrap, func(t *testing.T, a *Archive, _ store.ArchiveStore) {
		ctx := t.Context()
		h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
		_, err := a.Ask(ctx, h, `@arch:recall:learnings?q=cache; @arch:store:learnings{"insight":"cache keys name their version"}`, AskOptions{})
		if !errors.Is(err, errSearchDown) || !strings.Contains(err.Error(), "query 1 of 2") || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("Ask = %v; want the search's error at query 1, nothing written", err)
		}
		if got := globalRecords(t, a); len(got) != 0 {
			t.Errorf("the global history holds %q after a refused request", got)
		}
		ans, err := a.Ask(ctx, h, `@arch:store:learnings{"insight":"cache keys name their version"}; @arch:recall:learnings?q=cache`, AskOptions{})
		if err != nil || len(ans) != 2 {
			t.Fatalf("Ask = %+v, %v", ans, err)
		}
		if ans[0].Write == nil || ans[0].Write.Status != "created" || ans[1].Status != StatusFailed || !strings.Contains(ans[1].Text, errSearchDown.Error()) {
			t.Errorf("answers %+v; want the store created and the recall FAILED with its reason", ans)
		}
		if got := globalRecords(t, a); len(got) != 1 {
			t.Errorf("the global history holds %q; want the insight", got)
		}
	})
}

// TestAsk_TransactionFails: when the transaction of a request's stores
// fails as a whole (here registering the agent its first write was to
// register, which another request registered meanwhile in another
// session), the error says so, and nothing was written.
func TestAsk_TransactionFails(t *testing.T) {
	eachBackend(t, nil, func(t *testing.T, a *Archive, _ store.ArchiveStore) {
		ctx := t.Context()
		h, err := a.ConnectOnWrite(ctx, AgentSpec{ID: "x1", SessionID: "s1"})
		if err != nil {
			t.Fatal(err)
		}
		register(t, a, AgentSpec{ID: "x1", SessionID: "s2"})
		_, err = a.Ask(ctx, h, `@arch:recall:patterns; @arch:store:learnings{"insight":"one"}; @arch:store:decision{"decision":"two"}`, AskOptions{})
		var ie *IsolationError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "nothing was written: the transaction of the request's 2 stores") {
			t.Fatalf("Ask = %v; want an *IsolationError of the transaction, saying nothing was written", err)
		}
		if got := globalRecords(t, a); len(got) != 0 {
			t.Errorf("the global history holds %q", got)
		}
	})
}

// TestAsk_RequestOverRateLimit: a request whose stores by themselves pass
// a rate limit is refused, writing nothing, with a rate limit that no
// wait lifts (the same request would fail again) and says to split it;
// one under the limit is written.
func TestAsk_RequestOverRateLimit(t *testing.T) {
	ctx := t.Context()
	a, _ := newArchive(t, Options{Limits: Limits{PatternsPerMinute: 2}})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	in := `@arch:store:pattern{"category":"testing.unit","pattern":"name each test after the behaviour it checks"}; ` +
		`@arch:store:pattern{"category":"database.orm","pattern":"load relations eagerly in list views"}`
	_, err := a.Ask(ctx, h, in+`; @arch:store:pattern{"category":"auth.tokens","pattern":"validate JWT expiry on every request"}`, AskOptions{})
	var rl *RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter != 0 || !strings.Contains(err.Error(), "smaller requests") || !strings.Contains(err.Error(), "query 3 of 3") {
		t.Fatalf("Ask = %v (%+v); want a rate limit at query 3 that no wait lifts", err, rl)
	}
	if got := globalRecords(t, a); len(got) != 0 {
		t.Errorf("the global history holds %q", got)
	}
	if ans, err := a.Ask(ctx, h, in, AskOptions{}); err != nil || len(ans) != 2 {
		t.Fatalf("Ask = %+v, %v", ans, err)
	}
	// Over the limit now because of earlier requests: waiting helps.
	_, err = a.Ask(ctx, h, `@arch:store:pattern{"category":"auth.tokens","pattern":"validate JWT expiry on every request"}`, AskOptions{})
	if !errors.As(err, &rl) || rl.RetryAfter == 0 {
		t.Errorf("Ask = %v; want a rate limit with a retry-after", err)
	}
}
