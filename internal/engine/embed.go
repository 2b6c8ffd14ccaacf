package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// The embedding providers.
const (
	ProviderCorpus    = "corpus"
	ProviderModel2Vec = "model2vec"
	ProviderOllama    = "ollama"
	ProviderOpenAI    = "openai"
	ProviderNone      = "none"
)

// Providers lists the embedding providers.
var Providers = []string{ProviderCorpus, ProviderModel2Vec, ProviderOllama, ProviderOpenAI, ProviderNone}

// Defaults for EmbedOptions.
const (
	DefaultProvider = ProviderCorpus
	// DefaultCorpusGrowth retrains the corpus model when the store has
	// grown to this many times the chunks it was trained on.
	DefaultCorpusGrowth = 2.0
	// DefaultCorpusSample bounds the chunks a corpus model is trained on;
	// a larger store is sampled evenly.
	DefaultCorpusSample = 50000
)

// CorpusFusion is the fusion of hybrid search with the corpus model,
// unless configured otherwise: lexical-heavy, since the corpus model knows
// only which words go together in the store. Chosen on engram eval
// (BENCHMARKS.md): hybrid recall@10 with it beats lexical-only on all three
// sets, where the seed's vector 0.7 / lexical 0.3 wins on LoCoMo but loses
// a third of the recall on gocommits and a fifth on LongMemEval.
var CorpusFusion = retrieve.FuseOptions{Method: retrieve.Weighted, LexicalWeight: 0.8, VectorWeight: 0.2}

// EmbedOptions choose and configure the embedder.
type EmbedOptions struct {
	// Provider is one of Providers; empty means DefaultProvider.
	Provider string
	// Model names the model of a remote provider.
	Model string
	// URL is a remote provider's base URL; empty means its default.
	URL string
	// APIKey authenticates with an OpenAI-compatible provider.
	APIKey string
	// Path is the directory of a Model2Vec model.
	Path string
	// Remote tunes the HTTP providers.
	Remote embed.RemoteOptions
	// Corpus tunes the training of the corpus model.
	Corpus lsa.Options
	// Batch is how many chunks are embedded and stored at once; zero means
	// embed.DefaultWorkerBatch.
	Batch int
	// CorpusGrowth and CorpusSample: see DefaultCorpusGrowth and
	// DefaultCorpusSample.
	CorpusGrowth float64
	CorpusSample int
}

func (o *EmbedOptions) defaults() {
	if o.Provider == "" {
		o.Provider = DefaultProvider
	}
	if o.CorpusGrowth <= 1 {
		o.CorpusGrowth = DefaultCorpusGrowth
	}
	if o.CorpusSample <= 0 {
		o.CorpusSample = DefaultCorpusSample
	}
}

// Settings and blobs of the corpus model.
const (
	settingCorpusActive = "embed.corpus.active"
	settingCorpusNext   = "embed.corpus.next"
	settingCorpusChunks = "embed.corpus.trained_chunks"
	// settingCorpusTerms is the terms.Version the model was trained with;
	// unset means 1.
	settingCorpusTerms   = "embed.corpus.terms_version"
	blobPrefix           = "embed/"
	corpusListingModel   = embed.CorpusPrefix // no model has this exact name: PendingChunks under it lists every chunk
	corpusPendingBatches = 5000
)

// embedState caches the embedder and the hybrid searcher built on it.
type embedState struct {
	mu     sync.Mutex
	emb    embed.Embedder // nil: none
	name   string         // emb's model, or the corpus setting it came from
	hybrid *retrieve.Hybrid
	remote embed.Embedder // built once for a remote or Model2Vec provider
}

// Embedder returns the embedder search uses: nil if embeddings are off
// or the corpus model has not been trained yet (engram embed trains it).
func (e *Engine) Embedder(ctx context.Context) (embed.Embedder, error) {
	e.embed.mu.Lock()
	defer e.embed.mu.Unlock()
	return e.embedderLocked(ctx)
}

