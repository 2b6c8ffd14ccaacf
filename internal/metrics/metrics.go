// Package metrics is what engram serve exposes to Prometheus at /metrics:
// requests and tool calls, search latency by the signals that answered,
// degradations, briefing results, tokens served and saved, the watcher's
// queue and updates, and, read at each scrape, the store's size, the
// embedding queue, cache hits and misses, and the model API proxy's
// counters (engram proxy serves those too).
//
// A nil *Metrics records nothing, so code paths need no checks.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// Metrics holds engram's collectors in a registry of its own.
type Metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec
	requestTime  *prometheus.HistogramVec
	toolCalls    *prometheus.CounterVec
	toolTime     *prometheus.HistogramVec
	searchTime   *prometheus.HistogramVec
	degraded     prometheus.Counter
	briefings    *prometheus.CounterVec
	tokensServed *prometheus.CounterVec
	tokensSaved  *prometheus.CounterVec
	indexPending prometheus.Gauge
	indexUpdates *prometheus.CounterVec
	indexFiles   *prometheus.CounterVec
	refused      *prometheus.CounterVec
	mcpSessions  prometheus.Gauge
	refsExpanded prometheus.Counter
	prefetches   *prometheus.CounterVec
	// since is when the metrics were made: the counters count from it.
	since time.Time
	// expanded, prefetchHits and prefetchEmpty mirror the counters of
	// expansions and pre-fetches, for Counters (a Prometheus counter is
	// not meant to be read back).
	expanded, prefetchHits, prefetchEmpty atomic.Int64
	// briefingHits and briefingMisses count briefings served from the
	// cache and assembled, reported with the store's caches.
	briefingHits, briefingMisses atomic.Int64
}

// New returns the metrics, with a collector that reads the store's figures
// from eng at each scrape.
func New(eng *engine.Engine) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), since: time.Now()}
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_http_requests_total",
		Help: "HTTP requests, by route, method and status code."}, []string{"route", "method", "code"})
	m.requestTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "engram_http_request_seconds",
		Help: "HTTP request latency, by route.", Buckets: buckets}, []string{"route"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_mcp_tool_calls_total",
		Help: "MCP tool calls, by tool and result (ok or error)."}, []string{"tool", "result"})
	m.toolTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "engram_mcp_tool_seconds",
		Help: "MCP tool call latency, by tool.", Buckets: buckets}, []string{"tool"})
	m.searchTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "engram_search_seconds",
		Help: "Search latency, by the signals that answered: lexical, vector or hybrid.", Buckets: buckets}, []string{"signals"})
	m.degraded = prometheus.NewCounter(prometheus.CounterOpts{Name: "engram_search_degraded_total",
		Help: "Searches answered without a signal that should have answered (a failing or slow embedder)."})
	m.briefings = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_briefings_total",
		Help: "Briefings served, by result: not_modified, cached or assembled."}, []string{"result"})
	m.tokensServed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_tokens_served_total",
		Help: "Tokens of the text answers served to agents, by operation."}, []string{"op"})
	m.tokensSaved = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_tokens_saved_total",
		Help: "Tokens agents did not have to read again: unchanged briefings and global reads (not_modified), and what deltas left out (delta)."}, []string{"reason"})
	m.indexPending = prometheus.NewGauge(prometheus.GaugeOpts{Name: "engram_index_pending_paths",
		Help: "Paths changed on disk and not indexed yet (the watcher's queue)."})
	m.indexUpdates = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_index_updates_total",
		Help: "Index updates the watcher ran, by result (ok or error)."}, []string{"result"})
	m.indexFiles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_index_files_total",
		Help: "Files the watcher's updates stored or removed, by change: new, changed, deleted."}, []string{"change"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_http_refused_total",
		Help: "HTTP requests refused before any route saw them, by reason: host, origin, token, content_type, reader (a write with the dashboard's read-only sign-in), login (a spent or forged login link), forbidden (another session's state), too_large, body (a body that did not arrive), bodies (a credential's bodies on their way took its share), overloaded, mcp_sessions."}, []string{"reason"})
	m.mcpSessions = prometheus.NewGauge(prometheus.GaugeOpts{Name: "engram_mcp_sessions",
		Help: "MCP sessions open over HTTP."})
	m.refsExpanded = prometheus.NewCounter(prometheus.CounterOpts{Name: "engram_refs_expanded_total",
		Help: "Reference markers expanded back into what they stand for: read (GET /v1/refs/{id}, retrieve_context with a marker) or re-admitted into their window."})
	m.prefetches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "engram_prefetch_total",
		Help: "Pre-fetches served (the prefetch operation, and the retrieval layer of an assembled turn), by result: hit (at least one excerpt) or empty."}, []string{"result"})
	m.reg.MustRegister(m.requests, m.requestTime, m.toolCalls, m.toolTime, m.searchTime, m.degraded, m.briefings,
		m.tokensServed, m.tokensSaved, m.indexPending, m.indexUpdates, m.indexFiles, m.refused, m.mcpSessions, m.refsExpanded, m.prefetches,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if eng != nil {
		m.reg.MustRegister(&storeCollector{eng: eng, m: m})
	}
	return m
}

