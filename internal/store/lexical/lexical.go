// Package lexical is the part of lexical search that does not depend on a
// backend's full-text engine: planning a query's words within a budget of
// postings (PlanQuery), the BM25 of words known only by a capped count
// (CappedBM25) and the share of a query a hit holds (Coverage), or a
// whole entry (EntryCoverage). The SQLite
// backend matches the plan with FTS5; the PostgreSQL backend with its own
// postings. Both rank with BM25 as FTS5 computes it, so the two return the
// same hits in the same order.
//
// How lexical search stays fast. FTS5 ranks by BM25 by scoring every chunk
// that matches any query word, and BM25's IDF makes it read the whole
// posting list of each word once per query, so a query costs about the sum
// of its words' document frequencies (about 1 µs per posting): "the" or
// "error" in a million chunks costs tens to hundreds of milliseconds. Such
// words also carry almost no information (the IDF of a word in a third of
// the chunks is under 1, against 10 or more for a rare one). So a query is
// planned before it runs:
//
//  1. Each word's document frequency is counted, but only up to
//     MaxPostings+1: a count that reaches the cap says "too common" at a
//     bounded cost. Backends cache the counts: a word over the cap stays
//     over it, and an exact count is reused until the full-text index
//     changes.
//  2. Words are taken rarest first while their frequencies sum to at most
//     MaxPostings; the common rest is dropped (and rescored with
//     CappedBM25 among the candidates the rest found), as are words that
//     occur nowhere.
//  3. If even the rarest word is over the budget, every word is very
//     common: then the newest Window matches are fetched without BM25 and
//     scored with CappedBM25, so the cost stays bounded. Recency is the
//     best prior left.
//
// Queries of more than maxPlannedGroups distinct words keep the longest,
// which in natural text are the rarer ones.
package lexical

import (
	"math"
	"slices"
	"sort"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// Defaults of the backends' search options.
const (
	DefaultMaxPostings     = 12_000
	DefaultWindow          = 200
	DefaultMetaWeight      = 4.0
	DefaultContextWeight   = 0.5
	DefaultSelectiveFilter = 32
	// MaxLimit bounds Query.Limit.
	MaxLimit = 1000
	// RescoreExtra is how many more candidates than asked for are ranked
	// when words were planned out.
	RescoreExtra = 50
	// maxPlannedGroups bounds the distinct words of one query.
	maxPlannedGroups = 32
)

// Group is one query word with its frequencies.
type Group struct {
	terms.Group
	// Matches estimates how many chunks match the word; Cost is the
	// postings read to find them; WholeMatches is the chunks that hold a
	// compound identifier whole.
	Matches, Cost, WholeMatches int64
}

// Plan is a query's words as planned: those to match, in the order to
// match them (rarest first).
type Plan struct {
	Groups   []Group // the words to match; none if nothing can match
	Windowed bool    // every word is very common: score the newest matches with CappedBM25
	Dropped  []Group // planned out as too common
}

// PlanQuery plans a query's words within a budget of postings. docFreqs
// returns how many chunks hold each of the words, counting at most
// budget+1 of them.
func PlanQuery(groups []terms.Group, budget int64, docFreqs func(words []string) (map[string]int64, error)) (Plan, error) {
	// Stop words add only noise to a query that has other words.
	groups = Content(groups)
	if len(groups) > maxPlannedGroups {
		groups = slices.Clone(groups)
		sort.SliceStable(groups, func(i, j int) bool { return len(groups[i].Whole) > len(groups[j].Whole) })
		groups = groups[:maxPlannedGroups]
	}
	df, err := docFreqs(Terms(groups))
	if err != nil {
		return Plan{}, err
	}
	var gs []Group
	for _, g := range groups {
		w := df[g.Whole]
		matches, cost := w, w
		if len(g.Parts) > 0 {
			// The phrase of the parts matches at most as often as its
			// rarest part, and reading it costs all of their postings.
			phrase, phraseCost := int64(-1), int64(0)
			for _, part := range g.Parts {
				f := df[part]
				phraseCost += f
				if phrase < 0 || f < phrase {
					phrase = f
				}
			}
			if phrase > 0 {
				matches += phrase
				cost += phraseCost
			} else {
				g.Parts = nil // the phrase cannot match
			}
		}
		if w == 0 && len(g.Parts) == 0 {
			continue // occurs nowhere
		}
		gs = append(gs, Group{Group: g, Matches: matches, Cost: cost, WholeMatches: w})
	}
	var p Plan
	if len(gs) == 0 {
		return p, nil
	}
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Matches < gs[j].Matches })
	// A compound identifier whose phrase of parts is too costly (its parts
	// are common words) is still matched whole, if it occurs whole.
	cheapest := func(g Group) int64 {
		if len(g.Parts) > 0 && g.WholeMatches > 0 {
			return g.WholeMatches
		}
		return g.Cost
	}
	p.Windowed = cheapest(gs[0]) > budget
	var total int64
	for i, g := range gs {
		if !p.Windowed && i > 0 && total+g.Cost > budget {
			if len(g.Parts) == 0 || g.WholeMatches == 0 || total+g.WholeMatches > budget {
				p.Dropped = append(p.Dropped, g)
				continue
			}
			g.Parts, g.Matches, g.Cost = nil, g.WholeMatches, g.WholeMatches
		}
		if !p.Windowed && i == 0 && g.Cost > budget {
			g.Parts, g.Matches, g.Cost = nil, g.WholeMatches, g.WholeMatches
		}
		total += g.Cost
		p.Groups = append(p.Groups, g)
	}
	return p, nil
}

