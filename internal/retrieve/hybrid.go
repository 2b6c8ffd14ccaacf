// Package retrieve is engram's hybrid search: lexical (the store's BM25
// over code-aware terms) and vector (an embedder's vectors in an exact
// in-memory index) searched in parallel under a deadline, fused by
// reciprocal rank or a weighted merge, with boosts for exact symbol and
// path matches, circuit breakers that degrade a failing backend to the
// other's results, a hot tier of recently used chunks, and the pre-fetch
// block that injects the best of it into an agent's context.
package retrieve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

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
	// fileEvidence).
	DefaultFileEvidence = 0.05
	// DefaultFileCoverage weighs the share of a query's words that a
	// candidate's whole file holds (see Options.FileCoverage).
	DefaultFileCoverage = 0.5
	// fileEvidenceDepth is how many of the best candidates count as a
	// file's evidence.
	fileEvidenceDepth = 100
	// DefaultRerankDepth is how many of the best fused hits a re-ranker
	// scores.
	DefaultRerankDepth = 50
	// DefaultRerankTimeout bounds the wait for a re-ranker.
	DefaultRerankTimeout = 5 * time.Second
	// maxLimit bounds Query.Limit.
	maxLimit = 1000
	// vectorPage is how many vectors are loaded from the store at once.
	vectorPage = 10000
)

