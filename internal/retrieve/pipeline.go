package retrieve

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// A search ranks in steps, each in its own file:
//
//  1. candidates (candidates.go): each backend's best Depth chunks for the
//     query, lexical (the store's BM25) and vector (the embedder's nearest
//     neighbours), and, for a query that points back in time, the best of
//     that span too (stage_time.go);
//  2. fusion (fuse.go, pass.fuse): one list, by reciprocal rank or a
//     weighted merge, the span's list added to it;
//  3. rescoring (stage_*.go): each stage a small type that adds a bonus
//     or multiplies by a prior, with its weight in Options; any of them
//     can be switched off by name (Options.Off), which is how engram eval
//     measures what each gains or costs;
//  4. re-ranking (reranking.go): an optional model over the best hits.
//
// The ranking depends on the query and the store, never on how many
// results were asked for: a search ranks the same Depth candidates per
// backend whatever its limit, and one that asks for more than they yield
// ranks deeper tiers of candidates (four times as many each) on their own
// and appends what is new, so the first k results are the same for every
// limit above k.

// The rescoring stages, by the names Options.Off takes.
const (
	StageSentence     = "sentence"
	StageFileCoverage = "file-coverage"
	StageSymbol       = "symbol"
	StagePath         = "path"
	StageHot          = "hot"
	StageTime         = "time"
	StageAncillary    = "ancillary"
	StageDistractor   = "distractor"
	StageSpeaker      = "speaker"
	StageFileEvidence = "file-evidence"
)

// Stages returns the names of the rescoring stages in the order they run.
func Stages() []string {
	return []string{StageSentence, StageFileCoverage, StageSymbol, StagePath, StageHot, StageTime,
		StageAncillary, StageDistractor, StageSpeaker, StageFileEvidence}
}

// CheckStages returns an error naming the first of names that is not a
// stage.
func CheckStages(names []string) error {
	for _, n := range names {
		if !slices.Contains(Stages(), n) {
			return fmt.Errorf("unknown search stage %q (want one of %s)", n, strings.Join(Stages(), ", "))
		}
	}
	return nil
}

// A stage rescores the fused candidates of a search, in place.
type stage interface {
	name() string
	// enabled reports whether the stage's weight turns it on.
	enabled() bool
	rescore(ctx context.Context, p *pass)
}

// stages returns the stages a Hybrid runs, once, when it is made: those
// whose weight turns them on and that Options.Off does not name.
func (h *Hybrid) stages() []stage {
	o := &h.opts
	all := []stage{
		sentenceStage{weight: o.SentenceBoost},
		fileCoverageStage{weight: o.FileCoverage, st: h.st, log: o.Log},
		symbolStage{boost: o.SymbolBoost},
		pathStage{boost: o.PathBoost},
		hotStage{boost: o.HotBoost, hot: h.hot},
		timeStage{},
		ancillaryStage{prior: o.AncillaryPrior},
		distractorStage{priors: map[role]float64{roleTest: o.TestPrior, roleChangelog: o.ChangelogPrior, roleDoc: o.DocPrior}},
		speakerStage{prior: o.SpeakerPrior},
		fileEvidenceStage{weight: o.FileEvidence},
	}
	var on []stage
	for _, s := range all {
		if s.enabled() && !h.off(s.name()) {
			on = append(on, s)
		}
	}
	return on
}

// off reports whether Options.Off names a stage.
func (h *Hybrid) off(name string) bool { return slices.Contains(h.opts.Off, name) }

// candidates are what the backends returned for one search: each list
// best first, those of the span (then) empty without one.
type candidates struct {
	lex, vec, lexThen, vecThen []store.Hit
	// cosines are the vector hits' similarities to the query, by chunk.
	cosines map[int64]float64
}

// full reports whether a backend returned as many candidates as it was
// asked for, so that asking for more might find more.
func (c *candidates) full(depth int) bool {
	return len(c.lex) >= depth || len(c.vec) >= depth || len(c.lexThen) >= depth || len(c.vecThen) >= depth
}

// pass is one search's candidates on their way through fusion and the
// stages.
type pass struct {
	text  string
	cands *candidates
	span  *Span
	// fromSpan holds the candidates the search within the span found.
	fromSpan map[int64]bool
	hits     []Hit
	// best is the best fused score, before any stage: a stage that adds a
	// bonus adds a share of it, whatever the fusion's scale (RRF's scores
	// are a hundredth of the weighted merge's).
	best float64
	// symbols and paths are what the query names (see queryNames), read
	// once for the stages that need them.
	named          bool
	symbols, paths []string
}

// names returns the identifiers and paths the query names.
func (p *pass) names() (symbols, paths []string) {
	if !p.named {
		p.symbols, p.paths = queryNames(p.text)
		p.named = true
	}
	return p.symbols, p.paths
}

// lexical reports whether the lexical backend found candidates: the
// stages that count the query's words are lexical signals, left out of a
// vector-only search.
func (p *pass) lexical() bool { return len(p.cands.lex)+len(p.cands.lexThen) > 0 }

