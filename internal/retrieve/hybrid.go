// Package retrieve is engram's hybrid search: lexical (the store's BM25
// over code-aware terms) and vector (an embedder's vectors in an exact
// in-memory index) searched in parallel under a deadline, fused by
// reciprocal rank or a weighted merge, then rescored by small stages
// (symbol and path matches, file evidence, priors for tests, changelogs,
// vendored code and the other speaker, ...), with circuit breakers that
// degrade a failing backend to the other's results, a hot tier of
// recently used chunks, files as results (Places), and the pre-fetch block
// that injects the best of it into an agent's context, held to a
// relevance floor. pipeline.go is the map: the steps of a search, each in
// its own file.
package retrieve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/rerank"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// Defaults for Options.
const (
	DefaultLimit    = 10
	DefaultDepth    = 50
	DefaultDeadline = 250 * time.Millisecond
	// DefaultSymbolBoost and DefaultPathBoost multiply the fused score of a
	// hit by 1 plus the boost.
	DefaultSymbolBoost = 0.3
	DefaultPathBoost   = 0.3
	// DefaultSpeakerPrior multiplies the score of a message by the other
	// speaker than the one a question asks about (see namedSpeaker and
	// otherSpeaker).
	DefaultSpeakerPrior = 0.5
	// DefaultAncillaryPrior multiplies the score of a chunk of vendored
	// code, a test fixture or a file the go tool ignores (see ancillary).
	DefaultAncillaryPrior = 0.5
	// DefaultTestPrior, DefaultChangelogPrior and DefaultDocPrior
	// multiply the score of a chunk of a test, a changelog or release
	// notes, and documentation (see distractorStage).
	DefaultTestPrior      = 0.5
	DefaultChangelogPrior = 0.2
	DefaultDocPrior       = 0.5
	// DefaultHotBoost raises chunks used recently, the seed's recency
	// prior.
	DefaultHotBoost = 0.1
	// DefaultTimeBoost weighs the ranking of the span of time a query
	// points back to ("a week ago"; see ParseSpan) against the ranking of
	// everything: at 1 the best match from then ranks level with the best
	// match overall.
	DefaultTimeBoost = 1.0
	// DefaultSentenceBoost weighs the share of a query's words that a
	// candidate's best sentence holds (see sentenceCoverage).
	DefaultSentenceBoost = 0.3
	// DefaultFileEvidence is the share of the scores of a file's other
	// chunks among the best candidates that its best chunk gains (see
	// fileEvidence): none. On whole repositories the stage cost recall@10
	// on both code sets (gocommits 0.663 -> 0.656, ripgrep 0.806 -> 0.802)
	// for 0.004 of gocommits' MRR; file coverage carries what it said
	// (BENCHMARKS.md, the ablation table).
	DefaultFileEvidence = 0
	// DefaultFileCoverage weighs the share of a query's words that a
	// candidate's whole file holds (see Options.FileCoverage).
	DefaultFileCoverage = 0.5
	// fileEvidenceDepth is how many of the best candidates count as a
	// file's evidence.
	fileEvidenceDepth = 100
	// fileEvidenceChunks is how many of a file's other chunks count as its
	// evidence, its best after the best: a bound, so that a long file
	// (a changelog, a test suite) does not gain for being long.
	fileEvidenceChunks = 2
	// DefaultRerankDepth is how many of the best fused hits a re-ranker
	// scores.
	DefaultRerankDepth = 50
	// DefaultRerankTimeout bounds the wait for a re-ranker.
	DefaultRerankTimeout = 5 * time.Second
	// maxLimit bounds Query.Limit.
	maxLimit = 1000
	// maxDepth bounds the candidates of a search's deepest tier.
	maxDepth = 4 * maxLimit
	// vectorPage is how many vectors are loaded from the store at once.
	vectorPage = 10000
)