func (e *Engine) embedderLocked(ctx context.Context) (embed.Embedder, error) {
	switch e.opts.Embed.Provider {
	case ProviderNone:
		return nil, nil
	case ProviderCorpus:
		name, err := e.setting(ctx, settingCorpusActive)
		if err != nil || name == "" {
			e.embed.emb, e.embed.name = nil, ""
			return nil, err
		}
		if name == e.embed.name && e.embed.emb != nil {
			return e.embed.emb, nil
		}
		c, err := e.loadCorpus(ctx, name)
		if err != nil {
			return nil, err
		}
		e.embed.emb, e.embed.name, e.embed.hybrid = c, name, nil
		return c, nil
	}
	if e.embed.remote == nil {
		emb, err := e.newProvider()
		if err != nil {
			return nil, err
		}
		e.embed.remote = emb
		e.embed.emb, e.embed.name = emb, emb.Model()
	}
	return e.embed.remote, nil
}

// newProvider builds the embedder of a configured non-corpus provider.
func (e *Engine) newProvider() (embed.Embedder, error) {
	o := e.opts.Embed
	switch o.Provider {
	case ProviderModel2Vec:
		if o.Path == "" {
			return nil, errors.New("embed provider model2vec needs a model directory (embed.path; see engram model)")
		}
		return embed.LoadModel2Vec(o.Path)
	case ProviderOllama:
		return embed.NewOllama(o.URL, o.Model, o.Remote)
	case ProviderOpenAI:
		return embed.NewOpenAI(o.URL, o.Model, o.APIKey, o.Remote)
	}
	return nil, fmt.Errorf("unknown embed provider %q (want one of %v)", o.Provider, Providers)
}

func (e *Engine) setting(ctx context.Context, key string) (string, error) {
	v, err := e.st.Setting(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	return v, err
}

// lazyCorpus is the stored corpus model name, loaded when first asked for
// a vector: a run with nothing to embed (engram index after a touch, a
// hook's engram add of content already stored) does not load it, which
// was most of such a run.
type lazyCorpus struct {
	e    *Engine
	name string
	once sync.Once
	c    *embed.Corpus
	err  error
}

func (l *lazyCorpus) get(ctx context.Context) (*embed.Corpus, error) {
	l.once.Do(func() { l.c, l.err = l.e.loadCorpus(ctx, l.name) })
	return l.c, l.err
}

// Model implements embed.Embedder without loading the model.
func (l *lazyCorpus) Model() string { return l.name }

// Dim implements embed.Embedder; 0 if the model cannot be loaded (Embed
// says why).
func (l *lazyCorpus) Dim() int {
	c, err := l.get(context.Background())
	if err != nil {
		return 0
	}
	return c.Dim()
}

// Embed implements embed.Embedder.
func (l *lazyCorpus) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Embed(ctx, texts)
}

func (e *Engine) loadCorpus(ctx context.Context, name string) (*embed.Corpus, error) {
	data, err := e.st.Blob(ctx, blobPrefix+name)
	if err != nil {
		return nil, fmt.Errorf("load corpus model %s: %w", name, err)
	}
	c, err := embed.LoadCorpus(data)
	if err != nil {
		return nil, fmt.Errorf("stored corpus model %s: %w", name, err)
	}
	return c, nil
}

// Hybrid returns the hybrid searcher over the current embedder.
func (e *Engine) Hybrid(ctx context.Context) (*retrieve.Hybrid, error) {
	e.embed.mu.Lock()
	defer e.embed.mu.Unlock()
	emb, err := e.embedderLocked(ctx)
	if err != nil {
		// Search still works lexically; the fault is reported, not fatal.
		e.log.Warn("embedder unavailable: searching lexically", "err", err)
		emb = nil
	}
	if e.embed.hybrid == nil || e.embed.hybrid.Embedder() != emb {
		opts := e.opts.Retrieve
		opts.Log = e.log
		opts.Fusion = e.Fusion()
		e.embed.hybrid = retrieve.NewHybrid(e.st, emb, opts)
	}
	return e.embed.hybrid, nil
}

// Fusion is how hybrid search fuses its signals: as configured, else
// CorpusFusion for the corpus model and the seed's weighted merge (vector
// 0.7, lexical 0.3) for the others.
func (e *Engine) Fusion() retrieve.FuseOptions {
	f := e.opts.Retrieve.Fusion
	if e.opts.Embed.Provider == ProviderCorpus {
		if f.Method == "" {
			f.Method = CorpusFusion.Method
		}
		if f.LexicalWeight == 0 && f.VectorWeight == 0 {
			f.LexicalWeight, f.VectorWeight = CorpusFusion.LexicalWeight, CorpusFusion.VectorWeight
		}
	}
	return f
}

