package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
)

func (a *app) benchHybridCmd() *cobra.Command {
	var (
		sf                    storeFlags
		queries, limit, words int
	)
	cmd := &cobra.Command{
		Use:   "hybrid",
		Short: "Embedding throughput and hybrid search latency, against lexical search",
		Long: `Build (or, with --reuse, reopen) a store of at least --chunks chunks from the
synthetic corpus, embed it with the configured embedder (the corpus provider
trains its model first), and report the embedding throughput beside the
ingest throughput of the same build. Then time --queries queries of --words
words drawn from the corpus's word distribution through engram's search in
three modes, alternating: lexical only (the baseline), vector only, and
hybrid (both in parallel, fused). The vectors are loaded before timing.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			st, built, stats, closeStore, err := a.openBenchStore(ctx, sf)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, closeStore()) }()
			eng, err := engine.New(st, a.engineOptions())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "store: %s chunks, %s entries, %s\n", commas(stats.Chunks), commas(stats.Entries), humanBytes(stats.SizeBytes))
			if built.Chunks > 0 {
				fmt.Fprintf(a.stdout, "ingest: %s chunks stored and indexed in %v (%.0f chunks/s)\n",
					commas(built.Chunks), built.Took.Round(time.Millisecond), float64(built.Chunks)/built.Took.Seconds())
			}

			p := newProgress(a.stderr, "embedding", stats.Chunks)
			rep, err := eng.Embed(ctx, func(ep engine.EmbedProgress) {
				if ep.Phase == "embed" {
					p.update(ep.Done)
				}
			})
			if err != nil {
				return err
			}
			p.done(fmt.Sprintf("%s chunks", commas(rep.Embedded)))
			if rep.Embedded > 0 {
				embedTook := rep.Took - rep.Training
				fmt.Fprintf(a.stdout, "embed: %s with %s: trained in %v, %s chunks embedded and stored in %v (%.0f chunks/s; %.0f chunks/s with training)\n",
					a.cfg.Embed.Provider, rep.Model, rep.Training.Round(time.Millisecond), commas(rep.Embedded),
					embedTook.Round(time.Millisecond), float64(rep.Embedded)/embedTook.Seconds(), float64(rep.Embedded)/rep.Took.Seconds())
			}
			h, err := eng.Hybrid(ctx)
			if err != nil {
				return err
			}
			t0 := time.Now()
			if err := h.Warm(ctx); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "vectors: %s loaded in %v\n", commas(int64(h.Loaded())), time.Since(t0).Round(time.Millisecond))
			if h.Embedder() == nil {
				return errors.New("no embedder: set embed.provider")
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
			modes := []retrieve.Mode{retrieve.ModeLexical, retrieve.ModeVector, retrieve.ModeHybrid}
			lat := map[retrieve.Mode][]time.Duration{}
			degraded := 0
			for _, q := range qs {
				for _, m := range modes {
					t := time.Now()
					res, err := h.Search(ctx, retrieve.Query{Text: q, Limit: limit, Mode: m})
					if err != nil {
						return err
					}
					lat[m] = append(lat[m], time.Since(t))
					if res.Degraded {
						degraded++
					}
				}
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(w, "%d queries of %d words, limit %d\tp50\tp95\tp99\t\n", queries, words, limit)
			for _, m := range modes {
				s := bench.Summarize(lat[m])
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t\n", m, ms(s.P50), ms(s.P95), ms(s.P99))
			}
			fmt.Fprintln(w, "(milliseconds)")
			if err := w.Flush(); err != nil {
				return err
			}
			if degraded > 0 {
				fmt.Fprintf(a.stdout, "%d searches missed the %v deadline or failed a backend\n", degraded, a.engineOptions().Retrieve.Deadline)
			}
			return nil
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&queries, "queries", 300, "queries")
	f.IntVar(&words, "words", 5, "words per query")
	f.IntVar(&limit, "limit", 10, "hits per query")
	return cmd
}
