package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// assembleRow is what bench assemble measured of one set at one budget.
type assembleRow struct {
	Set       string `json:"set"`
	Budget    int    `json:"budget"`
	Questions int    `json:"questions"`
	// Engram and Recency are the shares of questions whose evidence turns
	// are all in the context verbatim: engram's assembly, and the most
	// recent turns that fit the same budget.
	Engram  float64 `json:"engram"`
	Recency float64 `json:"recency"`
	// Fit counts the questions whose whole history fits the budget;
	// Refused those whose budget was too small to assemble (a miss).
	Fit     int `json:"fit_whole"`
	Refused int `json:"refused"`
	// HistoryTokens is the full histories' tokens, on average a question;
	// ContextTokens what engram's contexts took, on average.
	HistoryTokens float64 `json:"history_tokens"`
	ContextTokens float64 `json:"context_tokens"`
	Seconds       float64 `json:"seconds"`
	// Kinds are the same shares by the set's kind of question.
	Kinds []assembleKind `json:"kinds"`
}

// assembleKind is what bench assemble measured of one kind of question.
type assembleKind struct {
	Kind      string  `json:"kind"`
	Questions int     `json:"questions"`
	Engram    float64 `json:"engram"`
	Recency   float64 `json:"recency"`
}

func (a *app) benchAssembleCmd() *cobra.Command {
	var (
		sets      []string
		budgets   []int
		benchPath string
		dir       string
		jsonOut   bool
		limitQ    int
		lexical   bool
		byKind    bool
	)
	cmd := &cobra.Command{
		Use:     "assemble",
		PreRunE: atLeast(map[string]int64{"questions": 0}),
		Short:   "Assemble a context for each conversation question and count the evidence in it",
		Long: `Feed each LoCoMo conversation through a window (the default role), then
assemble the context of each of its questions (categories 1-4) at each
--budget (default 2000, 4000 and 8000): the window's history laid out to
its share, the arc of what it no longer shows, and engram's retrieval for
the question within the conversation. For LongMemEval (oracle), each
question gets a window of its own sessions, in order, at each budget
(default 1000, 2000 and 4000). A question counts when every one of its
evidence turns is in the context verbatim. Beside it, in the same run,
recency truncation: the most recent turns that fit the same budget with
the question; and how many histories fit whole.

Retrieval is engram's hybrid search with the configured embedder (by
default the corpus model, trained on each store; nothing is downloaded);
--lexical leaves vectors out. --bench-dir defaults to $ENGRAM_BENCH_DIR, else
../shared/bench from the project.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			for _, b := range budgets {
				if b < window.MinBudget {
					return usagef("--budget %d: a window needs at least %d tokens", b, window.MinBudget)
				}
			}
			benchPath = a.benchSets(benchPath)
			for _, s := range sets {
				if s != eval.LoCoMo && s != eval.LongMemEval {
					return usagef("--set %s: the conversation sets are %s and %s", s, eval.LoCoMo, eval.LongMemEval)
				}
			}
			d, cleanup, err := benchDir(dir)
			if err != nil {
				return err
			}
			defer cleanup()
			var rows []assembleRow
			for _, name := range sets {
				set, err := eval.Load(name, benchPath, "")
				if errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("%w (set --bench-dir or ENGRAM_BENCH_DIR)", err)
				}
				if err != nil {
					return err
				}
				bs := budgets
				if len(bs) == 0 {
					bs = []int{2000, 4000, 8000}
					if name == eval.LongMemEval {
						bs = []int{1000, 2000, 4000}
					}
				}
				for _, b := range bs {
					row, err := a.assembleEvidence(ctx, set, b, limitQ, lexical, filepath.Join(d, fmt.Sprintf("assemble-%s-%d.db", name, b)))
					if err != nil {
						return err
					}
					fmt.Fprintf(a.stderr, "%s at %d: %d questions in %.1fs\n", name, b, row.Questions, row.Seconds)
					rows = append(rows, row)
				}
			}
			if jsonOut {
				return json.NewEncoder(a.stdout).Encode(rows)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "set\tbudget\tquestions\tengram\trecency\tfit whole\trefused\thistory tokens\tcontext tokens\tseconds")
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%d\t%d\t%.3f\t%.3f\t%d\t%d\t%.0f\t%.0f\t%.1f\n", r.Set, r.Budget, r.Questions, r.Engram, r.Recency, r.Fit,
					r.Refused, r.HistoryTokens, r.ContextTokens, r.Seconds)
			}
			if byKind {
				fmt.Fprintln(w, "\nset\tbudget\tkind\tquestions\tengram\trecency")
				for _, r := range rows {
					for _, k := range r.Kinds {
						fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%.3f\t%.3f\n", r.Set, r.Budget, k.Kind, k.Questions, k.Engram, k.Recency)
					}
				}
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.BoolVar(&byKind, "by-kind", false, "also print the shares by kind of question")
	f.StringSliceVar(&sets, "set", []string{eval.LoCoMo, eval.LongMemEval}, "conversation sets")
	f.IntSliceVar(&budgets, "budget", nil, "the contexts' budgets, in tokens (default by set)")
	f.IntVar(&limitQ, "questions", 0, "at most this many questions a conversation (0: all)")
	f.BoolVar(&lexical, "lexical", false, "retrieve without an embedder")
	f.StringVar(&benchPath, "bench-dir", "", "the bench folder (default $ENGRAM_BENCH_DIR, else ../shared/bench)")
	f.StringVar(&dir, "dir", "", "directory for the stores (default: a temporary one, removed after)")
	f.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	return cmd
}

// assembleEvidence feeds each conversation of set through a window whose
// budget is budget, in a new store at path, and assembles each of its
// questions' contexts.
func (a *app) assembleEvidence(ctx context.Context, set *eval.Set, budget, limitQ int, lexical bool, path string) (row assembleRow, err error) {
	row = assembleRow{Set: set.Name, Budget: budget}
	start := time.Now()
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: a.log})
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	opts := a.engineOptions()
	opts.Encoding, opts.KeepSecrets = tokens.O200kBase, true
	if lexical {
		opts.Embed = engine.EmbedOptions{Provider: "none"}
	}
	eng, err := engine.New(st, opts)
	if err != nil {
		return row, err
	}
	cat, err := tokens.NewCatalog(a.cfg.Models...)
	if err != nil {
		return row, err
	}
	m := window.NewManager(eng, cat)
	if err := m.Configure(window.ConfigFrom(a.cfg.Window)); err != nil {
		return row, err
	}
	asm := &assemble.Assembler{Engine: eng, Windows: m}
	enc := tokens.MustGet(tokens.O200kBase)
	questions := map[string][]eval.Question{}
	if set.Name != eval.LongMemEval {
		for _, q := range set.Questions {
			questions[q.Corpus] = append(questions[q.Corpus], q)
		}
	}
	var hit, recent, histTokens, ctxTokens float64
	kinds := map[string]*assembleKind{}
	limit := limitFor(budget, window.DefaultMargin)
	type conv struct {
		key   store.WindowKey
		items []eval.Item
		text  map[string]string
		tok   []int
		total int
	}
	var convs []conv
	// The conversations: a LoCoMo conversation is one, its questions asked
	// after it; a LongMemEval question has its own, its sessions in order.
	type asked struct {
		key   store.WindowKey
		items []eval.Item
	}
	var all []asked
	if set.Name == eval.LongMemEval {
		bySession := map[string][]eval.Item{}
		for _, items := range set.Corpora {
			for _, it := range items {
				bySession[it.Session] = append(bySession[it.Session], it)
			}
		}
		for _, q := range set.Questions {
			k := store.WindowKey{SessionID: q.ID, AgentID: "assistant"}
			var items []eval.Item
			for _, sid := range q.Sessions {
				items = append(items, bySession[sid]...)
			}
			all = append(all, asked{k, items})
			questions[q.ID] = []eval.Question{q}
		}
	} else {
		for _, corpus := range slices.Sorted(func(yield func(string) bool) {
			for c := range set.Corpora {
				if !yield(c) {
					return
				}
			}
		}) {
			all = append(all, asked{store.WindowKey{SessionID: corpus, AgentID: "assistant"}, set.Corpora[corpus]})
		}
	}
	for _, w := range all {
		c := conv{key: w.key, items: w.items, text: map[string]string{}}
		if _, err := m.Open(ctx, c.key, window.OpenOptions{Limit: limit, Output: 1, Safety: 1}); err != nil {
			return row, err
		}
		var msgs []window.Message
		c.tok = make([]int, len(c.items))
		for i, it := range c.items {
			role := window.RoleUser
			if it.Role == "assistant" {
				role = window.RoleAssistant
			}
			msgs = append(msgs, window.Message{Role: role, Blocks: []window.Block{{Type: window.BlockText, Text: it.Text}}})
			c.text[it.ID] = it.Text
			c.tok[i] = enc.Count(it.Text) + 4
			c.total += c.tok[i]
		}
		// A turn at a time is how a harness appends; the window's
		// decisions are the same appended in batches.
		for from := 0; from < len(msgs); from += 200 {
			if _, err := m.Append(ctx, c.key, msgs[from:min(from+200, len(msgs))]); err != nil {
				return row, fmt.Errorf("%s: %w", c.key, err)
			}
		}
		convs = append(convs, c)
	}
	if !lexical {
		if _, err := eng.Embed(ctx, nil); err != nil {
			return row, err
		}
	}
	for _, c := range convs {
		qs := questions[c.key.SessionID]
		if limitQ > 0 && len(qs) > limitQ {
			qs = qs[:limitQ]
		}
		for _, q := range qs {
			row.Questions++
			histTokens += float64(c.total)
			if c.total+enc.Count(q.Text) <= budget {
				row.Fit++
			}
			turn, err := asm.Assemble(ctx, assemble.Request{Key: c.key, Message: q.Text, Retrieve: true, Scope: store.Filter{SessionID: c.key.SessionID}})
			if errors.Is(err, assemble.ErrOverBudget) || errors.Is(err, assemble.ErrNoHistoryRoom) {
				row.Refused++ // a budget too small for the question: a miss
				turn = assemble.Turn{}
			} else if err != nil {
				return row, fmt.Errorf("%s: %w", q.ID, err)
			}
			ctxTokens += float64(turn.Tokens)
			var all strings.Builder
			for _, msg := range turn.Messages {
				for _, b := range msg.Blocks {
					all.WriteString(b.Text)
					all.WriteByte('\n')
				}
			}
			k := kinds[q.Kind]
			if k == nil {
				k = &assembleKind{Kind: q.Kind}
				kinds[q.Kind] = k
			}
			k.Questions++
			in := true
			for _, id := range q.Relevant {
				in = in && strings.Contains(all.String(), c.text[id])
			}
			if in {
				hit++
				k.Engram++
			}
			// Recency truncation: the newest turns that fit with the
			// question.
			room := budget - enc.Count(q.Text) - 4
			keep := map[string]bool{}
			for i := len(c.items) - 1; i >= 0 && room >= c.tok[i]; i-- {
				room -= c.tok[i]
				keep[c.items[i].ID] = true
			}
			in = true
			for _, id := range q.Relevant {
				in = in && keep[id]
			}
			if in {
				recent++
				k.Recency++
			}
		}
	}
	n := float64(max(1, row.Questions))
	row.Engram, row.Recency = hit/n, recent/n
	row.HistoryTokens, row.ContextTokens = histTokens/n, ctxTokens/n
	for _, k := range kinds {
		k.Engram, k.Recency = k.Engram/float64(k.Questions), k.Recency/float64(k.Questions)
		row.Kinds = append(row.Kinds, *k)
	}
	slices.SortFunc(row.Kinds, func(a, b assembleKind) int { return strings.Compare(a.Kind, b.Kind) })
	row.Seconds = time.Since(start).Seconds()
	return row, nil
}
