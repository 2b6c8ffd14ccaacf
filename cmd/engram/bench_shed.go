package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/httpapi"
)

func (a *app) benchShedCmd() *cobra.Command {
	var (
		messages, clients int
		duration, timeout time.Duration
		dir               string
	)
	cmd := &cobra.Command{
		Use:     "shed",
		PreRunE: atLeast(map[string]int64{"messages": 1, "clients": 1, "duration": 1, "timeout": 1}),
		Short:   "Searches under more clients than the machine serves: with admission control, against without",
		Long: `Fill a store with --messages synthetic messages, serve it as engram serve does
(on loopback, in this process), and run --clients clients for --duration,
each searching over the JSON API again and again with a --timeout, twice:
with engram serve's admission control (4 requests per core in flight, 32
times as many waiting at most 2 s, the rest answered 503 with Retry-After)
and, as the baseline in the same run, without it (every request served at
once). A client told 503 waits Retry-After, as clients should. Reported:
answers per second, how long the answered searches took, how many were
refused and how many timed out.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, eng, done, err := scratchStore(ctx, dir, "shed.db")
			if err != nil {
				return err
			}
			defer done()
			queries, err := a.storeSynthetic(ctx, eng, messages)
			if err != nil {
				return err
			}
			type outcome struct {
				ok, refused, timedOut int
				ds                    []time.Duration
				elapsed               time.Duration
			}
			phase := func(adm *httpapi.Admission) outcome {
				srv := httptest.NewServer(httpapi.Handler(eng, httpapi.Options{TrustLoopback: true, Admission: adm}))
				defer srv.Close()
				hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: timeout}
				var mu sync.Mutex
				var o outcome
				pctx, cancel := context.WithTimeout(ctx, duration)
				defer cancel()
				start := time.Now()
				var wg sync.WaitGroup
				for c := range clients {
					wg.Go(func() {
						for i := 0; pctx.Err() == nil; i++ {
							q := queries[(c*31+i)%len(queries)]
							t0 := time.Now()
							resp, err := hc.Get(srv.URL + "/v1/search?limit=10&q=" + url.QueryEscape(q))
							d := time.Since(t0)
							if pctx.Err() != nil {
								return
							}
							mu.Lock()
							switch {
							case err != nil:
								o.timedOut++
							case resp.StatusCode == http.StatusOK:
								o.ok++
								o.ds = append(o.ds, d)
							case resp.StatusCode == http.StatusServiceUnavailable:
								o.refused++
							}
							mu.Unlock()
							if err == nil {
								_ = resp.Body.Close()
								if resp.StatusCode == http.StatusServiceUnavailable {
									select { // as a client should: wait what Retry-After says
									case <-pctx.Done():
									case <-time.After(time.Second):
									}
								}
							}
						}
					})
				}
				wg.Wait()
				o.elapsed = time.Since(start)
				hc.CloseIdleConnections()
				return o
			}
			fmt.Fprintf(a.stderr, "%d clients for %s without admission control...\n", clients, duration)
			// No admission control: a slot for every request there can be.
			// (As many slots as clients raced: a client's next request can
			// arrive before the handler of its last releases its slot.)
			open := phase(httpapi.NewAdmission(1<<20, -1, time.Second))
			fmt.Fprintf(a.stderr, "%d clients for %s with admission control...\n", clients, duration)
			shed := phase(httpapi.NewAdmission(0, 0, 0))
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "%d messages, %d clients searching over HTTP for %s, timeout %s\n", messages, clients, duration, timeout)
			fmt.Fprintln(w, "ADMISSION\tANSWERED/S\tREFUSED (503)\tTIMED OUT\tLATENCY OF ANSWERS")
			for _, r := range []struct {
				name string
				o    outcome
			}{{"none (all at once)", open}, {"engram serve's", shed}} {
				fmt.Fprintf(w, "%s\t%.0f\t%d\t%d\t%s\n", r.name, float64(r.o.ok)/r.o.elapsed.Seconds(), r.o.refused, r.o.timedOut, bench.Summarize(r.o.ds))
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&messages, "messages", 20000, "synthetic messages in the store")
	f.IntVar(&clients, "clients", 200, "concurrent clients")
	f.DurationVar(&duration, "duration", 20*time.Second, "how long each phase runs")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "each request's timeout")
	f.StringVar(&dir, "dir", "", "directory for the store (default: a temporary one, removed after)")
	return cmd
}