// Retrieve runs a hybrid search. A vector search with no embedder to
// search with is refused, saying why.
func (e *Engine) Retrieve(ctx context.Context, q retrieve.Query) (retrieve.Result, error) {
	h, err := e.Hybrid(ctx)
	if err != nil {
		return retrieve.Result{}, err
	}
	if q.Mode == retrieve.ModeVector && h.Embedder() == nil && strings.TrimSpace(q.Text) != "" {
		return retrieve.Result{}, e.noVectors(ctx)
	}
	return h.Search(ctx, q)
}

// noVectors says why vector search has no embedder: none is configured,
// the corpus model is not trained yet, or the configured one fails.
func (e *Engine) noVectors(ctx context.Context) error {
	if e.opts.Embed.Provider == ProviderNone {
		return errors.New("vector search: embed.provider is none: search is lexical only (see engram model)")
	}
	st, err := e.EmbedStatus(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("vector search: embedder %s: %w", e.opts.Embed.Provider, err)
	case e.opts.Embed.Provider == ProviderCorpus && st.Model == "":
		return fmt.Errorf("vector search: the corpus model is %s; search is lexical until then", UntrainedCorpus(st.Chunks))
	}
	return errors.New("vector search: no embedder is configured (see engram model)")
}

// UntrainedCorpus says why there is no corpus model yet, in a store of
// chunks chunks: it is too small to train on, or engram embed has not run.
func UntrainedCorpus(chunks int64) string {
	if chunks < lsa.MinDocs {
		return fmt.Sprintf("not trained yet: it trains once the store holds %d chunks (it holds %d)", lsa.MinDocs, chunks)
	}
	return "not trained yet: engram embed trains it"
}

// Prefetch builds the pre-fetch block for a query, given the tokens left
// in the agent's window; zero fields of opts take the engine's settings,
// but for its Filter and Exclude, which are the caller's.
func (e *Engine) Prefetch(ctx context.Context, query string, remaining int, opts retrieve.PrefetchOptions) (retrieve.Block, error) {
	h, err := e.Hybrid(ctx)
	if err != nil {
		return retrieve.Block{}, err
	}
	p := e.opts.Prefetch
	if opts.Budget > 0 {
		p.Budget = opts.Budget
	}
	if !opts.Filter.IsZero() || opts.Filter.History {
		p.Filter = opts.Filter
	}
	if opts.Exclude != nil {
		p.Exclude = opts.Exclude
	}
	return h.Prefetch(ctx, query, remaining, p, e.enc().Count)
}

// Pack packs the best excerpts for a query into budget tokens, none of
// the entries excluded: the retrieval layer of an assembled context, which
// fills its share with what ranks best, where the pre-fetch injects only
// what it is confident of and holds back below its relevance floor.
func (e *Engine) Pack(ctx context.Context, query string, budget int, filter store.Filter, exclude map[string]bool) (retrieve.Block, error) {
	h, err := e.Hybrid(ctx)
	if err != nil {
		return retrieve.Block{}, err
	}
	p := e.opts.Prefetch
	p.Budget, p.Filter, p.Exclude, p.Compact = budget, filter, exclude, true
	p.ExcerptThreshold, p.ConfidenceThreshold, p.MinSignal = 1e-9, 1e-9, -1
	p.MaxExcerpts, p.MaxHints, p.ExcerptShare, p.HintShare = 1000, -1, 1, 0
	p.Candidates = max(p.Candidates, 200)
	p.MinCoverage = -1
	return h.Prefetch(ctx, query, budget, p, e.enc().Count)
}

// EmbedStatus describes the embeddings of the store.
type EmbedStatus struct {
	Provider string `json:"provider"`
	// Model is the model vectors are made with, empty if none yet.
	Model string `json:"model"`
	Dim   int    `json:"dim"`
	// Chunks are the chunks in default search, Embedded those with a
	// vector under Model, Pending the rest: the queue.
	Chunks   int64 `json:"chunks"`
	Embedded int64 `json:"embedded"`
	Pending  int64 `json:"pending"`
	// Next is a retrained corpus model being rolled out, with its
	// coverage.
	Next         string `json:"next,omitempty"`
	NextEmbedded int64  `json:"next_embedded,omitempty"`
	// TrainedChunks is the store's size when the corpus model was trained.
	TrainedChunks int64 `json:"trained_chunks,omitempty"`
	// Fusion is how hybrid search merges the two signals with this
	// embedder (see Engine.Fusion), with the defaults filled in.
	Fusion retrieve.FuseOptions `json:"fusion"`
	// Rerank names the re-ranker of hybrid search, if one is configured,
	// and RerankDepth how many of the best hits it orders.
	Rerank      string `json:"rerank,omitempty"`
	RerankDepth int    `json:"rerank_depth,omitempty"`
}

