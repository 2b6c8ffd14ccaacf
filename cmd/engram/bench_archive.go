package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/tokens"
)

func (a *app) benchArchiveCmd() *cobra.Command {
	var (
		opts    bench.ArchiveOptions
		dir     string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "The archivalist under the seed's stress test: write throughput, briefing latency, tokens per read",
		Long: `Run the seed's stress test on a new store: --sessions sessions of --agents
agents each (the first of each session the parent of the rest). First every
agent writes as fast as it can for --storm (two thirds session state, one
third new global records): acknowledged writes per second, each durable
before it is acknowledged. Then --readers readers read for --mixed in the
seed's mix (50 % micro briefings, 30 % standard, 15 % delta syncs, 5 % full
briefings), conditionally on the versions each agent last saw, while
--write-rate writes per second go on: briefing latency, the share of reads
that found nothing changed, and tokens per read against the same reads
made as unconditional standard and full briefings.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, _, done, err := scratchStore(ctx, dir, "archive.db")
			if err != nil {
				return err
			}
			defer done()
			enc, err := tokens.Get(a.cfg.Tokens.Encoding)
			if err != nil {
				return err
			}
			// The workload is a flood by design: the per-session rate limits
			// would refuse most of it.
			arc, err := archive.New(st, archive.Options{Encoding: enc, Limits: archive.Limits{PatternsPerMinute: -1, WritesPerMinute: -1}})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "%d sessions x %d agents: %s write storm, then %s of reads with %d writes/s...\n",
				opts.Sessions, opts.AgentsPerSession, opts.Storm, opts.Mixed, opts.WriteRate)
			rep, err := bench.RunArchive(ctx, arc, enc, opts)
			if err != nil {
				return err
			}
			// The baseline: the same number of writers, each write its own
			// transaction and fsync (an empty settings row), no group commit.
			base := baselineWrites(ctx, st, rep.Agents, opts.Storm)
			if jsonOut {
				return writeJSON(a.stdout, struct {
					bench.ArchiveReport
					BaselineWritesPerSec float64 `json:"baseline_writes_per_sec"`
				}{rep, base})
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
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
			return w.Flush()
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
	f.StringVar(&dir, "dir", "", "directory for the store (default: a temporary one, removed after)")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

// baselineWrites measures writes per second when every write is its own
// transaction: what the archive's group commit is measured against.
func baselineWrites(ctx context.Context, st *sqlite.Store, writers int, d time.Duration) float64 {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n, fails atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if err := st.PutSetting(ctx, fmt.Sprintf("bench.%d.%d", w, i%16), fmt.Sprint(i)); err == nil {
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
