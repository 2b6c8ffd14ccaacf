package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
)

// openServers opens n stores on one database, each with its own pool, as
// n engram servers would.
func openServers(t testing.TB, dsn string, n int) []*postgres.Store {
	t.Helper()
	out := make([]*postgres.Store, n)
	for i := range out {
		s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out[i] = s
	}
	return out
}

// Several servers write the archive at once: global records, records of
// their own sessions, and bare events, each write sleeping a little
// before it commits. Readers on other servers poll all the while, and
// must only ever see a prefix of the archive in commit order: global
// versions 1..n with no gap, each session's versions 1..k with no gap, no
// version without its record, and an event tail (ArchiveEvents after the
// last seq seen) that in the end has missed no event.
func TestArchiveWrite_CommitOrderAcrossServers(t *testing.T) {
	const (
		writers      = 4 // servers
		perWriter    = 2 // goroutines on each
		writesPerGor = 30
	)
	dsn := database(t)
	ctx := t.Context()
	servers := openServers(t, dsn, writers+2)
	var done atomic.Bool
	var writes sync.WaitGroup
	errs := make(chan error, writers*perWriter+2)
	for w := range writers {
		s := servers[w]
		for g := range perWriter {
			writes.Go(func() {
				session := fmt.Sprintf("s%d-%d", w, g)
				for i := range writesPerGor {
					err := s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
						e := store.ArchiveEvent{Type: "note", SessionID: session}
						switch i % 3 {
						case 0: // a global record
							gv, err := tx.NextGlobal()
							if err != nil {
								return err
							}
							r := store.ArchiveRecord{ID: fmt.Sprintf("ins-%d", gv), Kind: store.KindInsight, GV: gv,
								SessionID: session, Text: "insight"}
							if err := tx.Append(&r); err != nil {
								return err
							}
							e.Type, e.GV, e.RecordID = "global", gv, r.ID
						case 1: // a record of the writer's session
							sv, err := tx.NextSession(session)
							if err != nil {
								return err
							}
							r := store.ArchiveRecord{Kind: store.KindFile, SV: sv, SessionID: session, Key: fmt.Sprint(i)}
							if err := tx.Append(&r); err != nil {
								return err
							}
							e.Type, e.SV = "session", sv
						}
						if err := tx.AppendEvent(&e); err != nil {
							return err
						}
						// Hold the transaction open a little, so that
						// writes overlap if nothing orders them.
						time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
						return nil
					})
					if err != nil {
						errs <- fmt.Errorf("writer %s: %w", session, err)
						return
					}
				}
			})
		}
	}
	var readers sync.WaitGroup
	tails := make([][]store.ArchiveEvent, 2)
	for ri, s := range servers[writers:] {
		readers.Go(func() {
			var tail []store.ArchiveEvent
			var after int64
			for last := false; !last; {
				last = done.Load()
				if err := checkPrefix(ctx, s); err != nil {
					errs <- fmt.Errorf("reader %d: %w", ri, err)
					return
				}
				for {
					evs, err := s.ArchiveEvents(ctx, after, 50)
					if err != nil {
						errs <- err
						return
					}
					if len(evs) == 0 {
						break
					}
					tail = append(tail, evs...)
					after = evs[len(evs)-1].Seq
				}
				if err := checkEvents(tail); err != nil {
					errs <- fmt.Errorf("reader %d's tail: %w", ri, err)
					return
				}
			}
			tails[ri] = tail
		})
	}
	writes.Wait()
	done.Store(true)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	// At the end: everything, unique and contiguous, and every tail saw
	// every event.
	const total = writers * perWriter * writesPerGor
	s := servers[0]
	all, err := s.ArchiveEvents(ctx, 0, 10*total)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != total {
		t.Fatalf("%d events, want %d", len(all), total)
	}
	if err := checkEvents(all); err != nil {
		t.Error(err)
	}
	for ri, tail := range tails {
		if !slices.EqualFunc(tail, all, func(a, b store.ArchiveEvent) bool { return a.Seq == b.Seq }) {
			t.Errorf("reader %d's tail has %d events, the archive %d: the tail skipped some", ri, len(tail), len(all))
		}
	}
	gv, _, err := s.ArchiveVersions(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	globals := writers * perWriter * ((writesPerGor + 2) / 3)
	if gv != uint64(globals) {
		t.Errorf("global version %d, want %d", gv, globals)
	}
	if err := checkPrefix(ctx, s); err != nil {
		t.Error(err)
	}
}

