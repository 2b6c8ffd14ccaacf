package metrics_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/metrics"
)

// TestMetrics_Counters: expansions and pre-fetches are Prometheus
// counters and read back, for the status API, as the same numbers; nil
// metrics count nothing and read zero.
func TestMetrics_Counters(t *testing.T) {
	var none *metrics.Metrics
	none.RefExpanded()
	none.Prefetch(true)
	if c := none.Counters(); c != (metrics.Counters{}) {
		t.Errorf("nil metrics: %+v", c)
	}

	m := metrics.New(nil)
	for range 3 {
		m.RefExpanded()
	}
	m.Prefetch(true)
	m.Prefetch(false)
	m.Prefetch(false)
	c := m.Counters()
	if c.Since.IsZero() || c.RefsExpanded != 3 || c.Prefetches != 3 || c.PrefetchHits != 1 {
		t.Errorf("counters: %+v", c)
	}
	want := []string{`engram_prefetch_total{result="empty"} 2`, `engram_prefetch_total{result="hit"} 1`, "engram_refs_expanded_total 3"}
	got := append(scrape(t, m, "engram_prefetch_total{"), scrape(t, m, "engram_refs_expanded_total ")...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exposition (-want +got):\n%s", diff)
	}
}
