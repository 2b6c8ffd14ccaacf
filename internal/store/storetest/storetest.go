// Package storetest is the contract test suite of store.Store. Every backend
// runs it against a real instance of itself:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t testing.TB) store.Store { return openTestStore(t) })
//	}
//
// The opener must return an empty, migrated store and close it (checking
// its integrity) in a t.Cleanup.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/engramhq/engram/internal/store"
)

// Opener returns a new empty store for one test.
type Opener func(t testing.TB) store.Store

// Entry builds an entry for tests: its content split into one chunk per
// paragraph (blank-line separated), token counts approximated by words.
func Entry(session, agent string, typ store.ContentType, content string) store.Entry {
	return store.Entry{
		Content:    []byte(content),
		TokenCount: len(strings.Fields(content)),
		Chunks:     Chunks([]byte(content)),
		Occurrence: store.Occurrence{SessionID: session, AgentID: agent, AgentType: "engineer", Type: typ},
	}
}

// Chunks splits content into paragraph chunks on line boundaries.
func Chunks(content []byte) []store.Chunk {
	var out []store.Chunk
	start, startLine, line := 0, 1, 1
	flush := func(end, endLine int) {
		if end > start {
			out = append(out, store.Chunk{
				Ordinal: len(out), Start: start, End: end, StartLine: startLine, EndLine: endLine,
				TokenCount: len(bytes.Fields(content[start:end])),
			})
		}
	}
	for i := 0; i < len(content); i++ {
		if content[i] != '\n' {
			continue
		}
		// A blank line ends a paragraph; it belongs to the paragraph before.
		if i+1 < len(content) && content[i+1] == '\n' {
			flush(i+2, line+1)
			start, startLine = i+2, line+2
			line++
			i++
		}
		line++
	}
	lastLine := line
	if len(content) > 0 && content[len(content)-1] == '\n' {
		lastLine--
	}
	flush(len(content), max(lastLine, startLine))
	return out
}

func put(t testing.TB, s store.Store, entries ...store.Entry) []store.PutResult {
	t.Helper()
	res, err := s.PutEntries(context.Background(), entries)
	if err != nil {
		t.Fatalf("PutEntries: %v", err)
	}
	if len(res) != len(entries) {
		t.Fatalf("PutEntries returned %d results for %d entries", len(res), len(entries))
	}
	return res
}

