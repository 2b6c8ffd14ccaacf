package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/httpapi"
)

func (a *app) benchServeCmd() *cobra.Command {
	var (
		messages, clients int
		duration          time.Duration
		dir               string
	)
	cmd := &cobra.Command{
		Use:     "serve",
		PreRunE: atLeast(map[string]int64{"messages": 1, "clients": 2, "duration": 1}),
		Short:   "HTTP and MCP latency and throughput under concurrent clients, against in-process calls",
		Long: `Fill a store with --messages synthetic messages and a few patterns, serve it
as engram serve does (on loopback, in this process), and run --clients
clients for --duration: half call the JSON API, half hold an MCP session
over streamable HTTP, each alternating a search and a standard briefing.
The baseline is the same operations called in-process, without a transport,
by as many goroutines, in the same run.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, eng, done, err := scratchStore(ctx, dir, "serve.db")
			if err != nil {
				return err
			}
			defer done()
			queries, err := a.storeSynthetic(ctx, eng, messages)
			if err != nil {
				return err
			}
			arc, err := eng.Archive(ctx)
			if err != nil {
				return err
			}
			h, err := arc.Connect(ctx, archive.AgentSpec{ID: "bench", SessionID: "bench"})
			if err != nil {
				return err
			}
			for _, p := range []string{"wrap errors with context", "table-driven tests", "no global state in handlers"} {
				if _, err := h.RecordPattern(ctx, archive.Pattern{Category: "style.go", Pattern: p}); err != nil {
					return err
				}
			}
			srv := httptest.NewServer(httpapi.Handler(eng, httpapi.Options{TrustLoopback: true}))
			defer srv.Close()

			type result struct {
				front, op string
				d         time.Duration
				err       bool
			}
			var mu sync.Mutex
			var results []result
			firstErr := map[string]error{}
			record := func(front, op string, d time.Duration, err error) {
				mu.Lock()
				results = append(results, result{front, op, d, err != nil})
				if err != nil && firstErr[front+" "+op] == nil {
					firstErr[front+" "+op] = err
				}
				mu.Unlock()
			}
			// Memory: the process's resident set, sampled while a phase runs.
			peak := map[string]int64{}
			sample := func(rctx context.Context, phase string) {
				for {
					if rss, ok := residentBytes(); ok {
						mu.Lock()
						peak[phase] = max(peak[phase], rss)
						mu.Unlock()
					}
					select {
					case <-rctx.Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			// Idle: after the store is filled, with the memory its filling
			// freed returned to the system.
			debug.FreeOSMemory()
			time.Sleep(200 * time.Millisecond)
			idle, haveRSS := residentBytes()
			var heap runtime.MemStats
			runtime.ReadMemStats(&heap)
			run := func(front string, n int, call func(i int, op string, q string) error) time.Duration {
				rctx, cancel := context.WithTimeout(ctx, duration)
				// The sampler ends before run returns: the report reads peak
				// without the lock.
				var sampler sync.WaitGroup
				defer func() {
					cancel()
					sampler.Wait()
				}()
				sampler.Go(func() { sample(rctx, front) })
				start := time.Now()
				var wg sync.WaitGroup
				for c := range n {
					wg.Go(func() {
						for i := 0; rctx.Err() == nil; i++ {
							op := "search"
							if i%2 == 1 {
								op = "briefing"
							}
							t0 := time.Now()
							err := call(c, op, queries[(c*31+i)%len(queries)])
							if rctx.Err() == nil {
								record(front, op, time.Since(t0), err)
							}
						}
					})
				}
				wg.Wait()
				return time.Since(start)
			}

			// Baseline: the operations in-process.
			ops := &api.Ops{Eng: eng, Session: func() string { return "bench" }, Handle: func(context.Context) (*archive.Handle, error) { return h, nil }}
			baseTime := run("in-process", clients, func(_ int, op, q string) error {
				var err error
				if op == "search" {
					_, _, err = ops.Search(ctx, api.SearchIn{Query: q, Limit: 10})
				} else {
					_, _, err = ops.Briefing(ctx, api.BriefingIn{Session: "bench"})
				}
				return err
			})

			// HTTP and MCP clients at once.
			half := max(clients/2, 1)
			sessions := make([]*mcp.ClientSession, half)
			for i := range sessions {
				c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: version}, nil)
				cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", MaxRetries: -1}, nil)
				if err != nil {
					return err
				}
				defer func() { _ = cs.Close() }()
				sessions[i] = cs
			}
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
			var wg sync.WaitGroup
			var httpTime, mcpTime time.Duration
			wg.Go(func() {
				httpTime = run("http", clients-half, func(_ int, op, q string) error {
					u := srv.URL + "/v1/search?limit=10&q=" + url.QueryEscape(q)
					if op == "briefing" {
						u = srv.URL + "/v1/sessions/bench/briefing"
					}
					resp, err := hc.Get(u)
					if err != nil {
						return err
					}
					_ = resp.Body.Close()
					if resp.StatusCode != 200 {
						return fmt.Errorf("HTTP %d", resp.StatusCode)
					}
					return nil
				})
			})
			wg.Go(func() {
				mcpTime = run("mcp", half, func(c int, op, q string) error {
					params := &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"query": q, "limit": 10}}
					if op == "briefing" {
						params = &mcp.CallToolParams{Name: "briefing", Arguments: map[string]any{"session": "bench"}}
					}
					res, err := sessions[c].CallTool(ctx, params)
					if err == nil && res.IsError {
						err = fmt.Errorf("tool error")
					}
					return err
				})
			})
			wg.Wait()

			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "%d messages, %d clients (%d HTTP, %d MCP), %s each phase\n", messages, clients, clients-half, half, duration)
			fmt.Fprintln(w, "FRONT\tOP\tCALLS/S\tERRORS\tLATENCY")
			elapsed := map[string]time.Duration{"in-process": baseTime, "http": httpTime, "mcp": mcpTime}
			for _, front := range []string{"in-process", "http", "mcp"} {
				for _, op := range []string{"search", "briefing"} {
					var ds []time.Duration
					errs := 0
					for _, r := range results {
						if r.front == front && r.op == op {
							ds = append(ds, r.d)
							if r.err {
								errs++
							}
						}
					}
					fmt.Fprintf(w, "%s\t%s\t%.0f\t%d\t%s\n", front, op, float64(len(ds))/elapsed[front].Seconds(), errs, bench.Summarize(ds))
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if haveRSS {
				fmt.Fprintf(a.stdout, "memory (resident, this process: store, server and clients): idle %s (Go heap in use %s); peak %s in-process, %s with HTTP and MCP clients\n",
					humanBytes(idle), humanBytes(int64(heap.HeapInuse)), humanBytes(peak["in-process"]), humanBytes(max(peak["http"], peak["mcp"])))
			}
			for k, err := range firstErr {
				fmt.Fprintf(a.stderr, "%s: first error: %v\n", k, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&messages, "messages", 20000, "synthetic messages in the store")
	f.IntVar(&clients, "clients", 50, "concurrent clients")
	f.DurationVar(&duration, "duration", 10*time.Second, "how long each phase runs")
	f.StringVar(&dir, "dir", "", "directory for the store (default: a temporary one, removed after)")
	return cmd
}

// storeSynthetic stores n synthetic messages in eng and returns queries of
// three of their words, one per 97 messages.
func (a *app) storeSynthetic(ctx context.Context, eng *engine.Engine, n int) ([]string, error) {
	corpus := bench.NewCorpus(1)
	var recs []engine.Record
	var queries []string
	for i := range n {
		m := corpus.Next()
		recs = append(recs, engine.Record{Session: m.Session, Agent: m.Agent, Type: m.Type, Content: []byte(m.Content)})
		if i%97 == 0 {
			queries = append(queries, corpus.Word()+" "+corpus.Word()+" "+corpus.Word())
		}
	}
	fmt.Fprintf(a.stderr, "storing %d messages...\n", n)
	return queries, eng.AddAll(ctx, recs, 1000, nil)
}

// residentBytes returns the process's resident set size, where /proc says
// (Linux).
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
