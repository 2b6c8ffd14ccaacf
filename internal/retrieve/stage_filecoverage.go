package retrieve

import (
	"context"
	"log/slog"

	"github.com/engramhq/engram/internal/store"
)

// fileCoverage returns the share of the query that each indexed file among
// the candidates holds anywhere (see Options.FileCoverage), by entry.
func fileCoverage(ctx context.Context, st store.Store, text string, lists ...[]store.Hit) (map[string]float64, error) {
	seen := map[string]bool{}
	var ids []string
	for _, l := range lists {
		for _, hit := range l {
			if id := hit.Chunk.EntryID; hit.Occurrence.Type == store.CodeFile && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return st.EntryCoverage(ctx, text, ids)
}

// fileCoverageStage adds to each chunk of an indexed file weight times the
// share of the query's words that the whole file holds, as a share of the
// best fused score (Options.FileCoverage).
type fileCoverageStage struct {
	weight float64
	st     store.Store
	log    *slog.Logger
}

func (fileCoverageStage) name() string    { return StageFileCoverage }
func (s fileCoverageStage) enabled() bool { return s.weight > 0 }

func (s fileCoverageStage) rescore(ctx context.Context, p *pass) {
	if !p.lexical() {
		return
	}
	c := p.cands
	files, err := fileCoverage(ctx, s.st, p.text, c.lex, c.vec, c.lexThen, c.vecThen)
	if err != nil {
		if ctx.Err() == nil {
			// Only a bonus is lost.
			s.log.Warn("file coverage", "err", err)
		}
		return
	}
	for i := range p.hits {
		hit := &p.hits[i]
		if cov, ok := files[hit.Chunk.EntryID]; ok && hit.Occurrence.Type == store.CodeFile {
			hit.Score += p.best * s.weight * cov
		}
	}
}