// Options configure a Hybrid. The zero value uses the defaults.
type Options struct {
	Fusion FuseOptions
	// Depth is how many candidates each backend returns for fusion, at
	// least; a search for more results asks for more.
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

	lexCB, vecCB, rerankCB *Breaker
	vecs                   *vectorSet
	hot                    *hotSet
	// purges is the store's purge count the vector index and the hot set
	// were loaded at. Both are kept current by reading only what is new;
	// a forget or a redaction (in any process) deletes what they hold, so
	// when the count changes they are loaded again.
	purges atomic.Uint64

	searches, degraded, lexFaults, vecFaults, rerankFaults atomic.Int64
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
	h.searches.Add(1)
	reranking := q.Mode == ModeHybrid && !q.NoRerank && h.opts.Reranker != nil
	depth := max(h.opts.Depth, 2*limit)
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

	// The deadline is for fusion: past it, a backend that has not answered
	// is cut off if another one has, so that one slow signal never holds
	// up the other. A backend that is alone, or that answers first after
	// the deadline, is waited for (as long as the caller waits): under
	// load every search is slow, and cutting the only signal would turn
	// slowness into failures and trip its breaker.
	bctx, cutOff := context.WithCancel(ctx)
	defer cutOff()
	wantLex := q.Mode != ModeVector
	wantVec := q.Mode != ModeLexical && h.emb != nil
	if q.Mode == ModeVector && h.emb == nil {
		return res, errors.New("vector search: no embedder is configured (see engram model)")
	}
	var (
		lex, vec         []store.Hit
		lexThen, vecThen []store.Hit // within the span
		lexErr, vecErr   error
		cosines          map[int64]float64
		qvec             []float32
		index            *Index
		lexSkip, vecSkip bool
	)
	type answer struct {
		backend string
		ok      bool
	}
	answers := make(chan answer, 2)
	pending := 0
	if wantLex {
		if h.lexCB.Allow() {
			pending++
			go func() {
				lex, lexThen, lexErr = h.lexicalSearch(bctx, q, res.Span, depth)
				answers <- answer{"lexical", lexErr == nil}
			}()
		} else {
			lexSkip = true
		}
	}
	if wantVec {
		if h.vecCB.Allow() {
			pending++
			go func() {
				vec, vecThen, cosines, qvec, index, vecErr = h.vectorSearch(bctx, q.Text, q.Filter, res.Span, depth)
				answers <- answer{"vector", vecErr == nil}
			}()
		} else {
			vecSkip = true
		}
	}
	deadline := time.NewTimer(h.opts.Deadline)
	defer deadline.Stop()
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
		case <-deadline.C:
			late = true
		}
	}
	for backend, m := range missed {
		if m {
			// Cut off after the deadline: say so rather than "context canceled".
			err := fmt.Errorf("no answer within the %v deadline", h.opts.Deadline)
			if backend == "lexical" {
				lexErr = err
			} else {
				vecErr = err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up: not a backend's fault, and no outcome for a
		// probe either.
		if wantLex && !lexSkip {
			h.lexCB.Cancel()
		}
		if wantVec && !vecSkip {
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
		res.Lexical = fault("lexical", lexErr, lexSkip, h.lexCB, &h.lexFaults)
	}
	if wantVec {
		res.Vector = fault("vector", vecErr, vecSkip, h.vecCB, &h.vecFaults)
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
		return res, fmt.Errorf("search: no backend answered: %s", strings.Join(res.Faults, "; "))
	}
	n := limit
	if reranking {
		n = max(limit, h.opts.RerankDepth)
	}
	var files map[string]float64
	if h.opts.FileCoverage > 0 && res.Lexical {
		var err error
		if files, err = h.fileCoverage(ctx, q.Text, lex, vec, lexThen, vecThen); err != nil && ctx.Err() == nil {
			// Only a boost is lost.
			h.opts.Log.Warn("file coverage", "err", err)
		}
	}
	res.Hits = h.fuse(q.Text, lex, vec, lexThen, vecThen, cosines, res.Span, n, files)
	// Each hit gets both signals where both backends answered: the cosine
	// of a lexical-only hit from the index, the coverage of a vector-only
	// hit from its words (each weighing the same: its IDF is not at hand).
	var qterms []string
	for i := range res.Hits {
		hit := &res.Hits[i]
		if hit.VectorRank == 0 && res.Vector && index != nil {
			if d, ok := index.Dot(hit.Chunk.ID, qvec); ok {
				hit.Vector = max(d, 0)
			}
		}
		if hit.LexicalRank == 0 && res.Lexical {
			if qterms == nil {
				qterms = embed.Terms(q.Text)
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

// termCoverage is the share of the query's terms a text holds.
func termCoverage(qterms []string, text string) float64 {
	if len(qterms) == 0 {
		return 0
	}
	have := map[string]bool{}
	for _, t := range embed.Terms(text) {
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

// span returns the stretch of time q points back to, or nil: none when
// time phrases are off or the filter already bounds the time.
func (h *Hybrid) span(q Query) *Span {
	if h.opts.TimeBoost < 0 || !q.Filter.Since.IsZero() || !q.Filter.Until.IsZero() {
		return nil
	}
	now := q.Now
	if now.IsZero() {
		now = time.Now()
	}
	if sp, ok := ParseSpan(q.Text, now); ok {
		return &sp
	}
	return nil
}

// withoutPhrase returns text without the words that pointed back in time,
// if any: the span stands for them. ParseSpan reads the text lower-cased,
// so the phrase is found whatever its case ("Last Tuesday").
func withoutPhrase(text string, sp *Span) string {
	if sp == nil {
		return text
	}
	n := len(sp.Phrase)
	for i := 0; i+n <= len(text); i++ {
		if strings.EqualFold(text[i:i+n], sp.Phrase) {
			return text[:i] + " " + text[i+n:]
		}
	}
	return text
}

// inSpan returns f bounded to the span.
func inSpan(f store.Filter, sp *Span) store.Filter {
	f.Since, f.Until = sp.From, sp.To
	return f
}

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

// fuse merges the two lists, applies boosts and returns the best limit.
// With a span, the lists of the search within it are fused on their own,
// and each of their hits gains TimeBoost times its score there: what was
// said then ranks by how well it matches among what was said then, not
// among everything (where the min-max normalisation of the weighted merge
// would put a weak match at zero).
func (h *Hybrid) fuse(text string, lex, vec, lexThen, vecThen []store.Hit, cosines map[int64]float64, sp *Span, limit int,
	files map[string]float64) []Hit {
	byID := make(map[int64]store.Hit, len(lex)+len(vec))
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
	lexR := ranked(lex, func(hit store.Hit) float64 { return hit.Score })
	vecR := ranked(vec, func(hit store.Hit) float64 { return cosines[hit.Chunk.ID] })
	// A lexical hit carries its BM25 and coverage; keep those.
	for _, hit := range lex {
		byID[hit.Chunk.ID] = hit
	}
	fused := Fuse(lexR, vecR, h.opts.Fusion)
	fromSpan := map[int64]bool{}
	if sp != nil {
		then := Fuse(ranked(lexThen, func(hit store.Hit) float64 { return hit.Score }),
			ranked(vecThen, func(hit store.Hit) float64 { return cosines[hit.Chunk.ID] }), h.opts.Fusion)
		// A chunk the span's lexical search found shows where it was seen
		// then, the occurrence the query asks about (a vector hit keeps
		// the one it has: it carries no BM25 to keep).
		for _, hit := range lexThen {
			byID[hit.Chunk.ID] = hit
		}
		fused = addSpan(fused, then, h.opts.TimeBoost)
		for _, f := range then {
			fromSpan[f.ID] = true
		}
	}
	// The sentence and file bonuses, lexical signals, are left out of a
	// vector-only search; each is a share of the best fused score,
	// whatever the fusion's scale (RRF's scores are a hundredth of the
	// weighted merge's).
	var (
		sentences *terms.Counter
		qterms    []string
		best      float64
	)
	for _, f := range fused {
		best = max(best, f.Score)
	}
	if h.opts.SentenceBoost > 0 && len(lex)+len(lexThen) > 0 {
		qterms = embed.Terms(text)
		slices.Sort(qterms)
		if qterms = slices.Compact(qterms); len(qterms) > 0 {
			sentences = terms.NewCounter(qterms)
		}
	}
	symbols, paths := queryNames(text)
	ancillaryPrior := h.opts.AncillaryPrior
	if ancillaryRE.MatchString(text) {
		ancillaryPrior = 1
	}
	hot := h.hot.snapshot()
	out := make([]Hit, 0, len(fused))
	for _, f := range fused {
		hit := Hit{Hit: byID[f.ID], Vector: f.Vector, LexicalRank: f.LexicalRank, VectorRank: f.VectorRank, prior: 1}
		if matchSymbol(hit.Chunk.Symbols, symbols) {
			hit.prior *= 1 + h.opts.SymbolBoost
			hit.Boosts = append(hit.Boosts, "symbol")
		}
		if matchPath(hit.Occurrence.Files, paths) {
			hit.prior *= 1 + h.opts.PathBoost
			hit.Boosts = append(hit.Boosts, "path")
		}
		if hot[f.ID] {
			hit.prior *= 1 + h.opts.HotBoost
			hit.Boosts = append(hit.Boosts, "hot")
		}
		if fromSpan[f.ID] {
			hit.Boosts = append(hit.Boosts, "time")
		}
		if ancillaryPrior != 1 && ancillary(hit.Occurrence) {
			hit.prior *= ancillaryPrior
			hit.Boosts = append(hit.Boosts, "ancillary")
		}
		hit.Score = f.Score
		if sentences != nil {
			hit.Score += best * h.opts.SentenceBoost * sentenceCoverage(sentences, len(qterms), hit.Chunk.Text)
		}
		if c, ok := files[hit.Chunk.EntryID]; ok && hit.Occurrence.Type == store.CodeFile {
			hit.Score += best * h.opts.FileCoverage * c
		}
		hit.Score *= hit.prior
		out = append(out, hit)
	}
	if h.opts.SpeakerPrior != 1 {
		named, other := namedSpeaker(text, out), otherSpeaker(text)
		for i := range out {
			o := &out[i].Occurrence
			if named != "" && isMessage(o.Type) && o.AgentID != named || named == "" && other != "" && o.Type == other {
				out[i].Score *= h.opts.SpeakerPrior
				out[i].prior *= h.opts.SpeakerPrior
				out[i].Boosts = append(out[i].Boosts, "other-speaker")
			}
		}
	}
	sortHits(out)
	if h.opts.FileEvidence > 0 && fileEvidence(out, h.opts.FileEvidence, fileEvidenceDepth) {
		sortHits(out)
	}
	return out[:min(limit, len(out))]
}

// fileCoverage returns the share of the query that each indexed file among
// the candidates holds anywhere (see Options.FileCoverage), by entry.
func (h *Hybrid) fileCoverage(ctx context.Context, text string, lists ...[]store.Hit) (map[string]float64, error) {
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
	return h.st.EntryCoverage(ctx, text, ids)
}

// addSpan adds to each of all the boost times its score among then, the
// candidates within a span, and appends those all lacks; ranks stay as
// all has them, or as then has them for a hit only then found.
func addSpan(all, then []Fused, boost float64) []Fused {
	at := make(map[int64]int, len(all))
	for i, f := range all {
		at[f.ID] = i
	}
	for _, t := range then {
		if i, ok := at[t.ID]; ok {
			all[i].Score += boost * t.Score
			continue
		}
		t.Score *= boost
		all = append(all, t)
	}
	return all
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
		extra[f] += hits[i].Score
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

var (
	identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`)
	pathRE  = regexp.MustCompile(`[A-Za-z0-9_.\-]*(?:/[A-Za-z0-9_.\-]+)+/?|[A-Za-z0-9_\-]+\.[A-Za-z][A-Za-z0-9]{0,5}`)
)

// queryNames returns the identifiers a query names (camelCase, snake_case
// or qualified names: ordinary words are not symbols) and the paths it
// names (with a slash, or a file name with an extension).
func queryNames(text string) (symbols, paths []string) {
	for _, m := range identRE.FindAllString(text, -1) {
		rest := m[1:]
		if strings.ContainsAny(m, "_.") || strings.ToLower(rest) != rest {
			symbols = append(symbols, m)
		}
	}
	for _, m := range pathRE.FindAllString(text, -1) {
		m = strings.Trim(m, "./")
		if m != "" {
			paths = append(paths, m)
		}
	}
	return symbols, paths
}

// matchSymbol reports whether a chunk declares a named symbol: exactly, or
// as the method or field part of a qualified name.
func matchSymbol(declared, named []string) bool {
	for _, d := range declared {
		for _, n := range named {
			if d == n || strings.HasSuffix(d, "."+n) || strings.HasSuffix(n, "."+d) {
				return true
			}
		}
	}
	return false
}

// ancillaryDirs are the directories that hold code aside from a project's
// own by convention: copies of other projects' code (Go's vendor,
// third_party in Chromium and Google, node_modules) and test fixtures
// (Go's and Rust's testdata, fixtures, Jest's __fixtures__ and
// __snapshots__).
var ancillaryDirs = []string{"vendor", "third_party", "node_modules", "testdata", "fixtures", "__fixtures__", "__snapshots__"}

// ancillaryRE matches a query about ancillary code.
var ancillaryRE = regexp.MustCompile(`(?i)\b(vendor|third[_ -]party|node_modules|test ?data|fixtures?\b|__(fixtures|snapshots)__|snapshots?\b|golden)`)

// ancillary reports whether an occurrence is of an indexed file aside from
// the project's own code: under one of ancillaryDirs, or a Go file that
// the go tool ignores, whose name or a directory's begins with "_" or "."
// (generators kept beside a package, such as _gen/, and the like).
func ancillary(o store.Occurrence) bool {
	if o.Type != store.CodeFile || len(o.Files) == 0 {
		return false
	}
	dir, name := path.Split(o.Files[0])
	goFile := strings.HasSuffix(name, ".go")
	ignored := func(seg string) bool { return goFile && (strings.HasPrefix(seg, "_") || strings.HasPrefix(seg, ".")) }
	if ignored(name) {
		return true
	}
	for seg := range strings.SplitSeq(strings.TrimSuffix(dir, "/"), "/") {
		if slices.Contains(ancillaryDirs, seg) || ignored(seg) {
			return true
		}
	}
	return false
}

// matchPath reports whether a file is one the query names: the same path,
// a path ending in it at a slash, or under a named directory.
func matchPath(files, named []string) bool {
	for _, f := range files {
		for _, n := range named {
			if f == n || strings.HasSuffix(f, "/"+n) || strings.HasPrefix(f, n+"/") || strings.Contains(f, "/"+n+"/") {
				return true
			}
		}
	}
	return false
}

// vectorSet is the in-memory index of one model's vectors, loaded from the
// store and brought up to date before each search.
type vectorSet struct {
	model  string
	mu     sync.Mutex // serialises loading
	index  *Index
	loaded atomic.Bool // a first load completed
}

// reset drops the index, to be loaded again from the start.
func (v *vectorSet) reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.index = nil
	v.loaded.Store(false)
}

// sync loads the vectors stored since the last call and returns the index,
// or nil if the store has none.
func (v *vectorSet) sync(ctx context.Context, st store.Store) (*Index, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var last int64
	if v.index != nil {
		last = v.index.Last()
	}
	for {
		page, err := st.Vectors(ctx, v.model, last, vectorPage)
		if err != nil {
			return v.index, fmt.Errorf("load vectors: %w", err)
		}
		for _, c := range page {
			if v.index == nil {
				v.index = NewIndex(len(c.Vector))
			}
			v.index.Add(c.ID, c.Vector)
			last = c.ID
		}
		if len(page) < vectorPage {
			v.loaded.Store(true)
			return v.index, nil
		}
	}
}

// purged reports whether the store was purged since the last search,
// dropping the vector index if it was.
func (h *Hybrid) purged(ctx context.Context) bool {
	n, err := h.st.Purges(ctx)
	if err != nil {
		h.opts.Log.Warn("read the purge count", "err", err)
		return false
	}
	if h.purges.Swap(n) == n {
		return false
	}
	if h.vecs != nil {
		h.vecs.reset()
	}
	return true
}

// Loaded returns how many vectors are in memory.
func (h *Hybrid) Loaded() int {
	if h.vecs == nil {
		return 0
	}
	h.vecs.mu.Lock()
	defer h.vecs.mu.Unlock()
	if h.vecs.index == nil {
		return 0
	}
	return h.vecs.index.Len()
}

// Warm loads the stored vectors into memory now rather than at the first
// search.
func (h *Hybrid) Warm(ctx context.Context) error {
	if h.vecs == nil {
		return nil
	}
	_, err := h.vecs.sync(ctx, h.st)
	return err
}

var (
	// agentCue finds a question about what the agent said or did: "you
	// suggested", "did you say", "your answer".
	agentCue = regexp.MustCompile(`(?i)\byou\s+(?:\w+\s+)?(?:mentioned|said|say|recommended|recommend|suggested|suggest|provided|told|gave|created|wrote|made|listed|described|explained|shared|offered|proposed|came up|helped|remembered|decided|answered|replied)\b|\bdid you\b|\byour (?:answer|response|reply|suggestion|recommendation|list|explanation|advice)\b`)
	// bothCue finds a question about the conversation itself, which
	// either side may have said: "our last chat", "we discussed".
	bothCue = regexp.MustCompile(`(?i)\bour (?:\w+\s+)?(?:conversation|chat|discussion|session|talk)s?\b|\bwe (?:\w+\s+)?(?:talked|discussed|chatted|covered|went over)\b`)
	// selfCue finds a question in the first person.
	selfCue = regexp.MustCompile(`\b(?:I|I'm|I've|I'd|I'll|[Mm]y|[Mm]e|[Mm]ine|[Mm]yself)\b`)
)

// isMessage reports whether content of a type is said by a speaker: a
// prompt, a response or a message between agents.
func isMessage(t store.ContentType) bool {
	return t == store.UserPrompt || t == store.AgentResponse || t == store.AgentMessage
}

// namedSpeaker returns the one speaker of the candidates' messages that a
// question names ("what did Caroline paint?"), if the candidates hold
// messages of more than one speaker; else "". Names are the agents' ids,
// matched as whole words, ignoring case, three letters at least.
func namedSpeaker(text string, hits []Hit) string {
	lower := strings.ToLower(text)
	seen := map[string]bool{}
	named := ""
	for _, h := range hits {
		a := h.Occurrence.AgentID
		if a == "" || seen[a] || !isMessage(h.Occurrence.Type) {
			continue
		}
		seen[a] = true
		if len(a) >= 3 && hasWord(lower, strings.ToLower(a)) {
			if named != "" {
				return "" // two named: a question about both
			}
			named = a
		}
	}
	if len(seen) < 2 {
		return ""
	}
	return named
}

// hasWord reports whether w occurs in s between non-word characters.
func hasWord(s, w string) bool {
	isWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before, _ := utf8.DecodeLastRuneInString(s[:j])
		after, _ := utf8.DecodeRuneInString(s[j+len(w):])
		if (j == 0 || !isWord(before)) && (j+len(w) == len(s) || !isWord(after)) {
			return true
		}
		i = j + 1
	}
}

// otherSpeaker returns the content type of the messages a question is not
// about: agent responses when the asker asks about themselves ("what did
// I say about ...", "my deadline"), user prompts when they ask what the
// agent said ("you suggested ..."), and "" for a question that names
// neither (keywords, code) or names the conversation itself ("what did we
// discuss about ..."). A question in a conversation is mostly about
// what one side said; measured on LongMemEval, 98 % of the evidence of
// first-person questions is the user's turns.
func otherSpeaker(text string) store.ContentType {
	switch {
	case agentCue.MatchString(text):
		return store.UserPrompt
	case bothCue.MatchString(text):
		return ""
	case selfCue.MatchString(text):
		return store.AgentResponse
	}
	return ""
}
