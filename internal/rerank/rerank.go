// Package rerank re-scores the best candidates of a search with a model
// that reads the query and each passage together (a cross-encoder), served
// over HTTP. Hybrid search fuses what words and vectors found; a re-ranker
// judges each candidate against the whole question, which is what the
// offline signals cannot do ("health-related devices" for a Fitbit), at the
// price of a request per search.
//
// Two wire formats cover the servers people run:
//
//   - cohere: POST {url}/rerank with {"model", "query", "documents",
//     "top_n"}, answered with {"results": [{"index", "relevance_score"}]}
//     (or "data" for "results"): Cohere, Jina, vLLM, llama.cpp's server,
//     Infinity, LocalAI;
//   - tei: POST {url}/rerank with {"query", "texts", "truncate"}, answered
//     with [{"index", "score"}]: Hugging Face text-embeddings-inference.
//
// Scores come back from 0 to 1, one per document, in the documents' order.
// A server that answers raw logits (once a score outside 0-1 is seen) has
// all its scores passed through the logistic function, which keeps their
// order.
package rerank

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/httpx"
)

// Reranker scores documents for a query.
type Reranker interface {
	// Model names the provider and its model.
	Model() string
	// Rerank returns each document's relevance to the query, from 0 to 1,
	// in the documents' order.
	Rerank(ctx context.Context, query string, docs []string) ([]float64, error)
}

// The wire formats of Options.API.
const (
	APICohere = "cohere"
	APITEI    = "tei"
)

// APIs are the values of Options.API.
var APIs = []string{APICohere, APITEI}

// Defaults for Options.
const (
	// DefaultBatchSize is text-embeddings-inference's default largest
	// request.
	DefaultBatchSize   = 32
	DefaultConcurrency = 2
	DefaultMaxChars    = 4000
	// DefaultTimeout and DefaultRetries are short: a search waits for
	// the re-ranker.
	DefaultTimeout = 5 * time.Second
	DefaultRetries = 1
	DefaultBackoff = 200 * time.Millisecond
	maxBackoff     = 5 * time.Second
	maxAnswerBytes = 8 << 20
)

// Options configure a Remote.
type Options struct {
	// API is the wire format: cohere (the default) or tei.
	API string
	// URL is the server's base URL, such as https://api.cohere.com/v2,
	// https://api.jina.ai/v1 or http://localhost:8080; /rerank is added.
	URL string
	// Model names the model; the cohere format needs one, tei serves one.
	Model  string
	APIKey string
	// BatchSize is the most documents in one request; Concurrency the
	// most requests in flight.
	BatchSize, Concurrency int
	// MaxChars cuts documents longer than this many bytes (at a rune
	// boundary): a cross-encoder reads a few hundred tokens at most.
	MaxChars int
	// Timeout bounds each request; a request that failed for a passing
	// reason (network, timeout, 408, 429, 5xx) is tried again Retries times
	// after Backoff, doubled each time, or after the server's Retry-After.
	Timeout time.Duration
	Retries int
	Backoff time.Duration
	Client  *http.Client
}

// ErrBadAnswer is returned when a server's answer cannot be used: not
// JSON, a document missing, scored twice or without a score.
var ErrBadAnswer = errors.New("rerank: unusable answer")

// Remote is a re-ranker served over HTTP. It is safe for concurrent use.
type Remote struct {
	opts     Options
	endpoint string
	sem      chan struct{}
	// logits is set once the server has answered a score outside 0-1.
	logits atomic.Bool
}

