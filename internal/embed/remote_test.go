package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// vectorOf is the fake providers' embedding: a text's length and its
// first byte, so answers can be checked against their inputs.
func vectorOf(text string) []float32 { return []float32{float32(len(text)), float32(text[0]), 1} }

type fakeProvider struct {
	mu       sync.Mutex
	requests []map[string]any
	headers  []http.Header
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	// respond, if set, answers request n (from 0) instead of the default.
	respond func(n int, w http.ResponseWriter, input []string) bool
	delay   time.Duration
}

func (f *fakeProvider) handler(ollama bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cur := f.inFlight.Add(1)
		defer f.inFlight.Add(-1)
		for {
			m := f.maxSeen.Load()
			if cur <= m || f.maxSeen.CompareAndSwap(m, cur) {
				break
			}
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		n := len(f.requests)
		f.requests = append(f.requests, body)
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
		var input []string
		for _, x := range body["input"].([]any) {
			input = append(input, x.(string))
		}
		time.Sleep(f.delay)
		if f.respond != nil && f.respond(n, w, input) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if ollama {
			var embs [][]float32
			for _, t := range input {
				embs = append(embs, vectorOf(t))
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"model": body["model"], "embeddings": embs})
			return
		}
		// OpenAI: data in reverse order, placed by index.
		var data []map[string]any
		for i := len(input) - 1; i >= 0; i-- {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": vectorOf(input[i])})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": body["model"],
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	}
}

func checkVectors(t *testing.T, texts []string, vecs [][]float32) {
	t.Helper()
	if len(vecs) != len(texts) {
		t.Fatalf("%d vectors for %d texts", len(vecs), len(texts))
	}
	for i, text := range texts {
		if strings.TrimSpace(text) == "" {
			if vecs[i][0] != 0 || vecs[i][1] != 0 {
				t.Errorf("empty text %d: %v, want zeros", i, vecs[i])
			}
			continue
		}
		want := vectorOf(text)
		// Check normalised the vector: compare directions.
		ratio := vecs[i][0] / want[0]
		if d := vecs[i][1] - ratio*want[1]; d > 1e-5 || d < -1e-5 {
			t.Errorf("text %d (%q): %v, not along %v", i, text, vecs[i], want)
		}
	}
}

func fastOpts() RemoteOptions {
	return RemoteOptions{BatchSize: 2, Concurrency: 2, Timeout: 2 * time.Second, Retries: 2, Backoff: time.Millisecond}
}

func TestOllama(t *testing.T) {
	f := &fakeProvider{delay: 5 * time.Millisecond}
	srv := httptest.NewServer(f.handler(true))
	defer srv.Close()
	r, err := NewOllama(srv.URL, "nomic-embed-text", fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"alpha", "be", "", "gamma ray", "delta", "e", "   "}
	vecs, err := r.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	checkVectors(t, texts, vecs)
	if r.Dim() != 3 || r.Model() != "ollama/nomic-embed-text" {
		t.Errorf("Dim %d, Model %q", r.Dim(), r.Model())
	}
	if len(f.requests) != 3 { // 5 non-empty texts in batches of 2
		t.Errorf("%d requests, want 3", len(f.requests))
	}
	if m := f.maxSeen.Load(); m > 2 {
		t.Errorf("%d requests in flight, want at most 2", m)
	}
	req := f.requests[0]
	if req["model"] != "nomic-embed-text" || req["truncate"] != true {
		t.Errorf("request body %v", req)
	}
}

func TestOpenAI(t *testing.T) {
	f := &fakeProvider{}
	srv := httptest.NewServer(f.handler(false))
	defer srv.Close()
	opts := fastOpts()
	opts.Dimensions = 3
	r, err := NewOpenAI(srv.URL+"/v1", "text-embedding-3-small", "sk-test", opts)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"one", "two", "three"}
	vecs, err := r.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	checkVectors(t, texts, vecs)
	if got := f.headers[0].Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q", got)
	}
	if req := f.requests[0]; req["dimensions"] != float64(3) || req["encoding_format"] != "float" {
		t.Errorf("request body %v", req)
	}
	if r.Model() != "openai/text-embedding-3-small@3" {
		t.Errorf("Model %q", r.Model())
	}
}

func TestRemoteRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     func(w http.ResponseWriter)
		requests int
		wantErr  string
	}{
		{"500 then success", func(w http.ResponseWriter) { http.Error(w, `{"error":"overloaded"}`, http.StatusInternalServerError) }, 3, ""},
		{"429 with Retry-After", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"slow down","type":"rate_limit"}}`, http.StatusTooManyRequests)
		}, 3, ""},
		{"400 is not retried", func(w http.ResponseWriter) {
			http.Error(w, `{"error":{"message":"input too long","type":"invalid_request_error"}}`, http.StatusBadRequest)
		}, 1, "HTTP 400: input too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeProvider{respond: func(n int, w http.ResponseWriter, _ []string) bool {
				if n < 2 {
					tc.fail(w)
					return true
				}
				return false
			}}
			srv := httptest.NewServer(f.handler(false))
			defer srv.Close()
			r, _ := NewOpenAI(srv.URL, "m", "", fastOpts())
			vecs, err := r.Embed(context.Background(), []string{"x"})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				checkVectors(t, []string{"x"}, vecs)
			} else if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if len(f.requests) != tc.requests {
				t.Errorf("%d requests, want %d", len(f.requests), tc.requests)
			}
		})
	}
}

func TestRemoteFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		respond func(n int, w http.ResponseWriter, input []string) bool
		delay   time.Duration
		wantErr error
		want    string
	}{
		{"persistent 503", func(_ int, w http.ResponseWriter, _ []string) bool {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}, 0, nil, "HTTP 503: busy"},
		{"timeout", nil, 300 * time.Millisecond, context.DeadlineExceeded, "deadline"},
		{"wrong dimension", func(n int, w http.ResponseWriter, input []string) bool {
			if n == 0 {
				return false
			}
			embs := make([][]float32, len(input))
			for i := range embs {
				embs[i] = []float32{1, 2}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"embeddings": embs})
			return true
		}, 0, ErrBadVector, "2 dimensions, want 3"},
		{"NaN", func(n int, w http.ResponseWriter, input []string) bool {
			fmt.Fprint(w, `{"embeddings": [[NaN, 1, 2]]}`)
			return true
		}, 0, ErrBadVector, "decode answer"},
		{"too few vectors", func(n int, w http.ResponseWriter, input []string) bool {
			fmt.Fprint(w, `{"embeddings": []}`)
			return true
		}, 0, ErrBadVector, "0 vectors for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeProvider{respond: tc.respond, delay: tc.delay}
			srv := httptest.NewServer(f.handler(true))
			defer srv.Close()
			opts := fastOpts()
			opts.Timeout = 100 * time.Millisecond
			opts.Retries = 1
			opts.Concurrency = 1 // so that the first answer sets the dimension
			r, _ := NewOllama(srv.URL, "m", opts)
			_, err := r.Embed(context.Background(), []string{"first", "second", "third"})
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %q (%v)", err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestRemoteCancel(t *testing.T) {
	f := &fakeProvider{delay: 50 * time.Millisecond}
	srv := httptest.NewServer(f.handler(true))
	defer srv.Close()
	r, _ := NewOllama(srv.URL, "m", fastOpts())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := r.Embed(ctx, []string{"a", "b", "c", "d", "e"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the context's", err)
	}
}

func TestRemoteBadConfig(t *testing.T) {
	if _, err := NewOllama("", "", RemoteOptions{}); err == nil {
		t.Error("no model: accepted")
	}
	if _, err := NewOpenAI("ftp://x", "m", "", RemoteOptions{}); err == nil {
		t.Error("ftp URL: accepted")
	}
}
