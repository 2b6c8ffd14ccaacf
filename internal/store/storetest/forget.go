package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/store"
)

// Rechunk is a store.RedactRequest.Rechunk for tests: paragraph chunks,
// tokens approximated by words, as Entry makes them.
func Rechunk(e *store.Entry) error {
	e.Chunks = Chunks(e.Content)
	e.TokenCount = len(bytes.Fields(e.Content))
	return nil
}

const actor = "tester@host"

func archWrite(t testing.TB, s store.Store, fn func(tx store.ArchiveTx) error) {
	t.Helper()
	if err := s.ArchiveWrite(context.Background(), fn); err != nil {
		t.Fatalf("ArchiveWrite: %v", err)
	}
}

// appendGlobal appends a global record of kind with text and body, as the
// archivalist does, and returns its id.
func appendGlobal(tx store.ArchiveTx, kind store.RecordKind, prefix, session, agent, text, ref string, body any) (string, error) {
	gv, err := tx.NextGlobal()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	r := store.ArchiveRecord{ID: prefix + "-" + itoa(gv), Kind: kind, GV: gv, SessionID: session, AgentID: agent,
		Category: "error.handling", Ref: ref, Hash: "h-" + itoa(gv), Text: text, Body: b}
	if err := tx.Append(&r); err != nil {
		return "", err
	}
	return r.ID, tx.AppendEvent(&store.ArchiveEvent{Type: string(kind) + "_add", GV: gv, SessionID: session, AgentID: agent, RecordID: r.ID})
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// appendSession appends a session record (resume, file, want, reject).
func appendSession(tx store.ArchiveTx, kind store.RecordKind, session, agent, key, text string) error {
	sv, err := tx.NextSession(session)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]string{"text": text})
	r := store.ArchiveRecord{Kind: kind, SV: sv, SessionID: session, AgentID: agent, Key: key, Text: text, Body: b}
	if err := tx.Append(&r); err != nil {
		return err
	}
	return tx.AppendEvent(&store.ArchiveEvent{Type: string(kind) + "_update", SV: sv, SessionID: session, AgentID: agent, Detail: text})
}

