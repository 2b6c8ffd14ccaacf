package retrieve

import (
	"math"
	"slices"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

func ids(fs []Fused) []int64 {
	out := make([]int64, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

func TestFuseRRF(t *testing.T) {
	lex := []Ranked{{ID: 1, Score: 9}, {ID: 2, Score: 5}, {ID: 3, Score: 1}}
	vec := []Ranked{{ID: 3, Score: 0.9}, {ID: 4, Score: 0.8}, {ID: 1, Score: 0.1}}
	got := Fuse(lex, vec, FuseOptions{Method: RRF, LexicalWeight: 1, VectorWeight: 1})
	// 1: 1/61 + 1/63; 3: 1/63 + 1/61; 2 and 4: 1/62. Ties go to the
	// larger ID.
	if want := []int64{3, 1, 4, 2}; !slices.Equal(ids(got), want) {
		t.Fatalf("order %v, want %v", ids(got), want)
	}
	f := got[0]
	if f.LexicalRank != 3 || f.VectorRank != 1 || f.Lexical != 1 || f.Vector != 0.9 || !f.Both() {
		t.Fatalf("provenance of 3: %+v", f)
	}
	if want := 1.0/61 + 1.0/63; math.Abs(f.Score-want) > 1e-12 {
		t.Fatalf("score %v, want %v", f.Score, want)
	}
	if got[3].Both() || got[3].VectorRank != 0 {
		t.Fatalf("2 is lexical only: %+v", got[2])
	}
}

func TestFuseWeighted(t *testing.T) {
	lex := []Ranked{{ID: 1, Score: 10}, {ID: 2, Score: 6}, {ID: 3, Score: 2}}
	vec := []Ranked{{ID: 3, Score: 0.9}, {ID: 2, Score: 0.5}, {ID: 1, Score: 0.4}}
	got := Fuse(lex, vec, FuseOptions{Method: Weighted}) // 0.3 lexical, 0.7 vector
	// 1: 0.3*1 + 0.7*0 = 0.3; 2: 0.3*0.5 + 0.7*0.2 = 0.29; 3: 0 + 0.7 = 0.7.
	if want := []int64{3, 1, 2}; !slices.Equal(ids(got), want) {
		t.Fatalf("order %v, want %v", ids(got), want)
	}
	if math.Abs(got[0].Score-0.7) > 1e-12 || math.Abs(got[2].Score-0.29) > 1e-12 {
		t.Fatalf("scores %+v", got)
	}
}

// TestFuseWeighted_Shares: lexical scores as shares of the best keep the
// candidates as close as BM25 found them, where min-max puts the worst at
// zero, and the vector signal then decides.
func TestFuseWeighted_Shares(t *testing.T) {
	lex := []Ranked{{ID: 1, Score: 10}, {ID: 2, Score: 9}, {ID: 3, Score: 8}}
	vec := []Ranked{{ID: 3, Score: 0.9}, {ID: 2, Score: 0.5}, {ID: 1, Score: 0.1}}
	// Min-max: 1: 0.3; 2: 0.15 + 0.35 = 0.5; 3: 0 + 0.7 = 0.7.
	if got := Fuse(lex, vec, FuseOptions{Method: Weighted}); !slices.Equal(ids(got), []int64{3, 2, 1}) || math.Abs(got[1].Score-0.5) > 1e-12 {
		t.Fatalf("min-max: %+v", got)
	}
	// Shares: 1: 0.3; 2: 0.27 + 0.35 = 0.62; 3: 0.24 + 0.7 = 0.94.
	got := Fuse(lex, vec, FuseOptions{Method: Weighted, LexicalShares: true})
	if !slices.Equal(ids(got), []int64{3, 2, 1}) || math.Abs(got[0].Score-0.94) > 1e-12 || math.Abs(got[1].Score-0.62) > 1e-12 {
		t.Fatalf("shares: %+v", got)
	}
	// A list with no positive score counts each in full, as min-max does
	// a list of equal scores.
	if got := Fuse([]Ranked{{ID: 1, Score: 0}}, nil, FuseOptions{Method: Weighted, LexicalShares: true}); math.Abs(got[0].Score-0.3) > 1e-12 {
		t.Fatalf("zero scores: %+v", got)
	}
}

// TestLexicalShares: a list is fused as shares of the best when its best
// hit is what a person or an agent said, min-max when it is code or a
// tool's output.
func TestLexicalShares(t *testing.T) {
	hit := func(typ store.ContentType) store.Hit { return store.Hit{Occurrence: store.Occurrence{Type: typ}} }
	for _, tc := range []struct {
		lex  []store.Hit
		want bool
	}{
		{nil, false},
		{[]store.Hit{hit(store.UserPrompt), hit(store.CodeFile)}, true},
		{[]store.Hit{hit(store.AgentResponse)}, true},
		{[]store.Hit{hit(store.CodeFile), hit(store.UserPrompt)}, false},
		{[]store.Hit{hit(store.ToolResult)}, false},
	} {
		if got := lexicalShares(tc.lex); got != tc.want {
			t.Errorf("lexicalShares(%v) = %v, want %v", tc.lex, got, tc.want)
		}
	}
}

func TestFuseTieBreaks(t *testing.T) {
	// Equal scores: the newer time first, then the larger ID.
	lex := []Ranked{{ID: 5, Score: 1, Time: 100}, {ID: 6, Score: 1, Time: 200}, {ID: 7, Score: 1, Time: 200}}
	got := Fuse(lex, nil, FuseOptions{Method: Weighted})
	if want := []int64{7, 6, 5}; !slices.Equal(ids(got), want) {
		t.Fatalf("order %v, want %v", ids(got), want)
	}
	// The same inputs give the same order every time.
	for range 10 {
		if again := Fuse(lex, nil, FuseOptions{Method: Weighted}); !slices.Equal(ids(again), ids(got)) {
			t.Fatalf("unstable order %v vs %v", ids(again), ids(got))
		}
	}
}

func TestFuseEdgeCases(t *testing.T) {
	if got := Fuse(nil, nil, FuseOptions{}); len(got) != 0 {
		t.Fatalf("empty inputs: %v", got)
	}
	// One backend only: its order survives.
	vec := []Ranked{{ID: 1, Score: 0.9}, {ID: 2, Score: 0.2}}
	if got := Fuse(nil, vec, FuseOptions{}); !slices.Equal(ids(got), []int64{1, 2}) {
		t.Fatalf("vector only: %v", ids(got))
	}
	// A duplicate in one list counts once, at its best place.
	lex := []Ranked{{ID: 1, Score: 3}, {ID: 1, Score: 2}}
	got := Fuse(lex, nil, FuseOptions{Method: RRF, LexicalWeight: 1, VectorWeight: 1})
	if len(got) != 1 || got[0].LexicalRank != 1 || math.Abs(got[0].Score-1.0/61) > 1e-12 {
		t.Fatalf("duplicate: %+v", got)
	}
	if _, err := ParseFusion("borda"); err == nil {
		t.Fatal("ParseFusion accepted an unknown method")
	}
	if f, err := ParseFusion("weighted"); err != nil || f != Weighted {
		t.Fatalf("ParseFusion(weighted) = %v, %v", f, err)
	}
}
