package retrieve_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/engramhq/engram/internal/rerank"
	"github.com/engramhq/engram/internal/retrieve"
)

// rerankServer speaks the Cohere-compatible /rerank format: documents
// holding want score 0.9, the rest 0.2; with fail set it answers 500.
type rerankServer struct {
	want     atomic.Value // string
	fail     atomic.Bool
	requests atomic.Int64
}

func (s *rerankServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	if s.fail.Load() {
		http.Error(w, `{"message":"model overloaded"}`, http.StatusInternalServerError)
		return
	}
	var req struct {
		Query     string   `json:"query"`
		Documents []string `json:"documents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	want, _ := s.want.Load().(string)
	res := make([]map[string]any, len(req.Documents))
	for i, d := range req.Documents {
		v := 0.2
		if want != "" && strings.Contains(d, want) {
			v = 0.9
		}
		res[i] = map[string]any{"index": i, "relevance_score": v}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"results": res})
}

func TestHybridRerank(t *testing.T) {
	f := newFixture(t)
	srv := &rerankServer{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	rr, err := rerank.New(rerank.Options{URL: hs.URL + "/v1", Model: "rerank-test", Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Reranker: rr, BreakerFailures: 2})
	fused := search(t, h, retrieve.Query{Text: "deadlock", Limit: 25, NoRerank: true})
	if fused.Reranked || srv.requests.Load() != 0 || len(fused.Hits) != 25 {
		t.Fatalf("NoRerank: reranked %v after %d requests, %d hits", fused.Reranked, srv.requests.Load(), len(fused.Hits))
	}
	// The re-ranker prefers the 21st fused hit: it comes first, the rest
	// follow in fused order.
	target := fused.Hits[20].Chunk.Text
	srv.want.Store(target)
	res := search(t, h, retrieve.Query{Text: "deadlock", Limit: 5})
	if !res.Reranked || res.Degraded || len(res.Hits) != 5 {
		t.Fatalf("reranked %v, degraded %v %v, %d hits", res.Reranked, res.Degraded, res.Faults, len(res.Hits))
	}
	if res.Hits[0].Chunk.Text != target || !res.Hits[0].Reranked || res.Hits[0].Rerank != 0.9 {
		t.Errorf("first hit %q (rerank %v), want %q", res.Hits[0].Chunk.Text, res.Hits[0].Rerank, target)
	}
	for i, hit := range res.Hits[1:] {
		if hit.Chunk.ID != fused.Hits[i].Chunk.ID || hit.Rerank != 0.2 {
			t.Errorf("hit %d: %q, want fused hit %d %q", i+1, hit.Chunk.Text, i, fused.Hits[i].Chunk.Text)
		}
	}
	// Lexical and vector searches are never re-ranked.
	n := srv.requests.Load()
	if res := search(t, h, retrieve.Query{Text: "deadlock", Mode: retrieve.ModeLexical}); res.Reranked || srv.requests.Load() != n {
		t.Error("a lexical search was re-ranked")
	}

	// A failing re-ranker leaves the fused order, flagged; after two
	// failures its circuit opens and it is not asked.
	srv.fail.Store(true)
	for i := range 3 {
		res := search(t, h, retrieve.Query{Text: "deadlock", Limit: 5})
		if res.Reranked || !res.Degraded || len(res.Faults) != 1 || !strings.HasPrefix(res.Faults[0], "rerank: ") {
			t.Fatalf("search %d: reranked %v, degraded %v, faults %q", i, res.Reranked, res.Degraded, res.Faults)
		}
		for j, hit := range res.Hits {
			if hit.Chunk.ID != fused.Hits[j].Chunk.ID || hit.Reranked {
				t.Errorf("search %d, hit %d: %q, want the fused order", i, j, hit.Chunk.Text)
			}
		}
		if i == 2 && !strings.Contains(res.Faults[0], "circuit open") {
			t.Errorf("third search: %q, want the circuit open", res.Faults[0])
		}
	}
	if got := srv.requests.Load() - n; got != 2 {
		t.Errorf("the failing re-ranker was asked %d times, want 2", got)
	}
	if c := h.Counters(); c.RerankFaults != 2 || c.Degraded != 3 {
		t.Errorf("counters %+v", c)
	}
}
