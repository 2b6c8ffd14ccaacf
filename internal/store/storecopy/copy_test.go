package storecopy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/storecopy"
	"github.com/engramhq/engram/internal/store/storetest"
)

// backend is a store that can be copied from and into.
type backend interface {
	store.Store
	storecopy.Target
	IntegrityCheck(ctx context.Context) error
}

// opener makes a new empty store of one backend.
type opener struct {
	name string
	open func(t *testing.T) backend
}

func sqliteOpener() opener {
	return opener{"sqlite", func(t *testing.T) backend {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}}
}

// openers are the backends this test can reach.
func openers() []opener { return append([]opener{sqliteOpener()}, moreOpeners...) }

// moreOpeners are added by the files of other backends' tests.
var moreOpeners []opener

// TestCopy copies a store holding some of everything between every pair
// of backends, and checks that the copy reads as the original does.
func TestCopy(t *testing.T) {
	for _, from := range openers() {
		for _, to := range openers() {
			t.Run(from.name+"_to_"+to.name, func(t *testing.T) {
				src, dst := from.open(t), to.open(t)
				populate(t, src)
				ctx := context.Background()
				var tables []string
				var steps []string
				report, err := storecopy.Copy(ctx, src, dst, storecopy.Progress{
					Table: func(table string, rows int64, took time.Duration) { tables = append(tables, table) },
					Step:  func(what string) { steps = append(steps, what) },
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(tables) != len(storecopy.Tables) {
					t.Errorf("progress told of %d tables, want %d", len(tables), len(storecopy.Tables))
				}
				if want := []string{"building the full-text index", "verifying"}; !slices.Equal(steps, want) {
					t.Errorf("progress told of steps %q, want %q", steps, want)
				}
				rows := map[string]int64{}
				for _, tr := range report.Tables {
					rows[tr.Name] = tr.Rows
				}
				for _, name := range []string{"entries", "occurrences", "chunks", "files", "vectors", "arch_records", "arch_events", "window_items", "window_snapshots", "refs", "audit"} {
					if rows[name] == 0 {
						t.Errorf("table %s: no rows copied; populate should have written some", name)
					}
				}
				if err := dst.IntegrityCheck(ctx); err != nil {
					t.Error(err)
				}
				sameReads(t, src, dst)
				// A second copy into the same target is refused, and changes nothing.
				if _, err := storecopy.Copy(ctx, src, dst, storecopy.Progress{}); err == nil {
					t.Error("a copy into a store that holds one: no error")
				}
				if got, err := storecopy.Summarize(ctx, dst); err != nil || !cmp.Equal(got, report) {
					t.Errorf("after a refused copy the target changed: %v %s", err, cmp.Diff(report, got))
				}
				// The copy goes on as a store: its sequences and counters follow
				// on from the original's.
				after := storetest.Entry("s1", "claude", store.UserPrompt, "a prompt written after the copy")
				want, err := src.PutEntries(ctx, []store.Entry{after})
				if err != nil {
					t.Fatal(err)
				}
				got, err := dst.PutEntries(ctx, []store.Entry{after})
				if err != nil || !cmp.Equal(got, want) {
					t.Errorf("a prompt after the copy: %+v %v, want %+v as in the original", got, err, want)
				}
				if err := dst.IntegrityCheck(ctx); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

// TestCopy_NotEmpty refuses a copy into a target holding any row at all,
// whichever table holds it, and leaves the target as it was.
func TestCopy_NotEmpty(t *testing.T) {
	ctx := context.Background()
	for _, to := range openers() {
		src := sqliteOpener().open(t)
		populate(t, src)
		for _, c := range []struct {
			table string
			write func(s backend) error
		}{
			{"settings", func(s backend) error { return s.PutSetting(ctx, "embed.model", "x") }},
			{"blobs", func(s backend) error { return s.PutBlob(ctx, "model", []byte{1}) }},
			{"sessions", func(s backend) error { return s.PutSession(ctx, store.Session{ID: "s9"}) }},
			{"audit", func(s backend) error {
				// What a forgotten session leaves: the forget's audit row,
				// and the session's archive version.
				if _, err := s.PutEntries(ctx, []store.Entry{storetest.Entry("s1", "claude", store.UserPrompt, "forget me")}); err != nil {
					return err
				}
				_, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"s1"}, Actor: "test"})
				return err
			}},
		} {
			t.Run(to.name+"_"+c.table, func(t *testing.T) {
				dst := to.open(t)
				if err := c.write(dst); err != nil {
					t.Fatal(err)
				}
				before, err := storecopy.Summarize(ctx, dst)
				if err != nil {
					t.Fatal(err)
				}
				if rows(before)[c.table] == 0 {
					t.Fatalf("the write left no row in %s: %v", c.table, rows(before))
				}
				_, err = storecopy.Copy(ctx, src, dst, storecopy.Progress{})
				var ne *storecopy.NotEmptyError
				if !errors.As(err, &ne) || rows(before)[ne.Table] == 0 {
					t.Errorf("copy into a store holding rows %v: %v, want a NotEmptyError naming one of them", rows(before), err)
				}
				if after, err := storecopy.Summarize(ctx, dst); err != nil || !cmp.Equal(after, before) {
					t.Errorf("after a refused copy the target changed: %v %s", err, cmp.Diff(before, after))
				}
			})
		}
	}
}

// TestCopy_VerifyFails loses a row on the way into the target: the
// verification, inside the load's transaction, fails the copy, and the
// target holds nothing of it.
func TestCopy_VerifyFails(t *testing.T) {
	ctx := context.Background()
	for _, to := range openers() {
		t.Run(to.name, func(t *testing.T) {
			src, dst := sqliteOpener().open(t), to.open(t)
			populate(t, src)
			empty, err := storecopy.Summarize(ctx, dst)
			if err != nil {
				t.Fatal(err)
			}
			_, err = storecopy.Copy(ctx, src, lossy{dst, "audit"}, storecopy.Progress{})
			if err == nil || !strings.Contains(err.Error(), "verify: table audit") {
				t.Fatalf("a copy that lost an audit row: %v, want its verification to fail", err)
			}
			if got, err := storecopy.Summarize(ctx, dst); err != nil || !cmp.Equal(got, empty) {
				t.Errorf("after a failed verification the target holds rows: %v %s", err, cmp.Diff(empty, got))
			}
			// Nothing of it is left to refuse the next copy.
			if _, err := storecopy.Copy(ctx, src, dst, storecopy.Progress{}); err != nil {
				t.Errorf("a copy after the failed one: %v", err)
			}
		})
	}
}

// TestCopy_SourceRetried: a source that runs its read again (as the
// PostgreSQL backend does after a lost connection) fails the copy, saying
// so, rather than writing the first run's rows twice; the target holds
// nothing of it.
func TestCopy_SourceRetried(t *testing.T) {
	ctx := context.Background()
	src, dst := sqliteOpener().open(t), sqliteOpener().open(t)
	populate(t, src)
	empty, err := storecopy.Summarize(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	_, err = storecopy.Copy(ctx, retried{src}, dst, storecopy.Progress{})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("a copy whose source read twice: %v, want it refused as interrupted", err)
	}
	if got, err := storecopy.Summarize(ctx, dst); err != nil || !cmp.Equal(got, empty) {
		t.Errorf("after the failed copy the target holds rows: %v %s", err, cmp.Diff(empty, got))
	}
}

// retried is a source whose read runs twice, as after a lost connection.
type retried struct{ backend }

func (r retried) ReadTables(ctx context.Context, fn func(read func(t storecopy.Table, row func(values []any) error) error) error) error {
	return r.backend.ReadTables(ctx, func(read func(t storecopy.Table, row func(values []any) error) error) error {
		_ = fn(read) // the first run, "lost"
		return fn(read)
	})
}

// lossy is a target that drops the last row of one table on the way in.
type lossy struct {
	backend
	table string
}

func (l lossy) Load(ctx context.Context, fill, check func(storecopy.Loader) error) error {
	return l.backend.Load(ctx, func(ld storecopy.Loader) error { return fill(lossyLoader{ld, l.table}) }, check)
}

type lossyLoader struct {
	storecopy.Loader
	table string
}

func (l lossyLoader) Write(t storecopy.Table, next func() ([]any, bool, error)) error {
	if t.Name != l.table {
		return l.Loader.Write(t, next)
	}
	var held []any
	return l.Loader.Write(t, func() ([]any, bool, error) {
		for {
			v, ok, err := next()
			if err != nil || !ok {
				return nil, false, err // the row held is dropped
			}
			if held == nil {
				held = v
				continue
			}
			v, held = held, v
			return v, true, nil
		}
	})
}

func rows(r storecopy.Report) map[string]int64 {
	m := map[string]int64{}
	for _, t := range r.Tables {
		m[t.Name] = t.Rows
	}
	return m
}

// sameReads checks that two stores answer the contract's reads alike.
func sameReads(t *testing.T, a, b store.Store) {
	t.Helper()
	ctx := context.Background()
	check := func(what string, read func(s store.Store) (any, error)) {
		t.Helper()
		x, err := read(a)
		if err != nil {
			t.Fatalf("%s of the original: %v", what, err)
		}
		y, err := read(b)
		if err != nil {
			t.Fatalf("%s of the copy: %v", what, err)
		}
		if d := cmp.Diff(x, y); d != "" {
			t.Errorf("%s differs (-original +copy):\n%s", what, d)
		}
	}
	check("stats", func(s store.Store) (any, error) {
		st, err := s.Stats(ctx)
		// Where, how big and of which schema differ by backend.
		st.Location, st.SchemaVersion, st.SizeBytes, st.FreeBytes = "", 0, 0, 0
		return st, err
	})
	for _, q := range []string{"parseConfig", "timeout retry", "database connection pool", "cookie"} {
		// The same chunks are found. Their order may differ: SQLite's
		// FTS5 leaves the rows deleted from a contentless table in its
		// BM25 statistics (row count and total length; here 21 rows
		// counted for the 14 left after a forget and a file version
		// leaving default search), and a copy builds the index afresh.
		check("search "+q, func(s store.Store) (any, error) {
			hits, err := s.Search(ctx, store.Query{Text: q, Limit: 100})
			var ids []string
			for _, h := range hits {
				ids = append(ids, fmt.Sprintf("%s/%d", h.Chunk.EntryID, h.Chunk.Ordinal))
			}
			slices.Sort(ids)
			return ids, err
		})
	}
	check("turns", func(s store.Store) (any, error) { return s.TurnRange(ctx, "s1", 0, 0) })
	check("files", func(s store.Store) (any, error) { return s.Files(ctx, store.FileFilter{}) })
	check("vectors", func(s store.Store) (any, error) { return s.Vectors(ctx, "test-model", 0, 100) })
	check("records", func(s store.Store) (any, error) { return s.ArchiveRecords(ctx, store.RecordQuery{}) })
	check("archive search", func(s store.Store) (any, error) {
		hits, err := s.ArchiveSearch(ctx, "retry the connection", nil, 10)
		var ids []string
		for _, h := range hits {
			ids = append(ids, h.Record.ID)
		}
		return ids, err
	})
	check("events", func(s store.Store) (any, error) { return s.ArchiveEvents(ctx, 0, 100) })
	check("agents", func(s store.Store) (any, error) { return s.ArchiveAgents(ctx, "") })
	check("window", func(s store.Store) (any, error) {
		w, items, readmits, err := s.WindowLedger(ctx, store.WindowKey{SessionID: "s1", AgentID: "claude"})
		return []any{w, items, readmits}, err
	})
	check("snapshots", func(s store.Store) (any, error) {
		return s.Snapshots(ctx, store.WindowKey{SessionID: "s1", AgentID: "claude"}, 0)
	})
	check("reference", func(s store.Store) (any, error) { return s.Reference(ctx, "ref-1") })
	check("audit", func(s store.Store) (any, error) { return s.Audit(ctx, 0, 100) })
	check("blob", func(s store.Store) (any, error) { return s.Blob(ctx, "model") })
	check("empty blob", func(s store.Store) (any, error) {
		b, err := s.Blob(ctx, "empty")
		return fmt.Sprintf("%q", b), err // nil and empty alike
	})
}

// populate writes some of everything a store keeps.
func populate(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var entries []store.Entry
	for i, text := range []string{
		"How do I set a timeout on the database connection pool?",
		"func parseConfig(path string) (Config, error) {\n\treturn load(path)\n}\n\nThe pool retries a failed connection three times.",
		"Ran the tests: TestParseConfig passed.",
		"Why does the cookie parser drop the last value?",
		"readSetCookies splits on semicolons.\n\nA binary value: \x00\x01\xff.",
	} {
		typ := store.AgentResponse
		if i%3 == 0 {
			typ = store.UserPrompt
		}
		e := storetest.Entry("s1", "claude", typ, text)
		e.MsgID = fmt.Sprintf("m-%d", i)
		e.Files = []string{"internal/db/pool.go"}
		e.Keywords = []string{"timeout"}
		e.Metadata = map[string]any{"n": float64(i)}
		entries = append(entries, e)
	}
	entries = append(entries, storetest.Entry("s2", "codex", store.UserPrompt, "A prompt of another session about the pool."))
	res, err := s.PutEntries(ctx, entries)
	must(err)
	must(s.PutLinks(ctx, []store.Link{{FromID: res[1].ID, ToID: res[0].ID, Kind: store.LinkDerivedFrom}}))
	must(s.PutSession(ctx, store.Session{ID: "s1", Name: "first"}))
	must(s.PutAgent(ctx, store.Agent{SessionID: "s1", ID: "claude", Model: "opus"}))

	must(s.PutFiles(ctx, []store.FileChange{
		storetest.Version("internal/db/pool.go", "package db\n\n// Pool holds connections with a timeout.\nfunc NewPool() *Pool { return nil }\n"),
		storetest.Version("README.md", "# Project\n\nA cookie parser.\n"),
	}))
	must(s.PutFiles(ctx, []store.FileChange{
		storetest.Version("internal/db/pool.go", "package db\n\n// Pool holds connections with a timeout and retries.\nfunc NewPool() *Pool { return &Pool{} }\n"),
	}))

	var vecs []store.ChunkVector
	pending, err := s.PendingChunks(ctx, "test-model", 0, 100)
	must(err)
	for i, c := range pending {
		vecs = append(vecs, store.ChunkVector{ID: c.ID, Vector: []float32{float32(i), 0.5, -1}})
	}
	must(s.PutVectors(ctx, "test-model", 3, vecs))
	must(s.RecordAccess(ctx, []int64{pending[0].ID}, time.Unix(1_700_000_100, 0)))
	must(s.PutBlob(ctx, "model", []byte{0, 1, 2, 255}))
	must(s.PutBlob(ctx, "empty", []byte{})) // an empty BLOB, not NULL
	must(s.PutSetting(ctx, "embed.model", "test-model"))

	must(s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
		if err := tx.PutAgent(store.ArchiveAgent{ID: "a1", Name: "claude", SessionID: "s1", Model: "opus", Role: "engineer"}); err != nil {
			return err
		}
		for i, text := range []string{"Retry the connection with backoff", "Never log the token", "The pool timeout is 5 s"} {
			gv, err := tx.NextGlobal()
			if err != nil {
				return err
			}
			body, _ := json.Marshal(map[string]string{"text": text})
			r := store.ArchiveRecord{ID: fmt.Sprintf("p-%d", i), Kind: store.KindPattern, GV: gv, SessionID: "s1", AgentID: "a1",
				Category: "db", Hash: fmt.Sprintf("h%d", i), Text: text, Body: body}
			if err := tx.Append(&r); err != nil {
				return err
			}
			if err := tx.AppendEvent(&store.ArchiveEvent{Type: "pattern_add", GV: gv, SessionID: "s1", AgentID: "a1", RecordID: r.ID}); err != nil {
				return err
			}
		}
		sv, err := tx.NextSession("s1")
		if err != nil {
			return err
		}
		return tx.Append(&store.ArchiveRecord{Kind: store.KindResume, SV: sv, SessionID: "s1", AgentID: "a1", Text: "resume here", Body: []byte(`{}`)})
	}))

	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	_, err = s.PutWindow(ctx, key, []byte(`{"limit":1000}`))
	must(err)
	a := store.WindowAppend{Key: "turn-1", Digest: "digest of turn 1"} // a key, copied too
	for _, text := range []string{"window message one", "window message two", "window message three"} {
		e := storetest.Entry(key.SessionID, key.AgentID, store.UserPrompt, text)
		a.Entries = append(a.Entries, e)
		a.Items = append(a.Items, store.WindowItem{Form: []byte(`{"role":"user"}`), EntryIDs: []string{store.ID(e.Content)}, Tokens: e.TokenCount})
	}
	_, items, _, err := s.AppendWindow(ctx, key, a, nil)
	must(err)
	evict := func(st store.WindowState) ([]store.Eviction, error) {
		ids := slices.Concat(items[0].EntryIDs, items[1].EntryIDs)
		return []store.Eviction{{From: 0, To: 2, Ref: store.Reference{ID: "ref-1", Type: store.RefConversation,
			SessionID: key.SessionID, AgentID: key.AgentID, ContentIDs: ids, TurnFrom: 1, TurnTo: 2, Summary: "the first two"}}}, nil
	}
	_, _, err = s.RelayWindow(ctx, key, evict)
	must(err)
	_, err = s.PutWindowSummaries(ctx, key, 0, []store.WindowSummary{{Level: 1, From: 0, To: 2, Digest: "d", Text: "two messages", Tokens: 3, By: "extractive"}})
	must(err)
	_, err = s.PutSnapshot(ctx, store.WindowSnapshot{WindowKey: key, Body: []byte(`[{"role":"user"}]`), Version: 1, Report: []byte(`{}`)}, 0)
	must(err)

	_, err = s.Forget(ctx, store.ForgetRequest{Entries: []string{res[2].ID}, Actor: "test"})
	must(err)
}