// Content returns a query's content words: all but its stop words, or
// all of them if it has only stop words.
func Content(groups []terms.Group) []terms.Group {
	var content []terms.Group
	for _, g := range groups {
		if !g.Stop {
			content = append(content, g)
		}
	}
	if len(content) == 0 {
		return groups
	}
	return content
}

// Terms returns the index terms of a query's words, whole and by parts.
func Terms(groups []terms.Group) []string {
	var ts []string
	for _, g := range groups {
		ts = append(ts, g.Whole)
		ts = append(ts, g.Parts...)
	}
	return ts
}

// Counter counts the terms of a query's words, whole and by parts, in
// chunk texts.
func Counter(groups []terms.Group) *terms.Counter {
	return terms.NewCounter(Terms(groups))
}

// TermGroups returns the words of planned groups.
func TermGroups(gs []Group) []terms.Group {
	out := make([]terms.Group, len(gs))
	for i, g := range gs {
		out[i] = g.Group
	}
	return out
}

// CappedBM25 is BM25 over a chunk's term counts for words whose
// frequency is known only up to the planner's cap: a word's IDF takes its
// (capped) count as its frequency, so it is at most this; term frequency
// saturates as in BM25 (k1 = 1.2); lengths are not normalised, the corpus
// average not being at hand. A compound identifier counts where it appears
// whole or as its parts. It scores the newest matches when every word is
// very common (the windowed plan), and rescores candidates with the words
// the plan dropped: BM25 ranked them by the rarer words alone, and the
// common words still say something about which is best.
func CappedBM25(counts map[string]int, groups []Group, chunks int64) float64 {
	const k1 = 1.2
	score := 0.0
	for _, g := range groups {
		tf := g.TF(counts)
		if tf == 0 {
			continue
		}
		df := float64(max(g.Matches, 1))
		idf := math.Log(1 + (float64(chunks)-df+0.5)/(df+0.5))
		score += idf * float64(tf) * (k1 + 1) / (float64(tf) + k1)
	}
	return score
}

// Coverage sets each hit's Coverage: the IDF-weighted share of the query's
// content words (its stop words, if it has only those) that the chunk
// holds, given the chunk's term counts. Words that occur nowhere count in
// full against every hit; words the plan dropped as too common count with
// their capped frequency (capped, one more than the budget), a low IDF.
// total is the chunks stored.
func Coverage(groups []terms.Group, p Plan, hits []store.Hit, counts []map[string]int, total, capped int64) {
	if len(hits) == 0 {
		return
	}
	df := map[string]int64{}
	for _, g := range p.Groups {
		df[g.Whole] = g.Matches
	}
	for _, g := range p.Dropped {
		df[g.Whole] = max(g.Matches, capped)
	}
	content := Content(groups)
	idf := make([]float64, len(content))
	var sum float64
	for i, g := range content {
		n := min(df[g.Whole], total) // zero: occurs nowhere
		idf[i] = math.Log(1 + (float64(total)-float64(n)+0.5)/(float64(n)+0.5))
		sum += idf[i]
	}
	if sum == 0 {
		return
	}
	for i := range hits {
		var got float64
		for j, g := range content {
			if g.TF(counts[i]) > 0 {
				got += idf[j]
			}
		}
		hits[i].Coverage = got / sum
	}
}
