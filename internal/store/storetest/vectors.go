package storetest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
)

func testVectors(t *testing.T, s store.Store) {
	ctx := context.Background()
	res := put(t, s,
		Entry("s1", "a", store.Note, "first note about otters"),
		Entry("s2", "a", store.Note, "second note about badgers\n\nwith a second paragraph"),
	)
	putFiles(t, s, Version("x.go", "package x\n"))
	pending, err := s.PendingChunks(ctx, "m1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 4 {
		t.Fatalf("%d pending chunks, want 4", len(pending))
	}
	if pending[3].Path != "x.go" || pending[0].Text != "first note about otters" {
		t.Errorf("pending = %+v", pending)
	}
	// In pages, by ID.
	page, _ := s.PendingChunks(ctx, "m1", pending[1].ID, 1)
	if len(page) != 1 || page[0].ID != pending[2].ID {
		t.Errorf("second page = %+v", page)
	}
	vec := func(x float32) []float32 { return []float32{x, 1 - x, 0} }
	if err := s.PutVectors(ctx, "m1", 3, []store.ChunkVector{{ID: pending[0].ID, Vector: vec(0.1)}, {ID: pending[1].ID, Vector: vec(0.2)}}); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.PendingChunks(ctx, "m1", 0, 100); len(left) != 2 {
		t.Errorf("%d pending after embedding two, want 2", len(left))
	}
	if other, _ := s.PendingChunks(ctx, "m2", 0, 100); len(other) != 4 {
		t.Errorf("another model: %d pending, want 4", len(other))
	}
	got, err := s.Vectors(ctx, "m1", 0, 10)
	if err != nil || len(got) != 2 || got[1].ID != pending[1].ID || math.Abs(float64(got[1].Vector[0]-0.2)) > 1e-7 {
		t.Errorf("Vectors = %+v, %v", got, err)
	}
	st, err := s.VectorStats(ctx, "m1")
	if err != nil || st.Chunks != 4 || st.Embedded != 2 || st.Dim != 3 {
		t.Errorf("VectorStats = %+v, %v", st, err)
	}
	// Bad vectors are refused whole.
	for name, vs := range map[string][]store.ChunkVector{
		"wrong dimension": {{ID: pending[2].ID, Vector: vec(0.3)}, {ID: pending[3].ID, Vector: []float32{1}}},
		"NaN":             {{ID: pending[2].ID, Vector: []float32{float32(math.NaN()), 0, 0}}},
	} {
		if err := s.PutVectors(ctx, "m1", 3, vs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := s.PutVectors(ctx, "m1", 4, []store.ChunkVector{{ID: pending[2].ID, Vector: []float32{1, 2, 3, 4}}}); err == nil {
		t.Error("a second dimension for a model was accepted")
	}
	if left, _ := s.PendingChunks(ctx, "m1", 0, 100); len(left) != 2 {
		t.Errorf("a refused write changed the queue: %d pending", len(left))
	}

	// Hits by chunk ID, filtered, in the order asked.
	hits, err := s.ChunkHits(ctx, []int64{pending[1].ID, pending[0].ID, 999999}, store.Filter{})
	if err != nil || len(hits) != 2 || hits[0].Chunk.ID != pending[1].ID || hits[0].Occurrence.SessionID != "s2" {
		t.Errorf("ChunkHits = %+v, %v", hits, err)
	}
	hits, _ = s.ChunkHits(ctx, []int64{pending[1].ID, pending[0].ID}, store.Filter{SessionID: "s1"})
	if len(hits) != 1 || hits[0].Chunk.EntryID != res[0].ID {
		t.Errorf("ChunkHits with a filter = %+v", hits)
	}
	// A file version that is no longer current is not pending, and not a
	// hit unless History is asked for.
	putFiles(t, s, Version("x.go", "package x // v2\n"))
	if left, _ := s.PendingChunks(ctx, "m1", 0, 100); !slices.ContainsFunc(left, func(c store.ChunkText) bool { return c.Text == "package x // v2\n" }) ||
		slices.ContainsFunc(left, func(c store.ChunkText) bool { return c.Text == "package x\n" }) {
		t.Errorf("pending after a new version: %+v", left)
	}
	if hits, _ := s.ChunkHits(ctx, []int64{pending[3].ID}, store.Filter{}); len(hits) != 0 {
		t.Errorf("an old version is a hit: %+v", hits)
	}
	if hits, _ := s.ChunkHits(ctx, []int64{pending[3].ID}, store.Filter{History: true}); len(hits) != 1 {
		t.Errorf("an old version with History: %d hits", len(hits))
	}

	if err := s.DropVectors(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Vectors(ctx, "m1", 0, 10); len(got) != 0 {
		t.Errorf("%d vectors after DropVectors", len(got))
	}
	if err := s.PutVectors(ctx, "m1", 4, []store.ChunkVector{{ID: pending[0].ID, Vector: []float32{1, 2, 3, 4}}}); err != nil {
		t.Errorf("after a drop, a model name takes a new dimension: %v", err)
	}

	if _, err := s.Blob(ctx, "lsa"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Blob(missing) = %v", err)
	}
	if err := s.PutBlob(ctx, "lsa", []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Blob(ctx, "lsa"); err != nil || string(b) != "\x01\x02\x03" {
		t.Errorf("Blob = %v, %v", b, err)
	}
	if err := s.DeleteBlob(ctx, "lsa"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Blob(ctx, "lsa"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Blob after DeleteBlob = %v", err)
	}
	if err := s.DeleteBlob(ctx, "lsa"); err != nil {
		t.Errorf("DeleteBlob of a missing blob: %v", err)
	}
	// Content at two paths is embedded with the first path by name, not
	// the first stored: the text the embedder sees (and the corpus model
	// trained on it) must not depend on the order files were indexed in.
	putFiles(t, s, Version("zz/same.go", "package same\n"))
	putFiles(t, s, Version("aa/same.go", "package same\n"))
	twice, err := s.PendingChunks(ctx, "m4", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range twice {
		if strings.HasSuffix(c.Path, "same.go") {
			found = true
			if c.Path != "aa/same.go" {
				t.Errorf("content at zz/same.go, then aa/same.go: pending with %q, want aa/same.go", c.Path)
			}
		}
	}
	if !found {
		t.Errorf("the content of same.go is not pending: %+v", twice)
	}
}

func testAccess(t *testing.T, s store.Store) {
	ctx := context.Background()
	put(t, s, Entry("s1", "a", store.Note, "alpha"), Entry("s1", "a", store.Note, "beta"))
	pending, err := s.PendingChunks(ctx, "m", 0, 10)
	if err != nil || len(pending) != 2 {
		t.Fatalf("PendingChunks = %v, %v", pending, err)
	}
	a, b := pending[0].ID, pending[1].ID
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	if err := s.RecordAccess(ctx, []int64{a}, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAccess(ctx, []int64{b, a, 999999}, t0.Add(time.Hour)); err != nil {
		t.Fatalf("RecordAccess with an unknown chunk: %v", err)
	}
	hot, err := s.HotChunks(ctx, t0, 10)
	if err != nil || len(hot) != 2 || hot[0].ChunkID != b || hot[1].Count != 2 || !hot[1].Last.Equal(t0.Add(time.Hour)) {
		t.Fatalf("HotChunks = %+v, %v", hot, err)
	}
	if hot, _ := s.HotChunks(ctx, t0.Add(2*time.Hour), 10); len(hot) != 0 {
		t.Errorf("HotChunks since later = %+v", hot)
	}
	if hot, _ := s.HotChunks(ctx, t0, 1); len(hot) != 1 {
		t.Errorf("HotChunks limit 1 = %+v", hot)
	}
}

func testConversationContext(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(session string, turn int, typ store.ContentType, text string) store.Entry {
		e := Entry(session, "a", typ, text)
		e.Turn = turn
		return e
	}
	long := strings.Repeat("a long answer that stands on its own without help ", 20)
	res := put(t, s,
		mk("s1", 1, store.UserPrompt, "Which dessert did you bake for the party?"),
		mk("s1", 1, store.AgentResponse, "Coconut milk panna cotta, since I am lactose intolerant."),
		mk("s1", 2, store.UserPrompt, "And the quokka?"),
		mk("s1", 2, store.AgentResponse, long),
		mk("s2", 1, store.UserPrompt, "Unrelated opener in another session about a dessert"),
		mk("s3", 1, store.UserPrompt, "Last week we took the kids to the military memorial downtown."),
		mk("s3", 1, store.AgentResponse, "How did they take it?"),
		mk("s3", 2, store.UserPrompt, "They were awestruck and humbled."),
	)
	// The answer is found by the question's words, through its context.
	hits := search(t, s, store.Query{Text: "dessert party"})
	if !slices.Contains(hitIDs(hits), res[1].ID) {
		t.Errorf("the answer is not found by the question's words: %v", hitIDs(hits))
	}
	// The question itself ranks first: its own words count the same as a
	// context's, and it holds both.
	if hits[0].Chunk.EntryID != res[0].ID {
		t.Errorf("top hit %s, want the question", hits[0].Chunk.EntryID)
	}
	// A short answer to a short question is found by the words of the
	// turn before the question.
	if ids := hitIDs(search(t, s, store.Query{Text: "kids at the memorial"})); !slices.Contains(ids, res[7].ID) {
		t.Errorf("the answer two turns after the subject is not found by it: %v", ids)
	}
	// A long entry stands alone; a session's first entry has no context.
	if ids := hitIDs(search(t, s, store.Query{Text: "quokka"})); slices.Contains(ids, res[3].ID) {
		t.Errorf("a long entry got context: %v", ids)
	}
	pending, err := s.PendingChunks(ctx, "m", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	byEntry := map[string]string{}
	for _, c := range pending {
		hits, _ := s.ChunkHits(ctx, []int64{c.ID}, store.Filter{})
		if len(hits) == 1 {
			byEntry[hits[0].Chunk.EntryID] += c.Context
		}
	}
	if got := byEntry[res[1].ID]; got != "Which dessert did you bake for the party?" {
		t.Errorf("context of the answer: %q", got)
	}
	if got, want := byEntry[res[7].ID], "Last week we took the kids to the military memorial downtown.\nHow did they take it?"; got != want {
		t.Errorf("context of the answer two turns on: %q, want %q", got, want)
	}
	if byEntry[res[0].ID] != "" || byEntry[res[3].ID] != "" || byEntry[res[4].ID] != "" {
		t.Errorf("contexts where none belong: %q", byEntry)
	}
	if got := byEntry[res[2].ID]; !strings.HasSuffix(got, "lactose intolerant.") {
		t.Errorf("context of the second question: %q", got)
	}
}

// testVectorsWriteOrder checks that Vectors follows the order of writes,
// not of chunk IDs: a reader that passes the greatest Seq it has read
// sees every vector written since, one written for a lower chunk ID after
// a higher one's and one replaced alike, with its last value.
func testVectorsWriteOrder(t *testing.T, s store.Store) {
	ctx := context.Background()
	put(t, s,
		Entry("s1", "a", store.Note, "first note about otters"),
		Entry("s1", "a", store.Note, "second note about badgers"),
		Entry("s1", "a", store.Note, "third note about stoats"),
	)
	pending, err := s.PendingChunks(ctx, "m", 0, 100)
	if err != nil || len(pending) != 3 {
		t.Fatalf("PendingChunks = %d chunks, %v; want 3", len(pending), err)
	}
	a, b, c := pending[0].ID, pending[1].ID, pending[2].ID
	vec := func(x float32) []float32 { return []float32{x, 1 - x} }
	write := func(vs ...store.ChunkVector) {
		t.Helper()
		if err := s.PutVectors(ctx, "m", 2, vs); err != nil {
			t.Fatal(err)
		}
	}
	// follow reads what was written after the cursor, in pages of one,
	// checks that the Seqs increase past it, and moves it on.
	var cursor int64
	follow := func() map[int64]float32 {
		t.Helper()
		got := map[int64]float32{}
		for {
			page, err := s.Vectors(ctx, "m", cursor, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				return got
			}
			if page[0].Seq <= cursor {
				t.Fatalf("Vectors(after %d) returned Seq %d", cursor, page[0].Seq)
			}
			cursor = page[0].Seq
			got[page[0].ID] = page[0].Vector[0]
		}
	}
	eq := func(what string, got, want map[int64]float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: read %v, want %v", what, got, want)
			return
		}
		for id, x := range want {
			if y, ok := got[id]; !ok || math.Abs(float64(x-y)) > 1e-7 {
				t.Errorf("%s: read %v, want %v", what, got, want)
				return
			}
		}
	}

	// Seq is the store's: a caller's is ignored.
	write(store.ChunkVector{ID: c, Vector: vec(0.3), Seq: 1 << 40})
	eq("the first write", follow(), map[int64]float32{c: 0.3})
	if cursor >= 1<<40 {
		t.Errorf("the store kept the caller's Seq %d", cursor)
	}
	write(store.ChunkVector{ID: a, Vector: vec(0.1)})
	eq("a lower chunk ID written after a higher one", follow(), map[int64]float32{a: 0.1})
	write(store.ChunkVector{ID: c, Vector: vec(0.6)})
	eq("a vector replaced", follow(), map[int64]float32{c: 0.6})
	write(store.ChunkVector{ID: b, Vector: vec(0.2)}, store.ChunkVector{ID: a, Vector: vec(0.4)})
	eq("a new vector and a replaced one at once", follow(), map[int64]float32{a: 0.4, b: 0.2})
	eq("nothing written", follow(), map[int64]float32{})

	// From the start, each chunk once, with its last vector, in Seq order.
	all, err := s.Vectors(ctx, "m", 0, 100)
	if err != nil || len(all) != 3 {
		t.Fatalf("Vectors(0) = %+v, %v; want 3", all, err)
	}
	if all[0].Seq <= 0 || all[1].Seq <= all[0].Seq || all[2].Seq <= all[1].Seq {
		t.Errorf("Vectors(0) not in Seq order: %+v", all)
	}
	if all[2].Seq != cursor {
		t.Errorf("Vectors(0) ends at Seq %d, the reader's cursor is %d", all[2].Seq, cursor)
	}
	cursor = 0
	eq("from the start", follow(), map[int64]float32{a: 0.4, b: 0.2, c: 0.6})
}
