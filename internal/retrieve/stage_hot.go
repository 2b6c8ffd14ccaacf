package retrieve

import "context"

// hotStage raises the chunks used recently, the seed's recency prior
// (Options.HotBoost).
type hotStage struct {
	boost float64
	hot   *hotSet
}

func (hotStage) name() string    { return StageHot }
func (s hotStage) enabled() bool { return s.boost > 0 }

func (s hotStage) rescore(_ context.Context, p *pass) {
	hot := s.hot.snapshot()
	for i := range p.hits {
		if hot[p.hits[i].Chunk.ID] {
			p.hits[i].scale(1+s.boost, StageHot)
		}
	}
}
