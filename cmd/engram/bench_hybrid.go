package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

func (a *app) benchHybridCmd() *cobra.Command {
	var (
		sf                    storeFlags
		queries, limit, words int
		pgURL                 string
	)
	cmd := &cobra.Command{
		Use:     "hybrid",
		PreRunE: atLeast(map[string]int64{"queries": 1, "words": 1, "limit": 1, "chunks": 1}),
		Short:   "Embedding throughput and hybrid search latency, against lexical search",
		Long: `Build (or, with --reuse, reopen) a store of at least --chunks chunks from the
synthetic corpus, embed it with the configured embedder (the corpus provider
trains its model first), and report the embedding throughput beside the
ingest throughput of the same build. Then time --queries queries of --words
words drawn from the corpus's word distribution through engram's search in
three modes, alternating: lexical only (the baseline), vector only, and
hybrid (both in parallel, fused). The vectors are loaded before timing.

With --postgres (or ENGRAM_BENCH_POSTGRES), the same store is built from the
same corpus in a PostgreSQL database (engram_bench_chunks_N, kept with --dir
and reused with --reuse, as the file is), embedded the same way, and every
query is asked of both backends in turn.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			st, built, stats, closeStore, err := a.openBenchStore(ctx, sf)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, closeStore()) }()
			sides := []hybridSide{{name: "SQLite"}}
			if sides[0].h, err = a.hybridPrepare(ctx, "", st, built, stats); err != nil {
				return err
			}
			if admin := a.benchPostgres(pgURL); admin != "" {
				pst, pbuilt, pstats, closePG, err := a.openBenchStorePG(ctx, sf, admin)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, closePG()) }()
				pg := hybridSide{name: "PostgreSQL"}
				if pg.h, err = a.hybridPrepare(ctx, "PostgreSQL ", pst, pbuilt, pstats); err != nil {
					return err
				}
				sides = append(sides, pg)
			}

			corpus := bench.NewCorpus(sf.seed + 1000)
			qs := make([]string, queries)
			for i := range qs {
				ws := make([]string, words)
				for j := range ws {
					ws[j] = corpus.Word()
				}
				qs[i] = strings.Join(ws, " ")
			}
			// Each query in every mode on every backend in turn, so that
			// the machine's load falls on all alike.
			modes := []retrieve.Mode{retrieve.ModeLexical, retrieve.ModeVector, retrieve.ModeHybrid}
			for i := range sides {
				sides[i].lat = map[retrieve.Mode][]time.Duration{}
			}
			for _, q := range qs {
				for i := range sides {
					sd := &sides[i]
					for _, m := range modes {
						t := time.Now()
						res, err := sd.h.Search(ctx, retrieve.Query{Text: q, Limit: limit, Mode: m})
						if err != nil {
							return fmt.Errorf("%s: %w", sd.name, err)
						}
						sd.lat[m] = append(sd.lat[m], time.Since(t))
						if res.Degraded {
							sd.degraded++
						}
					}
				}
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			head := fmt.Sprintf("%d queries of %d words, limit %d", queries, words, limit)
			if len(sides) > 1 {
				for _, sd := range sides {
					head += "\t" + sd.name + "\t\t"
				}
				fmt.Fprintln(w, head+"\t")
				head = ""
			}
			for range sides {
				head += "\tp50\tp95\tp99"
			}
			fmt.Fprintln(w, head+"\t")
			for _, m := range modes {
				row := string(m)
				for _, sd := range sides {
					s := bench.Summarize(sd.lat[m])
					row += fmt.Sprintf("\t%s\t%s\t%s", ms(s.P50), ms(s.P95), ms(s.P99))
				}
				fmt.Fprintln(w, row+"\t")
			}
			fmt.Fprintln(w, "(milliseconds)")
			if err := w.Flush(); err != nil {
				return err
			}
			for _, sd := range sides {
				if sd.degraded > 0 {
					fmt.Fprintf(a.stdout, "%s: %d searches missed the %v deadline or failed a backend\n", sd.name, sd.degraded, a.engineOptions().Retrieve.Deadline)
				}
			}
			return nil
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&queries, "queries", 300, "queries")
	f.IntVar(&words, "words", 5, "words per query")
	f.IntVar(&limit, "limit", 10, "hits per query")
	registerPostgres(cmd, &pgURL)
	return cmd
}

// hybridSide is one backend of bench hybrid.
type hybridSide struct {
	name     string
	h        *retrieve.Hybrid
	lat      map[retrieve.Mode][]time.Duration
	degraded int
}

// hybridPrepare reports a bench store's build, embeds it and loads its
// vectors; label prefixes its lines ("" for SQLite, as before there was
// another backend).
func (a *app) hybridPrepare(ctx context.Context, label string, st store.Store, built buildStats, stats store.Stats) (*retrieve.Hybrid, error) {
	eng, err := engine.New(st, a.engineOptions())
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(a.stdout, "%sstore: %s chunks, %s entries, %s\n", label, commas(stats.Chunks), commas(stats.Entries), humanBytes(stats.SizeBytes))
	if built.Chunks > 0 {
		fmt.Fprintf(a.stdout, "%singest: %s chunks stored and indexed in %v (%.0f chunks/s)\n", label,
			commas(built.Chunks), built.Took.Round(time.Millisecond), float64(built.Chunks)/built.Took.Seconds())
	}
	p := newProgress(a.stderr, label+"embedding", stats.Chunks)
	rep, err := eng.Embed(ctx, func(ep engine.EmbedProgress) {
		if ep.Phase == "embed" {
			p.update(ep.Done)
		}
	})
	if err != nil {
		return nil, err
	}
	p.done(fmt.Sprintf("%s chunks", commas(rep.Embedded)))
	if rep.Embedded > 0 {
		embedTook := rep.Took - rep.Training
		fmt.Fprintf(a.stdout, "%sembed: %s with %s: trained in %v, %s chunks embedded and stored in %v (%.0f chunks/s; %.0f chunks/s with training)\n",
			label, a.cfg.Embed.Provider, rep.Model, rep.Training.Round(time.Millisecond), commas(rep.Embedded),
			embedTook.Round(time.Millisecond), float64(rep.Embedded)/embedTook.Seconds(), float64(rep.Embedded)/rep.Took.Seconds())
	}
	h, err := eng.Hybrid(ctx)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := h.Warm(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(a.stdout, "%svectors: %s loaded in %v\n", label, commas(int64(h.Loaded())), time.Since(t0).Round(time.Millisecond))
	if h.Embedder() == nil {
		return nil, errors.New("no embedder: set embed.provider")
	}
	return h, nil
}
