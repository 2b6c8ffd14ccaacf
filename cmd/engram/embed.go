package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
)

func (a *app) embedCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "embed",
		Short: "Bring the vectors of semantic search up to date",
		Long: `Embed every chunk that has no vector yet under the configured embedder
(embed.provider; see 'engram model'). With the default provider, corpus, a
model is first trained on the store itself (nothing is downloaded), and
retrained when the store has grown to twice its size; the new model's vectors
are made before search switches to it.

engram index and engram watch run this after storing, unless --no-embed is
given; engram add embeds its new chunks with the current model, and leaves
retraining to this command. The queue is the store's: chunks without a vector. Interrupt it at any
time; the next run continues. Search works, lexically, before it is done.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			eng, err := a.engine(cmd.Context(), true)
			if err != nil {
				return err
			}
			rep, err := a.runEmbed(cmd.Context(), eng, true)
			if jsonOut && err == nil {
				return writeJSON(a.stdout, rep)
			}
			switch {
			case err != nil || rep.TooSmall || rep.Trained || rep.Embedded > 0:
			case rep.Model == "":
				fmt.Fprintln(a.stderr, "embed: nothing to do: embeddings are off (embed.provider = \"none\")")
			default:
				fmt.Fprintf(a.stderr, "embed: nothing pending: every chunk has a vector from %s\n", rep.Model)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	cmd.AddCommand(a.embedStatusCmd())
	return cmd
}

// runEmbed embeds what is pending, with progress on standard error, and
// reports in one line. Without retrain it only embeds new chunks under the
// current model (engine.EmbedNew), and says when a retraining is due.
func (a *app) runEmbed(ctx context.Context, eng *engine.Engine, retrain bool) (engine.EmbedReport, error) {
	p := newEmbedProgress(a.stderr)
	embed := eng.Embed
	if !retrain {
		embed = eng.EmbedNew
	}
	rep, err := embed(ctx, p.update)
	p.finish()
	if err == nil && rep.RetrainDue {
		fmt.Fprintln(a.stderr, "embed: the corpus model is due for retraining (the store has grown, or engram now makes its words otherwise); run engram embed to retrain it (search uses the current one meanwhile)")
	}
	switch {
	case err != nil:
		return rep, fmt.Errorf("embed: %w (what was embedded is kept; run engram embed to continue)", err)
	case rep.TooSmall:
		fmt.Fprintln(a.stderr, "embed: the store is too small to train the corpus model yet; search is lexical until it grows")
	case rep.Model == "":
		// embeddings are off
	case rep.Embedded > 0 || rep.Trained:
		trained := ""
		if rep.Trained {
			trained = "trained a new model, "
		}
		fmt.Fprintf(a.stderr, "embed: %s%s chunks embedded with %s in %v\n", trained, commas(rep.Embedded), rep.Model, rep.Took.Round(time.Millisecond))
	}
	return rep, nil
}

// embedProgress shows embedding progress: a bar on a terminal, a line
// every few seconds otherwise.
type embedProgress struct {
	w        io.Writer
	terminal bool
	bar      *progressbar.ProgressBar
	phase    string
	last     time.Time
	// label starts each line and the bar's description; every is how
	// often a line is written when w is not a terminal.
	label string
	every time.Duration
}

func newEmbedProgress(w io.Writer) *embedProgress {
	f, ok := w.(*os.File)
	return &embedProgress{w: w, terminal: ok && isTerminal(f), last: time.Now(), every: 2 * time.Second}
}

func (p *embedProgress) update(pr engine.EmbedProgress) {
	if pr.Phase != p.phase {
		p.finish()
		p.phase = pr.Phase
		desc := map[string]string{"train": "training", "embed": "embedding"}[pr.Phase]
		if p.label != "" {
			desc = p.label + ": " + desc
		}
		if p.terminal && pr.Total > 0 {
			p.bar = progressbar.NewOptions64(pr.Total,
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription(desc),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetItsString("chunks"),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(),
			)
		}
	}
	if p.bar != nil {
		_ = p.bar.Set64(pr.Done)
		return
	}
	if time.Since(p.last) >= p.every && pr.Total > 0 {
		p.last = time.Now()
		label := ""
		if p.label != "" {
			label = p.label + ": "
		}
		fmt.Fprintf(p.w, "%s%s: %d/%d chunks\n", label, pr.Phase, pr.Done, pr.Total)
	}
}

func (p *embedProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}

func (a *app) embedStatusCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the embedder, its coverage of the store, and the queue",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			eng, err := a.engine(cmd.Context(), true)
			if err != nil {
				return err
			}
			st, err := eng.EmbedStatus(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(a.stdout, st)
			}
			w := a.stdout
			fmt.Fprintf(w, "provider  %s\n", st.Provider)
			switch {
			case st.Provider == engine.ProviderNone:
				fmt.Fprintln(w, "model     none: search is lexical only")
			case st.Model == "" && st.Provider == engine.ProviderCorpus:
				fmt.Fprintf(w, "model     %s; search is lexical until then\n", engine.UntrainedCorpus(st.Chunks))
			case st.Model == "":
				fmt.Fprintln(w, "model     not trained yet: run engram embed (search is lexical until then)")
			default:
				fmt.Fprintf(w, "model     %s (%d dimensions)\n", st.Model, st.Dim)
			}
			if st.Provider != engine.ProviderNone {
				f := st.Fusion
				if f.Method == retrieve.RRF {
					fmt.Fprintf(w, "fusion    rrf (k %g), lexical %g / vector %g\n", f.K, f.LexicalWeight, f.VectorWeight)
				} else {
					fmt.Fprintf(w, "fusion    weighted, lexical %g / vector %g\n", f.LexicalWeight, f.VectorWeight)
				}
			}
			if st.Rerank != "" {
				fmt.Fprintf(w, "rerank    %s, the best %d hybrid hits\n", st.Rerank, st.RerankDepth)
			}
			cov := 0.0
			if st.Chunks > 0 {
				cov = 100 * float64(st.Embedded) / float64(st.Chunks)
			}
			fmt.Fprintf(w, "coverage  %s of %s chunks (%.1f%%)\n", commas(st.Embedded), commas(st.Chunks), cov)
			fmt.Fprintf(w, "queue     %s chunks pending\n", commas(st.Chunks-st.Embedded))
			if st.TrainedChunks > 0 {
				fmt.Fprintf(w, "trained   on a store of %s chunks; retrained at %s\n", commas(st.TrainedChunks),
					commas(int64(float64(st.TrainedChunks)*a.corpusGrowth())))
			}
			if st.Next != "" {
				fmt.Fprintf(w, "rollout   %s: %s of %s chunks embedded (search switches when done)\n", st.Next, commas(st.NextEmbedded), commas(st.Chunks))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the status as JSON")
	return cmd
}

func (a *app) corpusGrowth() float64 {
	if g := a.cfg.Embed.CorpusGrowth; g > 1 {
		return g
	}
	return engine.DefaultCorpusGrowth
}

func (a *app) prefetchCmd() *cobra.Command {
	var (
		budget, remaining int
		jsonOut           bool
	)
	cmd := &cobra.Command{
		Use:   "prefetch QUERY...",
		Short: "Print the context block engram would inject with a query",
		Long: `Build the pre-fetch block for QUERY: the content engram is confident an agent
