package engine_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
)

func newEngine(t testing.TB, opts engine.Options) *engine.Engine {
	t.Helper()
	st := sqlitetest.Open(t, sqlite.Options{})
	if opts.Retrieve.Deadline == 0 {
		// Searches wait for both signals: on a loaded machine one can take
		// more than the default 250 ms, and these tests are not about it.
		opts.Retrieve.Deadline = time.Minute
	}
	e, err := engine.New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAdd_CountsAndChunks(t *testing.T) {
	e := newEngine(t, engine.Options{})
	ctx := t.Context()
	// A 5,000-line tool result: searchable piece by piece, with line ranges.
	var b strings.Builder
	for i := 1; i <= 5000; i++ {
		fmt.Fprintf(&b, "line %d: processed record batch %d without errors\n", i, i)
	}
	b.WriteString("line 5001: the needle zanzibar is here\n")
	content := b.String()
	res, err := e.Add(ctx, []engine.Record{{Session: "s", Agent: "a", Type: store.ToolResult, Content: []byte(content)}})
	if err != nil {
		t.Fatal(err)
	}
	ent, err := e.Entry(ctx, res[0].ID[:10])
	if err != nil {
		t.Fatal(err)
	}
	if want := tokens.MustGet(tokens.O200kBase).Count(content); ent.TokenCount != want {
		t.Errorf("TokenCount = %d, want %d", ent.TokenCount, want)
	}
	chunks, err := e.Store().Chunks(ctx, res[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 50 {
		t.Errorf("a 5,000-line result made %d chunks", len(chunks))
	}
	hits, err := e.Search(ctx, store.Query{Text: "zanzibar needle"})
	if err != nil || len(hits) == 0 {
		t.Fatalf("search: %d hits, %v", len(hits), err)
	}
	h := hits[0]
	if h.Chunk.EndLine != 5001 || h.Chunk.StartLine < 4900 || !strings.Contains(h.Chunk.Text, "zanzibar") {
		t.Errorf("hit at lines %d-%d, want a chunk ending on line 5001", h.Chunk.StartLine, h.Chunk.EndLine)
	}
	if h.Chunk.TokenCount > 420 {
		t.Errorf("chunk of %d tokens", h.Chunk.TokenCount)
	}
}

func TestAdd_Parents(t *testing.T) {
	e := newEngine(t, engine.Options{})
	ctx := t.Context()
	call := engine.Record{Session: "s", Agent: "a", Type: store.ToolCall, MsgID: "toolu_1", Content: []byte(`{"cmd":"ls"}`)}
	result := engine.Record{Session: "s", Agent: "a", Type: store.ToolResult, Parent: "toolu_1", Content: []byte("main.go\n")}
	res, err := e.Add(ctx, []engine.Record{call, result})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := e.Store().Entries(ctx, []string{res[1].ID})
	if err != nil || ents[0].ParentID != res[0].ID {
		t.Fatalf("parent of result = %q, %v; want %s", ents[0].ParentID, err, res[0].ID)
	}
	// In a later call, the msg_id is found in the store.
	later := engine.Record{Session: "s", Agent: "a", Type: store.ToolResult, Parent: "toolu_1", Content: []byte("go.mod\n")}
	if _, err := e.Add(ctx, []engine.Record{later}); err != nil {
		t.Fatal(err)
	}
	// By entry ID.
	byID := engine.Record{Session: "other", Type: store.Note, Parent: res[0].ID, Content: []byte("see the call")}
	if _, err := e.Add(ctx, []engine.Record{byID}); err != nil {
		t.Fatal(err)
	}
	// By the short entry ID the tools hand out (12 hex digits), in any
	// case.
	short := engine.Record{Session: "s", Type: store.Note, Parent: strings.ToUpper(res[0].ID[:12]), Content: []byte("see the call, briefly")}
	sres, err := e.Add(ctx, []engine.Record{short})
	if err != nil {
		t.Fatal(err)
	}
	if ents, err := e.Store().Entries(ctx, []string{sres[0].ID}); err != nil || ents[0].ParentID != res[0].ID {
		t.Errorf("parent by a short ID: %+v, %v; want %s", ents, err, res[0].ID)
	}
	// Fewer digits could be a msg_id that happens to start an entry.
	for _, bad := range []string{"0000000000ab", "toolu_404", res[0].ID[:8]} {
		_, err := e.Add(ctx, []engine.Record{{Session: "s", Type: store.Note, Parent: bad, Content: []byte("orphan")}})
		if err == nil || !strings.Contains(err.Error(), "not an entry ID") {
			t.Errorf("parent %q: %v", bad, err)
		}
	}
	missing := engine.Record{Session: "s", Type: store.ToolResult, Parent: "toolu_404", Content: []byte("orphan")}
	_, err = e.Add(ctx, []engine.Record{later, missing})
	var re *engine.RecordError
	var fe *engine.FieldError
	if !errors.As(err, &re) || re.Index != 1 || !errors.As(err, &fe) || fe.Field != "parent" {
		t.Errorf("missing parent: %v, want a RecordError for record 1 on field parent", err)
	}
}

func TestAdd_Invalid(t *testing.T) {
	e := newEngine(t, engine.Options{MaxContentBytes: 100})
	ctx := t.Context()
	good := engine.Record{Session: "s", Type: store.Note, Content: []byte("fine")}
	for name, r := range map[string]engine.Record{
		"empty":     {Session: "s", Type: store.Note},
		"too big":   {Session: "s", Type: store.Note, Content: bytes.Repeat([]byte("x"), 101)},
		"no type":   {Session: "s", Content: []byte("x")},
		"bad type":  {Session: "s", Type: "chitchat", Content: []byte("x")},
		"turn only": {Type: store.Note, Turn: 3, Content: []byte("x")},
		"bad utf8":  {Session: "s\xff", Type: store.Note, Content: []byte("x")},
		// Names that read as others in every listing.
		"right-to-left agent": {Session: "s", Agent: "a\u202egnp.exe", Type: store.Note, Content: []byte("x")},
		"session with a tag":  {Session: "s\U000E0041", Type: store.Note, Content: []byte("x")},
		"newline session":     {Session: "s\n1", Type: store.Note, Content: []byte("x")},
	} {
		_, err := e.Add(ctx, []engine.Record{good, r})
		var re *engine.RecordError
		var fe *engine.FieldError
		if !errors.As(err, &re) || re.Index != 1 || !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a FieldError for record 1", name, err)
		}
	}
	st, err := e.Stats(ctx)
	if err != nil || st.Entries != 0 {
		t.Errorf("invalid batches wrote %d entries (%v)", st.Entries, err)
	}
}

func TestAdd_BinaryContent(t *testing.T) {
	e := newEngine(t, engine.Options{})
	ctx := t.Context()
	content := []byte("NUL \x00 and \xc3\x28 invalid, then words: quokka\n")
	res, err := e.Add(ctx, []engine.Record{{Session: "s", Type: store.ToolResult, Content: content}})
	if err != nil {
		t.Fatal(err)
	}
	ent, err := e.Entry(ctx, res[0].ID)
	if err != nil || !bytes.Equal(ent.Content, content) {
		t.Fatalf("round trip: %q, %v", ent.Content, err)
	}
	if hits, err := e.Search(ctx, store.Query{Text: "quokka"}); err != nil || len(hits) != 1 {
		t.Errorf("search: %d hits, %v", len(hits), err)
	}
}

func TestNew_UnknownEncoding(t *testing.T) {
	if _, err := engine.New(nil, engine.Options{Encoding: "gpt2"}); err == nil {
		t.Error("New accepted an unknown encoding")
	}
}

func TestAddAll(t *testing.T) {
	e := newEngine(t, engine.Options{})
	ctx := t.Context()
	var recs []engine.Record
	for i := range 25 {
		recs = append(recs, engine.Record{Session: "s", Type: store.UserPrompt, Content: []byte(fmt.Sprintf("prompt %d", i))})
	}
	// A tool result whose parent is a msg_id committed two batches earlier.
	recs[3].MsgID = "m3"
	recs[13] = engine.Record{Session: "s", Type: store.ToolResult, Parent: "m3", Content: []byte("result of 3")}
	var firsts []int
	err := e.AddAll(ctx, recs, 5, func(first int, res []engine.AddResult) error {
		firsts = append(firsts, first)
		if len(res) != min(5, len(recs)-first) {
			t.Errorf("batch at %d: %d results", first, len(res))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(firsts) != "[0 5 10 15 20]" {
		t.Errorf("batches committed at %v", firsts)
	}
	// A bad record in the fourth batch: three batches stored, the error
	// names the record's index in the whole input.
	more := make([]engine.Record, 20)
	for i := range more {
		more[i] = engine.Record{Session: "t", Type: store.Note, Content: []byte(fmt.Sprintf("more %d", i))}
	}
	more[17].Parent = "no-such-msg"
	err = e.AddAll(ctx, more, 5, func(int, []engine.AddResult) error { return nil })
	var re *engine.RecordError
	if !errors.As(err, &re) || re.Index != 17 {
		t.Fatalf("AddAll error %v, want a RecordError at index 17", err)
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 25+15 {
		t.Errorf("%d entries, want 40 (the failing batch and those after it not stored)", st.Entries)
	}
}

func TestAdd_RedactsSecrets(t *testing.T) {
	token := "ghp_" + strings.Repeat("k7", 18) // assembled so that scanners do not flag this file
	content := "export GITHUB_TOKEN=" + token + "\ngit push\n"
	call := engine.Record{Session: "s", Type: store.ToolCall, MsgID: "c1", Content: []byte(content)}
	result := engine.Record{Session: "s", Type: store.ToolResult, Parent: "c1", Content: []byte("pushed")}

	e := newEngine(t, engine.Options{})
	res, err := e.Add(t.Context(), []engine.Record{call, result})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res[0].Redacted) != "[github_token]" || res[1].Redacted != nil {
		t.Errorf("Redacted = %v, %v", res[0].Redacted, res[1].Redacted)
	}
	ent, err := e.Entry(t.Context(), res[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ent.Content), token) || !strings.Contains(string(ent.Content), "[REDACTED:github_token]") {
		t.Errorf("stored %q", ent.Content)
	}
	// The parent link points at the stored (redacted) call.
	if ents, _ := e.Store().Entries(t.Context(), []string{res[1].ID}); ents[0].ParentID != res[0].ID {
		t.Errorf("parent %s, want %s", ents[0].ParentID, res[0].ID)
	}
	if hits, _ := e.Search(t.Context(), store.Query{Text: token}); len(hits) != 0 {
		t.Errorf("the token is searchable: %d hits", len(hits))
	}
	if id := e.ContentID([]byte(content)); id != res[0].ID {
		t.Errorf("ContentID = %s, want the stored entry's %s", id, res[0].ID)
	}

	keep := newEngine(t, engine.Options{KeepSecrets: true})
	res, err = keep.Add(t.Context(), []engine.Record{call})
	if err != nil || res[0].ID != store.ID([]byte(content)) || res[0].Redacted != nil {
		t.Errorf("KeepSecrets: %+v, %v", res, err)
	}
	if id := keep.ContentID([]byte(content)); id != res[0].ID {
		t.Errorf("KeepSecrets: ContentID = %s, want %s", id, res[0].ID)
	}
}
