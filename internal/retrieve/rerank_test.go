package retrieve_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/rerank"
	"github.com/engramhq/engram/internal/retrieve"
)

// rerankServer speaks the Cohere-compatible /rerank format: documents
// holding want score 0.9 (or wantScore), the rest 0.2 (or otherScore);
// with fail set it answers 500, with hang it answers when the request is
// given up.
type rerankServer struct {
	want     atomic.Value // string
	scores   atomic.Value // [2]float64: want's, the others'
	fail     atomic.Bool
	hang     atomic.Bool
	requests atomic.Int64
	// arrived, if set, hears of each request that hangs.
	arrived chan struct{}
}

func (s *rerankServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	if s.hang.Load() {
		// The server notices a client that hangs up only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		if s.arrived != nil {
			s.arrived <- struct{}{}
		}
		<-r.Context().Done()
		return
	}
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
	scores, ok := s.scores.Load().([2]float64)
	if !ok {
		scores = [2]float64{0.9, 0.2}
	}
	res := make([]map[string]any, len(req.Documents))
	for i, d := range req.Documents {
		v := scores[1]
		if want != "" && strings.Contains(d, want) {
			v = scores[0]
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
	rr, err := rerank.New(rerank.Options{URL: hs.URL + "/v1", Model: "rerank-test", Retries: -1, BatchSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	h := retrieve.NewHybrid(f.st, f.emb, retrieve.Options{Deadline: unhurried, Reranker: rr, BreakerFailures: 2})
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

func newReranked(t *testing.T, f *fixture, opts retrieve.Options) (*rerankServer, *retrieve.Hybrid) {
	t.Helper()
	srv := &rerankServer{}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	rr, err := rerank.New(rerank.Options{URL: hs.URL + "/v1", Model: "rerank-test", Retries: -1, BatchSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	opts.Reranker = rr
	return srv, retrieve.NewHybrid(f.st, f.emb, opts)
}

// The re-ranker's relevance is weighed by the hit's boosts: a chunk
// declaring the symbol the query names (x1.3) beats one the re-ranker
// likes a little more, and loses to one it likes much more.
func TestHybridRerankKeepsBoosts(t *testing.T) {
	f := newFixture(t)
	srv, h := newReranked(t, f, retrieve.Options{Deadline: unhurried})
	srv.want.Store("func ScoreQuery")
	srv.scores.Store([2]float64{0.5, 0.6})
	res := search(t, h, retrieve.Query{Text: "ScoreQuery ranking"})
	if !res.Reranked || len(res.Hits) < 2 {
		t.Fatalf("reranked %v, %d hits", res.Reranked, len(res.Hits))
	}
	top := res.Hits[0]
	if !strings.Contains(top.Chunk.Text, "func ScoreQuery") || top.Rerank != 0.5 || !slices.Contains(top.Boosts, "symbol") {
		t.Errorf("top hit %q, rerank %v, boosts %v; want ScoreQuery, 0.5, symbol", top.Chunk.Text, top.Rerank, top.Boosts)
	}
	srv.scores.Store([2]float64{0.4, 0.6}) // 0.4 x 1.3 < 0.6
	if res := search(t, h, retrieve.Query{Text: "ScoreQuery ranking"}); strings.Contains(res.Hits[0].Chunk.Text, "func ScoreQuery") {
		t.Errorf("ScoreQuery first at relevance 0.4 x 1.3 against 0.6")
	}
}

// A re-ranker that does not answer in time leaves the fused order; a
// search given up while the re-ranker is the breaker's probe does not
// leave the circuit open for good.
func TestHybridRerankTimeoutAndCancel(t *testing.T) {
	f := newFixture(t)
	srv, h := newReranked(t, f, retrieve.Options{Deadline: unhurried, RerankTimeout: 50 * time.Millisecond, BreakerFailures: 1, BreakerCooldown: time.Millisecond})
	srv.hang.Store(true)
	srv.arrived = make(chan struct{}, 10)
	res := search(t, h, retrieve.Query{Text: "deadlock"})
	if res.Reranked || !res.Degraded || len(res.Faults) != 1 || !strings.Contains(res.Faults[0], "no answer within 50ms") {
		t.Fatalf("hanging re-ranker: reranked %v, faults %q", res.Reranked, res.Faults)
	}
	// The circuit is open; after the cooldown the next search is the probe,
	// and its caller gives up while the re-ranker works.
	<-srv.arrived
	time.Sleep(5 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-srv.arrived
		cancel()
	}()
	if _, err := h.Search(ctx, retrieve.Query{Text: "deadlock"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("given-up search: %v", err)
	}
	srv.hang.Store(false)
	if res := search(t, h, retrieve.Query{Text: "deadlock"}); !res.Reranked {
		t.Errorf("after a given-up probe the re-ranker is not asked: %q", res.Faults)
	}
}
