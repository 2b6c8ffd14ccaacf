package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/engramhq/engram/internal/httpx"
)

// Defaults for RemoteOptions.
const (
	DefaultBatchSize   = 64
	DefaultConcurrency = 2
	DefaultTimeout     = 30 * time.Second
	DefaultRetries     = 3
	DefaultBackoff     = 500 * time.Millisecond
	// maxBackoff caps one wait between attempts, Retry-After included.
	maxBackoff = 30 * time.Second
	// maxResponseBytes bounds a response body: 64 texts of 4,096
	// dimensions as JSON are about 5 MB.
	maxResponseBytes = 256 << 20
)

// Default endpoints.
const (
	DefaultOllamaURL = "http://localhost:11434"
	DefaultOpenAIURL = "https://api.openai.com/v1"
)

// RemoteOptions configure an HTTP embedder. The zero value uses the
// defaults.
type RemoteOptions struct {
	// BatchSize is the most texts sent in one request.
	BatchSize int
	// Concurrency is the most requests in flight at once.
	Concurrency int
	// Timeout bounds each request.
	Timeout time.Duration
	// Retries is how many times a request that failed for a passing reason
	// (a network error, a timeout, HTTP 429 or 5xx) is tried again, after
	// Backoff, doubled each time, with jitter, or after the server's
	// Retry-After.
	Retries int
	Backoff time.Duration
	// Dimensions asks an OpenAI-compatible endpoint for vectors of this
	// size (the "dimensions" parameter); zero takes the model's own.
	Dimensions int
	// Client is the HTTP client; nil means a new one.
	Client *http.Client
}

func (o *RemoteOptions) defaults() {
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
}

// Remote is an embedder served over HTTP: Ollama's /api/embed or an
// OpenAI-compatible /embeddings endpoint. Its dimension is learned from
// the first answer, and every later answer must agree.
type Remote struct {
	name     string
	endpoint string
	model    string
	apiKey   string
	ollama   bool
	opts     RemoteOptions
	dim      atomic.Int64
	sem      chan struct{}
}

// NewOllama returns an embedder for an Ollama server at baseURL (default
// DefaultOllamaURL) and one of its models, such as nomic-embed-text.
func NewOllama(baseURL, model string, opts RemoteOptions) (*Remote, error) {
	if baseURL == "" {
		baseURL = DefaultOllamaURL
	}
	return newRemote("ollama/"+model, strings.TrimSuffix(baseURL, "/")+"/api/embed", model, "", true, opts)
}

// NewOpenAI returns an embedder for an OpenAI-compatible API at baseURL
// (default DefaultOpenAIURL; the path ends before /embeddings), with an API
// key (empty for servers that need none).
func NewOpenAI(baseURL, model, apiKey string, opts RemoteOptions) (*Remote, error) {
	if baseURL == "" {
		baseURL = DefaultOpenAIURL
	}
	name := "openai/" + model
	if opts.Dimensions > 0 {
		name += "@" + strconv.Itoa(opts.Dimensions)
	}
	return newRemote(name, strings.TrimSuffix(baseURL, "/")+"/embeddings", model, apiKey, false, opts)
}

func newRemote(name, endpoint, model, apiKey string, ollama bool, opts RemoteOptions) (*Remote, error) {
	if model == "" {
		return nil, errors.New("remote embedder: no model named")
	}
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return nil, fmt.Errorf("remote embedder: URL %q is not http or https", endpoint)
	}
	opts.defaults()
	r := &Remote{name: name, endpoint: endpoint, model: model, apiKey: apiKey, ollama: ollama, opts: opts,
		sem: make(chan struct{}, opts.Concurrency)}
	if opts.Dimensions > 0 {
		r.dim.Store(int64(opts.Dimensions))
	}
	return r, nil
}

// Model implements Embedder: the provider and the model.
func (r *Remote) Model() string { return r.name }

// Dim implements Embedder; zero until the first answer, unless configured.
func (r *Remote) Dim() int { return int(r.dim.Load()) }

// Embed implements Embedder: batches in parallel, in order. Empty texts get
// zero vectors without a request.
func (r *Remote) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	var idx []int // the non-empty texts
	for i, t := range texts {
		if strings.TrimSpace(t) != "" {
			idx = append(idx, i)
		}
	}
	err := httpx.InBatches(ctx, len(idx), r.opts.BatchSize, r.sem, func(ctx context.Context, lo, hi int) error {
		batch := idx[lo:hi]
		in := make([]string, len(batch))
		for i, j := range batch {
			in[i] = texts[j]
		}
		vecs, err := r.request(ctx, in)
		if err != nil {
			return err
		}
		for i, j := range batch {
			out[j] = vecs[i]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embed with %s: %w", r.name, err)
	}
	dim := r.Dim()
	for i := range out {
		if out[i] == nil {
			out[i] = make([]float32, dim)
		}
	}
	return out, nil
}

// StatusError is an HTTP error answer from a provider.
type StatusError = httpx.StatusError

// request sends one batch, retrying passing failures.
func (r *Remote) request(ctx context.Context, texts []string) ([][]float32, error) {
	body := map[string]any{"model": r.model, "input": texts}
	if r.ollama {
		body["truncate"] = true
	} else {
		body["encoding_format"] = "float"
		if r.opts.Dimensions > 0 {
			body["dimensions"] = r.opts.Dimensions
		}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	passing := func(err error) bool {
		var se *StatusError
		if errors.As(err, &se) {
			return se.Temporary()
		}
		return !errors.Is(err, ErrBadVector)
	}
	return httpx.Retry(ctx, r.opts.Retries, r.opts.Backoff, maxBackoff, passing, func() ([][]float32, time.Duration, error) {
		return r.once(ctx, payload, len(texts))
	})
}

// once sends one request and decodes its answer.
func (r *Remote) once(ctx context.Context, payload []byte, n int) ([][]float32, time.Duration, error) {
	data, after, err := httpx.PostJSON(ctx, r.opts.Client, r.endpoint, r.apiKey, payload, r.opts.Timeout, maxResponseBytes)
	if err != nil {
		return nil, after, err
	}
	var vecs [][]float32
	if r.ollama {
		var ans struct {
			Embeddings [][]float32 `json:"embeddings"`
		}
		if err := json.Unmarshal(data, &ans); err != nil {
			return nil, 0, fmt.Errorf("%w: decode answer: %v", ErrBadVector, err)
		}
		vecs = ans.Embeddings
	} else {
		var ans struct {
			Data []struct {
				Index     int       `json:"index"`
				Embedding []float32 `json:"embedding"`
			} `json:"data"`
		}
		if err := json.Unmarshal(data, &ans); err != nil {
			return nil, 0, fmt.Errorf("%w: decode answer: %v", ErrBadVector, err)
		}
		vecs = make([][]float32, len(ans.Data))
		for _, d := range ans.Data {
			if d.Index < 0 || d.Index >= len(vecs) || vecs[d.Index] != nil {
				return nil, 0, fmt.Errorf("%w: answer has a bad or repeated index %d", ErrBadVector, d.Index)
			}
			vecs[d.Index] = d.Embedding
		}
	}
	dim := r.Dim()
	if dim == 0 && len(vecs) > 0 {
		r.dim.CompareAndSwap(0, int64(len(vecs[0])))
		dim = r.Dim()
	}
	if err := Check(vecs, n, dim); err != nil {
		return nil, 0, err
	}
	return vecs, 0, nil
}