func versions(t testing.TB, s store.Store, session string) (uint64, uint64) {
	t.Helper()
	gv, sv, err := s.ArchiveVersions(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return gv, sv
}

func mustPurges(t testing.TB, s store.Store) uint64 {
	t.Helper()
	n, err := s.Purges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// chunkIDs returns the chunk IDs of an entry.
func chunkIDs(t testing.TB, s store.Store, id string) []int64 {
	t.Helper()
	cs, err := s.Chunks(context.Background(), id)
	if err != nil {
		t.Fatalf("Chunks(%s): %v", id, err)
	}
	var out []int64
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// vectorIDs returns the chunk IDs with a vector under model.
func vectorIDs(t testing.TB, s store.Store, model string) []int64 {
	t.Helper()
	vs, err := s.Vectors(context.Background(), model, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

// embedAll gives every pending chunk a vector under model m.
func embedAll(t testing.TB, s store.Store) {
	t.Helper()
	ctx := context.Background()
	pend, err := s.PendingChunks(ctx, "m", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var vecs []store.ChunkVector
	for _, c := range pend {
		vecs = append(vecs, store.ChunkVector{ID: c.ID, Vector: []float32{1, 0}})
	}
	if err := s.PutVectors(ctx, "m", 2, vecs); err != nil {
		t.Fatal(err)
	}
}

func forget(t testing.TB, s store.Store, req store.ForgetRequest) store.PurgeReport {
	t.Helper()
	if req.Actor == "" {
		req.Actor = actor
	}
	rep, err := s.Forget(context.Background(), req)
	if err != nil {
		t.Fatalf("Forget(%+v): %v", req, err)
	}
	return rep
}

func testForgetSession(t *testing.T, s store.Store) {
	ctx := context.Background()
	only := Entry("s1", "a1", store.UserPrompt, "the wombat password rotation plan is secret to session one")
	shared := Entry("s1", "a1", store.ToolResult, "shared platypus output seen in both sessions")
	res := put(t, s, only, shared)
	shared2 := shared
	shared2.SessionID, shared2.AgentID = "s2", "b1"
	put(t, s, shared2, Entry("s2", "b1", store.UserPrompt, "session two keeps its echidna question"))
	putFiles(t, s, Version("pkg/numbat.go", "package pkg\n\n// numbat counts things.\nfunc numbat() {}\n"))
	file, err := s.File(ctx, "pkg/numbat.go")
	if err != nil {
		t.Fatal(err)
	}
	// The session also saw the file's content.
	fileSeen := Entry("s1", "a1", store.ToolResult, "package pkg\n\n// numbat counts things.\nfunc numbat() {}\n")
	put(t, s, fileSeen)
	if err := s.PutReference(ctx, store.Reference{ID: "ref1", Type: store.RefConversation, SessionID: "s1", AgentID: "a1",
		ContentIDs: []string{res[0].ID}}); err != nil {
		t.Fatal(err)
	}
	embedAll(t, s)
	onlyChunks := chunkIDs(t, s, res[0].ID)
	if err := s.RecordAccess(ctx, onlyChunks, time.Now()); err != nil {
		t.Fatal(err)
	}
	var patID string
	archWrite(t, s, func(tx store.ArchiveTx) error {
		if err := tx.PutAgent(store.ArchiveAgent{ID: "a1", SessionID: "s1", Name: "a1"}); err != nil {
			return err
		}
		if err := appendSession(tx, store.KindResume, "s1", "a1", "", "resume the wombat work"); err != nil {
			return err
		}
		var err error
		patID, err = appendGlobal(tx, store.KindPattern, "pat", "s1", "a1", "always wrap errors", "", map[string]string{"pattern": "always wrap errors"})
		return err
	})
	before := stats(t, s)
	gv0, sv0 := versions(t, s, "s1")
	p0 := mustPurges(t, s)

	// The shared entry came after the session's own one, so its context
	// (and its first chunk's vector) holds the words of what goes.
	// A dry run says what would go and removes nothing.
	dry := forget(t, s, store.ForgetRequest{Sessions: []string{"s1"}, DryRun: true})
	if dry.Counts.Entries != 1 || dry.Counts.EntriesKept != 2 || dry.Counts.Occurrences != 3 || dry.Audit != 0 {
		t.Errorf("dry run counts = %+v (audit %d), want 1 entry removed, 2 kept, 3 occurrences", dry.Counts, dry.Audit)
	}
	if diff := cmp.Diff(before, stats(t, s)); diff != "" {
		t.Errorf("a dry run changed the store (-before +after):\n%s", diff)
	}
	if got := hitIDs(search(t, s, store.Query{Text: "wombat"})); !slices.Contains(got, res[0].ID) {
		t.Errorf("after a dry run, wombat finds %v", got)
	}

	rep := forget(t, s, store.ForgetRequest{Sessions: []string{"s1"}})
	want := store.Counts{Sessions: 1, Occurrences: 3, Entries: 1, EntriesKept: 2, ContentBytes: int64(len(only.Content)),
		Chunks: int64(len(onlyChunks)), Vectors: int64(len(onlyChunks)) + 1, Contexts: 1, References: 1, Agents: 2, Records: 1, Events: 1}
	if diff := cmp.Diff(want, rep.Counts); diff != "" {
		t.Errorf("Forget counts (-want +got):\n%s", diff)
	}
	if _, err := s.Entries(ctx, []string{res[0].ID}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the session's own entry: %v, want not found", err)
	}
	for _, history := range []bool{false, true} {
		if got := search(t, s, store.Query{Text: "wombat", Filter: store.Filter{History: history}}); len(got) != 0 {
			t.Errorf("wombat (history %v) still finds %v", history, hitIDs(got))
		}
	}
	hits := search(t, s, store.Query{Text: "platypus"})
	if len(hits) == 0 || hits[0].Chunk.EntryID != res[1].ID || hits[0].Occurrence.SessionID != "s2" {
		t.Errorf("the shared entry: %+v, want found as seen in s2", hits)
	}
	if got := slices.Compact(found(t, s, "numbat", false)); !slices.Equal(got, []string{"pkg/numbat.go"}) {
		t.Errorf("the file the session saw: %v", got)
	}
	if f, err := s.File(ctx, "pkg/numbat.go"); err != nil || f.EntryID != file.EntryID || f.State != store.FileCurrent {
		t.Errorf("file after forgetting a session that saw it: %+v, %v", f, err)
	}
	if got := search(t, s, store.Query{Text: "platypus", Filter: store.Filter{SessionID: "s1"}}); len(got) != 0 {
		t.Errorf("a filter on the forgotten session finds %v", hitIDs(got))
	}
	if _, err := s.Session(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Session(s1): %v", err)
	}
	if ags, _ := s.Agents(ctx, "s1"); len(ags) != 0 {
		t.Errorf("agents of s1: %+v", ags)
	}
	if _, err := s.Reference(ctx, "ref1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("reference of s1: %v", err)
	}
	if turns, _ := s.TurnRange(ctx, "s1", 0, 0); len(turns) != 0 {
		t.Errorf("turns of s1: %d", len(turns))
	}
	for _, id := range vectorIDs(t, s, "m") {
		if slices.Contains(onlyChunks, id) {
			t.Errorf("vector of a removed chunk %d is left", id)
		}
	}
	if hot, _ := s.HotChunks(ctx, time.Time{}, 10); len(hot) != 0 {
		t.Errorf("access rows of removed chunks: %+v", hot)
	}
	after := stats(t, s)
	if after.Entries != before.Entries-1 || after.ContentBytes != before.ContentBytes-int64(len(only.Content)) ||
		after.Occurrences != before.Occurrences-3 || after.Chunks != before.Chunks-int64(len(onlyChunks)) || after.Sessions != before.Sessions-1 {
		t.Errorf("stats after = %+v, before = %+v", after, before)
	}
	if got, want := after.ByType[store.UserPrompt].Occurrences, before.ByType[store.UserPrompt].Occurrences-1; got != want {
		t.Errorf("user prompts counted %d, want %d", got, want)
	}
	// The archive: the session's state, agents and events are gone; the
	// pattern its agent wrote stays; the versions move on, never back.
	if recs, _ := s.ArchiveRecords(ctx, store.RecordQuery{SessionID: "s1", Kinds: []store.RecordKind{store.KindResume}}); len(recs) != 0 {
		t.Errorf("resume state of s1: %+v", recs)
	}
	if recs, _ := s.ArchiveRecords(ctx, store.RecordQuery{IDs: []string{patID}}); len(recs) != 1 {
		t.Errorf("the session's pattern, kept by default: %+v", recs)
	}
	if ags, _ := s.ArchiveAgents(ctx, "s1"); len(ags) != 0 {
		t.Errorf("archive agents of s1: %+v", ags)
	}
	evs, _ := s.ArchiveEvents(ctx, -1, 100)
	for _, e := range evs {
		if e.SessionID == "s1" && e.RecordID != patID {
			t.Errorf("event of s1 left: %+v", e)
		}
	}
	gv1, sv1 := versions(t, s, "s1")
	if gv1 <= gv0 || sv1 <= sv0 {
		t.Errorf("versions after forgetting: gv %d -> %d, sv %d -> %d; both must advance", gv0, gv1, sv0, sv1)
	}
	if got := mustPurges(t, s); got != p0+1 {
		t.Errorf("purges %d -> %d", p0, got)
	}
	// The audit names who, what and how much, and none of the content.
	aud, err := s.Audit(ctx, -1, 10)
	if err != nil || len(aud) != 1 {
		t.Fatalf("Audit = %+v, %v", aud, err)
	}
	a := aud[0]
	if a.Seq != rep.Audit || a.Actor != actor || a.Action != "forget" || !slices.Equal(a.Targets, []string{"session:s1"}) ||
		a.Counts != rep.Counts || time.Since(a.At) > time.Minute {
		t.Errorf("audit record = %+v", a)
	}
	if _, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"s1"}, Actor: actor}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("forgetting a forgotten session: %v", err)
	}

	// With SessionRecords the global records its agents wrote go too.
	archWrite(t, s, func(tx store.ArchiveTx) error {
		if err := tx.PutAgent(store.ArchiveAgent{ID: "b1", SessionID: "s2", Name: "b1"}); err != nil {
			return err
		}
		_, err := appendGlobal(tx, store.KindInsight, "ins", "s2", "b1", "the echidna insight", "", map[string]string{"insight": "the echidna insight"})
		return err
	})
	rep = forget(t, s, store.ForgetRequest{Sessions: []string{"s2", "s2"}, SessionRecords: true})
	if rep.Counts.Records != 1 || rep.Counts.Entries != 2 {
		t.Errorf("forget s2 with records: %+v", rep.Counts)
	}
	if hits, _ := s.ArchiveSearch(ctx, "echidna", nil, 10); len(hits) != 0 {
		t.Errorf("the session's insight is still found: %+v", hits)
	}
	if got := search(t, s, store.Query{Text: "platypus"}); len(got) != 0 {
		t.Errorf("platypus, seen in no session now: %v", hitIDs(got))
	}
}

func testForgetEntry(t *testing.T, s store.Store) {
	ctx := context.Background()
	call := Entry("s1", "a", store.ToolCall, "run the kookaburra tests")
	call.MsgID = "t1"
	r1 := put(t, s, call)
	result := Entry("s1", "a", store.ToolResult, "kookaburra tests passed")
	result.ParentID = r1[0].ID
	r2 := put(t, s, result)
	again := call
	again.SessionID, again.MsgID = "s2", ""
	put(t, s, again)
	if err := s.PutReference(ctx, store.Reference{ID: "ref-other", Type: store.RefToolResults, SessionID: "s3", AgentID: "x",
		ContentIDs: []string{r1[0].ID}}); err != nil {
		t.Fatal(err)
	}

	// Unknown and malformed IDs change nothing.
	if _, err := s.Forget(ctx, store.ForgetRequest{Entries: []string{store.ID([]byte("never"))}, Actor: actor}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown entry: %v", err)
	}
	var ve *store.ValidationError
	if _, err := s.Forget(ctx, store.ForgetRequest{Entries: []string{"abc"}, Actor: actor}); !errors.As(err, &ve) {
		t.Errorf("short id: %v", err)
	}
	if _, err := s.Forget(ctx, store.ForgetRequest{Entries: []string{r1[0].ID}}); !errors.As(err, &ve) {
		t.Errorf("no actor: %v", err)
	}

	rep := forget(t, s, store.ForgetRequest{Entries: []string{r1[0].ID}})
	if rep.Counts.Occurrences != 2 || rep.Counts.Entries != 1 || rep.Counts.References != 1 || rep.Counts.Links != 1 {
		t.Errorf("counts = %+v", rep.Counts)
	}
	if _, err := s.MsgEntry(ctx, "s1", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("its msg_id: %v", err)
	}
	ents, err := s.Entries(ctx, []string{r2[0].ID})
	if err != nil || ents[0].ParentID != "" {
		t.Errorf("the result it prompted: %+v, %v; want kept without a parent", ents, err)
	}
	if links, _ := s.Links(ctx, r2[0].ID); len(links) != 0 {
		t.Errorf("links of the result: %+v", links)
	}
	if got := hitIDs(search(t, s, store.Query{Text: "run kookaburra"})); slices.Contains(got, r1[0].ID) {
		t.Errorf("the forgotten entry is found: %v", got)
	}
	// Storing it again stores it again.
	if res := put(t, s, call); !res[0].NewContent || res[0].ID != r1[0].ID {
		t.Errorf("stored again: %+v", res[0])
	}

	// Files: the current version is refused; an old one leaves the history.
	putFiles(t, s, Version("a.go", "package a // bilby one\n"))
	putFiles(t, s, Version("a.go", "package a // bandicoot two\n"))
	vs, err := s.FileVersions(ctx, "a.go")
	if err != nil || len(vs) != 2 {
		t.Fatal(vs, err)
	}
	var ce *store.ConflictError
	if _, err := s.Forget(ctx, store.ForgetRequest{Entries: []string{vs[1].EntryID}, Actor: actor}); !errors.As(err, &ce) {
		t.Errorf("forgetting a current version: %v, want a conflict", err)
	}
	if got := found(t, s, "bandicoot", false); len(got) != 1 {
		t.Errorf("after the refusal the current version: %v", got)
	}
	rep = forget(t, s, store.ForgetRequest{Entries: []string{vs[0].EntryID}})
	if rep.Counts.FileVersions != 1 {
		t.Errorf("counts = %+v", rep.Counts)
	}
	if got := found(t, s, "bilby", true); len(got) != 0 {
		t.Errorf("the old version is still searchable in history: %v", got)
	}
	vs2, err := s.FileVersions(ctx, "a.go")
	if err != nil || len(vs2) != 1 || vs2[0].Version != 2 {
		t.Errorf("history after forgetting version 1: %+v, %v", vs2, err)
	}
	// A deleted file's last version: the manifest names the one before,
	// and forgets the file with the last of them.
	putFiles(t, s, store.FileChange{Kind: store.ChangeDelete, Path: "a.go"})
	forget(t, s, store.ForgetRequest{Entries: []string{vs[1].EntryID}})
	if _, err := s.File(ctx, "a.go"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a deleted file with no version left: %v", err)
	}
}

func testForgetRecords(t *testing.T, s store.Store) {
	ctx := context.Background()
	var old, newer, fail, res, other string
	archWrite(t, s, func(tx store.ArchiveTx) error {
		var err error
		if old, err = appendGlobal(tx, store.KindPattern, "pat", "s1", "a", "use the wallaby logger", "", map[string]string{"pattern": "use the wallaby logger"}); err != nil {
			return err
		}
		if newer, err = appendGlobal(tx, store.KindPattern, "pat", "s1", "a", "use the dingo logger", "", map[string]string{"pattern": "use the dingo logger"}); err != nil {
			return err
		}
		if err := tx.Supersede(old, newer); err != nil {
			return err
		}
		if err := tx.Use(newer, time.Now()); err != nil {
			return err
		}
		if fail, err = appendGlobal(tx, store.KindFailure, "fail", "s1", "a", "retry quoll forever", "", map[string]string{"approach": "retry quoll forever"}); err != nil {
			return err
		}
		if res, err = appendGlobal(tx, store.KindResolution, "res", "s2", "b", "back off the quoll", fail, map[string]string{"approach": "back off the quoll"}); err != nil {
			return err
		}
		other, err = appendGlobal(tx, store.KindInsight, "ins", "s2", "b", "an unrelated insight", "", map[string]string{"insight": "an unrelated insight"})
		if err != nil {
			return err
		}
		return appendSession(tx, store.KindWant, "s1", "a", "k", "a want")
	})
	gv0, sv0 := versions(t, s, "s1")
	if _, err := s.Forget(ctx, store.ForgetRequest{Records: []string{"pat-999"}, Actor: actor}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown record: %v", err)
	}
	rep := forget(t, s, store.ForgetRequest{Records: []string{newer, fail}})
	if rep.Counts.Records != 3 || !slices.Equal(rep.Reactivated, []string{old}) || rep.Counts.Events != 3 {
		t.Errorf("report = %+v, want 3 records (with the resolution), %s reactivated, 3 events", rep, old)
	}
	left, err := s.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindPattern, store.KindFailure, store.KindResolution, store.KindInsight}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range left {
		ids = append(ids, r.ID)
		if r.ID == old && r.SupersededBy != "" {
			t.Errorf("%s still superseded by %s", old, r.SupersededBy)
		}
	}
	if !slices.Equal(ids, []string{old, other}) {
		t.Errorf("records left %v, want %s and %s (%s went with its failure)", ids, old, other, res)
	}
	for _, q := range []string{"dingo", "quoll"} {
		if hits, _ := s.ArchiveSearch(ctx, q, nil, 10); len(hits) != 0 {
			t.Errorf("%s still finds %+v", q, hits)
		}
	}
	if hits, _ := s.ArchiveSearch(ctx, "wallaby", nil, 10); len(hits) != 1 {
		t.Errorf("wallaby finds %d", len(hits))
	}
	gv1, sv1 := versions(t, s, "s1")
	if gv1 <= gv0 || sv1 <= sv0 {
		t.Errorf("versions: gv %d -> %d, sv %d -> %d", gv0, gv1, sv0, sv1)
	}
	// Session records are forgotten with their session, not by themselves.
	if _, err := s.Forget(ctx, store.ForgetRequest{Records: []string{""}, Actor: actor}); err == nil {
		t.Error("an empty record id was accepted")
	}
}

// testForgetContexts checks that what followed a forgotten entry no longer
// carries it as conversation context.
func testForgetContexts(t *testing.T, s store.Store) {
	mk := func(turn int, typ store.ContentType, text string) store.Entry {
		e := Entry("s1", "a", typ, text)
		e.Turn = turn
		return e
	}
	res := put(t, s,
		mk(1, store.UserPrompt, "What did the cassowary eat at the zoo?"),
		mk(1, store.AgentResponse, "Mostly fruit, I believe."),
	)
	if got := hitIDs(search(t, s, store.Query{Text: "cassowary"})); !slices.Contains(got, res[1].ID) {
		t.Fatalf("the answer is not found by its question's words: %v", got)
	}
	rep := forget(t, s, store.ForgetRequest{Entries: []string{res[0].ID}})
	if rep.Counts.Contexts != 1 {
		t.Errorf("contexts worked out again: %d, want 1", rep.Counts.Contexts)
	}
	if got := hitIDs(search(t, s, store.Query{Text: "cassowary"})); len(got) != 0 {
		t.Errorf("the forgotten question's words still find %v", got)
	}
	pend, err := s.PendingChunks(context.Background(), "m", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pend {
		if strings.Contains(c.Context, "cassowary") {
			t.Errorf("the embedder would see the forgotten text as context: %q", c.Context)
		}
	}
}

func redact(t testing.TB, s store.Store, text string, dry bool) store.PurgeReport {
	t.Helper()
	rep, err := s.Redact(context.Background(), store.RedactRequest{Text: []byte(text), Actor: actor, DryRun: dry, Rechunk: Rechunk})
	if err != nil {
		t.Fatalf("Redact: %v", err)
	}
	return rep
}

func testRedact(t *testing.T, s store.Store) {
	ctx := context.Background()
	const secret = "hunter2<quokka>XYZZY"
	long := "first paragraph mentions nothing\n\nthe password is " + secret + " do not share\n\nthird paragraph\n"
	e := Entry("s1", "a", store.ToolResult, long)
	e.Turn = 1
	e.Keywords = []string{"key " + secret}
	e.Metadata = map[string]any{"note": "meta " + secret, "n": 1}
	short := Entry("s1", "a", store.AgentResponse, "noted, rotating it")
	short.Turn = 1
	res := put(t, s, e, short)
	clean := put(t, s, Entry("s2", "b", store.UserPrompt, "an entry without it"))
	embedAll(t, s)
	if err := s.PutSession(ctx, store.Session{ID: "s1", Name: "session about " + secret}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSetting(ctx, "some.setting", "value with "+secret); err != nil {
		t.Fatal(err)
	}
	var patID string
	archWrite(t, s, func(tx store.ArchiveTx) error {
		if err := tx.PutAgent(store.ArchiveAgent{ID: "a", SessionID: "s1", Name: "agent " + secret}); err != nil {
			return err
		}
		if err := appendSession(tx, store.KindWant, "s1", "a", "k", "never print "+secret); err != nil {
			return err
		}
		// A detail cut short inside the string keeps only its start.
		if err := tx.AppendEvent(&store.ArchiveEvent{Type: "want_update", SessionID: "s1", AgentID: "a",
			Detail: "cut short at " + secret[:9] + "…"}); err != nil {
			return err
		}
		var err error
		patID, err = appendGlobal(tx, store.KindPattern, "pat", "s1", "a", "never log "+secret, "", map[string]string{"pattern": "never log " + secret})
		return err
	})
	before := stats(t, s)
	oldChunks := chunkIDs(t, s, res[0].ID)

	// Refusals change nothing.
	var ve *store.ValidationError
	for _, bad := range []string{"abc", "    ", "REDACTED"} {
		if _, err := s.Redact(ctx, store.RedactRequest{Text: []byte(bad), Actor: actor, Rechunk: Rechunk}); !errors.As(err, &ve) {
			t.Errorf("Redact(%q): %v, want a validation error", bad, err)
		}
	}
	if _, err := s.Redact(ctx, store.RedactRequest{Text: []byte("abcdef"), Actor: actor}); !errors.As(err, &ve) {
		t.Errorf("without Rechunk: %v", err)
	}
	if diff := cmp.Diff(before, stats(t, s)); diff != "" {
		t.Errorf("refused redactions changed the store:\n%s", diff)
	}
	idErr := func(text string) {
		t.Helper()
		_, err := s.Redact(ctx, store.RedactRequest{Text: []byte(text), Actor: actor, Rechunk: Rechunk})
		if !errors.As(err, &ve) || strings.Contains(err.Error(), text) {
			t.Errorf("Redact of an identifier's part %q: %v; want a validation error that does not repeat it", text, err)
		}
	}
	put(t, s, Entry("sess-"+secret[:8], "a", store.Note, "x"))
	idErr(secret[:8])
	forget(t, s, store.ForgetRequest{Sessions: []string{"sess-" + secret[:8]}})
	before = stats(t, s)

	dry := redact(t, s, secret, true)
	if dry.Counts.Places == 0 || dry.Audit != 0 {
		t.Errorf("dry run = %+v", dry)
	}
	if diff := cmp.Diff(before, stats(t, s)); diff != "" {
		t.Errorf("a dry run changed the store:\n%s", diff)
	}

	p0 := mustPurges(t, s)
	gv0, sv0 := versions(t, s, "s1")
	rep := redact(t, s, secret, false)
	// Places: the content, keyword, metadata, the context of the short
	// entry, the session name, the setting, the agent, the want (text,
	// body, event) and the pattern (text, body).
	c := rep.Counts
	if c.Entries != 1 || c.Occurrences != 1 || c.Records != 2 || c.Settings != 1 || c.Agents != 1 || c.Sessions != 1 ||
		c.Events != 2 || c.Chunks != 3 || c.Places != 12 || c.Bytes != c.Places*int64(len(secret)) || c.Contexts != 1 {
		t.Errorf("counts = %+v", c)
	}
	got, err := s.Entries(ctx, []string{res[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	wantContent := strings.ReplaceAll(long, secret, store.DefaultMarker)
	if string(got[0].Content) != wantContent || !got[0].Redacted || got[0].ID != res[0].ID {
		t.Errorf("redacted entry = %q (redacted %v, id %s)", got[0].Content, got[0].Redacted, got[0].ID)
	}
	if got[0].TokenCount != len(strings.Fields(wantContent)) {
		t.Errorf("token count %d", got[0].TokenCount)
	}
	if !slices.Equal(got[0].Keywords, []string{"key " + store.DefaultMarker}) || got[0].Metadata["note"] != "meta "+store.DefaultMarker {
		t.Errorf("occurrence = %+v", got[0].Occurrence)
	}
	if ok, _ := s.Entries(ctx, []string{clean[0].ID}); ok[0].Redacted {
		t.Error("an entry without the string is marked redacted")
	}
	cs, err := s.Chunks(ctx, res[0].ID)
	if err != nil || len(cs) != 3 {
		t.Fatalf("chunks = %+v, %v", cs, err)
	}
	for _, c := range cs {
		if strings.Contains(c.Text, secret) || slices.Contains(oldChunks, c.ID) {
			t.Errorf("chunk %+v", c)
		}
	}
	after := stats(t, s)
	if d := after.ContentBytes - before.ContentBytes; d != int64(len(store.DefaultMarker)-len(secret)) {
		t.Errorf("content bytes moved by %d", d)
	}
	// Every word of it is gone from both full-text tables, and the
	// redacted chunks wait for new vectors.
	for _, q := range []string{"hunter2", "XYZZY", "quokka", secret} {
		for _, h := range []bool{false, true} {
			if hits := search(t, s, store.Query{Text: q, Filter: store.Filter{History: h}}); len(hits) != 0 {
				t.Errorf("search %q (history %v) finds %v", q, h, hitIDs(hits))
			}
		}
		if hits, _ := s.ArchiveSearch(ctx, q, nil, 10); len(hits) != 0 {
			t.Errorf("archive search %q finds %+v", q, hits)
		}
	}
	if got := hitIDs(search(t, s, store.Query{Text: "password share"})); !slices.Contains(got, res[0].ID) {
		t.Errorf("the rest of the redacted entry is not found: %v", got)
	}
	vecs := vectorIDs(t, s, "m")
	pend, _ := s.PendingChunks(ctx, "m", 0, 100)
	pendIDs := map[int64]bool{}
	for _, p := range pend {
		pendIDs[p.ID] = true
		if strings.Contains(p.Text, secret) || strings.Contains(p.Context, secret) {
			t.Errorf("pending chunk holds it: %+v", p)
		}
	}
	for _, id := range chunkIDs(t, s, res[0].ID) {
		if !pendIDs[id] || slices.Contains(vecs, id) {
			t.Errorf("redacted chunk %d is not waiting for a vector", id)
		}
	}
	if !pendIDs[chunkIDs(t, s, res[1].ID)[0]] {
		t.Error("the entry whose context held it is not waiting for a new vector")
	}
	// Archive, agents, settings, sessions, events.
	recs, _ := s.ArchiveRecords(ctx, store.RecordQuery{})
	for _, r := range recs {
		if strings.Contains(r.Text+string(r.Body), secret) || strings.Contains(string(r.Body), "hunter2") {
			t.Errorf("record %s holds it: %q %s", r.ID, r.Text, r.Body)
		}
	}
	if ag, _ := s.ArchiveAgent(ctx, "a"); strings.Contains(ag.Name, "hunter2") {
		t.Errorf("agent %+v", ag)
	}
	evs, _ := s.ArchiveEvents(ctx, -1, 100)
	for _, ev := range evs {
		if strings.Contains(ev.Detail, "hunter2") {
			t.Errorf("event %+v", ev)
		}
		if strings.HasPrefix(ev.Detail, "cut short") && ev.Detail != "cut short at "+store.DefaultMarker+"…" {
			t.Errorf("the cut detail = %q", ev.Detail)
		}
	}
	if v, _ := s.Setting(ctx, "some.setting"); v != "value with "+store.DefaultMarker {
		t.Errorf("setting = %q", v)
	}
	if ss, _ := s.Session(ctx, "s1"); ss.Name != "session about "+store.DefaultMarker {
		t.Errorf("session = %+v", ss)
	}
	if pats, _ := s.ArchiveRecords(ctx, store.RecordQuery{IDs: []string{patID}}); len(pats) != 1 {
		t.Errorf("the pattern is gone instead of redacted")
	}
	gv1, sv1 := versions(t, s, "s1")
	if gv1 <= gv0 || sv1 <= sv0 || mustPurges(t, s) != p0+1 {
		t.Errorf("versions did not advance: gv %d -> %d, sv %d -> %d", gv0, gv1, sv0, sv1)
	}
	// The audit holds neither the string nor its hash, nor its length
	// (the bytes replaced, with the places).
	aud, err := s.Audit(ctx, rep.Audit-1, 10)
	audited := rep.Counts
	audited.Bytes = 0
	if err != nil || len(aud) != 1 || aud[0].Action != "redact" || aud[0].Counts != audited || len(aud[0].Targets) != 0 {
		t.Fatalf("audit = %+v, %v", aud, err)
	}
	blob, _ := json.Marshal(aud)
	sum := sha256.Sum256([]byte(secret))
	if bytes.Contains(blob, []byte("hunter2")) || bytes.Contains(blob, []byte(hex.EncodeToString(sum[:]))) {
		t.Errorf("the audit holds the string or its hash: %s", blob)
	}
	// A second redaction finds nothing and records nothing.
	if rep := redact(t, s, secret, false); rep.Counts.Places != 0 || rep.Audit != 0 {
		t.Errorf("second redaction = %+v", rep)
	}
	// Storing the original content again finds it stored: the string
	// does not come back.
	if r := put(t, s, Entry("s3", "c", store.ToolResult, long)); r[0].NewContent || r[0].ID != res[0].ID {
		t.Errorf("stored again: %+v", r[0])
	}
	if hits := search(t, s, store.Query{Text: "hunter2"}); len(hits) != 0 {
		t.Errorf("after storing the original again, hunter2 finds %v", hitIDs(hits))
	}
}

func testRetain(t *testing.T, s store.Store) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mk := func(session string, at time.Time, text string) store.Entry {
		e := Entry(session, "a", store.UserPrompt, text)
		e.Time = at
		return e
	}
	put(t, s,
		mk("old", now.Add(-100*24*time.Hour), "an old session about lyrebirds"),
		mk("mid", now.Add(-10*24*time.Hour), "a middle session about bowerbirds and more words"),
		mk("new", now.Add(-time.Minute), "a new session about magpies"),
	)
	archWrite(t, s, func(tx store.ArchiveTx) error {
		return tx.PutAgent(store.ArchiveAgent{ID: "x", SessionID: "archonly", RegisteredAt: now.Add(-200 * 24 * time.Hour)})
	})
	before := stats(t, s)
	if _, err := s.Retain(ctx, store.RetainRequest{MaxAge: -time.Hour, Actor: actor}); err == nil {
		t.Error("a negative age was accepted")
	}
	dry, err := s.Retain(ctx, store.RetainRequest{MaxAge: 30 * 24 * time.Hour, Now: now, Actor: actor, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dry.Sessions, []string{"archonly", "old"}) {
		t.Errorf("dry run would forget %v", dry.Sessions)
	}
	if diff := cmp.Diff(before, stats(t, s)); diff != "" {
		t.Errorf("a dry run changed the store:\n%s", diff)
	}
	rep, err := s.Retain(ctx, store.RetainRequest{MaxAge: 30 * 24 * time.Hour, Now: now, Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Sessions, []string{"archonly", "old"}) || rep.Counts.Sessions != 2 {
		t.Errorf("forgot %v (%+v)", rep.Sessions, rep.Counts)
	}
	if got := search(t, s, store.Query{Text: "lyrebirds"}); len(got) != 0 {
		t.Errorf("the old session is still found")
	}
	aud, _ := s.Audit(ctx, -1, 10)
	if len(aud) != 2 || aud[0].Action != "retention" || !slices.Equal(aud[1].Targets, []string{"session:old"}) {
		t.Errorf("audit = %+v", aud)
	}
	// By size: the oldest go first until the content fits; a session in
	// use is never forgotten for size.
	rep, err = s.Retain(ctx, store.RetainRequest{MaxBytes: 1, Now: now, Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Sessions, []string{"mid"}) || rep.ContentBytes != int64(len("a new session about magpies")) {
		t.Errorf("by size forgot %v, content now %d", rep.Sessions, rep.ContentBytes)
	}
	rep, err = s.Retain(ctx, store.RetainRequest{MaxBytes: 1 << 20, MaxAge: time.Hour, Now: now, Actor: actor})
	if err != nil || len(rep.Sessions) != 0 {
		t.Errorf("within the policy: %+v, %v", rep, err)
	}
}

// testForgetThenStore stores content again after it was forgotten.
func testForgetThenStore(t *testing.T, s store.Store) {
	e := Entry("s1", "a", store.Note, "a note about kiwis")
	put(t, s, e)
	forget(t, s, store.ForgetRequest{Sessions: []string{"s1"}})
	res := put(t, s, e)
	if !res[0].NewContent {
		t.Errorf("content stored after it was forgotten: %+v", res[0])
	}
	if got := hitIDs(search(t, s, store.Query{Text: "kiwis"})); !slices.Equal(got, []string{res[0].ID}) {
		t.Errorf("kiwis finds %v", got)
	}
}

// testRedactEscaped: a redaction finds the string where content is JSON
// text that escapes it, as encoders other than Go's do (Python's \u00XX
// for what is past ASCII, PHP's \/ for a slash, \u0026 for an ampersand),
// and in metadata where it is a number. Before, all of these were left
// and the redaction reported nothing.
func testRedactEscaped(t *testing.T, s store.Store) {
	ctx := context.Background()
	cases := []struct{ secret, content string }{
		{"Tr0ub4dor&3Horse", `{"cmd":"mysql -pTr0ub4dor\u00263Horse"}`},
		{"https://hook.example/T0K3N", `{"url":"https:\/\/hook.example\/T0K3N"}`},
		{"café-s3cr3t-ü", `{"note":"caf\u00e9-s3cr3t-\u00fc"}`},
		{"ZEBRA-πλ-42", `{"note":"ZEBRA-\u03C0\u03BB-42"}`},
	}
	for i, c := range cases {
		e := Entry("esc", "a", store.ToolCall, c.content)
		e.Turn = i + 1
		put(t, s, e)
	}
	num := Entry("esc", "a", store.Note, "a note with a pin in its metadata")
	num.Metadata = map[string]any{"pin": 48151623}
	num.Turn = 10
	put(t, s, num)
	for _, c := range cases {
		rep := redact(t, s, c.secret, false)
		if rep.Counts.Entries != 1 || rep.Counts.Places != 1 {
			t.Errorf("%s: %+v, want one place in one entry", c.secret, rep.Counts)
		}
	}
	rep := redact(t, s, "48151623", false)
	if rep.Counts.Occurrences != 1 {
		t.Errorf("the pin: %+v, want one occurrence", rep.Counts)
	}
	got, err := s.TurnRange(ctx, "esc", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range got {
		text := string(e.Content) + fmt.Sprint(e.Metadata)
		for _, bad := range []string{"Tr0ub4dor", "T0K3N", "s3cr3t", "\\u03C0", "48151623"} {
			if strings.Contains(text, bad) {
				t.Errorf("entry %s still holds %q: %s", e.ID[:8], bad, text)
			}
		}
		if e.Type == store.ToolCall && !json.Valid(e.Content) {
			t.Errorf("entry %s is no longer JSON: %s", e.ID[:8], e.Content)
		}
	}
	// A string that is part of an id is refused, saying what to do and
	// naming no id.
	put(t, s, Entry("sess-Qx7Leak", "a", store.Note, "a note"))
	_, err = s.Redact(ctx, store.RedactRequest{Text: []byte("Qx7Leak"), Actor: actor, Rechunk: Rechunk})
	var ve *store.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "is part of a session id") || !strings.Contains(err.Error(), "engram forget session") ||
		strings.Contains(err.Error(), "sess-") {
		t.Errorf("a string in a session id: %v", err)
	}
}
