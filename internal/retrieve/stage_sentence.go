package retrieve

import (
	"context"
	"slices"

	"github.com/engramhq/engram/internal/terms"
)

// sentenceCoverage returns the largest share of the query's n terms, as c
// counts them, that one sentence of text holds. A sentence ends after '.',
// '!' or '?' followed by white space, and at each line end, so that in
// code a line is a sentence. Words that meet in one sentence are more
// likely about one thing than the same words spread over a long chunk: a
// proximity signal that BM25, which counts words wherever they are, lacks.
func sentenceCoverage(c *terms.Counter, n int, text string) float64 {
	if n == 0 {
		return 0
	}
	best, start := 0, 0
	for i := 0; i < len(text) && best < n; i++ {
		switch text[i] {
		case '\n':
		case '.', '!', '?':
			if i+1 < len(text) && !isSpace(text[i+1]) {
				continue
			}
		default:
			continue
		}
		if i > start {
			best = max(best, c.Distinct(text[start:i+1]))
		}
		start = i + 1
	}
	if start < len(text) && best < n {
		best = max(best, c.Distinct(text[start:]))
	}
	return float64(best) / float64(n)
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// sentenceStage adds to each candidate weight times the share of the
// query's words that its best sentence holds, as a share of the best
// fused score (Options.SentenceBoost).
type sentenceStage struct{ weight float64 }

func (sentenceStage) name() string    { return StageSentence }
func (s sentenceStage) enabled() bool { return s.weight > 0 }

func (s sentenceStage) rescore(_ context.Context, p *pass) {
	if !p.lexical() {
		return
	}
	qterms := terms.Content(p.text)
	slices.Sort(qterms)
	if qterms = slices.Compact(qterms); len(qterms) == 0 {
		return
	}
	c := terms.NewCounter(qterms)
	for i := range p.hits {
		p.hits[i].Score += p.best * s.weight * sentenceCoverage(c, len(qterms), p.hits[i].Chunk.Text)
	}
}
