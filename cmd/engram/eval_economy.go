package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/retrieve"
)

// economyRow is the token economy of pre-fetch on a conversation set at
// one budget and policy: how much of the evidence the block carries, and
// what it costs against the whole conversation.
type economyRow struct {
	Set    string `json:"set"`
	Budget int    `json:"budget"`
	// Policy is "seed" (the configured thresholds: at most two excerpts
	// over the excerpt threshold, three hints) or "packed" (the best hits
	// as excerpts until the budget is full, no thresholds).
	Policy    string `json:"policy"`
	Questions int    `json:"questions"`
	// Recall is the mean share of a question's evidence turns the block
	// holds as excerpts; WithHints counts a one-line hint as holding its
	// turn.
	Recall    float64 `json:"evidence_recall"`
	WithHints float64 `json:"evidence_recall_with_hints"`
	// Tokens is the block's mean size; Conversation the mean size of the
	// conversation a question is about, the cost of putting all of it in
	// the window (evidence recall 1).
	Tokens       float64 `json:"block_tokens"`
	Conversation float64 `json:"conversation_tokens"`
	// Empty is the share of questions that got no block at all.
	Empty float64 `json:"empty"`
}

// evalEconomy measures pre-fetch blocks capped at each budget on a
// conversation set. The blocks are built as an agent gets them, through
// the hybrid search the configuration describes, but leave the access
// record alone so that one question's block does not warm the next.
func (a *app) evalEconomy(ctx context.Context, set *eval.Set, engines map[string]*engine.Engine, shared map[string]map[string][]string, budgets []int) ([]economyRow, error) {
	if set.Code || len(budgets) == 0 {
		return nil, nil
	}
	convTokens := map[string]int{}
	for name, items := range set.Corpora {
		enc := engines[name].Encoding()
		for _, it := range items {
			convTokens[name] += enc.Count(it.Text)
		}
	}
	policies := []struct {
		name string
		opts retrieve.PrefetchOptions
	}{
		{"seed", a.engineOptions().Prefetch},
		{"packed", retrieve.PrefetchOptions{
			ExcerptThreshold: 1e-9, ConfidenceThreshold: 1e-9, MinSignal: -1, SingleSignalFactor: 1,
			MaxExcerpts: 1 << 20, MaxHints: -1, ExcerptShare: 1, Candidates: 200,
		}},
	}
	var rows []economyRow
	for _, budget := range budgets {
		for _, pol := range policies {
			row := economyRow{Set: set.Name, Budget: budget, Policy: pol.name}
			for _, q := range set.Questions {
				if len(q.Relevant) == 0 {
					continue
				}
				eng := engines[q.Corpus]
				h, err := eng.Hybrid(ctx)
				if err != nil {
					return nil, err
				}
				opts := pol.opts
				opts.Budget, opts.NoRecord, opts.Now = budget, true, q.Time
				b, err := h.Prefetch(ctx, q.Text, 0, opts, eng.Encoding().Count)
				if err != nil {
					return nil, fmt.Errorf("question %s: %w", q.ID, err)
				}
				if b.Degraded {
					return nil, fmt.Errorf("question %s: pre-fetch degraded: %v", q.ID, b.Faults)
				}
				// An excerpt holds every turn with its content.
				excerpts, hints := map[string]bool{}, map[string]bool{}
				for _, in := range b.Excerpts {
					excerpts[in.MsgID] = true
					for _, id := range shared[q.Corpus][in.EntryID] {
						excerpts[id] = true
					}
				}
				for _, in := range b.Hints {
					hints[in.MsgID] = true
					for _, id := range shared[q.Corpus][in.EntryID] {
						hints[id] = true
					}
				}
				var got, gotHints int
				for _, id := range q.Relevant {
					if excerpts[id] {
						got++
					}
					if excerpts[id] || hints[id] {
						gotHints++
					}
				}
				row.Questions++
				row.Recall += float64(got) / float64(len(q.Relevant))
				row.WithHints += float64(gotHints) / float64(len(q.Relevant))
				row.Tokens += float64(b.Tokens)
				row.Conversation += float64(convTokens[q.Corpus])
				if b.Text == "" {
					row.Empty++
				}
			}
			if n := float64(row.Questions); n > 0 {
				row.Recall /= n
				row.WithHints /= n
				row.Tokens /= n
				row.Conversation /= n
				row.Empty /= n
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func printEconomy(a *app, rows []economyRow) {
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Set < rows[j].Set })
	fmt.Fprintln(a.stdout)
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "set\tbudget\tpolicy\tquestions\tevidence recall\twith hints\tblock tokens\tempty\tconversation tokens\t")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%.3f\t%.3f\t%.0f\t%.1f%%\t%.0f\t\n", r.Set, r.Budget, r.Policy, r.Questions,
			r.Recall, r.WithHints, r.Tokens, 100*r.Empty, r.Conversation)
	}
	_ = w.Flush()
}

// joinInts writes numbers as "1000/2000/4000".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, "/")
}
