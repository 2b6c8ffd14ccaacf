package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
)

// twoEngines opens one store file twice, each with an engine of its own,
// as two engram processes would.
func twoEngines(t *testing.T, opts engine.Options) (a, b *engine.Engine) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "engram.db")
	if opts.Retrieve.Deadline == 0 {
		// As newEngine: searches wait for both signals, which under load
		// (go test -race of several packages) take more than 250 ms.
		opts.Retrieve.Deadline = time.Minute
	}
	var err error
	if a, err = engine.New(sqlitetest.OpenPath(t, path, sqlite.Options{}), opts); err != nil {
		t.Fatal(err)
	}
	if b, err = engine.New(sqlitetest.OpenPath(t, path, sqlite.Options{}), opts); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func sessionsOf(res retrieve.Result) []string {
	var out []string
	for _, h := range res.Hits {
		if !slices.Contains(out, h.Occurrence.SessionID) {
			out = append(out, h.Occurrence.SessionID)
		}
	}
	slices.Sort(out)
	return out
}

// TestForget_TwoEngines forgets a session through one engine and checks
// that the other, which has searched and read it, no longer finds it.
func TestForget_TwoEngines(t *testing.T) {
	ctx := t.Context()
	a, b := twoEngines(t, engine.Options{Embed: engine.EmbedOptions{Corpus: lsa.Options{Dim: 8}}})
	var recs []engine.Record
	for i := range 60 {
		recs = append(recs, engine.Record{Session: fmt.Sprintf("s%d", i%2+1), Agent: "a", Type: store.Note,
			Content: []byte(fmt.Sprintf("note %d on the ingest pipeline and its %s", i, embedTopics[i%3][i%6]))})
	}
	if _, err := a.Add(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Embed(ctx, nil); err != nil {
		t.Fatal(err)
	}
	arA, err := a.Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := arA.Register(ctx, archive.AgentSpec{ID: "a1", SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.UpdateResume(ctx, archive.Resume{Task: "finish the ingest pipeline"}); err != nil {
		t.Fatal(err)
	}
	q := retrieve.Query{Text: "ingest pipeline", Limit: 40}
	res, err := b.Retrieve(ctx, q)
	if err != nil || !slices.Equal(sessionsOf(res), []string{"s1", "s2"}) || !res.Vector {
		t.Fatalf("before: sessions %v, vector %v, %v", sessionsOf(res), res.Vector, err)
	}
	arB, err := b.Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := arB.ReadSession(ctx, "s1", 0); err != nil || st.Resume.Task == "" {
		t.Fatalf("session before: %+v, %v", st, err)
	}

	dry, err := a.Forget(ctx, engine.ForgetRequest{Sessions: []string{"s1"}, Actor: "op", DryRun: true})
	if err != nil || dry.Counts.Occurrences != 30 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	rep, err := a.Forget(ctx, engine.ForgetRequest{Sessions: []string{"s1"}, Actor: "op", Compact: true})
	if err != nil || rep.Counts.Entries != 30 || rep.Counts.Records != 1 {
		t.Fatalf("forget: %+v, %v", rep, err)
	}
	res, err = b.Retrieve(ctx, q)
	if err != nil || !slices.Equal(sessionsOf(res), []string{"s2"}) {
		t.Errorf("after: engine b finds sessions %v, %v", sessionsOf(res), err)
	}
	if st, err := arB.ReadSession(ctx, "s1", 0); err != nil || st.Resume.Task != "" || len(st.Agents) != 0 {
		t.Errorf("engine b reads the forgotten session as %+v, %v", st, err)
	}
	br, err := arB.Briefing(ctx, "s1", archive.Full, nil)
	if err != nil || strings.Contains(br.Text, "ingest pipeline") {
		t.Errorf("engine b's briefing of the forgotten session: %+v, %v", br, err)
	}

	// An entry by a unique prefix; a prefix of nothing changes nothing.
	res, err = b.Retrieve(ctx, q)
	if err != nil || len(res.Hits) == 0 {
		t.Fatal(err)
	}
	id := res.Hits[0].Chunk.EntryID
	if _, err := a.Forget(ctx, engine.ForgetRequest{Entries: []string{"ffffffffff"}, Actor: "op"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown prefix: %v", err)
	}
	if rep, err := a.Forget(ctx, engine.ForgetRequest{Entries: []string{id[:12]}, Actor: "op"}); err != nil || rep.Counts.Entries != 1 {
		t.Errorf("forget by prefix: %+v, %v", rep, err)
	}
	if _, err := b.Entry(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("engine b reads the forgotten entry: %v", err)
	}
	aud, err := b.Audit(ctx, -1, 10)
	if err != nil || len(aud) != 2 || aud[1].Targets[0] != "entry:"+id {
		t.Errorf("audit = %+v, %v", aud, err)
	}
}

// TestRedact_Engine redacts a string from a conversation and an indexed
// file: the file is chunked again by its declarations, counts are exact,
// and a corpus model that learned the string is dropped and trained again
// without it.
func TestRedact_Engine(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Corpus: lsa.Options{Dim: 8}, Batch: 64}})
	const secret = "moonbeamquasar42"
	root := t.TempDir()
	code := "package vault\n\n// Open opens the vault.\nfunc Open() string {\n\treturn \"" + secret + "\"\n}\n\n// Close closes it.\nfunc Close() {}\n"
	if err := os.WriteFile(filepath.Join(root, "vault.go"), []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Index(ctx, root, index.Options{}); err != nil {
		t.Fatal(err)
	}
	addNotes(t, e, 0, 60)
	var recs []engine.Record
	for i := range 3 {
		recs = append(recs, engine.Record{Session: "s", Agent: "a", Type: store.ToolResult,
			Content: []byte(fmt.Sprintf("attempt %d: login with %s failed\nsee the deadlock and the mutex\n", i, secret))})
	}
	if _, err := e.Add(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if rep, err := e.Embed(ctx, nil); err != nil || !rep.Trained {
		t.Fatalf("embed: %+v, %v", rep, err)
	}
	before, err := e.EmbedStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// A string whose words other content holds too keeps the model.
	rep, err := e.Redact(ctx, engine.RedactRequest{Text: []byte("the deadlock and the mutex"), Actor: "op"})
	if err != nil || rep.Counts.Entries != 3 || len(rep.Models) != 0 {
		t.Fatalf("redact common words: %+v, %v", rep, err)
	}
	rep, err = e.Redact(ctx, engine.RedactRequest{Text: []byte(secret), Actor: "op", Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Entries != 4 || !slices.Equal(rep.Models, []string{before.Model}) {
		t.Errorf("redact: %+v", rep)
	}
	f, err := e.Store().File(ctx, "vault.go")
	if err != nil {
		t.Fatal(err)
	}
	ent, err := e.Entry(ctx, f.EntryID)
	if err != nil || !ent.Redacted || bytes.Contains(ent.Content, []byte(secret)) {
		t.Fatalf("file entry = %+v, %v", ent, err)
	}
	if want := tokens.MustGet(tokens.O200kBase).Count(string(ent.Content)); ent.TokenCount != want {
		t.Errorf("token count %d, want %d", ent.TokenCount, want)
	}
	chunks, err := e.Store().Chunks(ctx, f.EntryID)
	if err != nil {
		t.Fatal(err)
	}
	var symbols []string
	for _, c := range chunks {
		symbols = append(symbols, c.Symbols...)
	}
	if !slices.Contains(symbols, "Open") || !slices.Contains(symbols, "Close") {
		t.Errorf("chunks of the redacted file lost their declarations: %v", symbols)
	}
	if res, err := e.Retrieve(ctx, retrieve.Query{Text: "Open vault"}); err != nil || len(res.Hits) == 0 || res.Hits[0].Chunk.EntryID != f.EntryID {
		t.Errorf("the redacted file is not found by its words: %+v, %v", res, err)
	}
	// The model is gone with its vectors; the next embed trains one that
	// never saw the string.
	if st, err := e.EmbedStatus(ctx); err != nil || st.Model != "" {
		t.Errorf("status after the redaction: %+v, %v", st, err)
	}
	if _, err := e.Store().Blob(ctx, "embed/"+before.Model); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old model's blob: %v", err)
	}
	if vs, _ := e.Store().VectorStats(ctx, before.Model); vs.Embedded != 0 {
		t.Errorf("the old model's vectors: %+v", vs)
	}
	er, err := e.Embed(ctx, nil)
	if err != nil || !er.Trained {
		t.Fatalf("embed after: %+v, %v", er, err)
	}
	blob, err := e.Store().Blob(ctx, "embed/"+er.Model)
	if err != nil || bytes.Contains(blob, []byte(secret)) {
		t.Errorf("the new model holds the string: %v", err)
	}
}

func TestDisk(t *testing.T) {
	e := newEngine(t, engine.Options{})
	ctx := t.Context()
	u, err := e.Disk(ctx, 0)
	if err != nil || u.Level != engine.DiskOK || u.UsedBytes <= 0 || u.Warning() != "" {
		t.Fatalf("no cap: %+v, %v", u, err)
	}
	for _, c := range []struct {
		cap   int64
		level string
	}{{u.UsedBytes * 2, engine.DiskOK}, {u.UsedBytes + u.UsedBytes/20, engine.DiskNear}, {u.UsedBytes, engine.DiskOver}, {u.UsedBytes / 2, engine.DiskOver}} {
		got, err := e.Disk(ctx, c.cap)
		if err != nil || got.Level != c.level || (c.level != engine.DiskOK) != (got.Warning() != "") {
			t.Errorf("cap %d: %+v (%q), %v; want %s", c.cap, got, got.Warning(), err, c.level)
		}
	}
}
