package retrieve

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/store"
)

// lexicalSearch runs the query on the store's full-text index; with a
// span, also within the span (then). The words of the phrase that made
// the span are left out of both searches when the span holds a match: the
// span stands for them, and "a couple of days ago" would match any message
// about days. A span that holds nothing (a question about last week asked
// of a store from other years) stands for nothing, so they are kept.
func (h *Hybrid) lexicalSearch(ctx context.Context, q Query, sp *Span, depth int) (hits, then []store.Hit, err error) {
	text := q.Text
	if sp != nil {
		bare := withoutPhrase(text, sp)
		if then, err = h.st.Search(ctx, store.Query{Text: bare, Filter: inSpan(q.Filter, sp), Limit: depth}); err != nil {
			return nil, nil, err
		}
		if len(then) > 0 {
			text = bare
		}
	}
	hits, err = h.st.Search(ctx, store.Query{Text: text, Filter: q.Filter, Limit: depth})
	return hits, then, err
}

// vectorSearch embeds the query and returns the nearest chunks that pass
// the filter, and with a span also the nearest within it (then), with
// their cosines.
func (h *Hybrid) vectorSearch(ctx context.Context, text string, f store.Filter, sp *Span, depth int) (hits, then []store.Hit, cos map[int64]float64, qvec []float32, x *Index, err error) {
	vecs, err := h.emb.Embed(ctx, []string{text})
	if err != nil {
		return nil, nil, nil, nil, nil, fmt.Errorf("embed query: %w", err)
	}
	if err := embed.Check(vecs, 1, h.emb.Dim()); err != nil {
		return nil, nil, nil, nil, nil, fmt.Errorf("embed query: %w", err)
	}
	if x, err = h.vecs.sync(ctx, h.st); err != nil || x == nil {
		return nil, nil, nil, nil, nil, err // x nil: nothing embedded yet
	}
	if x.Dim() != len(vecs[0]) {
		return nil, nil, nil, nil, nil, fmt.Errorf("embed query: %w: %d dimensions, the stored vectors have %d", embed.ErrBadVector, len(vecs[0]), x.Dim())
	}
	if hits, cos, err = h.nearest(ctx, x, vecs[0], f, depth); err != nil || sp == nil {
		return hits, nil, cos, vecs[0], x, err
	}
	then, thenCos, err := h.nearest(ctx, x, vecs[0], inSpan(f, sp), depth)
	if err != nil {
		return nil, nil, nil, nil, nil, err
	}
	maps.Copy(cos, thenCos)
	return hits, then, cos, vecs[0], x, nil
}

// nearest returns the chunks nearest to qvec that pass the filter, with
// their cosines.
func (h *Hybrid) nearest(ctx context.Context, x *Index, qvec []float32, f store.Filter, depth int) ([]store.Hit, map[int64]float64, error) {
	if !f.IsZero() {
		// A selective filter's chunks are scored exactly, one dot product
		// each, rather than found among the store's nearest neighbours.
		ids, err := h.st.FilterChunks(ctx, f, prefilterChunks)
		if err != nil {
			return nil, nil, err
		}
		if len(ids) <= prefilterChunks {
			return h.nearestAmong(ctx, x, qvec, ids, f, depth)
		}
	}
	// Otherwise a filter is applied after the nearest neighbours are
	// found, so ask for more when there is one, and again for more if too
	// few pass.
	k := depth
	if !f.IsZero() {
		k = 8 * depth
	}
	for {
		near := x.Search(qvec, k)
		ids := make([]int64, 0, len(near))
		cos := make(map[int64]float64, len(near))
		for _, n := range near {
			if n.Score <= 0 {
				break // orthogonal or opposite: no semantic support
			}
			ids = append(ids, n.ID)
			cos[n.ID] = n.Score
		}
		hits, err := h.chunkHits(ctx, ids, f, depth)
		if err != nil {
			return nil, nil, err
		}
		if len(hits) >= depth || len(near) < k || k >= 64*depth || f.IsZero() {
			return hits, cos, nil
		}
		k *= 4
	}
}

// prefilterChunks is the most chunks a filter may match for vector search
// to score them all (a few milliseconds) rather than filter the nearest
// neighbours of the whole store.
const prefilterChunks = 20000

