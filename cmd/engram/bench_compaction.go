package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/store/sqlite"
)

func (a *app) benchCompactionCmd() *cobra.Command {
	var (
		benchPath, dir string
		limitQ, expand int
	)
	cmd := &cobra.Command{
		Use:     "compaction",
		PreRunE: atLeast(map[string]int64{"questions": 0, "expand": 1}),
		Short:   "Compaction rescue: what engram's hooks put back in front of the model after a harness compacts",
		Long: `Replay each LongMemEval (oracle) question's sessions as a Claude Code session
through engram's hooks, with a compaction at the midpoint: PreCompact imports
the first half and records its reference, Stop imports the rest, SessionStart
after the compaction lists the reference's marker, and the question is the
next prompt (UserPromptSubmit, with its pre-fetch). A question is rescued when
all its evidence turns are before the model whole:

  harness    in the recent half, which the harness keeps after compacting
             (its summary is a model's, and is not counted: a real summary
             may keep some evidence, so this is the floor of what it keeps)
  injected   in the recent half or the pre-fetch block
  expanded   also in one expansion of the compaction's marker with the
             question as the query (retrieve_context, --expand tokens)

Every session goes into one store, as a project's sessions do; the store is
embedded before the questions are asked.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			benchPath = a.benchSets(benchPath)
			set, err := eval.Load(eval.LongMemEval, benchPath, "")
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w (set --bench-dir or ENGRAM_BENCH_DIR)", err)
			}
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, set.Close()) }()
			d, cleanup, err := benchDir(dir)
			if err != nil {
				return err
			}
			defer cleanup()
			path := filepath.Join(d, "compaction.db")
			if err := removeStore(path); err != nil {
				return err
			}
			st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: a.log, Search: a.searchOptions()})
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, st.Close()) }()
			opts := a.engineOptions()
			opts.KeepSecrets = true
			eng, err := engine.New(st, opts)
			if err != nil {
				return err
			}
			h := a.cfg.Hooks
			run := &hook.Runner{Eng: eng, Harness: hook.ClaudeCode, Opts: hook.Options{Briefing: "none",
				PrefetchBudget: h.PrefetchBudget, MaxToolTokens: h.MaxToolTokens, KeepTokens: h.KeepTokens}}
			bySession := map[string][]eval.Item{}
			for _, items := range set.Corpora {
				for _, it := range items {
					bySession[it.Session] = append(bySession[it.Session], it)
				}
			}
			qs := set.Questions
			if limitQ > 0 && len(qs) > limitQ {
				qs = qs[:limitQ]
			}
			tdir := filepath.Join(d, "transcripts")
			if err := os.MkdirAll(tdir, 0o755); err != nil {
				return err
			}
			start := time.Now()
			prog := newProgress(a.stderr, "sessions", int64(len(qs)))
			type asked struct {
				q      eval.Question
				recent string
				text   map[string]string
				ref    string
			}
			var all []asked
			for i, q := range qs {
				var items []eval.Item
				for _, sid := range q.Sessions {
					items = append(items, bySession[sid]...)
				}
				x, err := replayCompaction(ctx, run, tdir, q, items)
				if err != nil {
					return fmt.Errorf("%s: %w", q.ID, err)
				}
				all = append(all, asked{q: q, recent: x.recent, text: x.text, ref: x.ref})
				prog.update(int64(i + 1))
			}
			prog.done(fmt.Sprintf("%d sessions", len(qs)))
			if _, err := eng.Embed(ctx, nil); err != nil {
				return err
			}
			ops := &api.Ops{Eng: eng, Session: func() string { return "" }}
			var harness, injected, expanded, refused int
			var injTokens, expTokens float64
			enc := eng.Encoding()
			for _, x := range all {
				p, err := hook.ParsePayload(mustJSON(map[string]any{"session_id": x.q.ID, "hook_event_name": hook.UserPromptSubmit,
					"prompt": x.q.Text}), hook.UserPromptSubmit)
				if err != nil {
					return err
				}
				res, err := run.Run(ctx, p)
				if err != nil {
					return fmt.Errorf("%s: %w", x.q.ID, err)
				}
				injTokens += float64(enc.Count(res.Context))
				var more string
				if x.ref != "" {
					out, _, err := ops.RetrieveContext(ctx, api.RetrieveIn{RefID: x.ref, Query: x.q.Text, MaxTokens: expand})
					if err != nil {
						refused++
					}
					for _, it := range out.Items {
						more += it.Content + "\n"
					}
					expTokens += float64(out.Tokens)
				}
				all := func(in ...string) bool {
					for _, id := range x.q.Relevant {
						found := false
						for _, s := range in {
							found = found || strings.Contains(s, x.text[id])
						}
						if !found {
							return false
						}
					}
					return true
				}
				if all(x.recent) {
					harness++
				}
				if all(x.recent, res.Context) {
					injected++
				}
				if all(x.recent, res.Context, more) {
					expanded++
				}
			}
			n := float64(max(1, len(all)))
			fmt.Fprintf(a.stdout, "LongMemEval (oracle), %d questions, a compaction at each session's midpoint (%v):\n", len(all), time.Since(start).Round(time.Second))
			fmt.Fprintf(a.stdout, "  harness alone (the recent half):          %.3f\n", float64(harness)/n)
			fmt.Fprintf(a.stdout, "  engram, injected (+ the pre-fetch):       %.3f  (%.0f tokens injected on average)\n", float64(injected)/n, injTokens/n)
			fmt.Fprintf(a.stdout, "  engram, one expansion away (+ the marker): %.3f  (%.0f tokens per expansion, max %d)\n", float64(expanded)/n, expTokens/n, expand)
			if refused > 0 {
				fmt.Fprintf(a.stdout, "  %d expansions failed\n", refused)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&benchPath, "bench-dir", "", "the shared bench folder (default $ENGRAM_BENCH_DIR, else ../shared/bench)")
	f.StringVar(&dir, "dir", "", "directory for the transcripts and the store (default: a temporary one, removed after)")
	f.IntVar(&limitQ, "questions", 0, "only the first N questions (0: all)")
	f.IntVar(&expand, "expand", 4000, "tokens of the one expansion of the compaction's marker")
	return cmd
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type replayed struct {
	recent string
	text   map[string]string
	ref    string
}

// replayCompaction writes a question's sessions as a Claude Code
// transcript, half of it at a time, and runs the hooks of a compaction at
// its midpoint over it: PreCompact, Stop, SessionStart after the
// compaction.
func replayCompaction(ctx context.Context, run *hook.Runner, dir string, q eval.Question, items []eval.Item) (replayed, error) {
	x := replayed{text: map[string]string{}}
	path := filepath.Join(dir, q.ID+".jsonl")
	var lines []string
	for i, it := range items {
		x.text[it.ID] = it.Text
		content := any(it.Text)
		if it.Role == "assistant" {
			content = []any{map[string]any{"type": "text", "text": it.Text}}
		}
		lines = append(lines, string(mustJSON(map[string]any{"type": it.Role, "uuid": fmt.Sprintf("%s-%d", q.ID, i),
			"sessionId": q.ID, "timestamp": it.Time.UTC().Format(time.RFC3339Nano), "message": map[string]any{"role": it.Role, "content": content}})))
	}
	mid := len(lines) / 2
	var recent strings.Builder
	for _, it := range items[mid:] {
		recent.WriteString(it.Text)
		recent.WriteByte('\n')
	}
	x.recent = recent.String()
	event := func(ev string, fields map[string]any) (hook.Result, error) {
		m := map[string]any{"session_id": q.ID, "hook_event_name": ev, "transcript_path": path}
		for k, v := range fields {
			m[k] = v
		}
		p, err := hook.ParsePayload(mustJSON(m), ev)
		if err != nil {
			return hook.Result{}, err
		}
		return run.Run(ctx, p)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines[:mid], "\n")+"\n"), 0o644); err != nil {
		return x, err
	}
	res, err := event(hook.PreCompact, map[string]any{"trigger": "auto"})
	if err != nil {
		return x, err
	}
	if len(res.Refs) > 0 {
		x.ref = res.Refs[0]
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return x, err
	}
	if _, err := event(hook.Stop, map[string]any{"last_assistant_message": ""}); err != nil {
		return x, err
	}
	if _, err := event(hook.SessionStart, map[string]any{"source": "compact"}); err != nil {
		return x, err
	}
	return x, nil
}
