package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// teiServer speaks text-embeddings-inference's /rerank: texts that hold
// favourite score 0.9, the rest 0.1, best first; with fail set it answers
// 503.
type teiServer struct {
	favourite atomic.Value // string
	fail      atomic.Bool
}

func (s *teiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/rerank" {
		http.NotFound(w, r)
		return
	}
	if s.fail.Load() {
		http.Error(w, `{"error":"model is loading","error_type":"Overloaded"}`, http.StatusServiceUnavailable)
		return
	}
	var req struct {
		Query string   `json:"query"`
		Texts []string `json:"texts"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Query == "" {
		http.Error(w, `{"error":"bad request","error_type":"Validation"}`, http.StatusUnprocessableEntity)
		return
	}
	var first, rest []map[string]any
	for i, t := range req.Texts {
		if fav, _ := s.favourite.Load().(string); fav != "" && strings.Contains(t, fav) {
			first = append(first, map[string]any{"index": i, "score": 0.9})
		} else {
			rest = append(rest, map[string]any{"index": i, "score": 0.1})
		}
	}
	_ = json.NewEncoder(w).Encode(append(first, rest...))
}

func TestCLI_SearchRerank(t *testing.T) {
	e := newEnv(t)
	semanticProject(t, e.project)
	e.ok("", "index", "--yes")
	srv := &teiServer{}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e.vars["ENGRAM_RERANK_PROVIDER"] = "tei"
	e.vars["ENGRAM_RERANK_URL"] = hs.URL

	var res searchJSON
	if err := json.Unmarshal([]byte(e.ok("", "search", "retry", "backoff", "--json", "--no-rerank")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Reranked || len(res.Hits) != 10 || !strings.HasPrefix(res.Hits[0].Files[0], "internal/retry/") || res.Hits[0].Rerank != nil {
		t.Fatalf("--no-rerank: %+v", res)
	}
	// The re-ranker's favourite, last of the fused ten, comes first.
	fav := res.Hits[9].Files[0]
	srv.favourite.Store(fav)
	if err := json.Unmarshal([]byte(e.ok("", "search", "retry", "backoff", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Reranked || res.Degraded || len(res.Hits) != 10 || res.Hits[0].Files[0] != fav ||
		res.Hits[0].Rerank == nil || *res.Hits[0].Rerank != 0.9 || res.Hits[1].Rerank == nil || *res.Hits[1].Rerank != 0.1 {
		t.Fatalf("reranked: %+v", res)
	}
	if out := e.ok("", "search", "retry", "backoff"); !strings.Contains(strings.SplitN(out, "\n", 2)[0], fav) || !strings.Contains(out, "rr 0.90") {
		t.Errorf("search output shows no re-ranker score:\n%s", out)
	}

	if out := e.ok("", "embed", "status"); !strings.Contains(out, "rerank    tei, the best 50 hybrid hits") {
		t.Errorf("embed status does not name the re-ranker:\n%s", out)
	}

	// A failing re-ranker: the fused order, and a warning.
	srv.fail.Store(true)
	code, out, errOut := e.run("", "search", "retry", "backoff")
	if code != 0 || !strings.Contains(errOut, "rerank: ") || !strings.Contains(errOut, "model is loading") ||
		!strings.Contains(errOut, "results are in fused order") || strings.Contains(strings.SplitN(out, "\n", 2)[0], fav) {
		t.Errorf("failing re-ranker: exit %d\n%s%s", code, out, errOut)
	}

	// Misconfigured: said plainly, before anything runs.
	e.vars["ENGRAM_RERANK_PROVIDER"] = "cohere"
	if code, _, errOut := e.run("", "search", "retry"); code == 0 || !strings.Contains(errOut, "rerank.model") {
		t.Errorf("cohere without a model: exit %d, %s", code, errOut)
	}
	e.vars["ENGRAM_RERANK_PROVIDER"] = "bm25"
	if code, _, errOut := e.run("", "search", "retry"); code == 0 || !strings.Contains(errOut, "rerank.provider") {
		t.Errorf("unknown provider: exit %d, %s", code, errOut)
	}
	delete(e.vars, "ENGRAM_RERANK_URL")
	e.vars["ENGRAM_RERANK_PROVIDER"] = "tei"
	if code, _, errOut := e.run("", "search", "retry"); code == 0 || !strings.Contains(errOut, "rerank.url") {
		t.Errorf("no URL: exit %d, %s", code, errOut)
	}
}
