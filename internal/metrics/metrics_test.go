package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/proxy"
)

// scrape returns the lines of m's exposition that start with prefix.
func scrape(t *testing.T, m *metrics.Metrics, prefix string) []string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

// TestMetrics_Proxy reports every counter of a proxy's Stats, as they are
// at each scrape.
func TestMetrics_Proxy(t *testing.T) {
	st := proxy.Stats{
		Requests:    map[string]int64{"messages": 7, "count_tokens": 2, "chat": 1, "responses": 0, "other": 3},
		Virtualized: 4, Whole: 2, FailedOpen: 1,
		Edits: 5, Restarts: 1,
		Refused:  map[string]int64{"origin": 1, "host": 0, "token": 2, "too_large": 1, "unreadable": 0},
		Upstream: map[string]int64{"2xx": 9, "3xx": 0, "4xx": 2, "5xx": 1, "unreachable": 0, "timeout": 1},
		Answers:  6, Partial: 2,
	}
	m := metrics.New(nil)
	m.Proxy(func() proxy.Stats { return st })
	want := []string{
		`engram_proxy_answers_total{result="partial"} 2`,
		`engram_proxy_answers_total{result="whole"} 4`,
		`engram_proxy_history_total{change="edit"} 5`,
		`engram_proxy_history_total{change="restart"} 1`,
		`engram_proxy_layout_total{result="failed_open"} 1`,
		`engram_proxy_layout_total{result="virtualized"} 4`,
		`engram_proxy_layout_total{result="whole"} 2`,
		`engram_proxy_refused_total{reason="host"} 0`,
		`engram_proxy_refused_total{reason="origin"} 1`,
		`engram_proxy_refused_total{reason="token"} 2`,
		`engram_proxy_refused_total{reason="too_large"} 1`,
		`engram_proxy_refused_total{reason="unreadable"} 0`,
		`engram_proxy_requests_total{route="chat"} 1`,
		`engram_proxy_requests_total{route="count_tokens"} 2`,
		`engram_proxy_requests_total{route="messages"} 7`,
		`engram_proxy_requests_total{route="other"} 3`,
		`engram_proxy_requests_total{route="responses"} 0`,
		`engram_proxy_upstream_total{class="2xx"} 9`,
		`engram_proxy_upstream_total{class="3xx"} 0`,
		`engram_proxy_upstream_total{class="4xx"} 2`,
		`engram_proxy_upstream_total{class="5xx"} 1`,
		`engram_proxy_upstream_total{class="timeout"} 1`,
		`engram_proxy_upstream_total{class="unreachable"} 0`,
	}
	if diff := cmp.Diff(want, scrape(t, m, "engram_proxy_")); diff != "" {
		t.Errorf("the proxy's metrics (-want +got):\n%s", diff)
	}
	// Read again at the next scrape.
	st.Requests = map[string]int64{"messages": 8}
	if got := scrape(t, m, "engram_proxy_requests_total"); !cmp.Equal(got, []string{`engram_proxy_requests_total{route="messages"} 8`}) {
		t.Errorf("the next scrape: %v", got)
	}
	// Without a proxy, none.
	if got := scrape(t, metrics.New(nil), "engram_proxy_"); len(got) != 0 {
		t.Errorf("metrics without a proxy: %v", got)
	}
}
