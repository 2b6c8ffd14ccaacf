package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/engramhq/engram/internal/terms"
)

// BM25 as FTS5 computes it (bm25() in SQLite's fts5_aux.c), over engram's
// own postings. A query is a list of phrases: each word whole, and for a
// compound identifier the phrase of its parts too, in the order the SQLite
// backend writes them into its MATCH expression. For each phrase i, its
// weighted frequency in a document is w = sum over fields of weight_f *
// tf_if, and the document scores
//
//	sum_i idf_i * w*(k1+1) / (w + k1*(1 - b + b*D/avgD))
//
// with k1 = 1.2, b = 0.75, D the document's length in tokens over all its
// fields, avgD the space's average, and idf_i = log((N - n_i + 0.5) /
// (n_i + 0.5)) where n_i is the documents holding phrase i and N those of
// the space; an idf of zero or less counts as 1e-6. Being computed in the
// same order as FTS5 computes it, in float64, scores agree with SQLite's
// to the last bits or so.

// docScore is a document's BM25 score, higher better.
type docScore struct {
	Doc   int64
	Score float64
}

// phrase is tokens to match at consecutive positions of one field.
type phrase []string

// queryPhrases returns the phrases of query words, in FTS5's order: each
// word whole, then the phrase of its parts.
func queryPhrases(groups []terms.Group) []phrase {
	var out []phrase
	for _, g := range groups {
		out = append(out, phrase(tokens(g.Whole)))
		if len(g.Parts) > 0 {
			var p phrase
			for _, part := range g.Parts {
				p = append(p, tokens(part)...)
			}
			out = append(out, p)
		}
	}
	return out
}

// spaceStats are a space's documents, their summed length and its
// generation.
type spaceStats struct {
	docs, len, gen int64
}

// readStats reads the statistics of every space.
func readStats(ctx context.Context, q querier) (map[int16]spaceStats, error) {
	rows, err := q.Query(ctx, `SELECT space, docs, len, gen FROM fts_stats`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int16]spaceStats{}
	for rows.Next() {
		var sp int16
		var st spaceStats
		if err := rows.Scan(&sp, &st.docs, &st.len, &st.gen); err != nil {
			return nil, err
		}
		out[sp] = st
	}
	return out, rows.Err()
}

// phraseFreqs are each document's frequencies of one phrase, by field.
type phraseFreqs map[int64][3]int32

// loadPostings reads the postings of tokens in a space, with positions for
// those in withPos.
func loadPostings(ctx context.Context, q querier, space int16, toks, withPos []string) (map[string]map[int64]posting, error) {
	rows, err := q.Query(ctx, `SELECT term, doc, body, meta, ctx, CASE WHEN term = ANY($3) THEN pos END
		FROM fts_postings WHERE term = ANY($2) AND space = $1`, space, toks, withPos)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[int64]posting{}
	for rows.Next() {
		var (
			term string
			doc  int64
			p    posting
		)
		if err := rows.Scan(&term, &doc, &p.tf[0], &p.tf[1], &p.tf[2], &p.pos); err != nil {
			return nil, err
		}
		m := out[term]
		if m == nil {
			m = map[int64]posting{}
			out[term] = m
		}
		m[doc] = p
	}
	return out, rows.Err()
}

// matchPhrase returns each document's frequencies of a phrase, by field:
// its postings for one token, the places where its tokens follow each
// other in one field for more.
func matchPhrase(ph phrase, postings map[string]map[int64]posting) phraseFreqs {
	out := phraseFreqs{}
	if len(ph) == 0 {
		return out
	}
	first := postings[ph[0]]
	if len(ph) == 1 {
		for doc, p := range first {
			out[doc] = p.tf
		}
		return out
	}
next:
	for doc, p := range first {
		rest := make([][]int32, len(ph)-1)
		for i, tok := range ph[1:] {
			q, ok := postings[tok][doc]
			if !ok {
				continue next
			}
			rest[i] = q.pos
		}
		var tf [3]int32
		for _, start := range p.pos {
			at := true
			for i, pos := range rest {
				want := start + int32(i) + 1
				if want>>fieldShift != start>>fieldShift {
					at = false
					break
				}
				if _, found := slices.BinarySearch(pos, want); !found {
					at = false
					break
				}
			}
			if at {
				tf[start>>fieldShift]++
			}
		}
		if tf != [3]int32{} {
			out[doc] = tf
		}
	}
	return out
}