// Handler serves the registry in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Request records an HTTP request.
func (m *Metrics) Request(route, method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.requestTime.WithLabelValues(route).Observe(d.Seconds())
}

// Refused counts a request refused for reason.
func (m *Metrics) Refused(reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(reason).Inc()
}

// MCPSessions sets the number of open MCP sessions.
func (m *Metrics) MCPSessions(n int) {
	if m == nil {
		return
	}
	m.mcpSessions.Set(float64(n))
}

// ToolCall records an MCP tool call.
func (m *Metrics) ToolCall(tool string, failed bool, d time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	if failed {
		result = "error"
	}
	m.toolCalls.WithLabelValues(tool, result).Inc()
	m.toolTime.WithLabelValues(tool).Observe(d.Seconds())
}

// Search records a search's latency, the signals that answered, and
// whether it was degraded.
func (m *Metrics) Search(lexical, vector, degraded bool, d time.Duration) {
	if m == nil {
		return
	}
	signals := "hybrid"
	switch {
	case lexical && !vector:
		signals = "lexical"
	case vector && !lexical:
		signals = "vector"
	}
	m.searchTime.WithLabelValues(signals).Observe(d.Seconds())
	if degraded {
		m.degraded.Inc()
	}
}

// BriefingServed records a briefing served: not_modified (with the tokens
// the reader did not have to read again), cached or assembled.
func (m *Metrics) BriefingServed(b *archive.Briefing) {
	if m == nil {
		return
	}
	switch {
	case b.Status == archive.StatusNotModified:
		m.briefings.WithLabelValues("not_modified").Inc()
		m.Saved("not_modified", b.SavedTokens)
	case b.Cached:
		m.briefings.WithLabelValues("cached").Inc()
		m.briefingHits.Add(1)
	default:
		m.briefings.WithLabelValues("assembled").Inc()
		m.briefingMisses.Add(1)
	}
}

// IndexPending sets how many changed paths wait for the watcher's next
// update.
func (m *Metrics) IndexPending(paths int) {
	if m == nil {
		return
	}
	m.indexPending.Set(float64(paths))
}

// IndexUpdated records an update of the watcher: the files it stored and
// removed, or that it failed.
func (m *Metrics) IndexUpdated(s index.Summary, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.indexUpdates.WithLabelValues("error").Inc()
		return
	}
	m.indexUpdates.WithLabelValues("ok").Inc()
	for change, n := range map[string]int{"new": s.New, "changed": s.Changed, "deleted": s.Deleted} {
		if n > 0 {
			m.indexFiles.WithLabelValues(change).Add(float64(n))
		}
	}
}

// RefExpanded counts a reference marker expanded: read back or
// re-admitted.
func (m *Metrics) RefExpanded() {
	if m == nil {
		return
	}
	m.refsExpanded.Inc()
	m.expanded.Add(1)
}

// Prefetch counts a pre-fetch served: a hit when it returned at least one
// excerpt.
func (m *Metrics) Prefetch(hit bool) {
	if m == nil {
		return
	}
	if hit {
		m.prefetches.WithLabelValues("hit").Inc()
		m.prefetchHits.Add(1)
		return
	}
	m.prefetches.WithLabelValues("empty").Inc()
	m.prefetchEmpty.Add(1)
}

// Counters are what the dashboard shows of the metrics: counts since
// Since, when this server started (made its Metrics). They are kept in
// memory only: a restart starts them over, and with several servers on
// one store each counts its own requests.
type Counters struct {
	Since        time.Time `json:"since"`
	RefsExpanded int64     `json:"refs_expanded"`
	// Prefetches counts every pre-fetch served, PrefetchHits those that
	// returned at least one excerpt.
	Prefetches   int64 `json:"prefetches"`
	PrefetchHits int64 `json:"prefetch_hits"`
}

// Counters returns the counts so far; the zero Counters for nil metrics.
func (m *Metrics) Counters() Counters {
	if m == nil {
		return Counters{}
	}
	hits := m.prefetchHits.Load()
	return Counters{Since: m.since, RefsExpanded: m.expanded.Load(), Prefetches: hits + m.prefetchEmpty.Load(), PrefetchHits: hits}
}

// Served counts tokens of an answer served by an operation.
func (m *Metrics) Served(op string, tokens int) {
	if m == nil || tokens <= 0 {
		return
	}
	m.tokensServed.WithLabelValues(op).Add(float64(tokens))
}

// Saved counts tokens an agent did not have to read.
func (m *Metrics) Saved(reason string, tokens int) {
	if m == nil || tokens <= 0 {
		return
	}
	m.tokensSaved.WithLabelValues(reason).Add(float64(tokens))
}

// Proxy reports a proxy's counters (engram proxy's, or the model APIs of
// engram serve), read from stats at each scrape. Call it at most once.
func (m *Metrics) Proxy(stats func() proxy.Stats) {
	if m == nil {
		return
	}
	m.reg.MustRegister(proxyCollector{stats})
}

