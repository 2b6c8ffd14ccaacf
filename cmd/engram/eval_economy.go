package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
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
	// Policy is "default" (pre-fetch as configured: the relevance floor,
	// then excerpts and hints) or "packed" (the best hits as excerpts
	// until the budget is full, no floor or thresholds).
	Policy    string `json:"policy"`
	Questions int    `json:"questions"`
	// Carried is the share of questions whose block holds at least one of
	// their evidence turns as an excerpt.
	Carried float64 `json:"evidence_carried"`
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
	// Negatives are questions asked of a store without their answer (the
	// default policy only); FalseInjection is the share of them that got
	// a block.
	Negatives      int     `json:"negatives,omitempty"`
	FalseInjection float64 `json:"false_injection,omitempty"`
}

// evalEconomy measures pre-fetch blocks capped at each budget on a
// conversation set. The blocks are built as an agent gets them, through
// the hybrid search the configuration describes, but leave the access
// record alone so that one question's block does not warm the next.
//
// The default policy is also asked questions whose answer is not in the
// store (see negativeStores), and should inject nothing.
func (a *app) evalEconomy(ctx context.Context, set *eval.Set, engines map[string]*engine.Engine, shared map[string]map[string][]string, budgets []int,
	negDir string, r evalRun) ([]economyRow, error) {
	if set.Code || len(budgets) == 0 {
		return nil, nil
	}
	negatives, closeNeg, err := a.negativeStores(ctx, set, engines, negDir, r)
	if err != nil {
		return nil, fmt.Errorf("negatives: %w", err)
	}
	defer closeNeg()
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
		{"default", a.engineOptions().Prefetch},
		{"packed", retrieve.PrefetchOptions{
			ExcerptThreshold: 1e-9, ConfidenceThreshold: 1e-9, MinSignal: -1, MinCoverage: -1, SingleSignalFactor: 1,
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
				b, err := askPrefetch(ctx, engines[q.Corpus], q, pol.opts, budget)
				if err != nil {
					return nil, err
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
				if got > 0 {
					row.Carried++
				}
				row.Recall += float64(got) / float64(len(q.Relevant))
				row.WithHints += float64(gotHints) / float64(len(q.Relevant))
				row.Tokens += float64(b.Tokens)
				row.Conversation += float64(convTokens[q.Corpus])
				if b.Text == "" {
					row.Empty++
				}
			}
			if pol.name == "default" {
				for _, q := range set.Questions {
					eng, ok := negatives[q.ID]
					if !ok || len(q.Relevant) == 0 {
						continue
					}
					b, err := askPrefetch(ctx, eng, q, pol.opts, budget)
					if err != nil {
						return nil, fmt.Errorf("asked of a store without its answer: %w", err)
					}
					row.Negatives++
					if b.Text != "" {
						row.FalseInjection++
					}
				}
				if row.Negatives > 0 {
					row.FalseInjection /= float64(row.Negatives)
				}
			}
			if n := float64(row.Questions); n > 0 {
				row.Carried /= n
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

// askPrefetch builds the pre-fetch block of a question at a budget, as an
// agent would get it, leaving the access record alone. A degraded block is
// an error: it would score what a failure left out.
func askPrefetch(ctx context.Context, eng *engine.Engine, q eval.Question, opts retrieve.PrefetchOptions, budget int) (retrieve.Block, error) {
	h, err := eng.Hybrid(ctx)
	if err != nil {
		return retrieve.Block{}, err
	}
	opts.Budget, opts.NoRecord, opts.Now = budget, true, q.Time
	b, err := h.Prefetch(ctx, q.Text, 0, opts, eng.Encoding().Count)
	if err != nil {
		return b, fmt.Errorf("question %s: %w", q.ID, err)
	}
	if b.Degraded {
		return b, fmt.Errorf("question %s: pre-fetch degraded: %v", q.ID, b.Faults)
	}
	return b, nil
}

func printEconomy(a *app, rows []economyRow) {
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Set < rows[j].Set })
	fmt.Fprintln(a.stdout)
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "set\tbudget\tpolicy\tquestions\tevidence carried\tevidence recall\twith hints\tblock tokens\tempty\tconversation tokens\tnegatives\tfalse injection\t")
	for _, r := range rows {
		neg, falseInj := "-", "-"
		if r.Negatives > 0 {
			neg, falseInj = strconv.Itoa(r.Negatives), fmt.Sprintf("%.1f%%", 100*r.FalseInjection)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%.1f%%\t%.3f\t%.3f\t%.0f\t%.1f%%\t%.0f\t%s\t%s\t\n", r.Set, r.Budget, r.Policy, r.Questions,
			100*r.Carried, r.Recall, r.WithHints, r.Tokens, 100*r.Empty, r.Conversation, neg, falseInj)
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

// negativeStores returns, by question ID, a store that lacks the
// question's answer, for the questions that get one: with several
// corpora (LoCoMo's conversations), the next corpus in name order; with
// one pooled corpus (LongMemEval), a store of its own under dir, of the
// pool without the sessions that hold the evidence of every other
// question, nor any turn with the same text as that evidence, for those
// questions. close closes what it opened.
func (a *app) negativeStores(ctx context.Context, set *eval.Set, engines map[string]*engine.Engine, dir string, r evalRun) (map[string]*engine.Engine, func(), error) {
	out := map[string]*engine.Engine{}
	names := slices.Sorted(maps.Keys(engines))
	if len(names) > 1 {
		for _, q := range set.Questions {
			i := slices.Index(names, q.Corpus)
			out[q.ID] = engines[names[(i+1)%len(names)]]
		}
		return out, func() {}, nil
	}
	items := set.Corpora[names[0]]
	byID := make(map[string]eval.Item, len(items))
	for _, it := range items {
		byID[it.ID] = it
	}
	dropSession, dropText := map[string]bool{}, map[string]bool{}
	var asked []eval.Question
	for i, q := range set.Questions {
		if i%2 == 1 && len(q.Relevant) > 0 {
			asked = append(asked, q)
			for _, id := range q.Relevant {
				dropSession[byID[id].Session] = true
				dropText[byID[id].Text] = true
			}
		}
	}
	var kept []eval.Item
	for _, it := range items {
		if !dropSession[it.Session] && !dropText[it.Text] {
			kept = append(kept, it)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	st, closeSt, err := r.stores.open(ctx, dir, set.Name+"-negatives", names[0])
	if err != nil {
		return nil, nil, err
	}
	closeStore := func() {
		if err := closeSt(); err != nil {
			fmt.Fprintf(a.stderr, "%s: negatives: %v\n", set.Name, err)
		}
	}
	opts := a.engineOptions()
	opts.KeepSecrets = true
	opts.Retrieve.Deadline = evalDeadline
	opts.Retrieve.Off = append(opts.Retrieve.Off, r.off...)
	eng, err := engine.New(st, opts)
	if err == nil {
		_, err = ingest(ctx, eng, kept)
	}
	if err == nil {
		_, err = eng.Embed(ctx, nil)
	}
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	fmt.Fprintf(a.stderr, "%s: negatives: %d questions asked of the pool without their %d answer sessions (%d of %d turns kept)\n",
		set.Name, len(asked), len(dropSession), len(kept), len(items))
	for _, q := range asked {
		out[q.ID] = eng
	}
	return out, closeStore, nil
}
