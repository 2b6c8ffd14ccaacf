package httpapi

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/store"
)

func TestMetrics(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	if _, err := eng.Add(ctx, []engine.Record{{Session: "s0", Agent: "x", Type: store.Note, Content: []byte("retry with backoff and jitter")}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", Metrics: metrics.New(eng)}))
	defer srv.Close()
	c := client{t, srv.URL}

	cs, err := connect(t, srv.URL, map[string]string{"Authorization": "Bearer tok", "X-Engram-Session": "s1"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "briefing", Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"query": "   "}}); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"prefer small interfaces", "errors are values", "keep main small"} {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "record_insight", Arguments: map[string]any{"insight": text}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = cs.Close()
	ih, _ := c.want(200, "GET", "/v1/insights", "", "keep main small")
	if st, _, _ := c.do("GET", "/v1/insights", "", "If-None-Match", ih.Get("ETag")); st != 304 {
		t.Fatalf("insights: 304 expected, got %d", st)
	}
	c.want(200, "GET", "/v1/insights?since=2", "", `"saved_tokens"`)
	c.want(200, "GET", "/v1/search?q=retry+backoff", "", "retry with backoff")
	c.want(200, "GET", "/v1/search?q=retry+backoff", "", "retry with backoff") // the word counts are cached now
	h, _ := c.want(200, "GET", "/v1/sessions/s1/briefing", "", "briefing s1")
	if st, _, _ := c.do("GET", "/v1/sessions/s1/briefing", "", "If-None-Match", h.Get("ETag")); st != 304 {
		t.Fatalf("304 expected, got %d", st)
	}
	c.want(401, "GET", "/metrics", "", "wrong token", "Authorization", "Bearer nope")
	_, body := c.want(200, "GET", "/metrics", "", "engram_")
	for _, want := range []string{
		`engram_http_requests_total{code="200",method="GET",route="GET /v1/search"} 2`,
		`engram_http_requests_total{code="304",method="GET",route="GET /v1/sessions/{session}/briefing"} 1`,
		`engram_mcp_tool_calls_total{result="ok",tool="briefing"} 2`,
		`engram_mcp_tool_calls_total{result="error",tool="search"} 1`,
		`engram_search_seconds_count{signals="lexical"} 2`,
		`engram_briefings_total{result="not_modified"} 1`,
		`engram_briefings_total{result="cached"}`,
		`engram_tokens_served_total{op="briefing"}`,
		`engram_tokens_saved_total{reason="not_modified"}`,
		`engram_tokens_saved_total{reason="delta"}`,
		`engram_store_chunks 1`,
		`engram_cache_requests_total{cache="briefings",result="hit"} 1`,
		`engram_cache_requests_total{cache="word_counts",result="hit"}`,
		`engram_cache_requests_total{cache="word_counts",result="miss"}`,
		`engram_index_pending_paths 0`,
		`engram_embed_queue`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "engram_") {
				lines = append(lines, l)
			}
		}
		t.Logf("engram metrics:\n%s", strings.Join(lines, "\n"))
	}
}