func stats(t testing.TB, s store.Store) store.Stats {
	t.Helper()
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// Run runs the contract suite.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"ContentAddressed", testContentAddressed},
		{"TurnAssignment", testTurnAssignment},
		{"TurnRange", testTurnRange},
		{"MsgIDReplay", testMsgIDReplay},
		{"ParentLinks", testParentLinks},
		{"Validation", testValidation},
		{"BatchAtomic", testBatchAtomic},
		{"Chunks", testChunks},
		{"BinaryContent", testBinaryContent},
		{"ResolveID", testResolveID},
		{"SearchCodeAware", testSearchCodeAware},
		{"SearchFilters", testSearchFilters},
		{"SearchHostileQueries", testSearchHostileQueries},
		{"SearchCommonWords", testSearchCommonWords},
		{"Links", testLinks},
		{"References", testReferences},
		{"SessionsAgents", testSessionsAgents},
		{"Stats", testStats},
		{"ConcurrentWriters", testConcurrentWriters},
		{"Files", testFiles},
		{"FilesInvalid", testFilesInvalid},
		{"FilesBrief", testFilesBrief},
		{"SearchSeesNewContent", testSearchSeesNewContent},
		{"Vectors", testVectors},
		{"VectorsWriteOrder", testVectorsWriteOrder},
		{"Access", testAccess},
		{"SearchPaths", testSearchPaths},
		{"ArchiveWriteIsolation", testArchiveWriteIsolation},
		{"ArchiveState", testArchiveState},
		{"SearchCoverage", testSearchCoverage},
		{"EntryCoverage", testEntryCoverage},
		{"ConversationContext", testConversationContext},
		{"ForgetSession", testForgetSession},
		{"ForgetEntry", testForgetEntry},
		{"ForgetRecords", testForgetRecords},
		{"ForgetContexts", testForgetContexts},
		{"ForgetThenStore", testForgetThenStore},
		{"Redact", testRedact},
		{"RedactWindows", testRedactWindows},
		{"RedactEscaped", testRedactEscaped},
		{"Retain", testRetain},
		{"Windows", testWindows},
		{"WindowKeys", testWindowKeys},
		{"WindowConcurrentAppends", testWindowConcurrentAppends},
		{"WindowAppendKeys", testWindowAppendKeys},
		{"WindowNext", testWindowNext},
		{"WindowAbsorb", testWindowAbsorb},
		{"WindowSummaries", testWindowSummaries},
		{"RunRefs", testRunRefs},
		{"Snapshots", testSnapshots},
		{"ForgetSnapshots", testForgetSnapshots},
		{"ForgetSnapshotsElsewhere", testForgetSnapshotsElsewhere},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

func testContentAddressed(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := Entry("s1", "claude", store.ToolResult, "PASS ok  \tgithub.com/x/y\t0.2s\n")
	b := a
	b.SessionID, b.AgentID, b.Turn = "s2", "codex", 3
	r1 := put(t, s, a)
	r2 := put(t, s, b)
	if r1[0].ID != store.ID(a.Content) || r2[0].ID != r1[0].ID {
		t.Fatalf("IDs %s and %s, want both %s", r1[0].ID, r2[0].ID, store.ID(a.Content))
	}
	if !r1[0].NewContent || r2[0].NewContent {
		t.Errorf("NewContent = %v, %v; want true, false", r1[0].NewContent, r2[0].NewContent)
	}
	if r2[0].Seq <= r1[0].Seq {
		t.Errorf("Seq did not increase: %d then %d", r1[0].Seq, r2[0].Seq)
	}
	st := stats(t, s)
	if st.Entries != 1 || st.Occurrences != 2 || st.ContentBytes != int64(len(a.Content)) {
		t.Errorf("stats: %d entries, %d occurrences, %d bytes; want 1, 2, %d", st.Entries, st.Occurrences, st.ContentBytes, len(a.Content))
	}
	occ, err := s.Occurrences(ctx, r1[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var who []string
	for _, o := range occ {
		who = append(who, fmt.Sprintf("%s/%s/%d", o.SessionID, o.AgentID, o.Turn))
	}
	if diff := cmp.Diff([]string{"s1/claude/1", "s2/codex/3"}, who); diff != "" {
		t.Errorf("occurrences (-want +got):\n%s", diff)
	}
	got, err := s.Entries(ctx, []string{r1[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[0].Content, a.Content) || got[0].SessionID != "s1" || got[0].TokenCount != a.TokenCount {
		t.Errorf("Entries = %+v, want the content with its first occurrence", got[0])
	}
	_, err = s.Entries(ctx, []string{r1[0].ID, store.ID([]byte("nope"))})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Entries(missing) error = %v, want ErrNotFound", err)
	}
	if _, err := s.Occurrences(ctx, store.ID([]byte("nope"))); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Occurrences(missing) error = %v, want ErrNotFound", err)
	}
}

func testTurnAssignment(t *testing.T, s store.Store) {
	mk := func(typ store.ContentType, c string) store.Entry { return Entry("s", "a", typ, c) }
	res := put(t, s,
		mk(store.AgentResponse, "hello before any prompt"),
		mk(store.UserPrompt, "fix the flaky test"),
		mk(store.ToolCall, `{"tool":"bash","cmd":"go test"}`),
		mk(store.ToolResult, "FAIL TestX"),
		mk(store.UserPrompt, "try again"),
	)
	var turns []int
	for _, r := range res {
		turns = append(turns, r.Turn)
	}
	if diff := cmp.Diff([]int{1, 2, 2, 2, 3}, turns); diff != "" {
		t.Errorf("turns (-want +got):\n%s", diff)
	}
	// An explicit turn is kept, and later assignment continues after it.
	e := mk(store.UserPrompt, "jump ahead")
	e.Turn = 10
	res = put(t, s, e, mk(store.AgentResponse, "ok, at ten"))
	if res[0].Turn != 10 || res[1].Turn != 10 {
		t.Errorf("turns %d, %d; want 10, 10", res[0].Turn, res[1].Turn)
	}
	// Without a session there is no turn.
	res = put(t, s, mk2(store.CodeFile, "package main\n"))
	if res[0].Turn != 0 {
		t.Errorf("turn without session = %d, want 0", res[0].Turn)
	}
}

func mk2(typ store.ContentType, c string) store.Entry { return Entry("", "", typ, c) }

func testTurnRange(t *testing.T, s store.Store) {
	ctx := context.Background()
	var entries []store.Entry
	for turn := 1; turn <= 6; turn++ {
		e := Entry("s", "a", store.UserPrompt, fmt.Sprintf("prompt %d", turn))
		e.Turn = turn
		entries = append(entries, e)
	}
	// The same content seen again at turn 5 must appear in 4-6 at turn 5,
	// and in 1-2 at turn 1.
	again := Entry("s", "a", store.ToolResult, "prompt 1")
	again.Turn = 5
	entries = append(entries, again)
	other := Entry("other", "a", store.UserPrompt, "prompt 5 elsewhere")
	other.Turn = 5
	entries = append(entries, other)
	put(t, s, entries...)
	got, err := s.TurnRange(ctx, "s", 4, 6)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range got {
		seen = append(seen, fmt.Sprintf("%d:%s", e.Turn, e.Content))
	}
	if diff := cmp.Diff([]string{"4:prompt 4", "5:prompt 5", "5:prompt 1", "6:prompt 6"}, seen); diff != "" {
		t.Errorf("TurnRange(s, 4, 6) (-want +got):\n%s", diff)
	}
	got, err = s.TurnRange(ctx, "s", 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Turn != 1 || got[1].Turn != 2 {
		t.Errorf("TurnRange(s, 0, 2) = %d entries, want turns 1, 2", len(got))
	}
	got, err = s.TurnRange(ctx, "nobody", 0, 0)
	if err != nil || len(got) != 0 {
		t.Errorf("TurnRange(unknown session) = %d entries, %v; want none", len(got), err)
	}
	ids, err := s.TurnIDs(ctx, "s", 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{store.ID([]byte("prompt 4")), store.ID([]byte("prompt 5")), store.ID([]byte("prompt 1")), store.ID([]byte("prompt 6"))}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("TurnIDs(s, 4) (-want +got):\n%s", diff)
	}
	if ids, err := s.TurnIDs(ctx, "s", 0); err != nil || len(ids) != 6 {
		t.Errorf("TurnIDs(s, 0) = %d ids, %v; want the 6 distinct entries", len(ids), err)
	}
	for session, want := range map[string]int{"s": 6, "other": 5, "nobody": 0} {
		if last, err := s.LastTurn(ctx, session); err != nil || last != want {
			t.Errorf("LastTurn(%s) = %d, %v; want %d", session, last, err, want)
		}
	}
}

func testMsgIDReplay(t *testing.T, s store.Store) {
	ctx := context.Background()
	e := Entry("s", "a", store.ToolCall, `{"tool":"read","path":"main.go"}`)
	e.MsgID = "toolu_01"
	first := put(t, s, e)
	again := put(t, s, e, e)
	for i, r := range again {
		if !r.Replayed || r.Seq != first[0].Seq || r.ID != first[0].ID {
			t.Errorf("replay %d = %+v, want Replayed of seq %d", i, r, first[0].Seq)
		}
	}
	if n := stats(t, s).Occurrences; n != 1 {
		t.Errorf("%d occurrences after replays, want 1", n)
	}
	id, err := s.MsgEntry(ctx, "s", "toolu_01")
	if err != nil || id != first[0].ID {
		t.Errorf("MsgEntry = %q, %v; want %s", id, err, first[0].ID)
	}
	if _, err := s.MsgEntry(ctx, "other", "toolu_01"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("MsgEntry in another session: %v, want ErrNotFound", err)
	}
	clash := Entry("s", "a", store.ToolCall, "different content")
	clash.MsgID = "toolu_01"
	_, err = s.PutEntries(ctx, []store.Entry{clash})
	var ce *store.ConflictError
	if !errors.As(err, &ce) {
		t.Errorf("reusing a msg_id for other content: %v, want *ConflictError", err)
	}
	// The same msg_id in another session is another message.
	elsewhere := clash
	elsewhere.SessionID = "s2"
	put(t, s, elsewhere)
}

func testParentLinks(t *testing.T, s store.Store) {
	ctx := context.Background()
	call := Entry("s", "a", store.ToolCall, `{"tool":"grep","pattern":"TODO"}`)
	result := Entry("s", "a", store.ToolResult, "main.go:12: // TODO remove")
	result.ParentID = store.ID(call.Content)
	res := put(t, s, call, result) // parent earlier in the same batch
	links, err := s.Links(ctx, res[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].FromID != res[0].ID || links[0].ToID != res[1].ID || links[0].Kind != store.LinkParent {
		t.Errorf("Links = %+v, want one parent link call -> result", links)
	}
	orphan := Entry("s", "a", store.ToolResult, "no call made me")
	orphan.ParentID = store.ID([]byte("never stored"))
	_, err = s.PutEntries(ctx, []store.Entry{orphan})
	var ve *store.ValidationError
	if !errors.As(err, &ve) || ve.Field != "parent" {
		t.Errorf("missing parent: %v, want a ValidationError on parent", err)
	}
}

func testValidation(t *testing.T, s store.Store) {
	ctx := context.Background()
	good := Entry("s", "a", store.Note, "fine")
	cases := map[string]func(e *store.Entry){
		"empty content":  func(e *store.Entry) { e.Content = nil; e.Chunks = nil },
		"unknown type":   func(e *store.Entry) { e.Type = "gossip" },
		"wrong id":       func(e *store.Entry) { e.ID = store.ID([]byte("other")) },
		"no chunks":      func(e *store.Entry) { e.Chunks = nil },
		"chunk past end": func(e *store.Entry) { e.Chunks[0].End = 99 },
		"bad ordinal":    func(e *store.Entry) { e.Chunks[0].Ordinal = 3 },
		"bad lines":      func(e *store.Entry) { e.Chunks[0].StartLine = 0 },
		"negative turn":  func(e *store.Entry) { e.Turn = -1 },
		"turn, no session": func(e *store.Entry) {
			e.SessionID, e.Turn = "", 2
		},
		"long session":   func(e *store.Entry) { e.SessionID = strings.Repeat("s", store.MaxIdentifierBytes+1) },
		"bad parent":     func(e *store.Entry) { e.ParentID = "abc" },
		"bad metadata":   func(e *store.Entry) { e.Metadata = map[string]any{"f": func() {}} },
		"msg no session": func(e *store.Entry) { e.SessionID, e.MsgID = "", "m1" },
	}
	for name, mutate := range cases {
		e := good
		e.Chunks = slices.Clone(good.Chunks)
		mutate(&e)
		_, err := s.PutEntries(ctx, []store.Entry{good, e})
		var ie *store.ItemError
		if !errors.As(err, &ie) || ie.Index != 1 {
			t.Errorf("%s: error %v, want an ItemError for entry 1", name, err)
			continue
		}
		var ve *store.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: error %v, want a ValidationError", name, err)
		}
	}
	if st := stats(t, s); st.Entries != 0 || st.Occurrences != 0 {
		t.Errorf("invalid batches wrote %d entries, %d occurrences", st.Entries, st.Occurrences)
	}
}

func testBatchAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := Entry("s", "a", store.UserPrompt, "first of the batch")
	b := Entry("s", "a", store.AgentResponse, "second of the batch")
	bad := Entry("s", "a", store.ToolResult, "third, with a parent nobody stored")
	bad.ParentID = store.ID([]byte("ghost"))
	if _, err := s.PutEntries(ctx, []store.Entry{a, b, bad}); err == nil {
		t.Fatal("PutEntries with a missing parent succeeded")
	}
	st := stats(t, s)
	if st.Entries != 0 || st.Occurrences != 0 || st.Chunks != 0 || st.Sessions != 0 {
		t.Errorf("a failed batch left %d entries, %d occurrences, %d chunks, %d sessions", st.Entries, st.Occurrences, st.Chunks, st.Sessions)
	}
	hits, err := s.Search(ctx, store.Query{Text: "batch"})
	if err != nil || len(hits) != 0 {
		t.Errorf("search after failed batch: %d hits, %v", len(hits), err)
	}
	put(t, s, a, b)
	if st := stats(t, s); st.Entries != 2 || st.Occurrences != 2 {
		t.Errorf("after a good batch: %d entries, %d occurrences; want 2, 2", st.Entries, st.Occurrences)
	}
}

func testChunks(t *testing.T, s store.Store) {
	ctx := context.Background()
	content := "para one line one\npara one line two\n\npara two\n\nlast para, no newline"
	e := Entry("s", "a", store.AgentResponse, content)
	res := put(t, s, e)
	got, err := s.Chunks(ctx, res[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(e.Chunks) || len(got) != 3 {
		t.Fatalf("Chunks = %d chunks, want 3", len(got))
	}
	var joined string
	for i, c := range got {
		want := e.Chunks[i]
		want.EntryID = res[0].ID
		want.Text = content[want.Start:want.End]
		if c.ID <= 0 {
			t.Errorf("chunk %d has no ID", i)
		}
		want.ID = c.ID
		if diff := cmp.Diff(want, c, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("chunk %d (-want +got):\n%s", i, diff)
		}
		joined += c.Text
	}
	if joined != content {
		t.Errorf("chunks do not cover the content: %q", joined)
	}
	if _, err := s.Chunks(ctx, store.ID([]byte("x"))); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Chunks(missing) = %v, want ErrNotFound", err)
	}
}

func testBinaryContent(t *testing.T, s store.Store) {
	ctx := context.Background()
	content := []byte("bytes \x00 with NUL, invalid \xff\xfe UTF-8, and a word: zebra\n")
	e := store.Entry{Content: content, TokenCount: 9, Chunks: Chunks(content),
		Occurrence: store.Occurrence{SessionID: "s", Type: store.ToolResult}}
	res := put(t, s, e)
	got, err := s.Entries(ctx, []string{res[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[0].Content, content) {
		t.Errorf("content did not round-trip byte for byte: %q", got[0].Content)
	}
	hits, err := s.Search(ctx, store.Query{Text: "zebra"})
	if err != nil || len(hits) != 1 {
		t.Errorf("search in binary content: %d hits, %v", len(hits), err)
	}
}

func testResolveID(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Find two contents whose IDs share a first hex digit, and one that
	// does not share four.
	var entries []store.Entry
	for i := range 40 {
		entries = append(entries, Entry("s", "a", store.Note, fmt.Sprintf("note %d", i)))
	}
	res := put(t, s, entries...)
	id := res[0].ID
	got, err := s.ResolveID(ctx, id[:12])
	if err != nil || got != id {
		t.Errorf("ResolveID(%s) = %q, %v; want %s", id[:12], got, err, id)
	}
	got, err = s.ResolveID(ctx, strings.ToUpper(id))
	if err != nil || got != id {
		t.Errorf("ResolveID(upper case) = %q, %v", got, err)
	}
	byFirst := map[byte]int{}
	for _, r := range res {
		byFirst[r.ID[0]]++
	}
	for _, r := range res {
		if byFirst[r.ID[0]] > 1 {
			// A shared single digit is below MinPrefix: a validation error.
			if _, err := s.ResolveID(ctx, r.ID[:1]); err == nil {
				t.Errorf("ResolveID(%q) accepted a 1-digit prefix", r.ID[:1])
			}
			break
		}
	}
	if _, err := s.ResolveID(ctx, "zzzz"); err == nil {
		t.Error("ResolveID(zzzz) accepted a non-hex prefix")
	}
	missing := strings.Repeat("0", 10)
	if _, err := s.ResolveID(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ResolveID(%s) = %v, want ErrNotFound", missing, err)
	}
	// Ambiguity needs two IDs sharing MinPrefix digits: make them.
	seen := map[string]string{}
	for i := 0; ; i++ {
		c := fmt.Sprintf("collide %d", i)
		p := store.ID([]byte(c))[:store.MinPrefix]
		if other, ok := seen[p]; ok {
			put(t, s, Entry("s", "a", store.Note, other), Entry("s", "a", store.Note, c))
			_, err := s.ResolveID(ctx, p)
			var ae *store.AmbiguousError
			if !errors.As(err, &ae) || len(ae.Matches) < 2 {
				t.Errorf("ResolveID(%s) = %v, want *AmbiguousError", p, err)
			}
			break
		}
		seen[p] = c
	}
}

func hitIDs(hits []store.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Chunk.EntryID)
	}
	return out
}

func search(t testing.TB, s store.Store, q store.Query) []store.Hit {
	t.Helper()
	hits, err := s.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("Search(%+v): %v", q, err)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Errorf("Search(%q): hit %d scores %v above hit %d's %v", q.Text, i, hits[i].Score, i-1, hits[i-1].Score)
		}
	}
	return hits
}

func testSearchCodeAware(t *testing.T, s store.Store) {
	// Each in a session of its own: none is another's conversation context.
	camel := Entry("s1", "a", store.CodeFile, "func parseHTTPRequest(r io.Reader) (*Request, error) {\n\treturn nil, nil\n}\n")
	camel.Files = []string{"internal/server/http_parse.go"}
	snake := Entry("s2", "a", store.CodeFile, "def parse_http_request(raw):\n    return raw\n")
	snake.Files = []string{"tools/py/parser.py"}
	pascal := Entry("s3", "a", store.CodeFile, "public Request ParseHTTPRequest(Stream s) { return null; }\n")
	pascal.Files = []string{"src/Server/Parser.cs"}
	prose := Entry("s4", "a", store.AgentResponse, "The request parser reads HTTP headers first.")
	unrelated := Entry("s5", "a", store.AgentResponse, "Nothing to see here about databases.")
	res := put(t, s, camel, snake, pascal, prose, unrelated)
	ids := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, res[i].ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(h []store.Hit) []string { v := hitIDs(h); slices.Sort(v); return v }
	for _, q := range []string{"parseHTTPRequest", "parse_http_request", "ParseHTTPRequest", "PARSE_HTTP_REQUEST"} {
		hits := search(t, s, store.Query{Text: q})
		if diff := cmp.Diff(ids(0, 1, 2), sorted(hits)); diff != "" {
			t.Errorf("Search(%q) (-want +got):\n%s", q, diff)
		}
	}
	for _, q := range []string{"parse", "http", "request"} {
		hits := search(t, s, store.Query{Text: q})
		got := sorted(hits)
		for _, want := range ids(0, 1, 2) {
			if !slices.Contains(got, want) {
				t.Errorf("Search(%q) misses %s", q, want)
			}
		}
		if slices.Contains(got, res[4].ID) {
			t.Errorf("Search(%q) found the unrelated entry", q)
		}
	}
	// Path parts are words; a path query finds its file first.
	for q, want := range map[string]int{"http_parse.go": 0, "internal/server": 0, "parser.py": 1, "Server/Parser.cs": 2} {
		hits := search(t, s, store.Query{Text: q})
		if len(hits) == 0 || hits[0].Chunk.EntryID != res[want].ID {
			t.Errorf("Search(%q) top hit = %v, want entry %d", q, hitIDs(hits), want)
		}
	}
	hits := search(t, s, store.Query{Text: "parseHTTPRequest"})
	if len(hits) > 0 {
		h := hits[0]
		if h.Score <= 0 || !strings.HasPrefix(h.Occurrence.SessionID, "s") || h.Chunk.Text == "" || h.EntryTokens == 0 || h.Chunk.StartLine < 1 {
			t.Errorf("hit lacks provenance: %+v", h)
		}
	}
}

func testSearchFilters(t *testing.T, s store.Store) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mk := func(session, agent, agentType string, typ store.ContentType, turn int, day int, c string) store.Entry {
		e := Entry(session, agent, typ, c)
		e.AgentType, e.Turn, e.Time = agentType, turn, base.AddDate(0, 0, day)
		return e
	}
	res := put(t, s,
		mk("s1", "alice", "engineer", store.UserPrompt, 1, 0, "deploy the migration"),
		mk("s1", "bob", "inspector", store.InspectorFinding, 2, 1, "migration lacks a rollback"),
		mk("s2", "alice", "engineer", store.ToolResult, 1, 2, "migration applied in 3s"),
		mk("s2", "carol", "tester", store.TestResult, 5, 3, "migration tests pass"),
	)
	cases := []struct {
		name string
		f    store.Filter
		want []int
	}{
		{"none", store.Filter{}, []int{0, 1, 2, 3}},
		{"session", store.Filter{SessionID: "s2"}, []int{2, 3}},
		{"agent", store.Filter{AgentID: "alice"}, []int{0, 2}},
		{"agent type", store.Filter{AgentType: "inspector"}, []int{1}},
		{"types", store.Filter{Types: []store.ContentType{store.TestResult, store.ToolResult}}, []int{2, 3}},
		{"turn range", store.Filter{SessionID: "s2", TurnFrom: 2, TurnTo: 9}, []int{3}},
		{"turn from", store.Filter{TurnFrom: 2}, []int{1, 3}},
		{"since", store.Filter{Since: base.AddDate(0, 0, 2)}, []int{2, 3}},
		{"until", store.Filter{Until: base.AddDate(0, 0, 1)}, []int{0, 1}},
		{"nothing", store.Filter{SessionID: "s3"}, nil},
	}
	for _, tc := range cases {
		hits := search(t, s, store.Query{Text: "migration", Filter: tc.f})
		var want []string
		for _, i := range tc.want {
			want = append(want, res[i].ID)
		}
		got := hitIDs(hits)
		slices.Sort(want)
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("filter %s (-want +got):\n%s", tc.name, diff)
		}
		for _, h := range hits {
			if tc.f.SessionID != "" && h.Occurrence.SessionID != tc.f.SessionID {
				t.Errorf("filter %s: provenance from session %s", tc.name, h.Occurrence.SessionID)
			}
		}
	}
	_, err := s.Search(context.Background(), store.Query{Text: "x", Filter: store.Filter{Types: []store.ContentType{"bogus"}}})
	if err == nil {
		t.Error("Search with an unknown content type succeeded")
	}
	// Limit.
	if hits := search(t, s, store.Query{Text: "migration", Limit: 2}); len(hits) != 2 {
		t.Errorf("Limit 2: %d hits", len(hits))
	}
}