// EmbedStatus reports the embedder, its coverage and its queue.
func (e *Engine) EmbedStatus(ctx context.Context) (EmbedStatus, error) {
	s := EmbedStatus{Provider: e.opts.Embed.Provider, Fusion: retrieve.WithDefaults(e.Fusion())}
	if r := e.opts.Retrieve.Reranker; r != nil {
		s.Rerank, s.RerankDepth = r.Model(), cmp.Or(e.opts.Retrieve.RerankDepth, retrieve.DefaultRerankDepth)
	}
	emb, err := e.Embedder(ctx)
	if err != nil {
		return s, err
	}
	model := ""
	if emb != nil {
		model = emb.Model()
	}
	vs, err := e.st.VectorStats(ctx, model)
	if err != nil {
		return s, err
	}
	s.Model, s.Dim, s.Chunks, s.Embedded = model, vs.Dim, vs.Chunks, vs.Embedded
	if model != "" {
		s.Pending = vs.Chunks - vs.Embedded
	}
	if e.opts.Embed.Provider == ProviderCorpus {
		if s.Next, err = e.setting(ctx, settingCorpusNext); err != nil {
			return s, err
		}
		if s.Next != "" {
			nv, err := e.st.VectorStats(ctx, s.Next)
			if err != nil {
				return s, err
			}
			s.NextEmbedded = nv.Embedded
		}
		if v, _ := e.setting(ctx, settingCorpusChunks); v != "" {
			s.TrainedChunks, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return s, nil
}

// EmbedProgress reports Embed's work: Phase is "train" or "embed".
type EmbedProgress struct {
	Phase string
	embed.Progress
}

// EmbedReport says what Embed did.
type EmbedReport struct {
	Model    string        `json:"model"`
	Trained  bool          `json:"trained"`
	Embedded int64         `json:"embedded"`
	Took     time.Duration `json:"took_ns"`
	// Training is the part of Took spent training a corpus model.
	Training time.Duration `json:"training_ns,omitempty"`
	// TooSmall is set when the corpus is too small to train a model on
	// yet; search stays lexical until it grows.
	TooSmall bool `json:"too_small,omitempty"`
	// RetrainDue is set by EmbedNew when the store has outgrown its corpus
	// model, the model was trained on terms made the way an older engram
	// made them, or a new one is being rolled out: Embed does that work.
	RetrainDue bool `json:"retrain_due,omitempty"`
}

// Embed brings the store's vectors up to date: for the corpus provider it
// trains a model when there is none or the store has grown CorpusGrowth
// times since the last training, embeds every chunk under it, and only
// then switches search to it and drops the old model's vectors; for other
// providers it embeds the pending chunks. Stopping it at any point loses
// nothing: the next call continues.
func (e *Engine) Embed(ctx context.Context, progress func(EmbedProgress)) (EmbedReport, error) {
	return e.embedPending(ctx, progress, true)
}

// EmbedNew embeds the chunks that have no vector under the model search
// uses, and nothing more: it trains a corpus model only if there is none
// yet, and leaves retraining and rolling out a new one to Embed, which can
// take minutes on a large store (RetrainDue says when one is due). It is
// for quick writers such as engram add.
func (e *Engine) EmbedNew(ctx context.Context, progress func(EmbedProgress)) (EmbedReport, error) {
	return e.embedPending(ctx, progress, false)
}

func (e *Engine) embedPending(ctx context.Context, progress func(EmbedProgress), retrain bool) (EmbedReport, error) {
	start := time.Now()
	var rep EmbedReport
	report := func(phase string) func(embed.Progress) {
		return func(p embed.Progress) {
			if progress != nil {
				progress(EmbedProgress{Phase: phase, Progress: p})
			}
		}
	}
	if e.opts.Embed.Provider == ProviderNone {
		return rep, nil
	}
	var emb embed.Embedder
	if e.opts.Embed.Provider == ProviderCorpus {
		c, trained, err := e.corpusToEmbed(ctx, report("train"), retrain)
		if errors.Is(err, lsa.ErrTooSmall) {
			rep.TooSmall = true
			return rep, nil
		}
		if err != nil {
			return rep, err
		}
		emb, rep.Trained = c, trained
		if trained {
			rep.Training = time.Since(start)
		}
		if !retrain {
			if rep.RetrainDue, err = e.retrainDue(ctx); err != nil {
				return rep, err
			}
		}
	} else {
		var err error
		if emb, err = e.Embedder(ctx); err != nil {
			return rep, err
		}
	}
	rep.Model = emb.Model()
	w := &embed.Worker{Store: e.st, Embedder: emb, Batch: e.opts.Embed.Batch, Log: e.log}
	n, err := w.Run(ctx, report("embed"))
	rep.Embedded, rep.Took = n, time.Since(start)
	if err != nil {
		return rep, err
	}
	if e.opts.Embed.Provider == ProviderCorpus {
		err = e.finishRollout(ctx, emb.Model())
	}
	rep.Took = time.Since(start)
	return rep, err
}

// corpusToEmbed returns the corpus model to embed with: the one being
// rolled out, a new one if the store needs one, else the active one.
// Without retrain it is the active one, or a new one if there is none.
func (e *Engine) corpusToEmbed(ctx context.Context, progress func(embed.Progress), retrain bool) (embed.Embedder, bool, error) {
	if !retrain {
		active, err := e.setting(ctx, settingCorpusActive)
		if err != nil {
			return nil, false, err
		}
		if active != "" {
			return &lazyCorpus{e: e, name: active}, false, nil
		}
	}
	next, err := e.setting(ctx, settingCorpusNext)
	if err != nil {
		return nil, false, err
	}
	if next != "" {
		c, err := e.loadCorpus(ctx, next)
		if err == nil {
			return c, false, nil
		}
		e.log.Warn("corpus model being rolled out is unreadable: retraining", "model", next, "err", err)
	}
	active, err := e.setting(ctx, settingCorpusActive)
	if err != nil {
		return nil, false, err
	}
	vs, err := e.st.VectorStats(ctx, "")
	if err != nil {
		return nil, false, err
	}
	if active != "" {
		trained, _ := e.setting(ctx, settingCorpusChunks)
		n, _ := strconv.ParseInt(trained, 10, 64)
		stale, err := e.corpusTermsStale(ctx)
		if err != nil {
			return nil, false, err
		}
		if n > 0 && float64(vs.Chunks) < e.opts.Embed.CorpusGrowth*float64(n) && !stale {
			return &lazyCorpus{e: e, name: active}, false, nil
		}
	}
	c, err := e.trainCorpus(ctx, vs.Chunks, progress)
	if err != nil {
		return nil, false, err
	}
	data, _ := c.MarshalBinary()
	if err := e.st.PutBlob(ctx, blobPrefix+c.Model(), data); err != nil {
		return nil, false, err
	}
	if err := e.st.PutSetting(ctx, settingCorpusChunks, strconv.FormatInt(vs.Chunks, 10)); err != nil {
		return nil, false, err
	}
	if active == "" {
		// The first model: search can use it as its vectors arrive.
		err = e.st.PutSetting(ctx, settingCorpusActive, c.Model())
	} else if active != c.Model() {
		err = e.st.PutSetting(ctx, settingCorpusNext, c.Model())
	}
	if err == nil {
		// Last: a crash before it costs one more training, not a model
		// of old terms taken for new.
		err = e.st.PutSetting(ctx, settingCorpusTerms, strconv.Itoa(terms.Version))
	}
	return c, true, err
}

// retrainDue reports whether the store has outgrown its corpus model, the
// model was trained on terms made the way an older engram made them
// (terms.Version), or a new one is being rolled out.
func (e *Engine) retrainDue(ctx context.Context) (bool, error) {
	next, err := e.setting(ctx, settingCorpusNext)
	if err != nil || next != "" {
		return next != "", err
	}
	trained, err := e.setting(ctx, settingCorpusChunks)
	if err != nil {
		return false, err
	}
	n, _ := strconv.ParseInt(trained, 10, 64)
	if n <= 0 {
		return false, nil
	}
	if stale, err := e.corpusTermsStale(ctx); err != nil || stale {
		return stale, err
	}
	vs, err := e.st.VectorStats(ctx, "")
	if err != nil {
		return false, err
	}
	return float64(vs.Chunks) >= e.opts.Embed.CorpusGrowth*float64(n), nil
}

// corpusTermsStale reports whether the corpus model was trained on terms
// made otherwise than terms.Version makes them: its vectors then miss the
// words as search now spells them ("bought" is "buy" since version 2).
func (e *Engine) corpusTermsStale(ctx context.Context) (bool, error) {
	v, err := e.setting(ctx, settingCorpusTerms)
	if err != nil {
		return false, err
	}
	version := 1
	if v != "" {
		if version, err = strconv.Atoi(v); err != nil {
			return true, nil // unreadable: retraining mends it
		}
	}
	return version != terms.Version, nil
}

// trainCorpus trains a corpus model on a sample of about
// CorpusSample of the store's chunks. The sample is chosen by a hash of
// each chunk's text and taken in the hashes' order, so that the same
// chunks give the same model whatever order they were stored in (indexing
// on several workers stores a repository's files in another order each
// time, and a sample of every n-th chunk by ID, in ID order, trained
// another model each time: engram eval's code sets moved by about 0.01
// from run to run for it).
func (e *Engine) trainCorpus(ctx context.Context, total int64, progress func(embed.Progress)) (*embed.Corpus, error) {
	stride := uint64(max(1, (total+int64(e.opts.Embed.CorpusSample)-1)/int64(e.opts.Embed.CorpusSample)))
	type sampled struct {
		hash uint64
		text string
	}
	var sample []sampled
	var seen, after int64
	if progress != nil {
		// The phase starts now: a bar started at the first batch's count
		// showed a rate of that count over microseconds.
		progress(embed.Progress{Total: total})
	}
	for {
		cs, err := e.st.PendingChunks(ctx, corpusListingModel, after, corpusPendingBatches)
		if err != nil {
			return nil, err
		}
		if len(cs) == 0 {
			break
		}
		for _, c := range cs {
			text := embed.Text(c)
			h := fnv.New64a()
			h.Write([]byte(text))
			if sum := h.Sum64(); sum%stride == 0 {
				sample = append(sample, sampled{sum, text})
			}
			seen++
		}
		after = cs[len(cs)-1].ID
		if progress != nil {
			progress(embed.Progress{Done: seen, Total: total})
		}
	}
	slices.SortFunc(sample, func(a, b sampled) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), strings.Compare(a.text, b.text))
	})
	texts := make([]string, len(sample))
	for i, s := range sample {
		texts[i] = s.text
	}
	return embed.TrainCorpus(texts, e.opts.Embed.Corpus)
}