// rank fuses a search's candidates and runs the stages over them: every
// candidate, best first.
func (h *Hybrid) rank(ctx context.Context, text string, c *candidates, sp *Span) []Hit {
	p := &pass{text: text, cands: c, span: sp}
	p.fuse(h.opts)
	for _, s := range h.stageList {
		s.rescore(ctx, p)
	}
	sortHits(p.hits)
	return p.hits
}

// lexicalShares reports whether a lexical list's scores are fused as
// shares of the best (FuseOptions.LexicalShares): when its best hit is
// what a person or an agent said (a prompt, a response, a message). Over
// conversation, a question shares everyday words with many turns, their
// BM25 scores bunch, and min-max would stretch small differences over
// [0, 1]; over code, a query's identifiers and paths single out a few
// chunks, and min-max lets them lead. Measured on the four eval sets
// (BENCHMARKS.md, "Fusion"): shares gain LongMemEval 0.02 of recall@10 on
// every seed of the corpus model and cost the code sets 0.003-0.009, so
// each list is normalised by the kind it leads with.
func lexicalShares(lex []store.Hit) bool {
	if len(lex) == 0 {
		return false
	}
	switch lex[0].Occurrence.Type {
	case store.UserPrompt, store.AgentResponse, store.AgentMessage:
		return true
	}
	return false
}

// fuse merges the candidates into p.hits. With a span, the lists of the
// search within it are fused on their own, and each of their hits gains
// TimeBoost times its score there: what was said then ranks by how well
// it matches among what was said then, not among everything (where the
// min-max normalisation of the weighted merge would put a weak match at
// zero).
func (p *pass) fuse(o Options) {
	c := p.cands
	byID := make(map[int64]store.Hit, len(c.lex)+len(c.vec))
	ranked := func(hs []store.Hit, score func(store.Hit) float64) []Ranked {
		out := make([]Ranked, len(hs))
		for i, hit := range hs {
			if _, ok := byID[hit.Chunk.ID]; !ok {
				byID[hit.Chunk.ID] = hit
			}
			out[i] = Ranked{ID: hit.Chunk.ID, Score: score(hit), Time: hit.Occurrence.Time.UnixNano()}
		}
		return out
	}
	bm25 := func(hit store.Hit) float64 { return hit.Score }
	cosine := func(hit store.Hit) float64 { return c.cosines[hit.Chunk.ID] }
	lexR, vecR := ranked(c.lex, bm25), ranked(c.vec, cosine)
	// A lexical hit carries its BM25 and coverage; keep those.
	for _, hit := range c.lex {
		byID[hit.Chunk.ID] = hit
	}
	fo := o.Fusion
	fo.LexicalShares = lexicalShares(c.lex)
	fused := Fuse(lexR, vecR, fo)
	p.fromSpan = map[int64]bool{}
	if p.span != nil {
		fo.LexicalShares = lexicalShares(c.lexThen)
		then := Fuse(ranked(c.lexThen, bm25), ranked(c.vecThen, cosine), fo)
		// A chunk the span's lexical search found shows where it was seen
		// then, the occurrence the query asks about (a vector hit keeps
		// the one it has: it carries no BM25 to keep).
		for _, hit := range c.lexThen {
			byID[hit.Chunk.ID] = hit
		}
		fused = addSpan(fused, then, o.TimeBoost)
		for _, f := range then {
			p.fromSpan[f.ID] = true
		}
	}
	p.hits = make([]Hit, len(fused))
	for i, f := range fused {
		p.hits[i] = Hit{Hit: byID[f.ID], Score: f.Score, Vector: f.Vector,
			LexicalRank: f.LexicalRank, VectorRank: f.VectorRank, prior: 1}
		p.best = max(p.best, f.Score)
	}
}

// scale multiplies a hit's score and prior by a factor and names the
// stage among its boosts.
func (hit *Hit) scale(factor float64, boost string) {
	hit.Score *= factor
	hit.prior *= factor
	hit.Boosts = append(hit.Boosts, boost)
}

// appendNew appends to hits (best first) those of more (best first, a
// deeper tier's ranking) whose chunks it lacks, their scores scaled, if
// need be, to rank below the last of hits: scores are comparable within
// a tier, not across tiers (fusion normalises each tier on its own).
func appendNew(hits, more []Hit) []Hit {
	have := make(map[int64]bool, len(hits))
	for _, hit := range hits {
		have[hit.Chunk.ID] = true
	}
	scale := 1.0
	for _, hit := range more {
		if have[hit.Chunk.ID] {
			continue
		}
		if len(hits) > 0 && scale == 1 && hit.Score > hits[len(hits)-1].Score {
			// The first new hit is the tier's best: it sets the scale.
			scale = hits[len(hits)-1].Score / hit.Score
		}
		hit.Score *= scale
		hits = append(hits, hit)
	}
	return hits
}

// sortHits orders hits best first: by score, then the newer, then the
// larger chunk ID, so that the order is stable from run to run.
func sortHits(hits []Hit) {
	slices.SortStableFunc(hits, func(a, b Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := b.Occurrence.Time.Compare(a.Occurrence.Time); c != 0 {
			return c
		}
		return cmp.Compare(b.Chunk.ID, a.Chunk.ID)
	})
}
