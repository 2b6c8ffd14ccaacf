// Package engine is the core that the operations every front end calls
// (package api: CLI, MCP, HTTP, hooks) work through: it turns what agents
// see into stored, searchable entries and answers questions about them. It owns the policy around the store: token
// counting with the configured encoding, chunking, validation of records
// and the resolution of message references; the store owns persistence.
//
// Start with New and Engine.Add; ReadJSONL decodes the `engram add` wire
// format into Records. Forget, Redact and Retain (forget.go) are the
// operator's removals; no agent-facing front end calls them.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/chunk"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/llm"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/secrets"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// DefaultMaxContentBytes bounds one record's content when
// Options.MaxContentBytes is zero.
const DefaultMaxContentBytes = 32 << 20

// Options configure an Engine. The zero value is ready to use.
type Options struct {
	// Encoding counts tokens. Empty means tokens.DefaultEncoding.
	Encoding string
	// MaxContentBytes bounds one record's content. Zero means
	// DefaultMaxContentBytes.
	MaxContentBytes int64
	// ChunkTokens bounds a chunk's tokens. Zero means
	// chunk.DefaultMaxTokens.
	ChunkTokens int
	// KeepSecrets stores content as given. By default, tokens of known
	// formats (cloud keys, API tokens) and private key blocks are redacted
	// before anything is stored (package secrets).
	KeepSecrets bool
	// Embed chooses and configures the embedder.
	Embed EmbedOptions
	// Retrieve tunes hybrid search; Prefetch the pre-fetch block.
	Retrieve retrieve.Options
	Prefetch retrieve.PrefetchOptions
	// RelevanceFloor is the least share of a query's words (each weighted
	// by its inverse document frequency) that the best hit of a history
	// search (Relevance) or the best record of a recall must hold: below
	// it they find nothing rather than the least bad match. Zero means
	// DefaultRelevanceFloor; negative turns the floor off.
	RelevanceFloor float64
	// LLM, if it names a model, is the chat model the archivalist asks to
	// classify questions (the rules answer without it).
	LLM llm.Options
	// Logger receives engine events. Nil discards them.
	Logger *slog.Logger
}

// Engine is engram's API over a store. It is safe for concurrent use.
type Engine struct {
	st   store.Store
	enc  func() *tokens.Encoding
	opts Options
	log  *slog.Logger

	embed embedState

	archOnce sync.Once
	arch     *archive.Archive
	archErr  error
}

// New returns an engine over st. The engine does not own st: the caller
// closes it.
func New(st store.Store, opts Options) (*Engine, error) {
	if opts.Encoding == "" {
		opts.Encoding = tokens.DefaultEncoding
	}
	if opts.MaxContentBytes <= 0 {
		opts.MaxContentBytes = DefaultMaxContentBytes
	}
	if opts.ChunkTokens <= 0 {
		opts.ChunkTokens = chunk.DefaultMaxTokens
	}
	if err := tokens.Known(opts.Encoding); err != nil {
		return nil, err
	}
	opts.Embed.defaults()
	if !slices.Contains(Providers, opts.Embed.Provider) {
		return nil, fmt.Errorf("unknown embed provider %q (want one of %s)", opts.Embed.Provider, strings.Join(Providers, ", "))
	}
	name := opts.Encoding
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// The vocabulary takes tens of milliseconds to load: only commands
	// that count tokens pay for it.
	enc := sync.OnceValue(func() *tokens.Encoding { return tokens.MustGet(name) })
	return &Engine{st: st, enc: enc, opts: opts, log: logger.With("component", "engine")}, nil
}

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.st }

// Encoding returns the encoding the engine counts tokens with.
func (e *Engine) Encoding() *tokens.Encoding { return e.enc() }

// MaxContentBytes is the most bytes one record's content may hold.
func (e *Engine) MaxContentBytes() int64 { return e.opts.MaxContentBytes }

// KeepsSecrets reports whether content is stored as given, secrets and
// all (KeepSecrets), rather than redacted.
func (e *Engine) KeepsSecrets() bool { return e.opts.KeepSecrets }

// EncodingName returns the name of the encoding, without loading it.
func (e *Engine) EncodingName() string { return e.opts.Encoding }

// Add stores records in one transaction: all are stored or none. Errors
// about a record are *RecordError, naming its index and field; every
// invalid record is reported, not only the first. Add is Prepare then
// Commit.
func (e *Engine) Add(ctx context.Context, recs []Record) ([]AddResult, error) {
	b, err := e.Prepare(ctx, recs)
	if err != nil {
		return nil, err
	}
	return e.Commit(ctx, b)
}

