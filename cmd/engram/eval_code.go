package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/store"
)

// indexCodeSet indexes a code set's tree into eng's store as engram index
// would (the configured exclusions, file size bound, workers and chunk
// size), and returns the paths it holds.
// Relevant files the indexer left out (generated, too large, ignored)
// stay relevant: every mode misses them, and a note says how many.
func (a *app) indexCodeSet(ctx context.Context, eng *engine.Engine, set *eval.Set) ([]string, error) {
	var opts index.Options
	a.indexOptions(&opts)
	p := newIndexProgress(a.stderr)
	opts.Progress = p.update
	sum, err := eng.Index(ctx, set.Dir, opts)
	p.finish()
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", set.Dir, err)
	}
	fmt.Fprintf(a.stderr, "%s: indexed %s files of %s in %v (%s chunks); skipped: %s\n", set.Name, commas(int64(sum.Indexed())),
		set.Dir, sum.Elapsed.Round(time.Millisecond), commas(int64(sum.Chunks)), orNone(counts(sum.Skipped)))
	files, err := eng.Store().Files(ctx, store.FileFilter{Brief: true})
	if err != nil {
		return nil, err
	}
	state := map[string]store.File{}
	var current []string
	for _, f := range files {
		state[f.Path] = f
		if f.State == store.FileCurrent {
			current = append(current, f.Path)
		}
	}
	if len(current) == 0 {
		return nil, fmt.Errorf("corpus %s: engram indexes none of its %d files (skipped: %s)", set.Dir, sum.Seen, orNone(counts(sum.Skipped)))
	}
	// Relevant files engram does not hold, and why (a mixed set's
	// conversation questions name turns).
	missing := map[string]bool{}
	var why []string
	var questions []eval.Question
	for _, part := range set.Parts() {
		if part.Code {
			questions = append(questions, part.Questions...)
		}
	}
	for _, q := range questions {
		for _, p := range q.Relevant {
			f, ok := state[p]
			if missing[p] || ok && f.State == store.FileCurrent {
				continue
			}
			missing[p] = true
			reason := "left out by the walk (ignored or excluded)"
			if ok {
				reason = strings.TrimSpace(string(f.State) + " " + f.Reason)
			}
			why = append(why, p+": "+reason)
		}
	}
	if len(why) > 0 {
		sort.Strings(why)
		fmt.Fprintf(a.stderr, "%s: %d relevant files are not indexed, so every mode misses them:\n  %s\n", set.Name, len(why),
			strings.Join(why[:min(len(why), 10)], "\n  "))
		if len(why) > 10 {
			fmt.Fprintf(a.stderr, "  and %d more\n", len(why)-10)
		}
	}
	return current, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// evalBM25 scores the plain BM25 baseline on a set: over the whole files
// of a code set's store (read from its tree), or over the turns of each
// conversation, without stop words.
func (a *app) evalBM25(ctx context.Context, set *eval.Set, corpora map[string]*evalCorpus) (evalRow, error) {
	start := time.Now()
	indexes := map[string]*eval.BM25{}
	docs := 0
	for name, c := range corpora {
		var ds []eval.Doc
		// A mixed set's store holds files and turns (eval.Mix).
		if len(c.files) > 0 {
			for _, p := range c.files {
				if err := ctx.Err(); err != nil {
					return evalRow{}, err
				}
				data, err := os.ReadFile(filepath.Join(set.Dir, filepath.FromSlash(p)))
				if err != nil {
					return evalRow{}, fmt.Errorf("bm25: %w", err)
				}
				ds = append(ds, eval.Doc{ID: p, Path: p, Text: string(data)})
			}
		}
		for _, it := range set.Corpora[name] {
			ds = append(ds, eval.Doc{ID: it.ID, Text: it.Text})
		}
		indexes[name] = eval.NewBM25(ds, eval.BM25Options{StopWords: !set.Code})
		docs += len(ds)
	}
	fmt.Fprintf(a.stderr, "%s: bm25: %s documents indexed in %v\n", set.Name, commas(int64(docs)), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	m, err := eval.Run(ctx, set, func(_ context.Context, q eval.Question, k int) ([]string, error) {
		return indexes[q.Corpus].Search(q.Text, k), nil
	})
	if err != nil {
		return evalRow{}, err
	}
	fmt.Fprintf(a.stderr, "%s: bm25: %d questions in %v, recall@10 %.3f\n", set.Name, m.Questions,
		time.Since(start).Round(time.Millisecond), m.Recall[10])
	return rowOf(set, "bm25", m), nil
}

// printChecks prints the ranking checks: how often the first ten items
// change with the number of hits asked for, and on code sets how often a
// test, doc or changelog comes first.
func printChecks(a *app, rows []evalRow) {
	show := false
	for _, r := range rows {
		show = show || r.LimitMoved != nil || r.DistractorFirst != nil
	}
	if !show {
		return
	}
	fmt.Fprintln(a.stdout)
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "set\tmode\ttest/doc first\tlimit moves top 10\tMRR at 25 hits\tMRR at 200+\tp50 ms at 10\tp95 ms at 10\t")
	pct := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100**v)
	}
	num := func(v *float64, format string) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf(format, *v)
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t\n", r.Set, r.Mode, pct(r.DistractorFirst), pct(r.LimitMoved), num(r.MRRFew, "%.3f"), r.MRR,
			num(r.P50ms10, "%.1f"), num(r.P95ms10, "%.1f"))
	}
	_ = w.Flush()
}