func testSearchPaths(t *testing.T, s store.Store) {
	putFiles(t, s,
		Version("internal/store/types.go", "package store // widget"),
		Version("internal/storefront/a.go", "package storefront // widget"),
		Version("cmd/engram/main.go", "package main // widget"),
		Version("README.md", "# widget"),
	)
	note := Entry("s1", "a", store.Note, "a widget note about a file")
	note.Files = []string{"cmd/engram/main.go"}
	put(t, s, note)
	paths := func(hits []store.Hit) []string {
		var out []string
		for _, h := range hits {
			if len(h.Occurrence.Files) > 0 {
				out = append(out, h.Occurrence.Files[0])
			}
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		paths []string
		want  []string
	}{
		{[]string{"internal/store"}, []string{"internal/store/types.go"}},
		{[]string{"internal/store/"}, []string{"internal/store/types.go"}},
		{[]string{"internal/store/types.go"}, []string{"internal/store/types.go"}},
		{[]string{"*.md"}, []string{"README.md"}},
		{[]string{"internal/*/*.go"}, []string{"internal/store/types.go", "internal/storefront/a.go"}},
		{[]string{"cmd", "README.md"}, []string{"README.md", "cmd/engram/main.go", "cmd/engram/main.go"}},
		{[]string{"nowhere"}, nil},
	} {
		got := paths(search(t, s, store.Query{Text: "widget", Filter: store.Filter{Paths: tc.paths}}))
		if !slices.Equal(got, tc.want) {
			t.Errorf("Paths %q: got %q, want %q", tc.paths, got, tc.want)
		}
	}
}

func testSearchCoverage(t *testing.T, s store.Store) {
	res := put(t, s,
		Entry("s1", "a", store.Note, "the migration needs a rollback plan"),
		Entry("s2", "a", store.Note, "the migration ran"),
		Entry("s3", "a", store.Note, "unrelated words about otters"),
		Entry("s4", "a", store.Note, "more unrelated words about badgers"),
	)
	cov := func(q string) map[string]float64 {
		out := map[string]float64{}
		for _, h := range search(t, s, store.Query{Text: q}) {
			out[h.Chunk.EntryID] = h.Coverage
		}
		return out
	}
	// zeppelin occurs nowhere, so no hit covers the whole query.
	if c, ok := cov("rollback zeppelin")[res[0].ID]; !ok || !(0 < c && c < 1) {
		t.Errorf("coverage with a word found nowhere: %v (found %v), want between 0 and 1", c, ok)
	}
	// A budget may drop the common word "migration" from the query, but
	// coverage still counts it.
	got := cov("migration rollback")
	if c, ok := got[res[0].ID]; !ok || math.Abs(c-1) > 1e-9 {
		t.Errorf("coverage of a chunk with every query word: %v (found %v), want 1", c, ok)
	}
	if c, ok := got[res[1].ID]; ok && !(0 < c && c < 1) {
		t.Errorf("coverage of a chunk with one of two words: %v, want between 0 and 1", c)
	}
	for _, id := range []string{res[2].ID, res[3].ID} {
		if _, ok := got[id]; ok {
			t.Errorf("an unrelated chunk is a hit")
		}
	}
}

// testEntryCoverage: an entry holds a query's words wherever they are in
// it, each chunk holding part of them; a compound identifier counts where
// its parts are.
func testEntryCoverage(t *testing.T, s store.Store) {
	ctx := context.Background()
	file := Entry("s1", "a", store.CodeFile, "func retryBackoff() {}\n\n// waits for the budget\n\n// logs the report\n")
	res := put(t, s,
		file,
		Entry("s1", "a", store.Note, "the retry budget"),
		Entry("s2", "a", store.Note, "unrelated words about otters"),
	)
	if n := len(file.Chunks); n != 3 {
		t.Fatalf("the file has %d chunks, want 3", n)
	}
	got, err := s.EntryCoverage(ctx, "retry backoff budget", []string{res[0].ID, res[1].ID, res[2].ID, "no-such-entry"})
	if err != nil {
		t.Fatal(err)
	}
	if c := got[res[0].ID]; math.Abs(c-1) > 1e-9 {
		t.Errorf("a file holding every word across its chunks: coverage %v, want 1", c)
	}
	if c := got[res[1].ID]; !(0 < c && c < 1) {
		t.Errorf("a note holding two of three words: coverage %v, want between 0 and 1", c)
	}
	if c, ok := got[res[2].ID]; !ok || c != 0 {
		t.Errorf("an unrelated note: coverage %v (found %v), want 0", c, ok)
	}
	if _, ok := got["no-such-entry"]; ok {
		t.Errorf("an entry not stored has a coverage")
	}
	// "backoff" alone is in the file as a part of retryBackoff; "zeppelin"
	// occurs nowhere and counts against every entry.
	got, err = s.EntryCoverage(ctx, "backoff zeppelin", []string{res[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if c := got[res[0].ID]; !(0 < c && c < 1) {
		t.Errorf("with a word found nowhere: coverage %v, want between 0 and 1", c)
	}
	for _, q := range []string{"", "   ", "the of"} {
		if _, err := s.EntryCoverage(ctx, q, []string{res[0].ID}); err != nil {
			t.Errorf("EntryCoverage(%q): %v", q, err)
		}
	}
}

func testSearchHostileQueries(t *testing.T, s store.Store) {
	put(t, s, Entry("s", "a", store.Note, "NEAR the AND gate OR not, said the parser (quoted \"x\")"))
	for _, q := range []string{
		"", "   \t\n", `"`, `"unbalanced`, "*", "a*", "-", "-x", "NEAR", "NEAR(a b)", "AND", "OR NOT",
		"(", ")", "((", "col:val", "^x", "{a b}", "+", "\x00", "\xff\xfe", "'; DROP TABLE entries; --",
		strings.Repeat("word ", 20000), strings.Repeat("x", 100000),
	} {
		if _, err := s.Search(context.Background(), store.Query{Text: q}); err != nil {
			t.Errorf("Search(%.40q): %v", q, err)
		}
	}
	if hits := search(t, s, store.Query{Text: `NEAR(gate`}); len(hits) != 1 {
		t.Errorf("Search(NEAR(gate) = %d hits, want 1", len(hits))
	}
	if hits := search(t, s, store.Query{Text: "   "}); len(hits) != 0 {
		t.Errorf("blank query: %d hits", len(hits))
	}
}

func testSearchCommonWords(t *testing.T, s store.Store) {
	// Every chunk holds "common"; one holds "rare". Queries of common words
	// still return results, best first, and rare words still rank first.
	var entries []store.Entry
	for i := range 300 {
		entries = append(entries, Entry("s", "a", store.AgentResponse, fmt.Sprintf("common words in message %d", i)))
	}
	entries = append(entries, Entry("s", "a", store.AgentResponse, "common but also rare"))
	res := put(t, s, entries...)
	hits := search(t, s, store.Query{Text: "common rare", Limit: 5})
	if len(hits) == 0 || hits[0].Chunk.EntryID != res[len(res)-1].ID {
		t.Errorf("Search(common rare) top = %v, want the rare entry", hitIDs(hits))
	}
	hits = search(t, s, store.Query{Text: "common", Limit: 5})
	if len(hits) != 5 {
		t.Errorf("Search(common) = %d hits, want 5", len(hits))
	}
}

func testLinks(t *testing.T, s store.Store) {
	ctx := context.Background()
	res := put(t, s, Entry("s", "a", store.Note, "summary of turns 1-5"), Entry("s", "a", store.Note, "turns 1-5 verbatim"))
	l := store.Link{FromID: res[0].ID, ToID: res[1].ID, Kind: store.LinkDerivedFrom}
	if err := s.PutLinks(ctx, []store.Link{l, l}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Links(ctx, res[1].ID)
	if err != nil || len(got) != 1 || got[0].Kind != store.LinkDerivedFrom || got[0].CreatedAt.IsZero() {
		t.Errorf("Links = %+v, %v; want one derived_from link", got, err)
	}
	bad := []store.Link{
		{FromID: res[0].ID, ToID: res[1].ID, Kind: "likes"},
		{FromID: res[0].ID, ToID: "short", Kind: store.LinkSupersedes},
		{FromID: res[0].ID, ToID: store.ID([]byte("missing")), Kind: store.LinkSupersedes},
	}
	for _, b := range bad {
		if err := s.PutLinks(ctx, []store.Link{{FromID: res[1].ID, ToID: res[0].ID, Kind: store.LinkSupersedes}, b}); err == nil {
			t.Errorf("PutLinks(%+v) succeeded", b)
		}
	}
	if got, _ := s.Links(ctx, res[0].ID); len(got) != 1 {
		t.Errorf("failed PutLinks calls wrote links: %+v", got)
	}
}

func testReferences(t *testing.T, s store.Store) {
	ctx := context.Background()
	res := put(t, s, Entry("s", "a", store.UserPrompt, "how does auth work"), Entry("s", "a", store.AgentResponse, "JWT middleware"))
	ref := store.Reference{
		ID: "ref_7f3a", Type: store.RefConversation, SessionID: "s", AgentID: "a",
		ContentIDs: []string{res[0].ID, res[1].ID}, Summary: "Discussion about auth, JWT",
		TokensSaved: 4200, TurnFrom: 1, TurnTo: 15, CreatedAt: time.Date(2026, 1, 2, 14, 23, 0, 0, time.UTC),
		Topics: []string{"auth flow", "JWT"}, Entities: []string{"middleware.go"}, QueryHints: []string{"discussion about auth flow"},
	}
	if err := s.PutReference(ctx, ref); err != nil {
		t.Fatal(err)
	}
	got, err := s.Reference(ctx, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ref, got); diff != "" {
		t.Errorf("Reference (-want +got):\n%s", diff)
	}
	var ce *store.ConflictError
	if err := s.PutReference(ctx, ref); !errors.As(err, &ce) {
		t.Errorf("second PutReference = %v, want *ConflictError", err)
	}
	if _, err := s.Reference(ctx, "ref_none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Reference(missing) = %v, want ErrNotFound", err)
	}
	bad := ref
	bad.ID, bad.ContentIDs = "ref_bad", []string{store.ID([]byte("never"))}
	if err := s.PutReference(ctx, bad); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("reference to missing content = %v, want ErrNotFound", err)
	}
	bad.ContentIDs, bad.Type = []string{res[0].ID}, "gossip"
	if err := s.PutReference(ctx, bad); err == nil {
		t.Error("reference of unknown type accepted")
	}
	// A marker carries the ID between quotes and brackets: an ID that
	// would break it is refused.
	for _, id := range []string{"ref 1", `ref"1`, "ref]1", "ref|1", strings.Repeat("r", store.MaxRefIDBytes+1)} {
		bad.ID, bad.Type = id, store.RefConversation
		if err := s.PutReference(ctx, bad); err == nil {
			t.Errorf("reference with ID %q accepted", id)
		}
	}
	// A derived write (store.Derived: committed without waiting for the
	// disk) is stored and refused as any other, and the writes after it
	// are as they were.
	derived := ref
	derived.ID = "ref_derived"
	if err := s.PutReference(store.Derived(ctx), derived); err != nil {
		t.Fatalf("derived PutReference: %v", err)
	}
	if got, err := s.Reference(ctx, derived.ID); err != nil || got.ID != derived.ID {
		t.Errorf("derived reference read back: %+v, %v", got, err)
	}
	if err := s.PutReference(store.Derived(ctx), derived); !errors.As(err, &ce) {
		t.Errorf("second derived PutReference = %v, want *ConflictError", err)
	}
	bad.ID = "ref_derived_bad"
	bad.ContentIDs = []string{store.ID([]byte("never"))}
	if err := s.PutReference(store.Derived(ctx), bad); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("derived reference to missing content = %v, want ErrNotFound", err)
	}
	after := ref
	after.ID = "ref_after_derived"
	if err := s.PutReference(ctx, after); err != nil {
		t.Fatalf("PutReference after derived writes: %v", err)
	}
}

func testSessionsAgents(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.PutSession(ctx, store.Session{ID: "s1", Name: "refactor auth", Metadata: map[string]any{"repo": "api"}}); err != nil {
		t.Fatal(err)
	}
	ss, err := s.Session(ctx, "s1")
	if err != nil || ss.Name != "refactor auth" || ss.Metadata["repo"] != "api" || ss.CreatedAt.IsZero() {
		t.Errorf("Session = %+v, %v", ss, err)
	}
	if _, err := s.Session(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Session(missing) = %v", err)
	}
	parent := store.Agent{SessionID: "s1", ID: "orch", Name: "Orchestrator", Role: "orchestrator", Model: "claude-opus-4-1", ContextWindow: 200000}
	child := store.Agent{SessionID: "s1", ID: "eng-1", Role: "engineer", ParentID: "orch", Model: "gpt-5"}
	if err := s.PutAgent(ctx, parent); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAgent(ctx, child); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAgent(ctx, store.Agent{SessionID: "s1", ID: "x", ParentID: "ghost"}); err == nil {
		t.Error("agent with an unregistered parent accepted")
	}
	if err := s.PutAgent(ctx, store.Agent{ID: "x"}); err == nil {
		t.Error("agent without a session accepted")
	}
	// Entries register their session and agent.
	put(t, s, Entry("s2", "codex", store.UserPrompt, "hi"))
	agents, err := s.Agents(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(agents) != 2 || agents[1].ParentID != "orch" || agents[0].ContextWindow != 200000 {
		t.Errorf("Agents(s1) = %+v", agents)
	}
	all, err := s.Agents(ctx, "")
	if err != nil || len(all) != 3 {
		t.Errorf("Agents(all) = %d, %v; want 3", len(all), err)
	}
	sessions, err := s.Sessions(ctx)
	if err != nil || len(sessions) != 2 {
		t.Errorf("Sessions = %d, %v; want 2", len(sessions), err)
	}
}

func testStats(t *testing.T, s store.Store) {
	put(t, s,
		Entry("s", "a", store.UserPrompt, "one two three"),
		Entry("s", "a", store.ToolResult, "four five"),
		Entry("s", "b", store.ToolResult, "four five"),
	)
	st := stats(t, s)
	if st.Entries != 2 || st.Occurrences != 3 || st.Tokens != 5 || st.Sessions != 1 || st.Agents != 2 || st.Chunks != 2 {
		t.Errorf("Stats = %+v", st)
	}
	if st.ByType[store.ToolResult].Occurrences != 2 || st.ByType[store.UserPrompt].Tokens != 3 {
		t.Errorf("ByType = %+v", st.ByType)
	}
	if st.SchemaVersion < 1 || st.Location == "" || st.First.IsZero() || st.Last.Before(st.First) {
		t.Errorf("Stats = %+v", st)
	}
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, batches, per = 4, 10, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				var entries []store.Entry
				for i := range per {
					entries = append(entries, Entry(fmt.Sprintf("w%d", w), "a", store.AgentResponse,
						fmt.Sprintf("writer %d batch %d item %d", w, b, i)))
				}
				if _, err := s.PutEntries(context.Background(), entries); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := stats(t, s); st.Entries != writers*batches*per {
		t.Errorf("%d entries, want %d", st.Entries, writers*batches*per)
	}
}