// AddResult reports what Add did with one record.
type AddResult struct {
	store.PutResult
	// Redacted names the kinds of secrets removed from the content before
	// it was stored; the entry ID is that of the redacted content.
	Redacted []string
}

// Batch is a set of records made ready to store: checked, redacted,
// counted and chunked, but not yet written.
type Batch struct {
	recs     []Record
	entries  []store.Entry
	redacted [][]string
}

// Prepare checks records and does the CPU work of storing them (token
// counting, chunking) without touching the store, so that a caller can
// prepare one batch while the previous one commits. Batches must still be
// committed in order: a record may name a parent in an earlier batch.
func (e *Engine) Prepare(ctx context.Context, recs []Record) (*Batch, error) {
	var errs []error
	for i, r := range recs {
		if err := e.Check(r); err != nil {
			errs = append(errs, atRecord(i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	b := &Batch{recs: recs, entries: make([]store.Entry, len(recs)), redacted: make([][]string, len(recs))}
	// Counting and chunking are CPU-bound: spread them over the cores.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range recs {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			r := recs[i]
			if !e.opts.KeepSecrets {
				// JSON (a tool's input, a vendor's block) stays JSON.
				if text, found := secrets.RedactContent(string(r.Content)); len(found) > 0 {
					r.Content = []byte(text)
					b.redacted[i] = secrets.Kinds(found)
				}
			}
			b.entries[i] = e.entry(&r)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return b, nil
}

// Entries returns the entries of a prepared batch, in the order of its
// records: what Commit would store, parents unresolved. A caller that
// stores them its own way (a window's append) takes them from here.
func (b *Batch) Entries() []store.Entry { return slices.Clone(b.entries) }

// Redacted returns, by record, the kinds of secrets removed from its
// content.
func (b *Batch) Redacted() [][]string { return slices.Clone(b.redacted) }

// Commit stores a prepared batch in one transaction.
func (e *Engine) Commit(ctx context.Context, b *Batch) ([]AddResult, error) {
	if len(b.recs) == 0 {
		return nil, nil
	}
	parents, err := e.resolveParents(ctx, b.recs, b.entries)
	if err != nil {
		return nil, err
	}
	entries := make([]store.Entry, len(b.entries))
	for i, ent := range b.entries {
		ent.ParentID = parents[i]
		entries[i] = ent
	}
	res, err := e.st.PutEntries(ctx, entries)
	if err != nil {
		var ie *store.ItemError
		if errors.As(err, &ie) {
			return nil, atRecord(ie.Index, ie.Err)
		}
		return nil, err
	}
	out := make([]AddResult, len(res))
	for i, r := range res {
		out[i] = AddResult{PutResult: r, Redacted: b.redacted[i]}
		if len(b.redacted[i]) > 0 {
			e.log.Warn("redacted secrets before storing", "entry", r.ID, "kinds", b.redacted[i])
		}
	}
	return out, nil
}

// AddAll stores recs in order, in transactions of batchSize records,
// preparing each batch while the one before commits. After each commit it
// calls done with the index in recs of the batch's first record and the
// batch's results; an error from done stops it. When AddAll fails, the
// batches before the failing one are stored and the rest are not; errors
// about a record are *RecordError with its index in recs.
func (e *Engine) AddAll(ctx context.Context, recs []Record, batchSize int, done func(first int, res []AddResult) error) error {
	if batchSize <= 0 {
		batchSize = len(recs)
	}
	type prepared struct {
		first int
		batch *Batch
		err   error
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan prepared, 1)
	go func() {
		defer close(ready)
		for first := 0; first < len(recs); first += batchSize {
			b, err := e.Prepare(pctx, recs[first:min(first+batchSize, len(recs))])
			select {
			case ready <- prepared{first, b, err}:
			case <-pctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for p := range ready {
		err := p.err
		var res []AddResult
		if err == nil {
			res, err = e.Commit(ctx, p.batch)
		}
		if err == nil && done != nil {
			err = done(p.first, res)
		}
		if err != nil {
			var re *RecordError
			if errors.As(err, &re) {
				re.Index += p.first
			}
			return err
		}
	}
	return ctx.Err()
}

// ContentID is the ID of the entry content would be stored as: its
// hash after secrets are redacted, unless the engine keeps them.
func (e *Engine) ContentID(content []byte) string {
	if !e.opts.KeepSecrets {
		if text, found := secrets.RedactContent(string(content)); len(found) > 0 {
			content = []byte(text)
		}
	}
	return store.ID(content)
}

// entry makes the store entry of a record: its tokens, chunks and
// occurrence. Its parent is resolved at commit.
func (e *Engine) entry(r *Record) store.Entry {
	text := string(r.Content)
	ent := store.Entry{
		Content: r.Content,
		Occurrence: store.Occurrence{
			SessionID: r.Session, AgentID: r.Agent, AgentType: r.AgentType, Type: r.Type,
			Turn: r.Turn, Time: r.Time, MsgID: r.MsgID,
			Files: r.Files, Keywords: r.Keywords, Entities: r.Entities, Metadata: r.Metadata,
		},
	}
	enc := e.enc()
	// The text between pieces of encoded media is chunked and counted;
	// the media is neither (see encodedSpans).
	ent.Chunks, ent.TokenCount = chunks(text, encodedSpans(r.Content), enc, e.opts.ChunkTokens)
	if len(ent.Chunks) == 0 && text != "" {
		// All of it encoded: chunked as text after all, since an entry
		// with content needs a chunk.
		ent.Chunks, ent.TokenCount = chunks(text, nil, enc, e.opts.ChunkTokens)
	}
	return ent
}

// chunks chunks and counts text but for its spans.
func chunks(text string, spans [][2]int, enc *tokens.Encoding, maxTokens int) (out []store.Chunk, count int) {
	from, line := 0, 0
	for k := 0; k <= len(spans); k++ {
		to := len(text)
		if k < len(spans) {
			to = spans[k][0]
		}
		doc := chunk.NewDoc(text[from:to], enc.CountLines, enc.Starts)
		for _, c := range chunk.Text(doc, chunk.Options{MaxTokens: maxTokens}) {
			out = append(out, store.Chunk{Ordinal: len(out), Start: from + c.Start, End: from + c.End,
				StartLine: line + c.StartLine, EndLine: line + c.EndLine, TokenCount: c.Tokens})
		}
		for _, n := range doc.Lines {
			count += n
		}
		line += strings.Count(text[from:to], "\n")
		if k < len(spans) {
			from = spans[k][1]
			count += encodedTokens(spans[k][1] - spans[k][0])
		}
	}
	return out, count
}

// minEncodedSpan is the shortest run of base64 that encodedSpans takes
// for encoded media.
const minEncodedSpan = 4 << 10

// encodedSpans finds the pieces of encoded media in content: runs of
// base64 of minEncodedSpan bytes or more that make a JSON string, or a
// data: URL's payload in one (a picture or a PDF in a vendor's block).
// Chunked as text, a picture of 1 MB was about 1,800 chunks of noise,
// each indexed and embedded: storing it took 15 to 40 times as long as
// text of its size. It is stored whole, as everything is, but not
// indexed: no search finds a picture by the letters of its base64.
func encodedSpans(content []byte) [][2]int {
	var spans [][2]int
	for i := 0; i < len(content); {
		if !secrets.Base64Letter(content[i]) {
			i++
			continue
		}
		j := i
		for j < len(content) && secrets.Base64Letter(content[j]) {
			j++
		}
		end := j
		for end < len(content) && end-j < 2 && content[end] == '=' {
			end++
		}
		if end-i >= minEncodedSpan && i > 0 && (content[i-1] == '"' || content[i-1] == ',') && end < len(content) && content[end] == '"' {
			spans = append(spans, [2]int{i, end})
		}
		i = max(j, i+1)
	}
	return spans
}

// encodedTokens is what a run of base64 of n bytes comes to as text: 0.68
// tokens a byte in o200k_base for random data, rounded up to 2 in 3.
func encodedTokens(n int) int {
	return (2*n + 2) / 3
}

// resolveParents turns each record's Parent (an entry ID, or the msg_id of
// an earlier message in its session) into the parent's entry ID.
func (e *Engine) resolveParents(ctx context.Context, recs []Record, entries []store.Entry) ([]string, error) {
	type key struct{ session, msg string }
	batch := map[key]string{}
	parents := make([]string, len(recs))
	var errs []error
	for i, r := range recs {
		if r.Parent != "" {
			switch {
			case store.ValidID(strings.ToLower(r.Parent)):
				parents[i] = strings.ToLower(r.Parent)
			default:
				id, ok := batch[key{r.Session, r.Parent}]
				if !ok {
					var err error
					id, err = e.st.MsgEntry(ctx, r.Session, r.Parent)
					if errors.Is(err, store.ErrNotFound) && isIDPrefix(r.Parent) {
						// The short entry IDs the tools hand out (12 hex
						// digits) name a parent too; fewer digits could
						// be a msg_id that happens to start some entry.
						id, err = e.st.ResolveID(ctx, strings.ToLower(r.Parent))
						if ae := (*store.AmbiguousError)(nil); errors.As(err, &ae) {
							errs = append(errs, atRecord(i, &FieldError{Field: "parent",
								Msg: fmt.Sprintf("%q starts several entry IDs: give more of it", r.Parent)}))
							continue
						}
					}
					if errors.Is(err, store.ErrNotFound) {
						errs = append(errs, atRecord(i, &FieldError{Field: "parent",
							Msg: fmt.Sprintf("no message %q in session %q, and not an entry ID", r.Parent, r.Session)}))
						continue
					}
					if err != nil {
						return nil, err
					}
				}
				parents[i] = id
			}
		}
		if r.MsgID != "" {
			batch[key{r.Session, r.MsgID}] = store.ID(entries[i].Content) // as stored: redacted
		}
	}
	return parents, errors.Join(errs...)
}

// Search runs a lexical search.
func (e *Engine) Search(ctx context.Context, q store.Query) ([]store.Hit, error) {
	return e.st.Search(ctx, q)
}

// Entry returns the entry whose ID is id or starts with it (at least
// store.MinPrefix hex digits), with its first occurrence.
func (e *Engine) Entry(ctx context.Context, id string) (store.Entry, error) {
	full, err := e.st.ResolveID(ctx, id)
	if err != nil {
		return store.Entry{}, err
	}
	ents, err := e.st.Entries(ctx, []string{full})
	if err != nil {
		return store.Entry{}, err
	}
	return ents[0], nil
}

// Ping reports whether the store answers; see store.Store.
func (e *Engine) Ping(ctx context.Context) error { return e.st.Ping(ctx) }

// Stats describes the store.
func (e *Engine) Stats(ctx context.Context) (store.Stats, error) {
	return e.st.Stats(ctx)
}

// Index indexes the repository at root into the engine's store; see
// package index. An empty opts.Encoding means the engine's.
func (e *Engine) Index(ctx context.Context, root string, opts index.Options) (index.Summary, error) {
	if opts.Encoding == "" {
		opts.Encoding = e.opts.Encoding
	}
	if opts.ChunkTokens == 0 {
		opts.ChunkTokens = e.opts.ChunkTokens
	}
	return index.Run(ctx, e.st, root, opts)
}

// Watch keeps the index of root current until ctx ends; see index.Watch.
func (e *Engine) Watch(ctx context.Context, root string, opts index.Options, wopts index.WatchOptions) error {
	if opts.Encoding == "" {
		opts.Encoding = e.opts.Encoding
	}
	if opts.ChunkTokens == 0 {
		opts.ChunkTokens = e.opts.ChunkTokens
	}
	return index.Watch(ctx, e.st, root, opts, wopts)
}

// LLM returns a client of the configured chat model, or nil when none is
// configured.
func (e *Engine) LLM() (*llm.Client, error) {
	if e.opts.LLM.Model == "" {
		return nil, nil
	}
	return llm.New(e.opts.LLM)
}

// Archive returns the archivalist over the engine's store, made on first
// use. Borderline duplicates are settled with the configured embedder
// when one is ready (a trained corpus model or a provider); without one,
// by trigrams alone.
func (e *Engine) Archive(ctx context.Context) (*archive.Archive, error) {
	e.archOnce.Do(func() {
		opts := archive.Options{Encoding: e.enc(), Logger: e.log, Fusion: e.Fusion(), KeepSecrets: e.opts.KeepSecrets,
			RelevanceFloor: e.opts.RelevanceFloor}
		if e.opts.LLM.Model != "" {
			c, err := llm.New(e.opts.LLM)
			if err != nil {
				e.archErr = err
				return
			}
			opts.Classifier = archive.NewLLMClassifier(c)
		}
		if emb, err := e.Embedder(ctx); err == nil {
			opts.Embedder = emb
		} else {
			e.log.Debug("archive duplicates judged without embeddings", "err", err)
		}
		e.arch, e.archErr = archive.New(e.st, opts)
	})
	return e.arch, e.archErr
}

// isIDPrefix reports whether s is an entry ID as the tools show it, or
// more of one: 12 hex digits or more.
func isIDPrefix(s string) bool {
	if len(s) < 12 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
