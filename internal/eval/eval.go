// Package eval scores retrieval on benchmark sets: the external sets of
// the shared bench folder and a team's own. It loads a set, runs a
// retriever over every question, and computes recall@k, MRR, nDCG@10 and
// latency percentiles, as the bench README prescribes.
//
// Code sets (code.go) search a whole repository: gocommits (Go commit
// subjects against all of GOROOT/src, tests, testdata and docs included),
// ripgrep (its commit subjects against the repository, extracted from the
// set's archive by ExtractTarGz) and any set in the same shape (LoadCode:
// a JSON Lines file of {"id", "query", "relevant"} against a directory).
// Their items are paths relative to the tree; relevant files are the
// code each commit changed. Conversation sets (sets.go) are LoCoMo (long
// conversations, evidence turns) and LongMemEval (pooled chat sessions,
// evidence turns), their turns given the roles agents' sessions are
// stored with: user and assistant.
//
// Rankings are scored on distinct items (Distinct): a file that several
// chunks matched takes the rank of its first chunk, once. On code sets,
// Metrics also count how often the first result is a test, doc or
// changelog (Classify says which). BM25 is the plain baseline every set is
// measured against in the same run.
//
// Loaders check their input before anything is scored: a missing, empty
// or malformed file, or a relevant file that is not in the corpus, is an
// error naming the file and line (LineError).
//
// Stores and retrievers are the caller's (engram eval): this package knows
// the sets, the baseline and the scoring, not how engram searches.
package eval

import (
	"context"
	"math"
	"time"

	"github.com/engramhq/engram/internal/bench"
)

// Item is one turn of a conversation corpus.
type Item struct {
	// ID identifies the turn in its corpus (LoCoMo's dialog id, or
	// LongMemEval's session:position).
	ID   string
	Text string
	// Session is the conversation the turn belongs to, Time when it was
	// said. Role is who said it, as agents' sessions are stored: "user"
	// (the person) or "assistant" (the agent).
	Session string
	Role    string
	Time    time.Time
}

// Question is a query with the items that answer it.
type Question struct {
	ID       string
	Text     string
	Corpus   string // which corpus of the set it is asked against
	Relevant []string
	// Kind is the question's category, for breakdowns.
	Kind string
	// Time is when the question is asked, if the set says (LongMemEval);
	// "a week ago" counts back from it.
	Time time.Time
	// Sessions are the sessions the question is asked over, in order, if
	// the set says (LongMemEval's haystack).
	Sessions []string
	// Part is, in a mixed set (Mix), the set the question comes from.
	Part string
}

// Set is a benchmark set: a repository (Code) or conversations
// (Corpora), and questions over them.
type Set struct {
	Name string
	// Code sets search a repository: Dir is the tree to index (as engram
	// index would: tests, docs and all), items are paths relative to it.
	Code bool
	Dir  string
	// Corpora hold the turns of conversation sets, by corpus name.
	Corpora   map[string][]Item
	Questions []Question
	// cleanup removes what loading made (an extracted archive).
	cleanup func() error
	// conv names, in a mixed set, its conversation parts; part is true
	// for a part of a mixed set (Parts).
	conv map[string]bool
	part bool
}

// Close removes what loading the set made, such as the directory an
// archive was extracted to. It is safe to call on any set, and more than
// once.
func (s *Set) Close() error {
	if s == nil || s.cleanup == nil {
		return nil
	}
	c := s.cleanup
	s.cleanup = nil
	return c()
}

// Retriever returns item IDs for a question, best first: at least k
// distinct ones when it can. Repeats are dropped before scoring, so a
// file that several chunks matched counts once, where it first appears.
type Retriever func(ctx context.Context, q Question, k int) ([]string, error)

// Ks are the cut-offs recall is reported at.
var Ks = []int{5, 10, 20}

// Metrics summarise a retriever on a set.
type Metrics struct {
	Questions int
	Recall    map[int]float64 // by k
	MRR       float64
	NDCG10    float64
	Latency   bench.Latencies
	// ByKind holds recall@10 by question kind.
	ByKind map[string]float64
	// DistractorFirst is, on a code set, the share of questions whose
	// first result is a test, doc or changelog (see Classify).
	DistractorFirst float64
}

// Depth is how many items a retriever is asked for: enough for every Ks
// and for MRR to see well past the first page.
const Depth = 50

// Run asks every question of set and scores the answers.
func Run(ctx context.Context, set *Set, r Retriever) (Metrics, error) {
	m := Metrics{Recall: map[int]float64{}, ByKind: map[string]float64{}}
	kindN := map[string]int{}
	var lat []time.Duration
	for _, q := range set.Questions {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		start := time.Now()
		got, err := r(ctx, q, Depth)
		if err != nil {
			return m, err
		}
		lat = append(lat, time.Since(start))
		got = Distinct(got, len(got))
		if set.Code && len(got) > 0 && Classify(got[0]).Distractor() {
			m.DistractorFirst++
		}
		rel := map[string]bool{}
		for _, id := range q.Relevant {
			rel[id] = true
		}
		for _, k := range Ks {
			m.Recall[k] += recall(got, rel, k)
		}
		m.MRR += reciprocalRank(got, rel)
		m.NDCG10 += ndcg(got, rel, 10)
		m.ByKind[q.Kind] += recall(got, rel, 10)
		kindN[q.Kind]++
		m.Questions++
	}
	if m.Questions > 0 {
		n := float64(m.Questions)
		for _, k := range Ks {
			m.Recall[k] /= n
		}
		m.MRR /= n
		m.NDCG10 /= n
		m.DistractorFirst /= n
	}
	for k, v := range m.ByKind {
		m.ByKind[k] = v / float64(kindN[k])
	}
	m.Latency = bench.Summarize(lat)
	return m, nil
}

// Distinct returns the first k distinct IDs of ids, each where it first
// appears: a ranking of chunks made into a ranking of the files (or
// turns) they belong to.
func Distinct(ids []string, k int) []string {
	out := make([]string, 0, min(k, len(ids)))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if len(out) == k {
			break
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// SameRanking reports whether two rankings agree on their first k items,
// compared over the shorter one: whether asking for fewer results (b)
// would have shown the same first items in the same order, only fewer
// of them when b ran out.
func SameRanking(a, b []string, k int) bool {
	n := min(k, len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// recall is the fraction of the relevant items in the first k of got,
// which holds distinct IDs (see Distinct).
func recall(got []string, rel map[string]bool, k int) float64 {
	if len(rel) == 0 {
		return 0
	}
	found := 0
	for _, id := range got[:min(k, len(got))] {
		if rel[id] {
			found++
		}
	}
	return float64(found) / float64(len(rel))
}

func reciprocalRank(got []string, rel map[string]bool) float64 {
	for i, id := range got {
		if rel[id] {
			return 1 / float64(i+1)
		}
	}
	return 0
}

// ndcg is the normalised discounted cumulative gain at k, with binary
// relevance.
func ndcg(got []string, rel map[string]bool, k int) float64 {
	dcg := 0.0
	for i, id := range got[:min(k, len(got))] {
		if rel[id] {
			dcg += 1 / math.Log2(float64(i+2))
		}
	}
	ideal := 0.0
	for i := range min(k, len(rel)) {
		ideal += 1 / math.Log2(float64(i+2))
	}
	if ideal == 0 {
		return 0
	}
	return dcg / ideal
}
