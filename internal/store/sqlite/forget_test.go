package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// fileHolds reports which of the store's files (the database and its
// write-ahead log) hold any of needles, byte for byte.
func fileHolds(t *testing.T, path string, needles ...string) []string {
	t.Helper()
	var out []string
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				out = append(out, filepath.Base(path+suffix)+": "+n)
			}
		}
	}
	return out
}

// TestRedact_GoneFromFile checks that a redacted string is gone from the
// store's files, not only from its tables: from content, from the terms
// of the full-text tables (lower-cased), from archive records, and from
// the free pages and the log.
func TestRedact_GoneFromFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	s := sqlitetest.OpenPath(t, path, sqlite.Options{})
	const secret = "Zq9SecretToken77"
	var entries []store.Entry
	for i := range 50 {
		text := strings.Repeat("filler words about nothing much in particular\n", 20)
		if i%10 == 3 {
			text += "\n\nthe token is " + secret + " keep it\n"
		}
		e := storetest.Entry("s1", "a", store.ToolResult, text+strings.Repeat("x", i))
		e.Keywords = []string{"kw " + secret}
		entries = append(entries, e)
	}
	if _, err := s.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	err := s.ArchiveWrite(ctx, func(tx store.ArchiveTx) error {
		gv, err := tx.NextGlobal()
		if err != nil {
			return err
		}
		r := store.ArchiveRecord{ID: "ins-1", Kind: store.KindInsight, GV: gv, SessionID: "s1", Text: "found " + secret,
			Body: []byte(`{"insight":"found ` + secret + `"}`)}
		return tx.Append(&r)
	})
	if err != nil {
		t.Fatal(err)
	}
	needles := []string{secret, strings.ToLower(secret)}
	if got := fileHolds(t, path, needles...); len(got) == 0 {
		t.Fatal("the string is not in the store's files before redaction: the test proves nothing")
	}
	rep, err := s.Redact(ctx, store.RedactRequest{Text: []byte(secret), Actor: "op", Rechunk: storetest.Rechunk, Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Entries != 5 || rep.Counts.Occurrences != 50 || rep.Counts.Records != 1 || !rep.Compacted {
		t.Errorf("report = %+v", rep)
	}
	if got := fileHolds(t, path, needles...); len(got) > 0 {
		t.Errorf("after redaction the store's files still hold it: %v", got)
	}
}

// TestForget_GoneFromFile checks the same of a forgotten session's words.
func TestForget_GoneFromFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	s := sqlitetest.OpenPath(t, path, sqlite.Options{})
	var entries []store.Entry
	for i := range 30 {
		entries = append(entries, storetest.Entry("keep", "a", store.Note, strings.Repeat("ordinary words here ", 30)+strings.Repeat("y", i)))
	}
	entries = append(entries, storetest.Entry("gone", "a", store.Note, "the Xylophonist9 confession of session gone"))
	if _, err := s.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	needles := []string{"Xylophonist9", "xylophonist9"}
	if got := fileHolds(t, path, needles...); len(got) == 0 {
		t.Fatal("the words are not in the store's files before forgetting")
	}
	rep, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"gone"}, Actor: "op", Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compacted {
		t.Error("not compacted")
	}
	if got := fileHolds(t, path, needles...); len(got) > 0 {
		t.Errorf("after forgetting the store's files still hold them: %v", got)
	}
}

