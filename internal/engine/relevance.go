package engine

import (
	"context"
	"regexp"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/terms"
)

// DefaultRelevanceFloor is the relevance floor of history search and
// recall when Options.RelevanceFloor is zero: archive's, so that both
// answer "nothing found" alike.
const DefaultRelevanceFloor = archive.DefaultRelevanceFloor

// Relevance is how much of a query a search's best hit holds, held to the
// relevance floor.
type Relevance struct {
	// Best is the largest share of the query's words that the entry of a
	// hit holds, each word weighted by its inverse document frequency
	// (store.Store.EntryCoverage), from 0 to 1; words that occur nowhere
	// in the store count in full against it. The words of the time the
	// query points to (its span, and the dates it names) are left out.
	Best float64 `json:"best"`
	// Floor is what Best must reach for the hits to be an answer.
	Floor float64 `json:"floor"`
}

// Found reports whether the best hit reaches the floor.
func (r Relevance) Found() bool { return r.Best >= r.Floor }

// floor returns the configured relevance floor; 0 is off.
func (e *Engine) floor() float64 {
	switch f := e.opts.RelevanceFloor; {
	case f < 0:
		return 0
	case f == 0:
		return DefaultRelevanceFloor
	default:
		return f
	}
}

// Relevance measures a search for text, whose result is res, against the
// relevance floor: a search whose best hit holds too little of the query
// found nothing, whatever it ranked first. A result without hits has
// Best 0; with the floor off (Options.RelevanceFloor negative), Floor is
// 0 and every result is found.
func (e *Engine) Relevance(ctx context.Context, text string, res retrieve.Result) (Relevance, error) {
	rel := Relevance{Floor: e.floor()}
	if len(res.Hits) == 0 || rel.Floor == 0 {
		return rel, nil
	}
	ids := make([]string, 0, len(res.Hits))
	for _, h := range res.Hits {
		ids = append(ids, h.Chunk.EntryID)
	}
	cov, err := e.st.EntryCoverage(ctx, aboutText(text, res.Span), ids)
	if err != nil {
		return rel, err
	}
	for _, c := range cov {
		rel.Best = max(rel.Best, c)
	}
	return rel, nil
}

// aboutText is what a query is about: its text without the phrase that
// points back in time, which search read as a time (span), and without
// the dates it names. A query that is all time keeps its words.
func aboutText(text string, span *retrieve.Span) string {
	about := text
	if span != nil && span.Phrase != "" {
		about = regexp.MustCompile(`(?i)`+regexp.QuoteMeta(span.Phrase)).ReplaceAllString(about, " ")
	}
	about = terms.Dateless(about)
	if len(terms.Query(about)) == 0 {
		return text
	}
	return about
}
