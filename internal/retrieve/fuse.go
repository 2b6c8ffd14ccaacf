package retrieve

import (
	"cmp"
	"fmt"
	"slices"
)

// Fusion names a way of merging the lexical and vector rankings.
type Fusion string

// The fusion methods.
const (
	// RRF is reciprocal rank fusion (Cormack, Clarke and Büttcher 2009):
	// each list adds w/(k+rank) for every item it ranks. It needs no score
	// calibration, so it is robust when one backend's scores are odd.
	RRF Fusion = "rrf"
	// Weighted is a weighted sum of min-max normalised scores: it keeps
	// how far apart the scores are, which rank fusion forgets.
	Weighted Fusion = "weighted"
)

// ParseFusion returns the fusion method of a name.
func ParseFusion(s string) (Fusion, error) {
	switch f := Fusion(s); f {
	case RRF, Weighted:
		return f, nil
	}
	return "", fmt.Errorf("unknown fusion %q (want rrf or weighted)", s)
}

// DefaultRRFK is the k of reciprocal rank fusion, the value of the paper
// that introduced it.
const DefaultRRFK = 60

// Default weights of the two signals: the seed's, for an embedder that
// understands text (a pretrained model or a remote provider). The corpus
// model is weaker and gets less weight: see engine.CorpusFusion.
const (
	DefaultVectorWeight  = 0.7
	DefaultLexicalWeight = 0.3
)

// Ranked is one candidate of one backend, best first in its list.
type Ranked struct {
	ID    int64
	Score float64
	// Time is when the content was seen, in Unix nanoseconds: the
	// tie-break after the fused score.
	Time int64
}

// Fused is a candidate after fusion, with what each backend said of it.
type Fused struct {
	ID    int64
	Score float64
	Time  int64
	// Lexical and Vector are the backends' raw scores; LexicalRank and
	// VectorRank the 1-based ranks, 0 where a backend did not return it.
	Lexical, Vector         float64
	LexicalRank, VectorRank int
}

// Both reports whether both backends returned the candidate.
func (f Fused) Both() bool { return f.LexicalRank > 0 && f.VectorRank > 0 }

// FuseOptions configure Fuse. The zero value is the weighted merge with
// the default weights (k 60 for RRF).
type FuseOptions struct {
	Method Fusion  `json:"method"`
	K      float64 `json:"rrf_k"`
	// LexicalWeight and VectorWeight weigh the two lists; both zero means
	// the defaults.
	LexicalWeight float64 `json:"lexical_weight"`
	VectorWeight  float64 `json:"vector_weight"`
	// LexicalShares normalises the weighted merge's lexical scores as
	// shares of the best (score / best) rather than min-max: BM25 is zero
	// for content that shares no word with the query, so the shares keep
	// the candidates' lexical scores as close as BM25 found them, and the
	// vector signal decides among those it cannot tell apart. The
	// pipeline sets it per query, by the kind of content the best lexical
	// hit is (see lexicalShares).
	LexicalShares bool `json:"-"`
}

// WithDefaults returns o with its zero fields set to the defaults.
func WithDefaults(o FuseOptions) FuseOptions {
	o.defaults()
	return o
}

func (o *FuseOptions) defaults() {
	if o.Method == "" {
		o.Method = Weighted
	}
	if o.K <= 0 {
		o.K = DefaultRRFK
	}
	if o.LexicalWeight == 0 && o.VectorWeight == 0 {
		o.LexicalWeight, o.VectorWeight = DefaultLexicalWeight, DefaultVectorWeight
	}
}

// Fuse merges a lexical and a vector ranking, each best first, into one,
// best first. Ties are broken by the newer time, then the larger ID, so the
// order is stable from run to run. A candidate listed twice in one list
// counts at its first (best) place.
func Fuse(lex, vec []Ranked, opts FuseOptions) []Fused {
	opts.defaults()
	byID := make(map[int64]int, len(lex)+len(vec))
	var out []Fused
	get := func(r Ranked) *Fused {
		i, ok := byID[r.ID]
		if !ok {
			i = len(out)
			byID[r.ID] = i
			out = append(out, Fused{ID: r.ID, Time: r.Time})
		}
		f := &out[i]
		f.Time = max(f.Time, r.Time)
		return f
	}
	lexNorm, vecNorm := normalizer(lex), normalizer(vec)
	if opts.LexicalShares {
		lexNorm = shares(lex)
	}
	for i, r := range lex {
		f := get(r)
		if f.LexicalRank > 0 {
			continue
		}
		f.Lexical, f.LexicalRank = r.Score, i+1
		f.Score += contribution(opts, opts.LexicalWeight, i, lexNorm(r.Score))
	}
	for i, r := range vec {
		f := get(r)
		if f.VectorRank > 0 {
			continue
		}
		f.Vector, f.VectorRank = r.Score, i+1
		f.Score += contribution(opts, opts.VectorWeight, i, vecNorm(r.Score))
	}
	slices.SortFunc(out, func(a, b Fused) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Time, a.Time); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out
}

func contribution(opts FuseOptions, w float64, i int, norm float64) float64 {
	if opts.Method == Weighted {
		return w * norm
	}
	return w / (opts.K + float64(i+1))
}

// normalizer returns min-max normalisation over a list's scores: the best
// maps to 1, the worst to 0; a list whose scores are all equal maps to 1.
func normalizer(l []Ranked) func(float64) float64 {
	if len(l) == 0 {
		return func(float64) float64 { return 0 }
	}
	lo, hi := l[0].Score, l[0].Score
	for _, r := range l[1:] {
		lo, hi = min(lo, r.Score), max(hi, r.Score)
	}
	if hi == lo {
		return func(float64) float64 { return 1 }
	}
	return func(s float64) float64 { return (s - lo) / (hi - lo) }
}

// shares returns normalisation of non-negative scores as shares of the
// best: the best maps to 1, zero to 0; a list whose best is not positive
// maps to 1.
func shares(l []Ranked) func(float64) float64 {
	hi := 0.0
	for _, r := range l {
		hi = max(hi, r.Score)
	}
	if hi <= 0 {
		return func(float64) float64 { return 1 }
	}
	return func(s float64) float64 { return max(s, 0) / hi }
}
