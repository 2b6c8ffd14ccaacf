package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/trajectory"
	"github.com/engramhq/engram/internal/window"
)

func (a *app) benchTrajectoriesCmd() *cobra.Command {
	var (
		budgets                        []int
		benchPath, file, counts, split string
		dir                            string
		jsonOut, assembly              bool
		limitRuns                      int
	)
	cmd := &cobra.Command{
		Use:     "trajectories",
		PreRunE: atLeast(map[string]int64{"runs": 0}),
		Short:   "Replay 401 real agent runs through context strategies at fixed budgets, and score them",
		Long: `Replay the real coding-agent runs of the shared bench (trajectories/: 401
SWE-bench Verified runs of mini-swe-agent with their o200k_base token
counts) turn by turn through each strategy at each --budget, and score
what each would have sent before every assistant message, built from the
messages before it, against sending the whole history every turn. The
scores are the README's of that folder, computed as its baselines.py does
(and TestReplay_Reference checks that they are its figures):

  line recall        needles (paths, identifiers, numbers the agent used,
                     first seen in an observation) whose line of output is
                     in the context, verbatim
  within one exp.    the same, counting the lines behind a reference marker
  string recall      needles anywhere in the context
  tokens vs full     tokens sent over all turns, against the full history's
  effective vs full  the same, billed as with a prompt cache (the leading
                     blocks that repeat the previous turn's at a tenth)
  over budget        contexts over the budget
  unpaired           contexts that keep an action without its observation,
                     or an observation without its action

The strategies are recency truncation and observation masking (the last 5
observations whole, older ones a placeholder of 12 tokens), the baselines,
and engram's window (internal/window's Layout with its policy for an
agent's tool loop, at budgets of 256 tokens or more): each command a tool call and
its observation the call's result, evicted runs replaced by reference
markers, lines of evicted observations kept in a digest, a message too
large shown as its head and tail. The window's limits are the budget
itself: the replay reserves nothing for the response, as the baselines
do not.

--assembly adds engram's turn assembly (internal/assemble), in the same
run: each run a window of the tool_loop role in a store of its own (under
a temporary directory, or --dir), so that a run's pre-fetch scores against
its own words whichever runs are replayed beside it and two replays give
the same rows, appended a step at a time as a harness appends them,
and each context the turn the Assembler builds for the step, within a
budget that is the row's exactly: "engram assembly" with engram's
pre-fetch in every step (lexical, within the run's own window: what
--retrieval on gives), and "engram assembly, no pre-fetch" (what the
default gives a tool loop's steps). Markers are scored as the window's are; the arc, the
history's summaries and excerpts and the pre-fetch as text (string and
line recall, not checked against the messages they quote). A turn the
assembly refuses (the system prompt and the step alone pass the budget)
is scored as nothing sent and counted under refused. It takes minutes,
not seconds: --runs N replays the first N runs only.

--split even or odd replays half the runs (by their place in the file,
from 0): tune on one half, report the other, so that a setting chosen on
these runs is checked on runs it was not chosen on.

--bench-dir defaults to $ENGRAM_BENCH_DIR, else ../shared/bench from the
project; --file and --counts name other runs in the same format. Bad input
is an error naming the file and line.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, b := range budgets {
				if b <= 0 {
					return usagef("--budget %d: budgets are tokens, more than 0", b)
				}
			}
			if limitRuns < 0 {
				return usagef("--runs %d: a number of runs, 0 for all", limitRuns)
			}
			if split != "" && split != "even" && split != "odd" {
				return usagef("--split %q: want even or odd", split)
			}
			benchPath = a.benchSets(benchPath)
			if file == "" {
				file = filepath.Join(benchPath, "trajectories", "trajectories.jsonl.gz")
			}
			if counts == "" {
				counts = filepath.Join(benchPath, "trajectories", "counts.o200k.jsonl")
			}
			start := time.Now()
			runs, err := trajectory.Load(file, counts)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w (set --bench-dir or ENGRAM_BENCH_DIR, or --file and --counts)", err)
			}
			if err != nil {
				return err
			}
			if split != "" {
				half := runs[:0:0]
				for i, r := range runs {
					if (i%2 == 0) == (split == "even") {
						half = append(half, r)
					}
				}
				runs = half
			}
			if limitRuns > 0 && len(runs) > limitRuns {
				runs = runs[:limitRuns]
			}
			if len(runs) == 0 {
				return fmt.Errorf("%s: no runs", file)
			}
			read := time.Since(start)
			specs := append(trajectory.Baselines(budgets...), trajectory.Windows(budgets...)...)
			if assembly {
				asm, done, err := a.trajectoryAssembly(cmd.Context(), dir)
				if err != nil {
					return err
				}
				defer done()
				specs = append(specs, asm.Specs(cmd.Context(), budgets...)...)
			}
			// Progress only once the replay has taken a while: most take
			// a few seconds.
			progress := newProgress(a.stderr, "replaying", int64(len(runs)))
			shown := false
			rep, err := trajectory.ReplayAll(cmd.Context(), runs, specs, func(n int) {
				if time.Since(start) > 3*time.Second {
					progress.update(int64(n))
					shown = true
				}
			})
			if err != nil {
				return err
			}
			elapsed := time.Since(start)
			if shown {
				progress.done(fmt.Sprintf("%d runs in %v", len(runs), elapsed.Round(100*time.Millisecond)))
			}
			if jsonOut {
				return writeJSON(a.stdout, trajectoryResults(rep, read, elapsed))
			}
			return printTrajectories(a, rep, read, elapsed)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&budgets, "budget", []int{4000, 8000, 16000}, "context budgets, in tokens")
	f.StringVar(&benchPath, "bench-dir", "", "the bench folder (default $ENGRAM_BENCH_DIR, else ../shared/bench)")
	f.StringVar(&file, "file", "", "the runs (default trajectories/trajectories.jsonl.gz under the bench folder)")
	f.StringVar(&counts, "counts", "", "their token counts (default trajectories/counts.o200k.jsonl under the bench folder)")
	f.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	f.StringVar(&split, "split", "", "replay half the runs: even or odd (by place in the file, from 0)")
	f.BoolVar(&assembly, "assembly", false, "also replay the runs through engram's turn assembly, with and without the pre-fetch")
	f.StringVar(&dir, "dir", "", "with --assembly, the directory its runs' stores are made in, each removed when its run is done (default: a temporary one)")
	f.IntVar(&limitRuns, "runs", 0, "replay only the first N runs (after --split; 0: all)")
	return cmd
}

// trajectoryAssembly makes the assembly's windows, each run's in a store
// of its own under dir or a temporary directory (so that a run's pre-fetch
// scores against its own run alone, whichever runs are replayed beside
// it): engines counting in o200k_base as the runs' counts do, keeping
// secrets so that every message is stored as given, retrieving without an
// embedder. done removes the directory.
func (a *app) trajectoryAssembly(_ context.Context, dir string) (asm *trajectory.Assembly, done func(), err error) {
	d, cleanup, err := benchDir(dir)
	if err != nil {
		return nil, nil, err
	}
	opts := a.engineOptions()
	opts.Encoding, opts.KeepSecrets = tokens.O200kBase, true
	opts.Embed = engine.EmbedOptions{Provider: "none"}
	open := func() (*engine.Engine, func() error, error) {
		sub, err := os.MkdirTemp(d, "run-")
		if err != nil {
			return nil, nil, err
		}
		st, err := sqlite.Open(context.Background(), filepath.Join(sub, "engram.db"), sqlite.Options{Logger: a.log})
		if err != nil {
			return nil, nil, errors.Join(err, os.RemoveAll(sub))
		}
		closeStore := func() error { return errors.Join(st.Close(), os.RemoveAll(sub)) }
		eng, err := engine.New(st, opts)
		if err != nil {
			return nil, nil, errors.Join(err, closeStore())
		}
		return eng, closeStore, nil
	}
	cat, err := a.cfg.Catalog()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	margin := cmp.Or(a.cfg.Window.Margin, window.DefaultMargin)
	return &trajectory.Assembly{Open: open, Catalog: cat, Config: window.ConfigFrom(a.cfg.Window),
		Limit: func(budget int) int { return limitFor(budget, margin) }}, cleanup, nil
}

// trajectoryRow is one line of engram bench trajectories' table.
type trajectoryRow struct {
	Strategy string `json:"strategy"`
	// Budget is 0 for the full history.
	Budget          int     `json:"budget"`
	LineRecall      float64 `json:"line_recall"`
	ExpansionRecall float64 `json:"within_one_expansion"`
	StringRecall    float64 `json:"string_recall"`
	TokensVsFull    float64 `json:"tokens_vs_full"`
	EffectiveVsFull float64 `json:"effective_vs_full"`
	EffectiveTokens float64 `json:"effective_tokens"`
	// Sums are the counts behind the figures.
	Sums trajectory.Score `json:"sums"`
}

type trajectoryReport struct {
	Runs        int             `json:"runs"`
	Rows        []trajectoryRow `json:"rows"`
	ReadSeconds float64         `json:"read_seconds"`
	Seconds     float64         `json:"seconds"`
}

func trajectoryResults(rep trajectory.Report, read, elapsed time.Duration) trajectoryReport {
	row := func(name string, budget int, s trajectory.Score) trajectoryRow {
		r := trajectory.Row{Name: name, Budget: budget, Score: s}
		return trajectoryRow{Strategy: name, Budget: budget, LineRecall: s.LineRecall(), ExpansionRecall: s.ExpansionRecall(),
			StringRecall: s.StringRecall(), TokensVsFull: rep.TokensVsFull(r), EffectiveVsFull: rep.EffectiveVsFull(r),
			EffectiveTokens: s.EffectiveTokens(), Sums: s}
	}
	out := trajectoryReport{Runs: rep.Runs, ReadSeconds: read.Seconds(), Seconds: elapsed.Seconds()}
	for _, r := range rep.Rows {
		out.Rows = append(out.Rows, row(r.Name, r.Budget, r.Score))
	}
	out.Rows = append(out.Rows, row("full history", 0, rep.Full))
	return out
}

func printTrajectories(a *app, rep trajectory.Report, read, elapsed time.Duration) error {
	full := rep.Full
	fmt.Fprintf(a.stdout, "%d runs, %s turns, %s needles; full history: %s tokens sent, %s effective with a prompt cache\n",
		rep.Runs, commas(int64(full.Turns)), commas(int64(full.Needles)), commas(full.TokensSent), commas(int64(math.RoundToEven(full.EffectiveTokens()))))
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "strategy\tbudget\tline recall\twithin one exp.\tstring recall\ttokens vs full\teffective vs full\tover budget\tunpaired\trefused")
	res := trajectoryResults(rep, read, elapsed)
	for _, r := range res.Rows {
		budget := "-"
		if r.Budget > 0 {
			budget = commas(int64(r.Budget))
		}
		fmt.Fprintf(w, "%s\t%6s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%d\n", r.Strategy, budget, r.LineRecall, r.ExpansionRecall,
			r.StringRecall, r.TokensVsFull, r.EffectiveVsFull, r.Sums.OverBudget, r.Sums.Unpaired, r.Sums.Refused)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "over budget, unpaired, refused: contexts, of %s in each row\nread %d runs in %v, replayed them in %v\n",
		commas(int64(full.Turns)), rep.Runs, read.Round(100*time.Millisecond), (elapsed - read).Round(100*time.Millisecond))
	return nil
}
