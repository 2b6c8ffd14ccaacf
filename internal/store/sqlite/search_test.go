package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/storetest"
	"github.com/engramhq/engram/internal/terms"
)

func openInternal(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "engram.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// putN stores n notes, each in a session of its own so that none is the
// conversation context of another.
func putN(t *testing.T, s *Store, n int, format string) {
	t.Helper()
	var entries []store.Entry
	for i := range n {
		text := fmt.Sprintf(format, i)
		entries = append(entries, storetest.Entry("s-"+text, "a", store.Note, text))
	}
	if _, err := s.PutEntries(context.Background(), entries); err != nil {
		t.Fatal(err)
	}
}

func TestPlanQuery(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t, Options{Search: SearchOptions{MaxPostings: 50}})
	// "everywhere" is in 100 chunks, "often" in 40, "solo" in one; "the"
	// is a stop word.
	putN(t, s, 60, "everywhere item %d")
	putN(t, s, 40, "everywhere often %d")
	putN(t, s, 1, "solo and everywhere %d")

	p, err := s.planQuery(ctx, terms.Query("the everywhere often solo nowhere"), mainOnly)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, g := range p.groups {
		kept = append(kept, g.Whole)
	}
	// Words are as indexed: stemmed.
	if p.windowed || !slices.Equal(kept, []string{"solo", "often"}) || len(p.dropped) != 1 || p.dropped[0].Whole != "everywher" {
		t.Errorf("plan: kept %v dropped %v windowed %v; want [solo often], [everywher], false", kept, p.dropped, p.windowed)
	}
	p, err = s.planQuery(ctx, terms.Query("everywhere"), mainOnly)
	if err != nil {
		t.Fatal(err)
	}
	if !p.windowed || p.match != `"everywher"` {
		t.Errorf("plan of a word over the budget: %+v, want windowed", p)
	}
	if p, _ := s.planQuery(ctx, terms.Query("nowhere absent"), mainOnly); p.match != "" {
		t.Errorf("plan of absent words: %+v, want nothing to match", p)
	}
	// Search still answers a windowed query, best (most occurrences) first.
	putN(t, s, 1, "everywhere everywhere everywhere, the best match %d")
	hits, err := s.Search(ctx, store.Query{Text: "everywhere", Limit: 3})
	if err != nil || len(hits) != 3 {
		t.Fatalf("windowed search: %d hits, %v", len(hits), err)
	}
	if hits[0].Chunk.Text != "everywhere everywhere everywhere, the best match 0" || hits[0].Score <= hits[1].Score {
		t.Errorf("windowed search top hit %q (score %v, next %v)", hits[0].Chunk.Text, hits[0].Score, hits[1].Score)
	}
}

func TestDocFreqs_Cache(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t, Options{Search: SearchOptions{MaxPostings: 20}})
	putN(t, s, 10, "alpha %d")
	putN(t, s, 30, "beta %d")
	df, err := s.docFreqs(ctx, []string{"alpha", "beta", "gamma"}, []string{"chunks_fts"})
	if err != nil {
		t.Fatal(err)
	}
	if df["alpha"] != 10 || df["beta"] != 21 || df["gamma"] != 0 {
		t.Errorf("docFreqs = %v, want alpha 10, beta capped at 21, gamma 0", df)
	}
	// Exact counts are recounted once the full-text tables change; capped
	// ones stay capped.
	putN(t, s, 1, "gamma %d")
	if df, _ := s.docFreqs(ctx, []string{"gamma"}, mainOnly); df["gamma"] != 1 {
		t.Errorf("a word counted as absent was not recounted after a write: %v", df)
	}
	putN(t, s, 5, "alpha again %d")
	df, _ = s.docFreqs(ctx, []string{"alpha", "beta", "gamma"}, []string{"chunks_fts"})
	if df["alpha"] != 15 || df["beta"] != 21 {
		t.Errorf("after growth: docFreqs = %v, want alpha 15, beta 21", df)
	}
}

var mainOnly = []string{"chunks_fts"}

// TestSearch_RescoresDroppedWords checks that a word planned out as too
// common still ranks the candidates found by the rarer words.
func TestSearch_RescoresDroppedWords(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t, Options{Search: SearchOptions{MaxPostings: 50}})
	putN(t, s, 400, "other filler text %d")
	putN(t, s, 60, "widely cited lemma number %d")                          // too common for the budget, yet 13% of chunks
	putN(t, s, 1, "zanzibar %d")                                            // short: BM25 ranks it first on zanzibar alone
	putN(t, s, 1, "zanzibar and the widely cited lemma with more words %d") // holds the dropped words too
	hits, err := s.Search(ctx, store.Query{Text: "zanzibar widely cited lemma", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.planQuery(ctx, terms.Query("zanzibar widely cited lemma"), mainOnly)
	if err != nil || len(p.dropped) == 0 {
		t.Fatalf("the plan dropped nothing: %+v, %v", p, err)
	}
	if len(hits) != 2 || !strings.Contains(hits[0].Chunk.Text, "widely") {
		t.Errorf("hits %v: want the chunk with the dropped words first", hits)
	}
}

// TestMmapSize checks that readers map the file by default, that a
// negative MmapSize turns the map off, and that searches read the same
// either way.
func TestMmapSize(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		size int64
		want func(int64) bool
	}{
		{0, func(n int64) bool { return n > 1<<30 }}, // the default, as SQLite caps it
		{1 << 20, func(n int64) bool { return n == 1<<20 }},
		{-1, func(n int64) bool { return n == 0 }},
	} {
		s := openInternal(t, Options{Search: SearchOptions{MmapSize: tc.size}})
		putN(t, s, 20, "mapped note %d about rotating signing keys")
		var got int64
		if err := s.r.QueryRowContext(ctx, "PRAGMA mmap_size").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !tc.want(got) {
			t.Errorf("MmapSize %d: readers' mmap_size is %d", tc.size, got)
		}
		hits, err := s.Search(ctx, store.Query{Text: "rotating keys", Limit: 5})
		if err != nil || len(hits) != 5 {
			t.Errorf("MmapSize %d: search: %d hits, %v", tc.size, len(hits), err)
		}
	}
}

func TestFilterChunks(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t, Options{})
	putN(t, s, 30, "note %d about the release checklist")
	ids, err := s.FilterChunks(ctx, store.Filter{SessionID: "s-note 7 about the release checklist"}, 10)
	if err != nil || len(ids) != 1 {
		t.Fatalf("one session: %v, %v; want one chunk", ids, err)
	}
	hits, err := s.ChunkHits(ctx, ids, store.Filter{})
	if err != nil || len(hits) != 1 || hits[0].Chunk.Text != "note 7 about the release checklist" {
		t.Fatalf("the chunk: %v, %v", hits, err)
	}
	// More than the limit: limit+1 say so.
	if ids, err := s.FilterChunks(ctx, store.Filter{AgentID: "a"}, 10); err != nil || len(ids) != 11 {
		t.Errorf("every note: %d IDs, %v; want 11", len(ids), err)
	}
	if ids, err := s.FilterChunks(ctx, store.Filter{AgentID: "nobody"}, 10); err != nil || len(ids) != 0 {
		t.Errorf("no match: %v, %v", ids, err)
	}
}