// checkPrefix reads the versions, then the records, then the versions
// again: the records must be a gapless prefix in seq order, and hold
// every version read before them and none read only after.
func checkPrefix(ctx context.Context, s *postgres.Store) error {
	gv0, _, err := s.ArchiveVersions(ctx, "")
	if err != nil {
		return err
	}
	recs, err := s.ArchiveRecords(ctx, store.RecordQuery{})
	if err != nil {
		return err
	}
	gv1, _, err := s.ArchiveVersions(ctx, "")
	if err != nil {
		return err
	}
	var globals uint64
	svs := map[string]uint64{}
	for _, r := range recs {
		if r.Kind.Global() {
			if r.GV != globals+1 {
				return fmt.Errorf("global version %d follows %d in seq order", r.GV, globals)
			}
			globals = r.GV
			continue
		}
		if r.SV != svs[r.SessionID]+1 {
			return fmt.Errorf("session %s: version %d follows %d in seq order", r.SessionID, r.SV, svs[r.SessionID])
		}
		svs[r.SessionID] = r.SV
	}
	if globals < gv0 || globals > gv1 {
		return fmt.Errorf("records up to global version %d, read between versions %d and %d", globals, gv0, gv1)
	}
	return nil
}

// checkEvents checks that events in seq order carry gapless versions.
func checkEvents(evs []store.ArchiveEvent) error {
	var gv uint64
	svs := map[string]uint64{}
	for i, e := range evs {
		if i > 0 && e.Seq <= evs[i-1].Seq {
			return fmt.Errorf("event seq %d after %d", e.Seq, evs[i-1].Seq)
		}
		switch e.Type {
		case "global":
			if e.GV != gv+1 {
				return fmt.Errorf("event %d: global version %d follows %d", e.Seq, e.GV, gv)
			}
			gv = e.GV
		case "session":
			if e.SV != svs[e.SessionID]+1 {
				return fmt.Errorf("event %d: session %s version %d follows %d", e.Seq, e.SessionID, e.SV, svs[e.SessionID])
			}
			svs[e.SessionID] = e.SV
		}
	}
	return nil
}

// A write whose fn panics rolls back and releases the archive lock: the
// next write, from this server or another, goes through.
func TestArchiveWrite_Panic(t *testing.T) {
	dsn := database(t)
	servers := openServers(t, dsn, 2)
	ctx := t.Context()
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the panic of fn", p)
			}
		}()
		_ = servers[0].ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
			if _, err := tx.NextGlobal(); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	for i, s := range servers {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var gv uint64
		err := s.ArchiveWrite(wctx, func(tx store.ArchiveTx) (err error) {
			gv, err = tx.NextGlobal()
			return err
		})
		cancel()
		if err != nil || gv != uint64(i+1) {
			t.Errorf("server %d: write after a panic: version %d, %v; want %d", i, gv, err, i+1)
		}
	}
}

// BenchmarkArchiveWrite measures acknowledged archive writes per second
// from 8 goroutines on one server: one transaction per call, as the store
// does, against the group commit of the SQLite backend (a test-only
// prototype, postgres.GroupWriter).
func BenchmarkArchiveWrite(b *testing.B) {
	write := func(tx store.ArchiveTx) error {
		gv, err := tx.NextGlobal()
		if err != nil {
			return err
		}
		r := store.ArchiveRecord{ID: fmt.Sprintf("ins-%d", gv), Kind: store.KindInsight, GV: gv, SessionID: "s",
			Text: "an insight about wrapping errors with the operation"}
		if err := tx.Append(&r); err != nil {
			return err
		}
		return tx.AppendEvent(&store.ArchiveEvent{Type: "insight", GV: gv, SessionID: "s", RecordID: r.ID})
	}
	const goroutines = 8
	for _, mode := range []string{"tx-per-call", "group-commit"} {
		b.Run(mode, func(b *testing.B) {
			s := openServers(b, database(b), 1)[0]
			ctx := b.Context()
			run := s.ArchiveWrite
			if mode == "group-commit" {
				run = postgres.NewGroupWriter(ctx, s).Write
			}
			b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := run(ctx, write); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
		})
	}
}
