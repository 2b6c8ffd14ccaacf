package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t testing.TB) store.Store { return sqlitetest.Open(t, sqlite.Options{}) })
}

// TestContract_TinyBudget runs the contract with a search budget so small
// that every query takes the windowed path and the selective-filter path.
func TestContract_TinyBudget(t *testing.T) {
	storetest.Run(t, func(t testing.TB) store.Store {
		return sqlitetest.Open(t, sqlite.Options{Search: sqlite.SearchOptions{MaxPostings: 1, Window: 50, SelectiveFilter: 1 << 30}})
	})
}

func TestOpen_SchemaTooNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engram.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = sqlite.Open(context.Background(), path, sqlite.Options{})
	if !errors.Is(err, store.ErrSchemaTooNew) || !strings.Contains(err.Error(), "upgrade engram") {
		t.Fatalf("Open(newer schema) = %v, want ErrSchemaTooNew telling to upgrade", err)
	}
}

func TestOpen_NotAStore(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("this is not sqlite\n", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(context.Background(), junk, sqlite.Options{}); err == nil || !strings.Contains(err.Error(), "not an engram store") {
		t.Errorf("Open(text file) = %v, want 'not an engram store'", err)
	}
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE customers(id INTEGER)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := sqlite.Open(context.Background(), other, sqlite.Options{}); err == nil || !strings.Contains(err.Error(), "not an engram store") {
		t.Errorf("Open(other app's db) = %v, want 'not an engram store'", err)
	}
}

func TestOpen_Reopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub dir", "odd?name#1.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := storetest.Entry("s", "a", store.Note, "kept across reopen")
	if _, err := s.PutEntries(ctx, []store.Entry{e}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("store file not at %s: %v", path, err)
	}
	s, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	got, err := s.Entries(ctx, []string{store.ID(e.Content)})
	if err != nil || string(got[0].Content) != "kept across reopen" {
		t.Fatalf("after reopen: %v", err)
	}
}

