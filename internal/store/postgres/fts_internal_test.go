package postgres

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store/postgres/pgtest"
	"github.com/engramhq/engram/internal/terms"
)

// openInternal opens a store on a database of its own, dropped when the
// test ends.
func openInternal(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.Database(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func stat(t *testing.T, s *Store, space int16) spaceStats {
	t.Helper()
	st, err := readStats(context.Background(), s.pool)
	if err != nil {
		t.Fatal(err)
	}
	return st[space]
}

func TestIndexAndBM25(t *testing.T) {
	ctx := context.Background()
	s := openInternal(t)
	docs := []ftsDoc{
		{ID: 1, Body: terms.String("alpha beta beta")},
		{ID: 2, Body: terms.String("alpha then parseHTTPRequest"), Meta: terms.String("parse http request")},
		{ID: 3, Body: terms.String("gamma"), Ctx: terms.String("alpha")},
		{ID: 4, Body: terms.String("request parse http")}, // the parts, not as a phrase
	}
	write := func(fn func(tx pgx.Tx) error) {
		t.Helper()
		if err := s.write(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	write(func(tx pgx.Tx) error { return indexDocs(ctx, tx, spaceMain, docs) })
	// Lengths: 3; 2 + 4 (whole and parts) + 3; 1 + 1; 3.
	if st := stat(t, s, spaceMain); st.docs != 4 || st.len != 17 || st.gen != 1 {
		t.Fatalf("stats after indexing: %+v, want 4 docs, 17 tokens, gen 1", st)
	}

	w := [3]float64{1, 4, 0.5}
	got, err := rankAll(ctx, s.pool, spaceMain, terms.Query("alpha"), w)
	if err != nil {
		t.Fatal(err)
	}
	bm25 := func(idf, f, d float64) float64 {
		return idf * (f * 2.2) / (f + 1.2*(0.25+0.75*d/(17.0/4)))
	}
	// alpha is in 3 of 4 documents: log(1.5/3.5) < 0, so 1e-6.
	want := []docScore{{1, bm25(1e-6, 1, 3)}, {2, bm25(1e-6, 1, 9)}, {3, bm25(1e-6, 0.5, 2)}}
	slices.SortFunc(want, func(a, b docScore) int {
		if a.Score > b.Score {
			return -1
		}
		return 1
	})
	checkScores(t, "alpha", got, want)

	// A compound identifier: the whole (doc 2) or the phrase of its parts
	// (doc 2, in body and in meta), not the parts apart (doc 4).
	got, err = rankAll(ctx, s.pool, spaceMain, terms.Query("parseHTTPRequest"), w)
	if err != nil {
		t.Fatal(err)
	}
	idf := math.Log((4 - 1 + 0.5) / (1 + 0.5))
	want = []docScore{{2, bm25(idf, 1, 9) + bm25(idf, 1+4, 9)}}
	checkScores(t, "parseHTTPRequest", got, want)

	// Moving a document takes it out of its space.
	write(func(tx pgx.Tx) error { return moveDocs(ctx, tx, spaceMain, spaceHistory, []int64{2}) })
	if st, h := stat(t, s, spaceMain), stat(t, s, spaceHistory); st.docs != 3 || st.len != 8 || st.gen != 2 || h.docs != 1 || h.len != 9 || h.gen != 1 {
		t.Fatalf("stats after a move: main %+v history %+v", st, h)
	}
	if got, _ := rankAll(ctx, s.pool, spaceMain, terms.Query("parseHTTPRequest"), w); len(got) != 0 {
		t.Errorf("a moved document still matches in main: %v", got)
	}
	if got, _ := rankAll(ctx, s.pool, spaceHistory, terms.Query("parseHTTPRequest"), w); len(got) != 1 || got[0].Doc != 2 {
		t.Errorf("a moved document does not match in history: %v", got)
	}

	// Document frequencies are cached per generation.
	df, err := s.docFreqs(ctx, s.pool, []string{"alpha"}, []int16{spaceMain}, map[int16]spaceStats{spaceMain: stat(t, s, spaceMain)})
	if err != nil || df["alpha"] != 2 {
		t.Fatalf("docFreqs = %v, %v; want alpha 2", df, err)
	}
	write(func(tx pgx.Tx) error { return unindexDocs(ctx, tx, spaceMain, []int64{1}) })
	if st := stat(t, s, spaceMain); st.docs != 2 || st.len != 5 || st.gen != 3 {
		t.Fatalf("stats after unindexing: %+v", st)
	}
	df, err = s.docFreqs(ctx, s.pool, []string{"alpha"}, []int16{spaceMain}, map[int16]spaceStats{spaceMain: stat(t, s, spaceMain)})
	if err != nil || df["alpha"] != 1 {
		t.Fatalf("docFreqs after a removal = %v, %v; want alpha 1 (recounted)", df, err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM fts_postings WHERE doc = 1`).Scan(&n); err != nil || n != 0 {
		t.Errorf("postings of an unindexed document: %d, %v", n, err)
	}
}

func checkScores(t *testing.T, q string, got, want []docScore) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("rankAll(%q) = %v, want %v", q, got, want)
	}
	for i := range want {
		if got[i].Doc != want[i].Doc || math.Abs(got[i].Score-want[i].Score) > 1e-12*math.Abs(want[i].Score) {
			t.Errorf("rankAll(%q) = %v, want %v", q, got, want)
			return
		}
	}
}

func TestTokensFold(t *testing.T) {
	for in, want := range map[string][]string{
		"parse http":     {"parse", "http"},
		"café naïve":     {"cafe", "naive"},
		"e\u0301t\u00e9": {"ete"},
		"straße":         {"straße"},
		"":               nil,
	} {
		if got := tokens(in); !slices.Equal(got, want) {
			t.Errorf("tokens(%q) = %q, want %q", in, got, want)
		}
	}
}