// proxyCollector reads a proxy's counters at each scrape.
type proxyCollector struct{ stats func() proxy.Stats }

var (
	proxyRequests = prometheus.NewDesc("engram_proxy_requests_total",
		"Model API requests the proxy forwarded, by route: messages, count_tokens, chat, responses, other.", []string{"route"}, nil)
	proxyLayout = prometheus.NewDesc("engram_proxy_layout_total",
		"Messages requests by how they went upstream: virtualized (the window's layout, markers in place of evicted runs), "+
			"whole (as they came, the window showing everything) or failed_open (as they came, engram unable to read, store or lay them out).",
		[]string{"result"}, nil)
	proxyRefused = prometheus.NewDesc("engram_proxy_refused_total",
		"Model API requests the proxy answered itself, by reason: origin, host, token, too_large, unreadable.", []string{"reason"}, nil)
	proxyUpstream = prometheus.NewDesc("engram_proxy_upstream_total",
		"Upstream answers by status class (2xx, 3xx, 4xx, 5xx), and unreachable or timeout when none came.", []string{"class"}, nil)
	proxyAnswers = prometheus.NewDesc("engram_proxy_answers_total",
		"Assistant answers stored, by result: whole, or partial (the stream ended early: the client left or the upstream broke off).",
		[]string{"result"}, nil)
	proxyHistory = prometheus.NewDesc("engram_proxy_history_total",
		"Histories a harness changed in place, by change: edit (the window followed it) or restart (another conversation under the session: the window's mapping starts anew).",
		[]string{"change"}, nil)
)

func (c proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{proxyRequests, proxyLayout, proxyRefused, proxyUpstream, proxyAnswers, proxyHistory} {
		ch <- d
	}
}

func (c proxyCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, n int64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), label)
	}
	for _, m := range []struct {
		d *prometheus.Desc
		n map[string]int64
	}{{proxyRequests, s.Requests}, {proxyRefused, s.Refused}, {proxyUpstream, s.Upstream}} {
		for label, n := range m.n {
			counter(m.d, n, label)
		}
	}
	counter(proxyLayout, s.Virtualized, "virtualized")
	counter(proxyLayout, s.Whole, "whole")
	counter(proxyLayout, s.FailedOpen, "failed_open")
	// Partial answers are among those stored.
	counter(proxyAnswers, max(0, s.Answers-s.Partial), "whole")
	counter(proxyAnswers, s.Partial, "partial")
	counter(proxyHistory, s.Edits, "edit")
	counter(proxyHistory, s.Restarts, "restart")
}

// storeCollector reads the store's figures at each scrape.
type storeCollector struct {
	eng *engine.Engine
	m   *Metrics
}

// cacheStats is what a store that counts its caches' lookups offers.
type cacheStats interface{ CacheStats() []sqlite.CacheStat }

var (
	storeUp     = prometheus.NewDesc("engram_store_up", "1 when the store answered this scrape's read, 0 when it could not be reached (its other figures are then left out).", nil, nil)
	storeBytes  = prometheus.NewDesc("engram_store_bytes", "Size of the store.", nil, nil)
	storeChunks = prometheus.NewDesc("engram_store_chunks", "Chunks in the store.", nil, nil)
	storeTokens = prometheus.NewDesc("engram_store_tokens", "Tokens of the content in the store.", nil, nil)
	embedQueue  = prometheus.NewDesc("engram_embed_queue", "Chunks waiting to be embedded by the configured model.", nil, nil)
	cacheLookup = prometheus.NewDesc("engram_cache_requests_total",
		"Cache lookups, by cache (briefings: assembled briefings kept by version; word_counts: the word frequencies query planning counts) and result (hit or miss).",
		[]string{"cache", "result"}, nil)
)

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeUp
	ch <- storeBytes
	ch <- storeChunks
	ch <- storeTokens
	ch <- embedQueue
	ch <- cacheLookup
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	up := 1.0
	if err := c.eng.Ping(ctx); err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(storeUp, prometheus.GaugeValue, up)
	if up == 1 {
		if st, err := c.eng.Stats(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(storeBytes, prometheus.GaugeValue, float64(st.SizeBytes))
			ch <- prometheus.MustNewConstMetric(storeChunks, prometheus.GaugeValue, float64(st.Chunks))
			ch <- prometheus.MustNewConstMetric(storeTokens, prometheus.GaugeValue, float64(st.Tokens))
		}
		if es, err := c.eng.EmbedStatus(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(embedQueue, prometheus.GaugeValue, float64(es.Pending))
		}
	}
	stats := []sqlite.CacheStat{{Name: "briefings", Hits: c.m.briefingHits.Load(), Misses: c.m.briefingMisses.Load()}}
	if cs, ok := c.eng.Store().(cacheStats); ok {
		stats = append(stats, cs.CacheStats()...)
	}
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(cacheLookup, prometheus.CounterValue, float64(s.Hits), s.Name, "hit")
		ch <- prometheus.MustNewConstMetric(cacheLookup, prometheus.CounterValue, float64(s.Misses), s.Name, "miss")
	}
}