// Options configure a Hybrid. The zero value uses the defaults.
type Options struct {
	Fusion FuseOptions
	// Depth is how many candidates each backend returns for fusion; a
	// search for more results than they yield ranks deeper tiers after
	// them (see pipeline.go).
	Depth int
	// Deadline bounds a search: a backend that has not answered by then is
	// left out and the result is marked degraded.
	Deadline time.Duration
	// SymbolBoost and PathBoost raise hits whose chunk declares a symbol,
	// or whose file has a path, that the query names exactly.
	SymbolBoost, PathBoost float64
	// HotBoost raises hits among the recently used chunks.
	HotBoost float64
	// TimeBoost raises hits from the span of time a query points back to
	// ("what did I cook a couple of days ago?"): each backend also searches
	// the span on its own, so that what was said then is among the
	// candidates even when other times match the words better, and each
	// hit from then gains TimeBoost times its fused score among them (see
	// fuse); a re-ranker's relevance of a hit from then is multiplied by
	// 1 + TimeBoost. Negative turns the reading of time phrases off.
	TimeBoost float64
	// SpeakerPrior multiplies the score of a user prompt when a question
	// asks what the agent said ("you suggested ..."), and of an agent
	// response when it asks about the asker ("I", "my"); 1 turns it off.
	SpeakerPrior float64
	// AncillaryPrior multiplies the score of a chunk of a file aside from
	// the project's own code (see ancillary): a vendored copy of a
	// dependency, a test fixture, a Go file the go tool ignores. They are
	// what a project's agents read and change only rarely. A query that
	// names such code ("bump the vendored x/net", "the testdata for ...")
	// is left alone; 1 turns the prior off.
	AncillaryPrior float64
	// TestPrior, ChangelogPrior and DocPrior multiply the score of a chunk
	// of a test, a changelog or release notes, or documentation (see
	// roleOf), unless the query asks for them; 1 turns each off.
	TestPrior, ChangelogPrior, DocPrior float64
	// SentenceBoost adds to each candidate's fused score this times the
	// share of the query's words that its best sentence holds (its best
	// line, in code), in searches with a lexical side, as a share of the
	// best fused score; negative turns it off.
	SentenceBoost float64
	// FileEvidence raises the best chunk of an indexed file by this share
	// of the scores of the file's other chunks among the best candidates;
	// negative turns it off.
	FileEvidence float64
	// FileCoverage adds to the fused score of each chunk of an indexed
	// file this times the share of the query's words that the whole file
	// holds (store.Store.EntryCoverage), as a share of the best fused
	// score, in searches with a lexical side: a change touches the file
	// that holds one of its words in one function and another in the
	// next, where no chunk holds them all. Negative turns it off.
	FileCoverage float64
	// Reranker, if set, re-scores the best RerankDepth hits of a hybrid
	// search that does not opt out (Query.NoRerank); a search waits for
	// it at most RerankTimeout, retries included.
	Reranker      rerank.Reranker
	RerankDepth   int
	RerankTimeout time.Duration
	// Off names rescoring stages to leave out (see Stages): how engram
	// eval measures what each stage gains or costs.
	Off []string
	// Breaker failures in a row open a backend's circuit for a cooldown;
	// zero takes the defaults.
	BreakerFailures int
	BreakerCooldown time.Duration
	Log             *slog.Logger
}