needs, to inject with the query before the agent sees it.

Only hits over the relevance floor are injected: a hit must hold at least
prefetch.min_coverage (35%) of the query's words, weighted by rarity, and
where both signals answer, its cosine and that share must each be at least
prefetch.min_signal (0.25). When only one signal is available the floor
rises by 10%. Below it nothing is injected, and the block is empty: the agent
can still search. Over it, the best hits become excerpts
([AUTO-RETRIEVED: path:start-end | confidence: C] with the content), at
most prefetch.max_excerpts (8) in 60% of the budget, and those that do not
fit become one-line hints ([RELATED: ...]), at most 3 in 30%. Confidence is
the mean of the lexical signal, the vector signal (cosine similarity) and
the hit's standing (its fused score over the best hit's);
prefetch.excerpt_threshold and prefetch.confidence_threshold (0 by
default) can ask more of it.

The budget is --budget tokens, or prefetch.budget_share (10%) of --remaining,
the tokens left in the agent's window. The block and its token count are
printed; injected excerpts count as used and stay hot for later searches.`,
		Example: `  engram prefetch "why does the upload retry forever" --budget 2000
  engram prefetch ValidateToken expiry --remaining 120000 --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("prefetch needs a query")
			}
			if budget != 0 {
				if _, err := api.PrefetchBudget.Check(budget); err != nil {
					return &usageError{err}
				}
			}
			if _, err := api.RemainingRange.Check(remaining); err != nil {
				return &usageError{err}
			}
			if budget == 0 && remaining == 0 {
				return usagef("prefetch needs --budget or --remaining")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			eng, err := a.engine(cmd.Context(), true)
			if err != nil {
				return err
			}
			b, err := eng.Prefetch(cmd.Context(), joinArgs(args), remaining, retrievePrefetch(budget))
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(a.stdout, b)
			}
			for _, f := range b.Faults {
				fmt.Fprintf(a.stderr, "warning: %s\n", f)
			}
			if b.Text != "" {
				fmt.Fprintln(a.stdout, b.Text)
			}
			note := ""
			if b.SingleSignal {
				note = " (one signal only: thresholds raised)"
			}
			fmt.Fprintf(a.stderr, "prefetch: %d tokens of a %d-token budget: %s, %s%s\n",
				b.Tokens, b.Budget, plural(len(b.Excerpts), "excerpt"), plural(len(b.Hints), "hint"), note)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&budget, "budget", 0, "the block's budget in tokens")
	f.IntVar(&remaining, "remaining", 0, "tokens left in the agent's window; the budget is prefetch.budget_share of it")
	f.BoolVar(&jsonOut, "json", false, "print the block as JSON")
	return cmd
}

func joinArgs(args []string) string { return strings.Join(args, " ") }

// retrievePrefetch is the per-call part of pre-fetch options.
func retrievePrefetch(budget int) retrieve.PrefetchOptions {
	return retrieve.PrefetchOptions{Budget: budget}
}
