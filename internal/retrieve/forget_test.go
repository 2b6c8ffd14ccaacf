package retrieve_test

import (
	"context"
	"testing"

	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// TestHybrid_ForgottenElsewhere forgets a session through another process
// on the same store file: the vectors of its chunks leave this process's
// in-memory index at its next search, and vector search fills its results
// from what is left.
func TestHybrid_ForgottenElsewhere(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	other := sqlitetest.OpenPath(t, f.st.Path(), sqlite.Options{})
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{})
	q := retrieve.Query{Text: "deploy the cluster rollout", Mode: retrieve.ModeVector, Limit: 40}
	before := search(t, h, q)
	if len(before.Hits) != 40 {
		t.Fatalf("%d hits before", len(before.Hits))
	}
	loaded := h.Loaded()
	forgotten := map[string]bool{}
	for _, hit := range before.Hits {
		if s := hit.Occurrence.SessionID; s != "" && len(forgotten) == 0 {
			forgotten[s] = true
		}
	}
	var sessions []string
	for s := range forgotten {
		sessions = append(sessions, s)
	}
	rep, err := other.Forget(ctx, store.ForgetRequest{Sessions: sessions, Actor: "op"})
	if err != nil {
		t.Fatal(err)
	}
	after := search(t, h, q)
	vs, err := f.st.VectorStats(ctx, f.emb.Model())
	if err != nil {
		t.Fatal(err)
	}
	if h.Loaded() != int(vs.Embedded) || h.Loaded() >= loaded {
		t.Errorf("%d vectors in memory after the forget (%d before, %d removed); the store holds %d",
			h.Loaded(), loaded, rep.Counts.Vectors, vs.Embedded)
	}
	if len(after.Hits) != 40 {
		t.Errorf("%d hits after the forget, want 40 from what is left", len(after.Hits))
	}
	for _, hit := range after.Hits {
		if forgotten[hit.Occurrence.SessionID] {
			t.Errorf("hit from the forgotten session: %+v", hit.Occurrence)
		}
	}
}

// TestHybrid_HotTierForgottenElsewhere: the hot tier, which answers from
// memory when no backend can, drops what another process forgot at the
// next search, not when it would next refresh.
func TestHybrid_HotTierForgottenElsewhere(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	other := sqlitetest.OpenPath(t, f.st.Path(), sqlite.Options{})
	h := retrieve.NewHybrid(failingSearch{f.st}, nil, retrieve.Options{})
	hits, err := f.st.Search(ctx, store.Query{Text: "deadlock", Limit: 3})
	if err != nil || len(hits) == 0 {
		t.Fatal(hits, err)
	}
	var ids []int64
	for _, hit := range hits {
		ids = append(ids, hit.Chunk.ID)
	}
	if err := h.Used(ctx, ids); err != nil {
		t.Fatal(err)
	}
	res := search(t, h, retrieve.Query{Text: "deadlock"})
	if len(res.Hits) == 0 {
		t.Fatalf("the hot tier does not answer: %+v", res)
	}
	if _, err := other.Forget(ctx, store.ForgetRequest{Sessions: []string{hits[0].Occurrence.SessionID}, Actor: "op"}); err != nil {
		t.Fatal(err)
	}
	res = search(t, h, retrieve.Query{Text: "deadlock"})
	for _, hit := range res.Hits {
		if hit.Occurrence.SessionID == hits[0].Occurrence.SessionID {
			t.Errorf("the hot tier still answers with the forgotten session: %+v", hit.Occurrence)
		}
	}
}
