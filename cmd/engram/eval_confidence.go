package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

// confidenceBins bound the rows of the confidence table: the seed's
// thresholds (0.85 for a hint, 0.90 for an excerpt) and the ranges below.
var confidenceBins = []float64{0, 0.5, 0.7, 0.8, 0.85, 0.9, 1.01}

// confidenceRow is how often pre-fetch candidates of one confidence range
// are relevant: what a confidence means on a set.
type confidenceRow struct {
	Set string `json:"set"`
	// From (inclusive) and To bound the confidence. Gated rows hold the
	// candidates that failed the multi-signal check (a signal under
	// prefetch.min_signal while both backends answered): never injected,
	// whatever their confidence.
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Gated bool    `json:"gated,omitempty"`
	// Candidates is how many of the candidates pre-fetch considers fell
	// in the range; Relevant how many of them hold a relevant item.
	Candidates int `json:"candidates"`
	Relevant   int `json:"relevant"`
	// Questions is the share of questions with a candidate in the range.
	Questions float64 `json:"questions"`
}

// Precision is the share of the row's candidates that are relevant.
func (r confidenceRow) Precision() float64 {
	if r.Candidates == 0 {
		return 0
	}
	return float64(r.Relevant) / float64(r.Candidates)
}

// evalConfidence asks every question as pre-fetch does (the configured
// number of candidates, hybrid, or lexical only without an embedder) and counts, for each confidence range,
// how many candidates hold a relevant item: a file the commit changed, an
// evidence turn. The seed's thresholds read as precision only if these
// shares come near them.
func (a *app) evalConfidence(ctx context.Context, set *eval.Set, engines map[string]*engine.Engine, shared map[string]map[string][]string) ([]confidenceRow, error) {
	opts := retrieve.PrefetchDefaults(a.engineOptions().Prefetch)
	n := len(confidenceBins) - 1
	rows := make([]confidenceRow, n+1)
	for i := range n {
		rows[i] = confidenceRow{Set: set.Name, From: confidenceBins[i], To: min(confidenceBins[i+1], 1)}
	}
	rows[n] = confidenceRow{Set: set.Name, Gated: true, From: 0, To: 1}
	questions := 0
	for _, q := range set.Questions {
		if len(q.Relevant) == 0 {
			continue
		}
		h, err := engines[q.Corpus].Hybrid(ctx)
		if err != nil {
			return nil, err
		}
		res, err := h.Search(ctx, retrieve.Query{Text: q.Text, Limit: opts.Candidates, Now: q.Time})
		if err != nil {
			return nil, fmt.Errorf("question %s: %w", q.ID, err)
		}
		if res.Degraded {
			return nil, fmt.Errorf("question %s: search degraded: %v", q.ID, res.Faults)
		}
		questions++
		relevant := map[string]bool{}
		for _, id := range q.Relevant {
			relevant[id] = true
		}
		seen := make([]bool, n+1)
		best := retrieve.BestOf(res.Hits)
		for _, hit := range res.Hits {
			i := n // gated
			if conf, ok := retrieve.Confidence(hit, best, res.Lexical, res.Vector, opts.MinSignal); ok {
				i = confidenceBin(conf)
			}
			rows[i].Candidates++
			for _, id := range itemsOf([]store.Hit{hit.Hit}, shared[q.Corpus], 1<<20) {
				if relevant[id] {
					rows[i].Relevant++
					break
				}
			}
			seen[i] = true
		}
		for i, s := range seen {
			if s {
				rows[i].Questions++
			}
		}
	}
	for i := range rows {
		if questions > 0 {
			rows[i].Questions /= float64(questions)
		}
	}
	return rows, nil
}

// confidenceBin returns the row of confidenceBins that holds c.
func confidenceBin(c float64) int {
	for i := len(confidenceBins) - 2; i > 0; i-- {
		if c >= confidenceBins[i] {
			return i
		}
	}
	return 0
}

func printConfidence(a *app, rows []confidenceRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(a.stdout)
	fmt.Fprintln(a.stdout, "pre-fetch confidence: how often the candidates of each range are relevant")
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "set\tconfidence\tcandidates\trelevant\tquestions with one\t")
	for _, r := range rows {
		rng := fmt.Sprintf("%.2f-%.2f", r.From, r.To)
		if r.Gated {
			rng = "gated"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.2f\t%.1f%%\t\n", r.Set, rng, r.Candidates, r.Precision(), 100*r.Questions)
	}
	_ = w.Flush()
}