func (o *Options) defaults() {
	o.Fusion.defaults()
	if o.Depth <= 0 {
		o.Depth = DefaultDepth
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	if o.SymbolBoost == 0 {
		o.SymbolBoost = DefaultSymbolBoost
	}
	if o.PathBoost == 0 {
		o.PathBoost = DefaultPathBoost
	}
	if o.HotBoost == 0 {
		o.HotBoost = DefaultHotBoost
	}
	if o.TimeBoost == 0 {
		o.TimeBoost = DefaultTimeBoost
	}
	if o.SpeakerPrior <= 0 {
		o.SpeakerPrior = DefaultSpeakerPrior
	}
	if o.AncillaryPrior <= 0 {
		o.AncillaryPrior = DefaultAncillaryPrior
	}
	if o.TestPrior <= 0 {
		o.TestPrior = DefaultTestPrior
	}
	if o.ChangelogPrior <= 0 {
		o.ChangelogPrior = DefaultChangelogPrior
	}
	if o.DocPrior <= 0 {
		o.DocPrior = DefaultDocPrior
	}
	if o.FileEvidence == 0 {
		o.FileEvidence = DefaultFileEvidence
	}
	if o.SentenceBoost == 0 {
		o.SentenceBoost = DefaultSentenceBoost
	}
	if o.FileCoverage == 0 {
		o.FileCoverage = DefaultFileCoverage
	}
	if o.RerankDepth <= 0 {
		o.RerankDepth = DefaultRerankDepth
	}
	if o.RerankTimeout <= 0 {
		o.RerankTimeout = DefaultRerankTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Mode chooses the backends of a search.
type Mode string

// The search modes.
const (
	ModeHybrid  Mode = "hybrid"
	ModeLexical Mode = "lexical"
	ModeVector  Mode = "vector"
)

// ParseMode returns the mode of a name; empty means hybrid.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeHybrid, nil
	case ModeHybrid, ModeLexical, ModeVector:
		return m, nil
	}
	return "", fmt.Errorf("unknown search mode %q (want hybrid, lexical or vector)", s)
}

// Query is a search.
type Query struct {
	Text   string
	Filter store.Filter
	// Limit is the most hits returned; zero means DefaultLimit.
	Limit int
	Mode  Mode
	// NoRerank skips the configured re-ranker.
	NoRerank bool
	// Now is when the query is asked, for phrases such as "a week ago";
	// zero means the time of the search.
	Now time.Time
}

// Hit is one result, with what each backend said of it.
type Hit struct {
	// Hit is the chunk and its provenance; its Score is the lexical BM25
	// and its Coverage the lexical confidence, zero if lexical search did
	// not return it.
	store.Hit
	// Score is the fused score, boosts applied.
	Score float64
	// Vector is the cosine similarity to the query, if vector search
	// returned the chunk; the ranks are 1-based, 0 where a backend did not
	// return it.
	Vector                  float64
	LexicalRank, VectorRank int
	// Boosts name what raised the hit: "symbol", "path", "hot", "time", "file"; or
	// lowered it: "other-speaker", "ancillary".
	Boosts []string
	// Rerank is the re-ranker's relevance, from 0 to 1, if Reranked.
	Rerank   float64
	Reranked bool
	// prior is the product of the boosts' factors and the speaker and
	// ancillary priors; zero means none was applied (see weight).
	prior float64
}

// weight is the product of the factors of a hit's boosts and priors: 1
// for a hit that has none.
func (h Hit) weight() float64 {
	if h.prior == 0 {
		return 1
	}
	return h.prior
}

// Result is a search's answer.
type Result struct {
	Hits []Hit
	// Lexical and Vector report whether each backend answered.
	Lexical, Vector bool
	// Reranked is set when the re-ranker ordered the best hits.
	Reranked bool
	// Span is the stretch of time the query pointed back to, if it did
	// (Options.TimeBoost): hits from it were searched for and raised.
	Span *Span
	// Degraded is set when a backend that should have answered did not:
	// it failed, timed out, or its circuit is open (the re-ranker too:
	// the hits are then in fused order). Faults say why.
	Degraded bool
	Faults   []string
	Elapsed  time.Duration
}

// Counters count a Hybrid's searches and faults since it was made.
type Counters struct {
	Searches      int64 `json:"searches"`
	Degraded      int64 `json:"degraded"`
	LexicalFaults int64 `json:"lexical_faults"`
	VectorFaults  int64 `json:"vector_faults"`
	RerankFaults  int64 `json:"rerank_faults"`
}

// Hybrid searches a store lexically and by vector. It is safe for
// concurrent use.
type Hybrid struct {
	st   store.Store
	emb  embed.Embedder // nil: lexical only
	opts Options

	stageList              []stage
	lexCB, vecCB, rerankCB *Breaker
	vecs                   *vectorSet
	hot                    *hotSet
	// purges is the store's purge count the vector index and the hot set
	// were loaded at. Both are kept current by reading only what is new;
	// a forget or a redaction (in any process) deletes what they hold, so
	// when the count changes they are loaded again.
	purges atomic.Uint64

	searches, degraded, lexFaults, vecFaults, rerankFaults atomic.Int64
	// lexDown is set while the lexical backend's last failure was the
	// store's being unavailable, so that a search refused by its open
	// circuit says why.
	lexDown atomic.Bool
}

// NewHybrid returns a hybrid searcher over st. emb may be nil, for lexical
// search only; its vectors are read from the store as they are needed.
func NewHybrid(st store.Store, emb embed.Embedder, opts Options) *Hybrid {
	opts.defaults()
	h := &Hybrid{st: st, emb: emb, opts: opts,
		lexCB:    NewBreaker(opts.BreakerFailures, opts.BreakerCooldown),
		vecCB:    NewBreaker(opts.BreakerFailures, opts.BreakerCooldown),
		rerankCB: NewBreaker(opts.BreakerFailures, opts.BreakerCooldown),
		hot:      newHotSet(),
	}
	if emb != nil {
		h.vecs = &vectorSet{model: emb.Model()}
	}
	h.stageList = h.stages()
	return h
}

// Embedder returns the embedder, or nil.
func (h *Hybrid) Embedder() embed.Embedder { return h.emb }

// Counters returns the search and fault counts.
func (h *Hybrid) Counters() Counters {
	return Counters{Searches: h.searches.Load(), Degraded: h.degraded.Load(),
		LexicalFaults: h.lexFaults.Load(), VectorFaults: h.vecFaults.Load(), RerankFaults: h.rerankFaults.Load()}
}

// Breakers returns the state of the lexical and vector circuit breakers.
func (h *Hybrid) Breakers() (lexical, vector BreakerState) {
	return h.lexCB.State(), h.vecCB.State()
}

// Search runs a query. An empty query has no hits; a failing backend
// degrades the result instead of failing it; only when no backend can
// answer is there an error.
func (h *Hybrid) Search(ctx context.Context, q Query) (Result, error) {
	start := time.Now()
	var res Result
	if q.Mode == "" {
		q.Mode = ModeHybrid
	}
	if _, err := ParseMode(string(q.Mode)); err != nil {
		return res, err
	}
	if err := q.Filter.Validate(); err != nil {
		return res, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, maxLimit)
	if strings.TrimSpace(q.Text) == "" {
		return res, nil
	}
	if q.Mode == ModeVector && h.emb == nil {
		return res, errors.New("vector search: no embedder is configured (see engram model)")
	}
	h.searches.Add(1)
	reranking := q.Mode == ModeHybrid && !q.NoRerank && h.opts.Reranker != nil
	// The depth is the same whatever the limit: see pipeline.go.
	depth := h.opts.Depth
	if reranking {
		depth = max(depth, h.opts.RerankDepth)
	}
	res.Span = h.span(q)
	purged := h.purged(ctx)
	// Tier one: the hot set, from memory.
	if err := h.refreshHot(ctx, purged); err != nil {
		h.opts.Log.Warn("refresh hot set", "err", err)
	}
	// The first search of a process loads the stored vectors; that is
	// start-up work, not the search's, so it does not count against the
	// deadline. Later searches load only what is new.
	if q.Mode != ModeLexical && h.vecs != nil && !h.vecs.loaded.Load() {
		if err := h.Warm(ctx); err != nil {
			h.opts.Log.Warn("load vectors", "err", err)
		}
	}
	wantLex := q.Mode != ModeVector
	wantVec := q.Mode != ModeLexical && h.emb != nil
	g := h.gather(ctx, q, res.Span, depth, wantLex, wantVec, true)
	if err := ctx.Err(); err != nil {
		// The caller gave up: not a backend's fault, and no outcome for a
		// probe either.
		if wantLex && !g.lexSkip {
			h.lexCB.Cancel()
		}
		if wantVec && !g.vecSkip {
			h.vecCB.Cancel()
		}
		return res, err
	}
	fault := func(backend string, err error, skipped bool, cb *Breaker, counter *atomic.Int64) bool {
		switch {
		case skipped:
			res.Faults = append(res.Faults, backend+": circuit open after repeated failures")
		case err != nil:
			cb.Failure()
			counter.Add(1)
			res.Faults = append(res.Faults, backend+": "+err.Error())
			h.opts.Log.Warn("search backend failed", "backend", backend, "err", err)
		default:
			cb.Success()
			return true
		}
		return false
	}
	if wantLex {
		res.Lexical = fault("lexical", g.lexErr, g.lexSkip, h.lexCB, &h.lexFaults)
		if !g.lexSkip {
			h.lexDown.Store(errors.Is(g.lexErr, store.ErrUnavailable))
		}
	}
	if wantVec {
		res.Vector = fault("vector", g.vecErr, g.vecSkip, h.vecCB, &h.vecFaults)
	}
	if !res.Lexical && !res.Vector {
		// No backend answered: the hot tier is all there is, if the query
		// has no filter it could not check.
		res.Degraded = true
		h.degraded.Add(1)
		if hot := h.hotSearch(q.Text, limit); len(hot) > 0 && q.Filter.IsZero() {
			res.Hits, res.Elapsed = hot, time.Since(start)
			return res, nil
		}
		err := fmt.Errorf("search: no backend answered: %s", strings.Join(res.Faults, "; "))
		if wantLex && h.lexDown.Load() {
			// The store's search failed for want of the store, now or
			// (its circuit open) the last time it was asked: a search
			// later may answer.
			err = store.Unavailable(err)
		}
		return res, err
	}
	n := limit
	if reranking {
		n = max(limit, h.opts.RerankDepth)
	}
	res.Hits = h.rank(ctx, q.Text, &g.candidates, res.Span)
	// Deeper tiers, for a search that asks for more than the first one
	// ranks; each is ranked on its own and adds what is new, so that the
	// first tier's order stands (see pipeline.go).
	for c, d := &g.candidates, depth; len(res.Hits) < n && c.full(d) && d < maxDepth; {
		d *= 4
		deeper := h.gather(ctx, q, res.Span, d, res.Lexical, res.Vector, false)
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if deeper.lexErr != nil || deeper.vecErr != nil {
			res.Faults = append(res.Faults, fmt.Sprintf("deeper candidates: %v", errors.Join(deeper.lexErr, deeper.vecErr)))
			break
		}
		c = &deeper.candidates
		res.Hits = appendNew(res.Hits, h.rank(ctx, q.Text, c, res.Span))
	}
	res.Hits = res.Hits[:min(n, len(res.Hits))]
	// Each hit gets both signals where both backends answered: the cosine
	// of a lexical-only hit from the index, the coverage of a vector-only
	// hit from its words (each weighing the same: its IDF is not at hand).
	var qterms []string
	for i := range res.Hits {
		hit := &res.Hits[i]
		if hit.VectorRank == 0 && res.Vector && g.index != nil {
			if d, ok := g.index.Dot(hit.Chunk.ID, g.qvec); ok {
				hit.Vector = max(d, 0)
			}
		}
		if hit.LexicalRank == 0 && res.Lexical {
			if qterms == nil {
				qterms = terms.Content(q.Text)
			}
			hit.Coverage = termCoverage(qterms, hit.Chunk.Text)
		}
	}
	if reranking {
		if h.rerankCB.Allow() {
			if err := h.rerank(ctx, q.Text, res.Hits); err != nil {
				if ctx.Err() != nil {
					h.rerankCB.Cancel()
					return res, ctx.Err()
				}
				h.rerankCB.Failure()
				h.rerankFaults.Add(1)
				res.Faults = append(res.Faults, "rerank: "+err.Error())
				h.opts.Log.Warn("re-ranker failed", "err", err)
			} else {
				h.rerankCB.Success()
				res.Reranked = true
			}
		} else {
			res.Faults = append(res.Faults, "rerank: circuit open after repeated failures")
		}
		res.Hits = res.Hits[:min(limit, len(res.Hits))]
	}
	if len(res.Faults) > 0 {
		res.Degraded = true
		h.degraded.Add(1)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// termCoverage is the share of the query's terms a text holds.
func termCoverage(qterms []string, text string) float64 {
	if len(qterms) == 0 {
		return 0
	}
	have := map[string]bool{}
	for _, t := range terms.Content(text) {
		have[t] = true
	}
	n := 0
	for _, t := range qterms {
		if have[t] {
			n++
		}
	}
	return float64(n) / float64(len(qterms))
}