// finishRollout makes a fully embedded new corpus model the active one and
// drops the old one's vectors and blob.
func (e *Engine) finishRollout(ctx context.Context, model string) error {
	next, err := e.setting(ctx, settingCorpusNext)
	if err != nil || next != model {
		return err
	}
	vs, err := e.st.VectorStats(ctx, model)
	if err != nil || vs.Embedded < vs.Chunks {
		return err
	}
	old, err := e.setting(ctx, settingCorpusActive)
	if err != nil {
		return err
	}
	if err := e.st.PutSetting(ctx, settingCorpusActive, model); err != nil {
		return err
	}
	if err := e.st.PutSetting(ctx, settingCorpusNext, ""); err != nil {
		return err
	}
	if old != "" && old != model {
		if err := e.st.DropVectors(ctx, old); err != nil {
			return err
		}
		return e.st.DeleteBlob(ctx, blobPrefix+old)
	}
	return nil
}

// RetrievePlaces runs a hybrid search for q.Limit distinct places (files,
// or other entries), each with at most spans of its best hits.
func (e *Engine) RetrievePlaces(ctx context.Context, q retrieve.Query, spans int) (retrieve.Result, []retrieve.Place, error) {
	h, err := e.Hybrid(ctx)
	if err != nil {
		return retrieve.Result{}, nil, err
	}
	return h.SearchPlaces(ctx, q, spans)
}
