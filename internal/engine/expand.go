package engine

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// Span is a range of an entry's lines and the bytes they take.
type Span struct {
	// Start and End are byte offsets into the content, End exclusive.
	Start, End int
	// StartLine and EndLine are 1-based and inclusive.
	StartLine, EndLine int
}

// LineSpan returns the span of lines from to to (1-based, inclusive) of
// content; to is clipped to the last line. A range that starts after the
// last line is an error that says how many lines there are.
func LineSpan(content []byte, from, to int) (Span, error) {
	start, line := 0, 1
	for line < from {
		i := bytes.IndexByte(content[start:], '\n')
		if i < 0 || start+i+1 == len(content) {
			return Span{}, fmt.Errorf("has %d lines, the range starts at %d", line, from)
		}
		start += i + 1
		line++
	}
	sp := Span{Start: start, StartLine: from}
	end := start
	for ; line <= to; line++ {
		i := bytes.IndexByte(content[end:], '\n')
		if i < 0 {
			end = len(content)
			break
		}
		end += i + 1
		if end == len(content) {
			break
		}
	}
	sp.End, sp.EndLine = end, min(line, to)
	return sp, nil
}

// CountLines returns how many lines content has; a last line without a
// newline counts.
func CountLines(content []byte) int {
	n := bytes.Count(content, []byte{'\n'})
	if len(content) > 0 && content[len(content)-1] != '\n' {
		n++
	}
	return n
}

// ChunkMatch is a chunk that holds words of a query.
type ChunkMatch struct {
	store.Chunk
	// Score is the chunk's BM25 among the chunks matched against; higher
	// is better.
	Score float64
}

// BM25's parameters, as FTS5 sets them.
const (
	bm25K1 = 1.2
	bm25B  = 0.75
)

// MatchChunks returns the chunks of the entries ids that hold any of the
// query's words (its content words, or its stop words if it has only
// those), best first, with their text. They are ranked by BM25 over the
// chunks of those entries alone: the entries are the corpus, so a word
// every chunk of them repeats weighs little. Ties keep the order of ids,
// then of the chunks in their entry. Words match as search matches them:
// stemmed, and identifiers whole or by their parts. A query with no words
// matches nothing; an ID that is not stored is an error wrapping
// store.ErrNotFound.
func (e *Engine) MatchChunks(ctx context.Context, ids []string, query string) ([]ChunkMatch, error) {
	groups := terms.Query(query)
	var content []terms.Group
	for _, g := range groups {
		if !g.Stop {
			content = append(content, g)
		}
	}
	if len(content) == 0 {
		content = groups
	}
	if len(content) == 0 {
		return nil, nil
	}
	var want []string
	for _, g := range content {
		want = append(want, g.Whole)
		want = append(want, g.Parts...)
	}
	counter := terms.NewCounter(want)
	var chunks []store.Chunk
	var tfs [][]int // by chunk, then group
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		cs, err := e.st.Chunks(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			counts := counter.Count(c.Text)
			tf := make([]int, len(content))
			for j, g := range content {
				tf[j] = g.TF(counts)
			}
			chunks = append(chunks, c)
			tfs = append(tfs, tf)
		}
	}
	if len(chunks) == 0 {
		return nil, nil
	}
	n := float64(len(chunks))
	var total float64
	df := make([]float64, len(content))
	for i, c := range chunks {
		total += float64(max(c.TokenCount, 1))
		for j, tf := range tfs[i] {
			if tf > 0 {
				df[j]++
			}
		}
	}
	avg := total / n
	var out []ChunkMatch
	for i, c := range chunks {
		norm := bm25K1 * (1 - bm25B + bm25B*float64(max(c.TokenCount, 1))/avg)
		var score float64
		for j, tf := range tfs[i] {
			if tf == 0 {
				continue
			}
			idf := math.Log(1 + (n-df[j]+0.5)/(df[j]+0.5))
			score += idf * float64(tf) * (bm25K1 + 1) / (float64(tf) + norm)
		}
		if score > 0 {
			out = append(out, ChunkMatch{Chunk: c, Score: score})
		}
	}
	slices.SortStableFunc(out, func(a, b ChunkMatch) int { return cmp.Compare(b.Score, a.Score) })
	return out, nil
}