// New returns a re-ranker; URL is required, and Model for the cohere
// format.
func New(opts Options) (*Remote, error) {
	if opts.API == "" {
		opts.API = APICohere
	}
	switch {
	case opts.API != APICohere && opts.API != APITEI:
		return nil, fmt.Errorf("rerank: unknown API %q (want %s)", opts.API, strings.Join(APIs, " or "))
	case !strings.HasPrefix(opts.URL, "http://") && !strings.HasPrefix(opts.URL, "https://"):
		return nil, fmt.Errorf("rerank: URL %q is not http or https", opts.URL)
	case opts.API == APICohere && opts.Model == "":
		return nil, errors.New("rerank: the cohere API needs a model name")
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.MaxChars <= 0 {
		opts.MaxChars = DefaultMaxChars
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Retries < 0 {
		opts.Retries = 0
	} else if opts.Retries == 0 {
		opts.Retries = DefaultRetries
	}
	if opts.Backoff <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	return &Remote{opts: opts, endpoint: strings.TrimRight(opts.URL, "/") + "/rerank",
		sem: make(chan struct{}, opts.Concurrency)}, nil
}

// Model implements Reranker: the API and the model.
func (r *Remote) Model() string {
	if r.opts.Model == "" {
		return r.opts.API
	}
	return r.opts.API + "/" + r.opts.Model
}

// Rerank implements Reranker. Documents go in batches, in parallel; an
// empty document scores 0 without being sent.
func (r *Remote) Rerank(ctx context.Context, query string, docs []string) ([]float64, error) {
	scores := make([]float64, len(docs))
	if strings.TrimSpace(query) == "" {
		return scores, nil
	}
	query = cut(query, r.opts.MaxChars)
	var idx []int // the non-empty documents
	for i, d := range docs {
		if strings.TrimSpace(d) != "" {
			idx = append(idx, i)
		}
	}
	err := httpx.InBatches(ctx, len(idx), r.opts.BatchSize, r.sem, func(ctx context.Context, lo, hi int) error {
		batch := idx[lo:hi]
		in := make([]string, len(batch))
		for i, j := range batch {
			in[i] = cut(docs[j], r.opts.MaxChars)
		}
		got, err := r.request(ctx, query, in)
		if err != nil {
			return err
		}
		for i, j := range batch {
			scores[j] = got[i]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Model(), err)
	}
	r.normalize(scores, idx)
	return scores, nil
}

// normalize passes the scores of the sent documents through the logistic
// function once the server has answered a score outside 0-1: it answers
// logits. The finding sticks, so that one server's scores mean the same
// from query to query.
func (r *Remote) normalize(scores []float64, sent []int) {
	if !r.logits.Load() {
		for _, i := range sent {
			if scores[i] < 0 || scores[i] > 1 {
				r.logits.Store(true)
				break
			}
		}
	}
	if !r.logits.Load() {
		return
	}
	for _, i := range sent {
		scores[i] = 1 / (1 + math.Exp(-scores[i]))
	}
}

// cut shortens s to at most n bytes, at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// request sends one batch, retrying passing failures.
func (r *Remote) request(ctx context.Context, query string, docs []string) ([]float64, error) {
	var body map[string]any
	if r.opts.API == APITEI {
		body = map[string]any{"query": query, "texts": docs, "truncate": true}
	} else {
		body = map[string]any{"model": r.opts.Model, "query": query, "documents": docs, "top_n": len(docs)}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	passing := func(err error) bool {
		var se *httpx.StatusError
		if errors.As(err, &se) {
			return se.Temporary()
		}
		return !errors.Is(err, ErrBadAnswer)
	}
	return httpx.Retry(ctx, r.opts.Retries, r.opts.Backoff, maxBackoff, passing, func() ([]float64, time.Duration, error) {
		data, after, err := httpx.PostJSON(ctx, r.opts.Client, r.endpoint, r.opts.APIKey, payload, r.opts.Timeout, maxAnswerBytes)
		if err != nil {
			return nil, after, err
		}
		scores, err := r.decode(data, len(docs))
		return scores, 0, err
	})
}

// scored is one document's score in an answer.
type scored struct {
	Index int      `json:"index"`
	Score *float64 `json:"score"`           // tei
	Rel   *float64 `json:"relevance_score"` // cohere
}

// decode reads an answer: exactly one score for each of n documents (JSON
// has no NaN or infinity).
func (r *Remote) decode(data []byte, n int) ([]float64, error) {
	var list []scored
	if r.opts.API == APITEI {
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadAnswer, err)
		}
	} else {
		var ans struct {
			Results []scored `json:"results"`
			Data    []scored `json:"data"`
		}
		if err := json.Unmarshal(data, &ans); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadAnswer, err)
		}
		list = ans.Results
		if list == nil {
			list = ans.Data
		}
	}
	if len(list) != n {
		return nil, fmt.Errorf("%w: %d scores for %d documents", ErrBadAnswer, len(list), n)
	}
	out := make([]float64, n)
	seen := make([]bool, n)
	for _, s := range list {
		v := s.Rel
		if v == nil {
			v = s.Score
		}
		switch {
		case s.Index < 0 || s.Index >= n || seen[s.Index]:
			return nil, fmt.Errorf("%w: a bad or repeated index %d", ErrBadAnswer, s.Index)
		case v == nil:
			return nil, fmt.Errorf("%w: document %d has no score", ErrBadAnswer, s.Index)
		}
		seen[s.Index] = true
		out[s.Index] = *v
	}
	return out, nil
}
