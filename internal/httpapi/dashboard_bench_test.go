package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/engramhq/engram/internal/browsertest"
)

// dashWindows opens n windows and appends a turn to each, through the
// API.
func dashWindows(tb testing.TB, url string, n int) {
	tb.Helper()
	for i := range n {
		w := fmt.Sprintf("/v1/windows/s1/agent-%02d", i)
		if st := post(tb, url, "PUT", w, `{"limit":8000}`); st != 200 {
			tb.Fatalf("open %s: %d", w, st)
		}
		if st := post(tb, url, "POST", w+"/messages", `{"messages":[{"role":"user","content":"read the handler and fix the retry"}]}`); st != 201 {
			tb.Fatalf("append %s: %d", w, st)
		}
	}
}

func post(tb testing.TB, url, method, path, body string) int {
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Engram-Session", "s1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// BenchmarkEventPoll is one poll of the event stream's hub over 20
// windows: idle (nothing changed: what an open page costs the server each
// second) against all 20 changed since the last poll.
func BenchmarkEventPoll(b *testing.B) {
	eng := newEngine(b)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	dashWindows(b, srv.URL, 20)
	ctx := context.Background()
	for _, changed := range []bool{false, true} {
		b.Run(fmt.Sprintf("changed=%v", changed), func(b *testing.B) {
			var p poller
			if err := p.init(ctx, eng); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if changed {
					b.StopTimer()
					clear(p.windows) // as if every window had moved
					b.StartTimer()
				}
				if _, err := p.changes(ctx, eng, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEventStreams measures what open pages cost agents: appends to
// 20 windows, round robin, with no stream open against 20 streams open
// (each reading every event), the hub polling every 100 ms (ten times the
// default, to make its cost visible).
func BenchmarkEventStreams(b *testing.B) {
	for _, streams := range []int{0, 20} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			eng := newEngine(b)
			srv := httptest.NewServer(Handler(eng, Options{Token: "tok", EventPoll: 100 * time.Millisecond}))
			defer srv.Close()
			dashWindows(b, srv.URL, 20)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			events := make(chan int, streams)
			for range streams {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/events/stream", nil)
				req.Header.Set("Authorization", "Bearer tok")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					defer func() { _ = resp.Body.Close() }()
					n := 0
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() {
						if strings.HasPrefix(sc.Text(), "event: windows") {
							n++
						}
					}
					events <- n
				}()
			}
			i := 0
			for b.Loop() {
				w := fmt.Sprintf("/v1/windows/s1/agent-%02d/messages", i%20)
				if st := post(b, srv.URL, "POST", w, `{"messages":[{"role":"assistant","content":"done: the retry is bounded now"}]}`); st != 201 {
					b.Fatalf("append: %d", st)
				}
				i++
			}
			b.StopTimer()
			cancel()
			total := 0
			for range streams {
				total += <-events
			}
			if streams > 0 {
				b.ReportMetric(float64(total)/float64(streams), "events/stream")
			}
		})
	}
}

// BenchmarkDashboardLoad loads the page in Chromium, signed in, against a
// server with 20 windows: the time to its first contentful paint and to
// the windows listed (its data read through the API), against the same
// browser loading /healthz from the same server (the round trip and the
// browser's own cost, the baseline); and the page's weight as sent, gzip.
func BenchmarkDashboardLoad(b *testing.B) {
	eng := newEngine(b)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	b.Cleanup(srv.Close) // after the browser's cleanup, which ends the page's event stream
	dashWindows(b, srv.URL, 20)
	br := browsertest.New(b)
	tab := br.Tab(b)
	link, err := LoginURL(srv.URL+"/", "tok", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	tab.Navigate(link)
	tab.WaitText("#conn", "Live")

	measure := func(b *testing.B, url string, ready string) {
		var fcp, data []float64
		for b.Loop() {
			tab.Run(chromedp.Navigate(url))
			var t struct{ FCP, Data float64 }
			tab.Eval(`new Promise(r => { const f = () => { const p = performance.getEntriesByName('first-contentful-paint')[0];
				const ok = `+ready+`; (p && ok) ? r({fcp: p.startTime, data: performance.now()}) : setTimeout(f, 5); }; f(); })`, &t)
			fcp, data = append(fcp, t.FCP), append(data, t.Data)
		}
		b.ReportMetric(median(fcp), "fcp-ms")
		b.ReportMetric(median(data), "ready-ms")
	}
	b.Run("page=healthz", func(b *testing.B) { measure(b, srv.URL+"/healthz", "true") })
	b.Run("page=dashboard", func(b *testing.B) {
		measure(b, srv.URL+"/", `document.querySelectorAll('#windows-table tbody tr').length === 20`)
		as := loadAssets()
		gz, raw := 0, 0
		for _, name := range []string{"index.html", "app.js", "style.css", "icon.svg", "vendor/uPlot-1.6.32.iife.min.js", "vendor/uPlot-1.6.32.min.css"} {
			gz += len(as[name].gz)
			raw += len(as[name].body)
		}
		b.ReportMetric(float64(gz), "gzip-bytes")
		b.ReportMetric(float64(raw), "raw-bytes")
	})
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
