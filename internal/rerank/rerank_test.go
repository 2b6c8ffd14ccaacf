package rerank

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/httpx"
)

// relevance is the fake model: the share of the query's words a document
// holds.
func relevance(query, doc string) float64 {
	q := strings.Fields(strings.ToLower(query))
	n := 0
	for _, w := range q {
		if strings.Contains(strings.ToLower(doc), w) {
			n++
		}
	}
	return float64(n) / float64(len(q))
}

// server speaks one wire format, answering best first as real servers do.
type server struct {
	api      string
	requests atomic.Int64
	mu       sync.Mutex
	batches  [][]string
	// fail, if set, answers a request instead.
	fail func(n int64, w http.ResponseWriter) bool
	// logits answers raw scores, centred on zero.
	logits bool
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.requests.Add(1)
	if r.URL.Path != "/v1/rerank" && r.URL.Path != "/rerank" {
		http.NotFound(w, r)
		return
	}
	if s.fail != nil && s.fail(n, w) {
		return
	}
	var req struct {
		Model     string   `json:"model"`
		Query     string   `json:"query"`
		Documents []string `json:"documents"`
		Texts     []string `json:"texts"`
		TopN      int      `json:"top_n"`
		Truncate  bool     `json:"truncate"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusUnprocessableEntity)
		return
	}
	docs := req.Documents
	if s.api == APITEI {
		if req.Texts == nil || !req.Truncate {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error":"texts missing","error_type":"Validation"}`))
			return
		}
		docs = req.Texts
	} else if req.Model == "" || req.TopN != len(docs) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"message":"model and top_n are required"}`))
		return
	}
	s.mu.Lock()
	s.batches = append(s.batches, docs)
	s.mu.Unlock()
	key := "relevance_score"
	if s.api == APITEI {
		key = "score"
	}
	out := make([]map[string]any, len(docs))
	for i, d := range docs {
		v := relevance(req.Query, d)
		if s.logits {
			v = 8*v - 4
		}
		out[i] = map[string]any{"index": i, key: v}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i][key].(float64) > out[j][key].(float64) })
	if s.api == APITEI {
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "x", "results": out, "meta": map[string]any{}})
}

func newRemote(t *testing.T, s *server, opts Options) *Remote {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	opts.API = s.api
	opts.URL = srv.URL + "/v1"
	if s.api == APITEI {
		opts.URL = srv.URL
	}
	if opts.Backoff == 0 {
		opts.Backoff = time.Millisecond
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var docs = []string{
	"the fitbit tracks my steps",
	"",
	"hearing aids need new batteries",
	"a recipe for bread",
	"batteries for the fitbit and the hearing aids",
}

func TestRerankFormats(t *testing.T) {
	for _, api := range APIs {
		for _, logits := range []bool{false, true} {
			t.Run(api, func(t *testing.T) {
				s := &server{api: api, logits: logits}
				r := newRemote(t, s, Options{Model: "rr-1", BatchSize: 2})
				got, err := r.Rerank(context.Background(), "fitbit hearing batteries", docs)
				if err != nil {
					t.Fatal(err)
				}
				// The empty document is not sent, and scores 0; the rest come
				// back in the documents' order, from 0 to 1, whatever order
				// the server answered in.
				if s.requests.Load() != 2 || len(s.batches) != 2 || len(s.batches[0])+len(s.batches[1]) != 4 {
					t.Fatalf("requests %d, batches %q", s.requests.Load(), s.batches)
				}
				order := []int{0, 1, 2, 3, 4}
				slices.SortStableFunc(order, func(a, b int) int {
					switch {
					case got[a] > got[b]:
						return -1
					case got[a] < got[b]:
						return 1
					}
					return 0
				})
				if order[0] != 4 || got[1] != 0 || got[4] != 1 && !logits {
					t.Errorf("scores %v, order %v", got, order)
				}
				for i, v := range got {
					if v < 0 || v > 1 {
						t.Errorf("score %d = %v, out of 0-1", i, v)
					}
				}
				if logits && (got[3] <= 0 || got[3] >= 0.1) {
					t.Errorf("logit -4 should be about 0.018, got %v", got[3])
				}
			})
		}
	}
}

func TestRerankRetriesAndFaults(t *testing.T) {
	ctx := context.Background()
	t.Run("503 then answers", func(t *testing.T) {
		s := &server{api: APICohere, fail: func(n int64, w http.ResponseWriter) bool {
			if n == 1 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}
			return false
		}}
		r := newRemote(t, s, Options{Model: "m"})
		if _, err := r.Rerank(ctx, "fitbit", docs); err != nil || s.requests.Load() != 2 {
			t.Fatalf("err %v after %d requests", err, s.requests.Load())
		}
	})
	t.Run("400 is not retried", func(t *testing.T) {
		s := &server{api: APICohere, fail: func(_ int64, w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"message":"invalid model"}`))
			return true
		}}
		r := newRemote(t, s, Options{Model: "m"})
		_, err := r.Rerank(ctx, "fitbit", docs)
		var se *httpx.StatusError
		if !errors.As(err, &se) || se.Code != 400 || se.Message != "invalid model" || s.requests.Load() != 1 {
			t.Fatalf("err %v after %d requests", err, s.requests.Load())
		}
	})
	for name, body := range map[string]string{
		"not JSON":        `<html>`,
		"missing":         `{"results":[{"index":0,"relevance_score":0.5}]}`,
		"repeated":        `{"results":[{"index":0,"relevance_score":0.5},{"index":0,"relevance_score":0.5},{"index":1,"relevance_score":0.1},{"index":2,"relevance_score":0.1}]}`,
		"out of range":    `{"results":[{"index":0,"relevance_score":0.5},{"index":1,"relevance_score":0.5},{"index":2,"relevance_score":0.1},{"index":9,"relevance_score":0.1}]}`,
		"without a score": `{"results":[{"index":0},{"index":1,"relevance_score":0.5},{"index":2,"relevance_score":0.1},{"index":3,"relevance_score":0.1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := &server{api: APICohere, fail: func(_ int64, w http.ResponseWriter) bool {
				_, _ = w.Write([]byte(body))
				return true
			}}
			r := newRemote(t, s, Options{Model: "m"})
			if _, err := r.Rerank(ctx, "fitbit", docs); !errors.Is(err, ErrBadAnswer) || s.requests.Load() != 1 {
				t.Fatalf("err %v after %d requests", err, s.requests.Load())
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		s := &server{api: APITEI, fail: func(_ int64, w http.ResponseWriter) bool {
			time.Sleep(200 * time.Millisecond)
			return false
		}}
		r := newRemote(t, s, Options{Timeout: 20 * time.Millisecond, Retries: -1})
		if _, err := r.Rerank(ctx, "fitbit", docs); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v", err)
		}
	})
}

func TestRerankCutsLongDocuments(t *testing.T) {
	s := &server{api: APITEI}
	r := newRemote(t, s, Options{MaxChars: 5})
	if _, err := r.Rerank(context.Background(), "fitbit", []string{"ééééé"}); err != nil {
		t.Fatal(err)
	}
	if got := s.batches[0][0]; got != "éé" {
		t.Errorf("cut to %q, want two whole runes", got)
	}
}

func TestNewRejects(t *testing.T) {
	for _, opts := range []Options{
		{API: "bm25", URL: "http://x", Model: "m"},
		{URL: "localhost:8080", Model: "m"},
		{URL: "http://x"},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("New(%+v) accepted", opts)
		}
	}
	r, err := New(Options{API: APITEI, URL: "http://x/"})
	if err != nil || r.Model() != "tei" || r.endpoint != "http://x/rerank" {
		t.Errorf("tei: %v, %v", r, err)
	}
}
