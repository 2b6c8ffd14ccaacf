package retrieve_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// TestHybrid_VectorReplacedElsewhere replaces, through another process on
// the same store file, the vector of the chunk with the lowest ID, below
// every chunk this process's index has loaded: the next search sees the
// new vector (the index follows the store's write order, not chunk IDs).
func TestHybrid_VectorReplacedElsewhere(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	// Chunk IDs run ahead of the count of vectors written: of 300 notes
	// more, only the last is embedded. (A reader that took the highest
	// chunk ID it loaded for a write cursor would skip the next 300
	// writes.)
	var more []store.Entry
	for i := range 300 {
		more = append(more, storetest.Entry("s9", "agent", store.Note, fmt.Sprintf("unembedded note %d", i)))
	}
	if _, err := f.st.PutEntries(ctx, more); err != nil {
		t.Fatal(err)
	}
	pending, err := f.st.PendingChunks(ctx, f.emb.Model(), 0, 1000)
	if err != nil || len(pending) != len(more) {
		t.Fatalf("%d chunks pending, %v", len(pending), err)
	}
	last := pending[len(pending)-1]
	lv, err := f.emb.Embed(ctx, []string{last.Text})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.PutVectors(ctx, f.emb.Model(), f.emb.Dim(), []store.ChunkVector{{ID: last.ID, Vector: lv[0]}}); err != nil {
		t.Fatal(err)
	}
	other := sqlitetest.OpenPath(t, f.st.Path(), sqlite.Options{})
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{})
	q := retrieve.Query{Text: "deploy the cluster rollout", Mode: retrieve.ModeVector, Limit: 10}
	ids := func(res retrieve.Result) []int64 {
		var out []int64
		for _, hit := range res.Hits {
			out = append(out, hit.Chunk.ID)
		}
		return out
	}
	before := search(t, h, q)
	loaded := h.Loaded()
	all, err := f.st.Vectors(ctx, f.emb.Model(), 0, 100000)
	if err != nil || len(all) != loaded {
		t.Fatalf("%d vectors stored, %d loaded, %v", len(all), loaded, err)
	}
	low := slices.MinFunc(all, func(a, b store.ChunkVector) int { return cmp.Compare(a.ID, b.ID) }).ID
	if slices.Contains(ids(before), low) {
		t.Fatalf("chunk %d is a hit before its vector is replaced", low)
	}
	// Its vector becomes the query's own: the nearest of all.
	qv, err := f.emb.Embed(ctx, []string{q.Text})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.PutVectors(ctx, f.emb.Model(), f.emb.Dim(), []store.ChunkVector{{ID: low, Vector: qv[0]}}); err != nil {
		t.Fatal(err)
	}
	after := search(t, h, q)
	if !slices.Contains(ids(after), low) {
		t.Errorf("chunk %d, whose vector is now the query's, is not a hit: %v", low, ids(after))
	}
	if h.Loaded() != loaded {
		t.Errorf("%d vectors in memory after a replacement, want %d", h.Loaded(), loaded)
	}
}