// rankAll scores every document of space holding any of groups (whole
// word, or the phrase of a compound word's parts), by BM25 as FTS5
// computes it, with field weights w (body, meta, ctx); best first, and
// among equal scores the newest (highest doc) first, as the SQLite backend
// orders them.
func rankAll(ctx context.Context, q querier, space int16, groups []terms.Group, w [3]float64) ([]docScore, error) {
	stats, err := readStats(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("rank: %w", err)
	}
	return rank(ctx, q, space, stats[space], groups, w, nil)
}

// rank is rankAll with the space's statistics read, and when keep is not
// nil only the documents it keeps scored (the index's statistics stay the
// whole space's).
func rank(ctx context.Context, q querier, space int16, st spaceStats, groups []terms.Group, w [3]float64,
	keep func(doc int64) bool) ([]docScore, error) {
	phrases := queryPhrases(groups)
	var toks, withPos []string
	for _, ph := range phrases {
		for _, tok := range ph {
			if !slices.Contains(toks, tok) {
				toks = append(toks, tok)
			}
			if len(ph) > 1 && !slices.Contains(withPos, tok) {
				withPos = append(withPos, tok)
			}
		}
	}
	if len(toks) == 0 || st.docs == 0 {
		return nil, nil
	}
	postings, err := loadPostings(ctx, q, space, toks, withPos)
	if err != nil {
		return nil, fmt.Errorf("rank: %w", err)
	}
	freqs := make([]phraseFreqs, len(phrases))
	idf := make([]float64, len(phrases))
	matched := map[int64]bool{}
	var docs []int64
	for i, ph := range phrases {
		freqs[i] = matchPhrase(ph, postings)
		n := int64(len(freqs[i]))
		idf[i] = math.Log((float64(st.docs-n) + 0.5) / (float64(n) + 0.5))
		if idf[i] <= 0 {
			idf[i] = 1e-6
		}
		for doc := range freqs[i] {
			if !matched[doc] && (keep == nil || keep(doc)) {
				matched[doc] = true
				docs = append(docs, doc)
			}
		}
	}
	if len(docs) == 0 {
		return nil, nil
	}
	lens := make(map[int64]int64, len(docs))
	rows, err := q.Query(ctx, `SELECT doc, len FROM fts_docs WHERE space = $1 AND doc = ANY($2)`, space, docs)
	if err != nil {
		return nil, fmt.Errorf("rank: %w", err)
	}
	for rows.Next() {
		var doc, n int64
		if err := rows.Scan(&doc, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("rank: %w", err)
		}
		lens[doc] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rank: %w", err)
	}
	const k1, b = 1.2, 0.75
	avgdl := float64(st.len) / float64(st.docs)
	out := make([]docScore, 0, len(docs))
	for _, doc := range docs {
		d := float64(lens[doc])
		score := 0.0
		for i := range phrases {
			tf := freqs[i][doc]
			f := w[0]*float64(tf[0]) + w[1]*float64(tf[1]) + w[2]*float64(tf[2])
			score += idf[i] * ((f * (k1 + 1.0)) / (f + k1*(1-b+b*d/avgdl)))
		}
		out = append(out, docScore{doc, score})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Score != out[j].Score {
			return out[i].Score > out[j].Score
		}
		return out[i].Doc > out[j].Doc
	})
	return out, nil
}