// nearestAmong returns the chunks among ids nearest to qvec, best first,
// with their cosines.
func (h *Hybrid) nearestAmong(ctx context.Context, x *Index, qvec []float32, ids []int64, f store.Filter, depth int) ([]store.Hit, map[int64]float64, error) {
	near := make([]Scored, 0, len(ids))
	for _, id := range ids {
		if d, ok := x.Dot(id, qvec); ok && d > 0 {
			near = append(near, Scored{ID: id, Score: d})
		}
	}
	slices.SortFunc(near, func(a, b Scored) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	near = near[:min(depth, len(near))]
	ids = make([]int64, len(near))
	cos := make(map[int64]float64, len(near))
	for i, n := range near {
		ids[i], cos[n.ID] = n.ID, n.Score
	}
	hits, err := h.chunkHits(ctx, ids, f, depth)
	return hits, cos, err
}

// chunkHits reads the best depth of the chunks ids that pass the filter,
// in the order of ids, as vector hits: no lexical score or coverage.
func (h *Hybrid) chunkHits(ctx context.Context, ids []int64, f store.Filter, depth int) ([]store.Hit, error) {
	hits, err := h.st.ChunkHits(ctx, ids, f)
	if err != nil {
		return nil, err
	}
	hits = hits[:min(depth, len(hits))]
	for i := range hits {
		hits[i].Score, hits[i].Coverage = 0, 0
	}
	return hits, nil
}

// gathered is what gather found: the candidates, each backend's error,
// whether its circuit kept it from being asked, and for vector search the
// query's vector and the index it searched.
type gathered struct {
	candidates
	lexErr, vecErr   error
	lexSkip, vecSkip bool
	qvec             []float32
	index            *Index
}

// gather asks the backends wanted for their best depth candidates, in
// parallel. The first tier of a search asks only backends whose circuit
// allows it, under the deadline: past it, a backend that has not answered
// is cut off if another one has, so that one slow signal never holds up
// the other. A backend that is alone, or that answers first after the
// deadline, is waited for (as long as the caller waits): under load every
// search is slow, and cutting the only signal would turn slowness into
// failures and trip its breaker. A deeper tier (first false) asks the
// backends that answered the first and waits for both.
func (h *Hybrid) gather(ctx context.Context, q Query, sp *Span, depth int, wantLex, wantVec bool, first bool) *gathered {
	g := &gathered{}
	bctx, cutOff := context.WithCancel(ctx)
	defer cutOff()
	type answer struct {
		backend string
		ok      bool
	}
	answers := make(chan answer, 2)
	pending := 0
	if wantLex {
		if !first || h.lexCB.Allow() {
			pending++
			go func() {
				g.lex, g.lexThen, g.lexErr = h.lexicalSearch(bctx, q, sp, depth)
				answers <- answer{"lexical", g.lexErr == nil}
			}()
		} else {
			g.lexSkip = true
		}
	}
	if wantVec {
		if !first || h.vecCB.Allow() {
			pending++
			go func() {
				g.vec, g.vecThen, g.cosines, g.qvec, g.index, g.vecErr = h.vectorSearch(bctx, q.Text, q.Filter, sp, depth)
				answers <- answer{"vector", g.vecErr == nil}
			}()
		} else {
			g.vecSkip = true
		}
	}
	var deadline <-chan time.Time // nil: never
	if first {
		t := time.NewTimer(h.opts.Deadline)
		defer t.Stop()
		deadline = t.C
	}
	late, answered, cut := false, false, false
	missed := map[string]bool{}
	for pending > 0 {
		if late && answered && !cut {
			cutOff()
			cut = true
		}
		select {
		case a := <-answers:
			pending--
			answered = answered || a.ok
			missed[a.backend] = cut && !a.ok
		case <-deadline:
			late = true
		}
	}
	for backend, m := range missed {
		if m {
			// Cut off after the deadline: say so rather than "context canceled".
			err := fmt.Errorf("no answer within the %v deadline", h.opts.Deadline)
			if backend == "lexical" {
				g.lexErr = err
			} else {
				g.vecErr = err
			}
		}
	}
	return g
}