// oldStore makes a store file in a temporary directory, puts the entries
// and then each file change, and closes it: for a migration test to turn
// into what an older engram would have left.
func oldStore(t *testing.T, entries []store.Entry, files ...store.FileChange) (string, []store.PutResult) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.PutEntries(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := s.PutFiles(ctx, []store.FileChange{f}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, res
}

// TestMigrate_RebuildFTS opens a store whose full-text tables hold terms
// made the old way (here: none at all) at schema version 2, and checks that
// the migrations index every chunk again, current and history alike, and
// give conversation entries their context.
func TestMigrate_RebuildFTS(t *testing.T) {
	ctx := context.Background()
	path, _ := oldStore(t, []store.Entry{
		storetest.Entry("s", "a", store.Note, "the parser parsed every request"),
		storetest.Entry("c", "a", store.UserPrompt, "Which dessert did you bake?"),
		storetest.Entry("c", "a", store.AgentResponse, "Panna cotta with coconut milk."),
	}, storetest.Version("a.go", "package a\n\n// quokkas hop\n"), storetest.Version("a.go", "package a\n\n// wombats dig\n"))
	// Undo what migrations 3 to 7 made, as a schema-2 store lacks it (the
	// full-text tables of schema 2 have two columns).
	execSQL(t, path,
		"DROP TABLE chunks_vocab", "DROP TABLE chunks_fts", "DROP TABLE history_fts",
		"CREATE VIRTUAL TABLE chunks_fts USING fts5(body, meta, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2')",
		"CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, row)",
		"CREATE VIRTUAL TABLE history_fts USING fts5(body, meta, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2')",
		"DROP TABLE vectors", "DROP TABLE vector_models", "DROP TABLE blobs", "DROP TABLE access", "DROP TABLE contexts",
		"DROP TABLE arch_versions", "DROP TABLE arch_records", "DROP TABLE arch_superseded", "DROP TABLE arch_usage",
		"DROP TABLE arch_agents", "DROP TABLE arch_events", "DROP TABLE arch_fts",
		"PRAGMA user_version = 2")

	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	for q, history := range map[string]bool{"parsing requests": false, "wombat": false, "quokka": true} {
		hits, err := s.Search(ctx, store.Query{Text: q, Filter: store.Filter{History: history}})
		if err != nil || len(hits) != 1 {
			t.Errorf("after migration, Search(%q, history %v) = %d hits, %v", q, history, len(hits), err)
		}
	}
	if hits, _ := s.Search(ctx, store.Query{Text: "quokka"}); len(hits) != 0 {
		t.Error("an old version came back into default search")
	}
	if hits, _ := s.Search(ctx, store.Query{Text: "dessert"}); len(hits) != 2 {
		t.Errorf("after migration, the answer is not found through its context: %d hits", len(hits))
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

// TestMigrate_ContextsReachBack opens a schema-7 store whose contexts were
// made from one entry back, and checks that migration 8 works them out
// again from up to three and indexes them.
func TestMigrate_ContextsReachBack(t *testing.T) {
	ctx := context.Background()
	path, res := oldStore(t, []store.Entry{
		storetest.Entry("c", "a", store.UserPrompt, "Last week we took the kids to the military memorial downtown."),
		storetest.Entry("c", "a", store.AgentResponse, "How did they take it?"),
		storetest.Entry("c", "a", store.UserPrompt, "They were awestruck and humbled."),
	})
	answer := res[2].ID
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// What migration 6 made of the answer: the question alone. The FTS
	// tables are contentless, so they are emptied and the old contexts
	// are what a rebuild would index.
	r, err := db.Exec("UPDATE contexts SET text = 'How did they take it?' WHERE entry = (SELECT pk FROM entries WHERE id = ?)", answer)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		t.Fatalf("the answer has no context to make old: %d rows", n)
	}
	db.Close()
	execSQL(t, path,
		"INSERT INTO chunks_fts(chunks_fts) VALUES ('delete-all')",
		"INSERT INTO history_fts(history_fts) VALUES ('delete-all')",
		"PRAGMA user_version = 7")

	s := sqlitetest.OpenPath(t, path, sqlite.Options{})
	hits, err := s.Search(ctx, store.Query{Text: "military memorial"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hits {
		ids = append(ids, h.Chunk.EntryID)
	}
	if !slices.Contains(ids, answer) {
		t.Errorf("after migration 8, the answer is not found by the words two turns before it: %v", ids)
	}
}

// execSQL runs statements on a closed store's file, as an older engram
// would have left it.
func execSQL(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestMigrate_IrregularForms opens a schema-8 store, whose full-text
// tables hold terms made before irregular forms were mapped to their base
// form (here: emptied, as a rebuild is what tells them apart), and checks
// that migration 9 indexes the entries and the archive's records again
// with today's terms: "buy" finds "bought".
func TestMigrate_IrregularForms(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutEntries(ctx, []store.Entry{
		storetest.Entry("c", "a", store.UserPrompt, "I bought an air fryer ten days ago."),
	}); err != nil {
		t.Fatal(err)
	}
	err = s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
		return tx.Append(&store.ArchiveRecord{ID: "ins-1", Kind: store.KindInsight, GV: 1,
			SessionID: "s", AgentID: "a", Text: "the children's build broke when we upgraded"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, path,
		"INSERT INTO chunks_fts(chunks_fts) VALUES ('delete-all')",
		"INSERT INTO history_fts(history_fts) VALUES ('delete-all')",
		"INSERT INTO arch_fts(arch_fts) VALUES ('delete-all')",
		"PRAGMA user_version = 8")

	s = sqlitetest.OpenPath(t, path, sqlite.Options{})
	for _, q := range []string{"what did I buy", "bought"} {
		if hits, err := s.Search(ctx, store.Query{Text: q}); err != nil || len(hits) != 1 {
			t.Errorf("after migration 9, Search(%q) = %d hits, %v", q, len(hits), err)
		}
	}
	if hits, err := s.ArchiveSearch(ctx, "child breaks", nil, 10); err != nil || len(hits) != 1 {
		t.Errorf("after migration 9, the archive's record is not found: %d hits, %v", len(hits), err)
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

// TestMigrate_EntryTerms opens a schema-9 store, whose files have no term
// sets: migration 10 writes one for each file of several chunks (and none
// for a message of several), and the whole-entry coverage reads it.
func TestMigrate_EntryTerms(t *testing.T) {
	ctx := context.Background()
	path, res := oldStore(t, []store.Entry{
		storetest.Entry("s", "a", store.CodeFile, "func retryBackoff() {}\n\n// waits for the budget\n"),
		storetest.Entry("s", "a", store.Note, "the retry budget"),
		storetest.Entry("s", "a", store.ToolResult, "retry 1 failed\n\nretry 2 failed\n"),
	})
	sets := func() int {
		t.Helper()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM entry_terms`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := sets(); n != 1 {
		t.Fatalf("a new store holds %d term sets, want 1 (the file's)", n)
	}
	execSQL(t, path, "DROP TABLE entry_terms", "PRAGMA user_version = 9")

	s := sqlitetest.OpenPath(t, path, sqlite.Options{})
	if n := sets(); n != 1 {
		t.Fatalf("after migration 10, %d term sets, want 1 (the file's)", n)
	}
	got, err := s.EntryCoverage(ctx, "retry backoff budget", []string{res[0].ID, res[1].ID})
	if err != nil {
		t.Fatal(err)
	}
	if c := got[res[0].ID]; c != 1 {
		t.Errorf("after migration 10, the file's coverage is %v, want 1", c)
	}
	if c := got[res[1].ID]; !(0 < c && c < 1) {
		t.Errorf("after migration 10, the note's coverage is %v, want between 0 and 1", c)
	}
}

// TestIntegrityCheckAfterMerges: sixteen archive writes make FTS5 merge
// the full-text table's segments; readers that searched it before still
// find everything, and the integrity check does not take the merged-away
// segments a pooled reader remembers for damage (it did, on a pooled
// connection).
func TestIntegrityCheckAfterMerges(t *testing.T) {
	ctx := context.Background()
	s := sqlitetest.Open(t, sqlite.Options{})
	for i := 1; i <= 40; i++ {
		err := s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
			return tx.Append(&store.ArchiveRecord{ID: fmt.Sprintf("ins-%d", i), Kind: store.KindInsight, GV: uint64(i),
				SessionID: "s", AgentID: "a", Text: fmt.Sprintf("prefer zz%d over the rest", i)})
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.IntegrityCheck(ctx); err != nil {
			t.Fatalf("after %d writes: %v", i, err)
		}
		hits, err := s.ArchiveSearch(ctx, "prefer rest", nil, 100)
		if err != nil || len(hits) != i {
			t.Fatalf("after %d writes: %d hits, %v", i, len(hits), err)
		}
	}
}

// TestMigrate_AgentCredentials opens a schema-10 store, whose agents have
// neither credential nor key: migration 11 makes each agent its own
// credential, and keys can then be issued and found.
func TestMigrate_AgentCredentials(t *testing.T) {
	ctx := context.Background()
	path, _ := oldStore(t, nil)
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
		return tx.PutAgent(store.ArchiveAgent{ID: "o1", Name: "o1", SessionID: "s1"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, path,
		"DROP INDEX arch_agents_key", "DROP INDEX arch_agents_credential",
		"ALTER TABLE arch_agents DROP COLUMN credential", "ALTER TABLE arch_agents DROP COLUMN key_hash",
		"PRAGMA user_version = 10")

	s = sqlitetest.OpenPath(t, path, sqlite.Options{})
	a, err := s.ArchiveAgent(ctx, "o1")
	if err != nil || a.Credential != "o1" || a.HasKey {
		t.Fatalf("after migration 11, o1 = %+v, %v: want its own credential and no key", a, err)
	}
	if err := s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error { return tx.SetAgentKey("o1", "h") }); err != nil {
		t.Fatal(err)
	}
	if a, err := s.ArchiveAgentByKey(ctx, "h"); err != nil || a.ID != "o1" {
		t.Errorf("agent by key after migration 11 = %+v, %v", a, err)
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
}

// TestOpen_Private: a new store and its WAL and shared-memory files are
// readable by their owner only, and an existing store opened with looser
// modes is made private.
func TestOpen_Private(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	s := sqlitetest.OpenPath(t, path, sqlite.Options{})
	if _, err := s.PutEntries(ctx, []store.Entry{storetest.Entry("s", "a", store.Note, "private")}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), perm)
		}
	}
	old := filepath.Join(t.TempDir(), "old.db")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sqlitetest.OpenPath(t, old, sqlite.Options{})
	if fi, err := os.Stat(old); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("an existing 0644 store after open: %v, %v", fi.Mode().Perm(), err)
	}
	// A file that is not a store, named by mistake, is refused and left
	// as it was.
	notes := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notes, []byte("hello, not a database at all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(ctx, notes, sqlite.Options{}); err == nil {
		t.Fatal("a text file opened as a store")
	}
	if fi, err := os.Stat(notes); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a file that is not a store, after the refusal: mode %v, %v", fi.Mode().Perm(), err)
	}
}

// TestMigrate_RollingSummaries: a schema-14 store, with a window, migrates
// to the rolling summaries' schema with its window whole (seed 002's gate,
// check 5: migration continuity).
func TestMigrate_RollingSummaries(t *testing.T) {
	ctx := context.Background()
	path, _ := oldStore(t, nil)
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := s.PutWindow(ctx, key, []byte(`{"model":"m"}`)); err != nil {
		t.Fatal(err)
	}
	e := storetest.Entry("s", "a", store.UserPrompt, "why does the lexer drop comments?")
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{Entries: []store.Entry{e},
		Items: []store.WindowItem{{Form: []byte(`{"role":"user"}`), EntryIDs: []string{store.ID(e.Content)}, Tokens: 9}}}, nil); err != nil {
		t.Fatal(err)
	}
	wantW, wantItems, _, err := s.WindowLedger(ctx, key)
	if err != nil || s.Close() != nil {
		t.Fatal(err)
	}
	execSQL(t, path, "DROP TABLE window_summaries", "PRAGMA user_version = 14")
	s = sqlitetest.OpenPath(t, path, sqlite.Options{})
	w, items, _, err := s.WindowLedger(ctx, key)
	if err != nil || w.Version != wantW.Version || string(w.Settings) != string(wantW.Settings) || len(items) != 1 ||
		items[0].EntryIDs[0] != wantItems[0].EntryIDs[0] || items[0].Tokens != 9 {
		t.Fatalf("after the migration: %+v, %+v, %v", w, items, err)
	}
	if epoch, sums, err := s.WindowSummaries(ctx, key); err != nil || epoch != 0 || len(sums) != 0 {
		t.Fatalf("summaries after the migration: %d, %+v, %v", epoch, sums, err)
	}
	if _, err := s.PutWindowSummaries(ctx, key, 0, []store.WindowSummary{{Level: 1, From: 0, To: 1, Digest: "d", Text: "the lexer", By: "extractive"}}); err != nil {
		t.Fatal(err)
	}
}

// TestMigrate_VectorSeq opens a schema-16 store, whose vectors have no
// write order, and checks that migration 17 numbers them by chunk ID (the
// order they were loaded in), and that what is written after it, for a
// lower chunk ID too, comes after them.
func TestMigrate_VectorSeq(t *testing.T) {
	ctx := context.Background()
	path, _ := oldStore(t, []store.Entry{storetest.Entry("s", "a", store.Note, "otters"),
		storetest.Entry("s", "a", store.Note, "badgers"), storetest.Entry("s", "a", store.Note, "stoats")})
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := s.PendingChunks(ctx, "m", 0, 10)
	if err != nil || len(pending) != 3 {
		t.Fatalf("PendingChunks = %d, %v", len(pending), err)
	}
	// Written in the order c, b: schema 16 lists them by chunk ID.
	for _, c := range []store.ChunkText{pending[2], pending[1]} {
		if err := s.PutVectors(ctx, "m", 2, []store.ChunkVector{{ID: c.ID, Vector: []float32{1, 0}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, path, "DROP INDEX vectors_seq", "ALTER TABLE vectors DROP COLUMN seq", "PRAGMA user_version = 16")

	s = sqlitetest.OpenPath(t, path, sqlite.Options{})
	got, err := s.Vectors(ctx, "m", 0, 10)
	if err != nil || len(got) != 2 || got[0].ID != pending[1].ID || got[0].Seq != pending[1].ID ||
		got[1].ID != pending[2].ID || got[1].Seq != pending[2].ID {
		t.Fatalf("after the migration: %+v, %v; want chunks %d, %d numbered by their IDs", got, err, pending[1].ID, pending[2].ID)
	}
	if err := s.PutVectors(ctx, "m", 2, []store.ChunkVector{{ID: pending[0].ID, Vector: []float32{0, 1}}}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Vectors(ctx, "m", pending[2].ID, 10)
	if err != nil || len(got) != 1 || got[0].ID != pending[0].ID || got[0].Seq != pending[2].ID+1 {
		t.Fatalf("a vector written after the migration: %+v, %v", got, err)
	}
}

// TestMigrate_WindowNext: a schema-18 store's window, migrated, knows
// the greatest place it gave: one past its last item's; the last message
// forgotten since, it stays past it.
func TestMigrate_WindowNext(t *testing.T) {
	ctx := context.Background()
	path, _ := oldStore(t, nil)
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := s.PutWindow(ctx, key, []byte(`{"model":"m"}`)); err != nil {
		t.Fatal(err)
	}
	appendOne := func(s *sqlite.Store, text string) store.WindowItem {
		t.Helper()
		e := storetest.Entry("s", "a", store.UserPrompt, text)
		_, items, _, err := s.AppendWindow(ctx, key, store.WindowAppend{Entries: []store.Entry{e},
			Items: []store.WindowItem{{Form: []byte(`{"role":"user"}`), EntryIDs: []string{store.ID(e.Content)}, Tokens: 9}}}, nil)
		if err != nil || len(items) != 1 {
			t.Fatalf("append: %+v, %v", items, err)
		}
		return items[0]
	}
	appendOne(s, "why does the lexer drop comments?")
	appendOne(s, "and the parser?")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	execSQL(t, path, "ALTER TABLE windows DROP COLUMN next_pos", "PRAGMA user_version = 18")
	s = sqlitetest.OpenPath(t, path, sqlite.Options{})
	if w, err := s.Window(ctx, key); err != nil || w.Next != 2 {
		t.Fatalf("after the migration: Next is %d, %v; want 2", w.Next, err)
	}
	last := appendOne(s, "and the printer?")
	if _, err := s.Forget(ctx, store.ForgetRequest{Entries: last.EntryIDs, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if w, err := s.Window(ctx, key); err != nil || last.Pos != 2 || w.Next != 3 {
		t.Errorf("the message at place %d forgotten: Next is %d, %v; want 3", last.Pos, w.Next, err)
	}
}
