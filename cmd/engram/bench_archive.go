package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/tokens"
)

func (a *app) benchArchiveCmd() *cobra.Command {
	var (
		opts       bench.ArchiveOptions
		dir, pgURL string
		jsonOut    bool
		servers    []int
	)
	cmd := &cobra.Command{
		Use:     "archive",
		PreRunE: atLeast(map[string]int64{"sessions": 1, "agents": 1, "storm": 1, "mixed": 1, "write-rate": 1, "readers": 1, "prefill": 0}),
		Short:   "The archivalist under the seed's stress test: write throughput, briefing latency, tokens per read",
		Long: `Run the seed's stress test on a new store: --sessions sessions of --agents
agents each (the first of each session the parent of the rest). First every
agent writes as fast as it can for --storm (two thirds session state, one
third new global records): acknowledged writes per second, each durable
before it is acknowledged. Then --readers readers read for --mixed in the
seed's mix (50 % micro briefings, 30 % standard, 15 % delta syncs, 5 % full
briefings), conditionally on the versions each agent last saw, while
--write-rate writes per second go on: briefing latency, the share of reads
that found nothing changed, and tokens per read against the same reads
made as unconditional standard and full briefings.

--servers runs the test once per number given, through that many servers
sharing the store: stores opened on the one file (or database), each with
an archivalist of its own; agent i writes and is briefed through server
i mod N. With --postgres (or ENGRAM_BENCH_POSTGRES) every run is made on
SQLite and then on a new PostgreSQL database (engram_bench_archive_N,
dropped after), and a table sets them side by side.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			enc, err := tokens.Get(a.cfg.Tokens.Encoding)
			if err != nil {
				return err
			}
			if len(servers) == 0 {
				servers = []int{1}
			}
			backends := []string{"SQLite"}
			admin := a.benchPostgres(pgURL)
			if admin != "" {
				backends = append(backends, "PostgreSQL")
			}
			var runs []archiveRun
			for _, backend := range backends {
				for _, n := range servers {
					if n < 1 {
						return fmt.Errorf("--servers %d: at least 1", n)
					}
					fmt.Fprintf(a.stderr, "%s, %d server(s): %d sessions x %d agents: %s write storm, then %s of reads with %d writes/s...\n",
						backend, n, opts.Sessions, opts.AgentsPerSession, opts.Storm, opts.Mixed, opts.WriteRate)
					r, err := a.archiveRun(ctx, backend, admin, dir, n, enc, opts)
					if err != nil {
						return fmt.Errorf("%s, %d server(s): %w", backend, n, err)
					}
					runs = append(runs, r)
				}
			}
			if jsonOut {
				if len(runs) == 1 {
					return writeJSON(a.stdout, runs[0])
				}
				return writeJSON(a.stdout, runs)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			for i, r := range runs {
				rep, base := r.ArchiveReport, r.BaselineWritesPerSec
				if len(runs) > 1 {
					if i > 0 {
						fmt.Fprintln(w)
					}
					fmt.Fprintf(w, "%s, %d server(s)\n", r.Backend, r.Servers)
				}
				fmt.Fprintf(w, "agents\t%d\n", rep.Agents)
				fmt.Fprintf(w, "write storm\t%d acknowledged writes in %.1fs: %.0f writes/s; latency %s\n", rep.StormWrites, rep.StormSeconds,
					rep.WritesPerSec, rep.StormWriteLat)
				fmt.Fprintf(w, "  baseline\t%.0f writes/s: one transaction per write (an empty settings row), %d writers\n", base, rep.Agents)
				fmt.Fprintf(w, "mixed reads\t%d reads (%.0f/s; micro %d, standard %d, delta %d, full %d) with %d writes\n", rep.Reads, rep.ReadsPerSec,
					rep.ByOp["micro"], rep.ByOp["standard"], rep.ByOp["delta"], rep.ByOp["full"], rep.MixedWrites)
				fmt.Fprintf(w, "unchanged\t%.1f%% of conditional reads answered NOT_MODIFIED\n", 100*rep.Unchanged)
				fmt.Fprintf(w, "tokens per read\t%.1f, against %.1f always standard (%.1f%% saved) and %.1f always full (%.1f%% saved)\n",
					rep.TokensPerRead, rep.StandardTokens, 100*(1-rep.TokensPerRead/rep.StandardTokens), rep.FullTokens,
					100*(1-rep.TokensPerRead/rep.FullTokens))
				fmt.Fprintf(w, "briefing latency\t%s\n", rep.Briefing)
				fmt.Fprintf(w, "  NOT_MODIFIED\t%s\n", rep.NotModified)
				fmt.Fprintf(w, "  from cache\t%s\n", rep.Cached)
				fmt.Fprintf(w, "  recomputed\t%s\n", rep.Recomputed)
				if r.Records > 0 {
					fmt.Fprintf(w, "records\t%s at the end (global and session)\n", commas(r.Records))
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if len(runs) == 1 {
				return nil
			}
			fmt.Fprintln(a.stdout)
			t := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(t, "backend\tservers\twrites/s\twrite p50\twrite p99\tbaseline/s\treads/s\tbriefing p50\tp95\trecomputed p50\tp95\t")
			for _, r := range runs {
				rep := r.ArchiveReport
				fmt.Fprintf(t, "%s\t%d\t%.0f\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t\n", r.Backend, r.Servers, rep.WritesPerSec,
					ms(rep.StormWriteLat.P50), ms(rep.StormWriteLat.P99), r.BaselineWritesPerSec, rep.ReadsPerSec,
					ms(rep.Briefing.P50), ms(rep.Briefing.P95), ms(rep.Recomputed.P50), ms(rep.Recomputed.P95))
			}
			fmt.Fprintln(t, "(latencies in milliseconds)")
			return t.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Sessions, "sessions", 6, "sessions")
	f.IntVar(&opts.AgentsPerSession, "agents", 30, "agents per session")
	f.DurationVar(&opts.Storm, "storm", 5*time.Second, "how long the write storm lasts")
	f.DurationVar(&opts.Mixed, "mixed", 10*time.Second, "how long the mixed phase lasts")
	f.IntVar(&opts.WriteRate, "write-rate", 20, "writes per second during the mixed phase")
	f.IntVar(&opts.Readers, "readers", 4, "concurrent readers during the mixed phase")
	f.Uint64Var(&opts.Seed, "seed", 1, "random seed")
	f.IntVar(&opts.Prefill, "prefill", 0, "records written before the storm, not timed (so that every backend briefs over as many)")
	f.StringVar(&dir, "dir", "", "directory for the store (default: a temporary one, removed after)")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	f.IntSliceVar(&servers, "servers", []int{1}, "run with each of these numbers of servers (stores of their own on one database), e.g. 1,3")
	registerPostgres(cmd, &pgURL)
	return cmd
}

// archiveRun is one run of bench archive: a backend with a number of
// servers.
type archiveRun struct {
	Backend string `json:"backend"`
	bench.ArchiveReport
	BaselineWritesPerSec float64 `json:"baseline_writes_per_sec"`
	Records              int64   `json:"records"`
}

// archiveRun runs the workload on a new store of backend ("SQLite" or
// "PostgreSQL") through n servers: n stores opened on the one file or
// database, each with its connections (on SQLite its own writer and group
// committer), each under an archivalist of its own, as n engram servers
// sharing a store would be.
func (a *app) archiveRun(ctx context.Context, backend, admin, dir string, n int, enc *tokens.Encoding, opts bench.ArchiveOptions) (r archiveRun, err error) {
	var stores []store.Store
	defer func() {
		for i := len(stores) - 1; i >= 0; i-- {
			err = errors.Join(err, stores[i].Close())
		}
	}()
	switch backend {
	case "SQLite":
		d, cleanup, err := benchDir(dir)
		if err != nil {
			return r, err
		}
		defer cleanup()
		path := filepath.Join(d, fmt.Sprintf("archive-%d.db", n))
		if err := removeStore(path); err != nil {
			return r, err
		}
		for range n {
			st, err := sqlite.Open(ctx, path, sqlite.Options{})
			if err != nil {
				return r, err
			}
			stores = append(stores, st)
		}
	default:
		name := fmt.Sprintf("engram_bench_archive_%d", n)
		st, drop, err := a.pgScratch(ctx, admin, name)
		if err != nil {
			return r, err
		}
		defer func() { err = errors.Join(err, drop()) }()
		stores = append(stores, nopClose{st})
		for range n - 1 {
			more, err := a.pgOpenMore(ctx, admin, name)
			if err != nil {
				return r, err
			}
			stores = append(stores, more)
		}
	}
	var arcs []*archive.Archive
	for _, st := range stores {
		// The workload is a flood by design: the per-session rate limits
		// would refuse most of it.
		arc, err := archive.New(st, archive.Options{Encoding: enc, Limits: archive.Limits{PatternsPerMinute: -1, WritesPerMinute: -1}})
		if err != nil {
			return r, err
		}
		arcs = append(arcs, arc)
	}
	rep, err := bench.RunArchiveServers(ctx, arcs, enc, opts)
	if err != nil {
		return r, err
	}
	recs, err := stores[0].ArchiveRecords(ctx, store.RecordQuery{})
	if err != nil {
		return r, err
	}
	// The baseline: the same number of writers, each write its own
	// transaction and fsync (an empty settings row), no group commit.
	base := baselineWrites(ctx, stores, rep.Agents, opts.Storm)
	return archiveRun{Backend: backend, ArchiveReport: rep, BaselineWritesPerSec: base, Records: int64(len(recs))}, nil
}

// nopClose is a store its maker closes.
type nopClose struct{ store.Store }

func (nopClose) Close() error { return nil }

// baselineWrites measures writes per second when every write is its own
// transaction: what the archive's group commit is measured against.
// Writer w writes through stores[w%len(stores)].
func baselineWrites(ctx context.Context, stores []store.Store, writers int, d time.Duration) float64 {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n, fails atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if err := stores[w%len(stores)].PutSetting(ctx, fmt.Sprintf("bench.%d.%d", w, i%16), fmt.Sprint(i)); err == nil {
					n.Add(1)
				} else if ctx.Err() == nil {
					fails.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if fails.Load() > 0 {
		return -1
	}
	return float64(n.Load()) / time.Since(start).Seconds()
}
