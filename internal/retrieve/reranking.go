package retrieve

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/store"
)

// rerank has the re-ranker score the best RerankDepth hits, within
// RerankTimeout, and orders them by its relevance times the hit's prior
// (the symbol, path and recent-use boosts, the speaker and ancillary priors)
// and the time factor, which know what the passage alone does not say:
// who spoke, when, what the agent used lately; ahead of the rest in fused
// order. Ties keep the fused order.
func (h *Hybrid) rerank(ctx context.Context, query string, hits []Hit) error {
	top := hits[:min(h.opts.RerankDepth, len(hits))]
	if len(top) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, h.opts.RerankTimeout)
	defer cancel()
	docs := make([]string, len(top))
	for i, hit := range top {
		c := store.ChunkText{Text: hit.Chunk.Text}
		if hit.Occurrence.Type == store.CodeFile && len(hit.Occurrence.Files) > 0 {
			c.Path = hit.Occurrence.Files[0]
		}
		docs[i] = embed.Text(c)
	}
	scores, err := h.opts.Reranker.Rerank(rctx, query, docs)
	if err != nil {
		if ctx.Err() == nil && rctx.Err() != nil {
			return fmt.Errorf("no answer within %v", h.opts.RerankTimeout)
		}
		return err
	}
	if len(scores) != len(top) {
		return fmt.Errorf("%d scores for %d hits", len(scores), len(top))
	}
	for i := range top {
		top[i].Rerank, top[i].Reranked = min(max(scores[i], 0), 1), true
	}
	// The boosts' factors apply to the relevance as they did to the fused
	// score; time, additive there, is a factor here: a re-ranker reads the
	// passage, not when it was said, and what was said then is what the
	// query asks about.
	timeFactor := 1 + max(h.opts.TimeBoost, 0)
	relevance := func(x Hit) float64 {
		r := x.Rerank * x.weight()
		if slices.Contains(x.Boosts, "time") {
			r *= timeFactor
		}
		return r
	}
	slices.SortStableFunc(top, func(a, b Hit) int { return cmp.Compare(relevance(b), relevance(a)) })
	return nil
}
