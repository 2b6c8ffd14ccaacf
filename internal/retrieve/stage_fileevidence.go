package retrieve

import (
	"context"

	"github.com/engramhq/engram/internal/store"
)

// fileEvidence raises the best chunk of each indexed file among the first
// depth hits (sorted, best first) by weight times the scores of the file's
// other chunks there: a file that matches a query in several places is
// more likely the one sought than a file that matches once as well (the
// file-level evidence of passage retrieval, max plus a share of the sum).
// Only the best chunk moves, so the file's other chunks do not crowd the
// results. It reports whether any score changed.
func fileEvidence(hits []Hit, weight float64, depth int) bool {
	best := map[string]int{}
	extra := map[string]float64{}
	others := map[string]int{}
	for i := range hits[:min(depth, len(hits))] {
		o := hits[i].Occurrence
		if o.Type != store.CodeFile || len(o.Files) == 0 {
			continue
		}
		f := o.Files[0]
		if _, ok := best[f]; !ok {
			best[f] = i
			continue
		}
		if others[f] < fileEvidenceChunks {
			others[f]++
			extra[f] += hits[i].Score
		}
	}
	changed := false
	for f, x := range extra {
		if x > 0 {
			hit := &hits[best[f]]
			hit.Score += weight * x
			hit.Boosts = append(hit.Boosts, "file")
			changed = true
		}
	}
	return changed
}

// fileEvidenceStage raises the best chunk of each file by a share of the
// scores of its other chunks among the best candidates
// (Options.FileEvidence). It runs last: it needs the others' scores.
type fileEvidenceStage struct{ weight float64 }

func (fileEvidenceStage) name() string    { return StageFileEvidence }
func (s fileEvidenceStage) enabled() bool { return s.weight > 0 }

func (s fileEvidenceStage) rescore(_ context.Context, p *pass) {
	sortHits(p.hits)
	fileEvidence(p.hits, s.weight, fileEvidenceDepth)
}