// TestForget_GoneFromFile_ManyWrites: content written over many
// transactions, interleaved with content that stays, then forgotten, is
// gone from the file. Before, copies were left in the unused space of
// live pages (cells moved as pages split and filled, with secure_delete
// off, as it is outside a purge), which only rewriting the file removes.
func TestForget_GoneFromFile_ManyWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	s := sqlitetest.OpenPath(t, path, sqlite.Options{})
	const secret = "Quokka77VaultKey"
	var sessions []string
	for i := range 30 {
		id := fmt.Sprintf("sv%d", i)
		sessions = append(sessions, id)
		batch := []store.Entry{
			storetest.Entry(id, "a", store.UserPrompt, fmt.Sprintf("message %d: the key is %s, %s", i, secret, strings.Repeat("z", i))),
			storetest.Entry("keep", "a", store.Note, fmt.Sprintf("note %d that stays: %s", i, strings.Repeat("ordinary words ", 20+i))),
		}
		if _, err := s.PutEntries(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if got := fileHolds(t, path, secret); len(got) == 0 {
		t.Fatal("the string is not in the store's files before forgetting: the test proves nothing")
	}
	rep, err := s.Forget(ctx, store.ForgetRequest{Sessions: sessions, Actor: "op", Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compacted || rep.Counts.Entries != 30 {
		t.Errorf("report = %+v", rep)
	}
	if got := fileHolds(t, path, secret, strings.ToLower(secret)); len(got) > 0 {
		t.Errorf("after forgetting the store's files still hold it: %v", got)
	}
	if n, err := s.Search(ctx, store.Query{Text: "stays", Limit: 50}); err != nil || len(n) != 30 {
		t.Errorf("what stays: %d hits, %v", len(n), err)
	}
}

// TestMigrate_Forgetting opens a schema-10 store, without the audit and
// the redacted mark, and checks that migration 12 adds them.
func TestMigrate_Forgetting(t *testing.T) {
	ctx := context.Background()
	e := storetest.Entry("s", "a", store.Note, "a note from before forgetting existed")
	path, res := oldStore(t, []store.Entry{e})
	execSQL(t, path, "DROP TABLE audit", "ALTER TABLE entries DROP COLUMN redacted",
		"DELETE FROM counters WHERE name = 'purges'", "PRAGMA user_version = 10")
	s := sqlitetest.OpenPath(t, path, sqlite.Options{})
	got, err := s.Entries(ctx, []string{res[0].ID})
	if err != nil || got[0].Redacted {
		t.Fatalf("Entries = %+v, %v", got, err)
	}
	if n, err := s.Purges(ctx); err != nil || n != 0 {
		t.Errorf("Purges = %d, %v", n, err)
	}
	if _, err := s.Redact(ctx, store.RedactRequest{Text: []byte("before"), Actor: "op", Rechunk: storetest.Rechunk}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purges(ctx); err != nil || n != 1 {
		t.Errorf("Purges after a redaction = %d, %v", n, err)
	}
	aud, err := s.Audit(ctx, 0, 10)
	if err != nil || len(aud) != 1 || aud[0].Counts.Entries != 1 {
		t.Errorf("Audit = %+v, %v", aud, err)
	}
}

// TestRedact_Interrupted: a redaction whose context ends midway says so,
// and only so; nothing of it is written. Before, its error went on to say
// "transaction has already been committed or rolled back", as if
// something had gone wrong twice.
func TestRedact_Interrupted(t *testing.T) {
	s := sqlitetest.Open(t, sqlite.Options{})
	const secret = "Zq9InterruptMe"
	if _, err := s.PutEntries(context.Background(), []store.Entry{
		storetest.Entry("s1", "a", store.Note, "one "+secret),
		storetest.Entry("s1", "a", store.Note, "two "+secret),
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.Redact(ctx, store.RedactRequest{Text: []byte(secret), Actor: "op", Rechunk: func(e *store.Entry) error {
		cancel()
		time.Sleep(50 * time.Millisecond) // database/sql rolls the transaction back meanwhile
		return storetest.Rechunk(e)
	}})
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "already been committed") {
		t.Errorf("Redact: %v, want context.Canceled alone", err)
	}
	if hits, err := s.Search(context.Background(), store.Query{Text: secret, Limit: 10}); err != nil || len(hits) != 2 {
		t.Errorf("after the interrupted redaction: %d hits, %v; want both entries as they were", len(hits), err)
	}
}
