package eval

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/engramhq/engram/internal/terms"
)

// The bench README's plain BM25, the baseline every set's figures are
// compared with.
const (
	DefaultK1 = 1.2
	DefaultB  = 0.75
	// DefaultPathWeight is how many times each word of a file's path
	// counts, as if the path were written that many times in the file.
	DefaultPathWeight = 3
)

// BM25Options configure a BM25 index. The zero value is the bench
// README's baseline for code: k1 1.2, b 0.75, path words counted
// DefaultPathWeight times, stop words kept.
type BM25Options struct {
	// K1 and B are BM25's term-frequency saturation and length
	// normalisation. Zero means DefaultK1 and DefaultB.
	K1, B float64
	// PathWeight is how many times each word of a document's path counts.
	// Zero means DefaultPathWeight; negative leaves paths out.
	PathWeight int
	// StopWords drops English stop words from documents and queries, as
	// for the conversation sets.
	StopWords bool
}

// Doc is one document of a BM25 index: a whole file (with its path) or a
// conversation turn.
type Doc struct {
	ID   string
	Path string
	Text string
}

// BM25 is a plain in-memory BM25 index over whole documents, the
// baseline engram's ranking is measured against. Words are engram's
// terms (package terms): lower case, stemmed, and an identifier both
// whole and split at case changes and underscores, so that
// parseHTTPRequest matches "parse", "http" and "request". It is safe for
// concurrent searches once built.
type BM25 struct {
	k1, b    float64
	stop     bool
	ids      []string
	norm     []float64 // k1 * (1 - b + b * len/avglen), per document
	postings map[string][]posting
}

type posting struct {
	doc int32
	tf  float32
}

// NewBM25 indexes docs. Tokenising is spread over the cores.
func NewBM25(docs []Doc, opts BM25Options) *BM25 {
	if opts.K1 == 0 {
		opts.K1 = DefaultK1
	}
	if opts.B == 0 {
		opts.B = DefaultB
	}
	if opts.PathWeight == 0 {
		opts.PathWeight = DefaultPathWeight
	}
	ix := &BM25{k1: opts.K1, b: opts.B, stop: opts.StopWords, ids: make([]string, len(docs)),
		norm: make([]float64, len(docs)), postings: map[string][]posting{}}
	// Term counts per document, made in parallel; postings are then
	// appended in document order, so each list is sorted by document.
	counts := make([]map[string]int, len(docs))
	lens := make([]int, len(docs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) { // tokenising is CPU-bound
		wg.Go(func() {
			for i := range next {
				tf := map[string]int{}
				n := 0
				for _, t := range ix.terms(docs[i].Text) {
					tf[t]++
					n++
				}
				if opts.PathWeight > 0 && docs[i].Path != "" {
					for _, t := range ix.terms(docs[i].Path) {
						tf[t] += opts.PathWeight
						n += opts.PathWeight
					}
				}
				counts[i], lens[i] = tf, n
			}
		})
	}
	for i := range docs {
		next <- i
	}
	close(next)
	wg.Wait()
	total := 0
	for i, d := range docs {
		ix.ids[i] = d.ID
		total += lens[i]
		for t, n := range counts[i] {
			ix.postings[t] = append(ix.postings[t], posting{doc: int32(i), tf: float32(n)})
		}
	}
	avg := 1.0
	if len(docs) > 0 && total > 0 {
		avg = float64(total) / float64(len(docs))
	}
	for i := range docs {
		ix.norm[i] = ix.k1 * (1 - ix.b + ix.b*float64(lens[i])/avg)
	}
	return ix
}

// terms returns text's index terms, without stop words if the index
// drops them.
func (ix *BM25) terms(text string) []string {
	if !ix.stop {
		return strings.Fields(terms.String(text))
	}
	// Stop words are recognised before stemming ("does" would stem to
	// "doe"), so words are made into terms one at a time.
	var buf []byte
	start := -1
	flush := func(end int) {
		if start >= 0 {
			if w := text[start:end]; !terms.Stop(strings.ToLower(w)) {
				buf = terms.Append(buf, w)
			}
			start = -1
		}
	}
	for i, r := range text {
		if r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		flush(i)
	}
	flush(len(text))
	return strings.Fields(string(buf))
}

// Search returns the IDs of the k best documents for query, best first;
// ties go to the earlier document. Each distinct query term counts once.
func (ix *BM25) Search(query string, k int) []string {
	all := ix.rank(query)
	out := make([]string, 0, min(k, len(all)))
	for _, s := range all[:min(k, len(all))] {
		out = append(out, ix.ids[s.doc])
	}
	return out
}

// scored is a document's score for a query.
type scored struct {
	doc   int32
	score float64
}

// rank scores every document that holds a query term, best first.
func (ix *BM25) rank(query string) []scored {
	n := float64(len(ix.ids))
	scores := map[int32]float64{}
	seen := map[string]bool{}
	for _, t := range ix.terms(query) {
		if seen[t] {
			continue
		}
		seen[t] = true
		ps := ix.postings[t]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			scores[p.doc] += idf * tf * (ix.k1 + 1) / (tf + ix.norm[p.doc])
		}
	}
	all := make([]scored, 0, len(scores))
	for d, s := range scores {
		all = append(all, scored{d, s})
	}
	slices.SortFunc(all, func(a, b scored) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		return int(a.doc - b.doc)
	})
	return all
}

// Len returns the number of documents indexed.
func (ix *BM25) Len() int { return len(ix.ids) }
