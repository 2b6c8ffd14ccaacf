package retrieve

import (
	"context"

	"github.com/engramhq/engram/internal/store"
)

// DefaultSpans is how many of its best hits a place carries.
const DefaultSpans = 3

// placeHits is how many hits a search for n places asks for at first, per
// place: a file often holds several of the best chunks.
const placeHits = 5

// Place is one distinct place among a search's hits: an indexed file,
// whatever chunks or versions of it matched, or another entry (a message,
// a tool result), with its best hits.
type Place struct {
	// Key is the file's path, or the entry ID of anything else.
	Key string
	// Score is the best hit's.
	Score float64
	// Hits are the place's best hits, best first.
	Hits []Hit
}

// PlaceKey returns the place a hit is in: the path of an indexed file,
// else its entry ID.
func PlaceKey(hit Hit) string {
	if o := hit.Occurrence; o.Type == store.CodeFile && len(o.Files) > 0 {
		return o.Files[0]
	}
	return hit.Chunk.EntryID
}

// Places groups hits, best first, into places in the order of their best
// hits, each with at most spans of its hits (DefaultSpans if not
// positive).
func Places(hits []Hit, spans int) []Place {
	if spans <= 0 {
		spans = DefaultSpans
	}
	at := map[string]int{}
	var out []Place
	for _, hit := range hits {
		k := PlaceKey(hit)
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, Place{Key: k, Score: hit.Score, Hits: []Hit{hit}})
			continue
		}
		if len(out[i].Hits) < spans {
			out[i].Hits = append(out[i].Hits, hit)
		}
	}
	return out
}

// SearchPlaces runs a query for q.Limit distinct places (DefaultLimit if
// not positive), each with at most spans of its best hits. It asks for
// more hits until it has as many places or the store has no more: ten
// hits cover five files or so, and an agent that asks for ten places
// should get ten. The ranking of places, as of hits, does not depend on
// the limit. The result's hits are those the places were made of.
func (h *Hybrid) SearchPlaces(ctx context.Context, q Query, spans int) (Result, []Place, error) {
	want := q.Limit
	if want <= 0 {
		want = DefaultLimit
	}
	ask := max(want*placeHits, DefaultLimit)
	for {
		q.Limit = min(ask, maxLimit)
		res, err := h.Search(ctx, q)
		if err != nil {
			return res, nil, err
		}
		places := Places(res.Hits, spans)
		if len(places) >= want || len(res.Hits) < q.Limit || q.Limit == maxLimit {
			return res, places[:min(want, len(places))], nil
		}
		ask *= 4
	}
}
