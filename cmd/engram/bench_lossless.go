package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/eval"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// benchSets returns the folder of the shared benchmark sets: dir if
// given, else $ENGRAM_BENCH_DIR, else ../shared/bench beside the project.
func (a *app) benchSets(dir string) string {
	if dir == "" {
		dir = a.getenv("ENGRAM_BENCH_DIR")
	}
	if dir == "" {
		dir = filepath.Join(a.cfg.Project, "..", "shared", "bench")
	}
	return dir
}

// losslessRow is what bench lossless checked of one set at one budget.
type losslessRow struct {
	Set        string  `json:"set"`
	Limit      int     `json:"limit"`
	Budget     int     `json:"budget"`
	Windows    int     `json:"windows"`
	Messages   int     `json:"messages"`
	Bytes      int64   `json:"bytes"`
	Evicted    int     `json:"evicted"`
	Refs       int     `json:"refs"`
	Mismatches int     `json:"mismatches"`
	OverBudget int     `json:"over_budget"`
	Seconds    float64 `json:"seconds"`
}

func (a *app) benchLosslessCmd() *cobra.Command {
	var (
		sets      []string
		limits    []int
		benchPath string
		dir       string
		jsonOut   bool
	)
	cmd := &cobra.Command{
		Use:   "lossless",
		Short: "Replay the conversation sets through windows and expand every reference back",
		Long: `Feed the conversation sets through real windows of each --limit (a window
for each LoCoMo conversation, all its sessions in turn, and one for each
LongMemEval oracle session), one
message per append, as an agent's harness would; then read each window's
context and expand every [CTX-REF] reference in it, and compare what comes
back with what was appended, byte for byte, in order. Reports the messages
and bytes checked, the references, any mismatch (one is a bug) and any
moment a window held more than its budget.

A window of limit N keeps 1 token for the response and 1 of safety, and
the 10 % margin of a model whose tokenizer engram only approximates, as no
model is named. Secrets are kept in this measurement (a real window
redacts them before they are stored), so that every byte compares.

--bench-dir defaults to $ENGRAM_BENCH_DIR, else ../shared/bench from the
project.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			for _, l := range limits {
				if l <= 2 {
					return usagef("--limit %d: limits are tokens, more than 2", l)
				}
			}
			for _, s := range sets {
				if s != eval.LoCoMo && s != eval.LongMemEval {
					return usagef("--set %s: the conversation sets are %s and %s", s, eval.LoCoMo, eval.LongMemEval)
				}
			}
			benchPath = a.benchSets(benchPath)
			d, cleanup, err := benchDir(dir)
			if err != nil {
				return err
			}
			defer cleanup()
			var rows []losslessRow
			for _, name := range sets {
				set, err := eval.Load(name, benchPath, "")
				if errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("%w (set --bench-dir or ENGRAM_BENCH_DIR)", err)
				}
				if err != nil {
					return err
				}
				for _, limit := range limits {
					row, err := a.losslessReplay(ctx, set, limit, filepath.Join(d, fmt.Sprintf("%s-%d.db", name, limit)))
					if err != nil {
						return err
					}
					fmt.Fprintf(a.stderr, "%s at %d: %d messages in %d windows checked in %.1fs\n", name, limit, row.Messages, row.Windows, row.Seconds)
					rows = append(rows, row)
				}
			}
			if jsonOut {
				return json.NewEncoder(a.stdout).Encode(rows)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "set\tlimit\tbudget\twindows\tmessages\tbytes\tevicted\trefs\tmismatches\tover budget\tseconds")
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\n", r.Set, r.Limit, r.Budget, r.Windows, r.Messages, r.Bytes,
					r.Evicted, r.Refs, r.Mismatches, r.OverBudget, r.Seconds)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			for _, r := range rows {
				if r.Mismatches > 0 {
					return fmt.Errorf("%s at %d: %d messages did not come back byte for byte", r.Set, r.Limit, r.Mismatches)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&sets, "set", []string{eval.LoCoMo, eval.LongMemEval}, "conversation sets to replay")
	f.IntSliceVar(&limits, "limit", []int{2000, 4000, 8000}, "windows' context limits, in tokens")
	f.StringVar(&benchPath, "bench-dir", "", "the bench folder (default $ENGRAM_BENCH_DIR, else ../shared/bench)")
	f.StringVar(&dir, "dir", "", "directory for the stores (default: a temporary one, removed after)")
	f.BoolVar(&jsonOut, "json", false, "print the results as JSON")
	return cmd
}

// losslessReplay replays a conversation set's sessions through windows of
// one limit in a new store at path, and checks every reference.
func (a *app) losslessReplay(ctx context.Context, set *eval.Set, limit int, path string) (row losslessRow, err error) {
	row = losslessRow{Set: set.Name, Limit: limit}
	start := time.Now()
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: a.log})
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	eng, err := engine.New(st, engine.Options{Encoding: a.cfg.Tokens.Encoding, Logger: a.log, KeepSecrets: true,
		Embed: engine.EmbedOptions{Provider: "none"}})
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
	// Sessions in order of their first turn, turns in order.
	type session struct {
		key   store.WindowKey
		items []eval.Item
	}
	var sessions []*session
	byKey := map[store.WindowKey]*session{}
	for _, corpus := range slices.Sorted(func(yield func(string) bool) {
		for c := range set.Corpora {
			if !yield(c) {
				return
			}
		}
	}) {
		for _, it := range set.Corpora[corpus] {
			// A LoCoMo conversation is one window, all its sessions in
			// turn; a LongMemEval session is one.
			k := store.WindowKey{SessionID: corpus, AgentID: "claude"}
			if set.Name != eval.LoCoMo {
				k.SessionID += "/" + it.Session
			}
			s := byKey[k]
			if s == nil {
				s = &session{key: k}
				byKey[k] = s
				sessions = append(sessions, s)
			}
			s.items = append(s.items, it)
		}
	}
	for _, s := range sessions {
		opened, err := m.Open(ctx, s.key, window.OpenOptions{Limit: limit, Output: 1, Safety: 1})
		if err != nil {
			return row, err
		}
		row.Budget = opened.Budget
		row.Windows++
		for _, it := range s.items {
			role := window.RoleUser
			if it.Role == "assistant" {
				role = window.RoleAssistant
			}
			res, err := m.Append(ctx, s.key, []window.Message{{Role: role, Blocks: []window.Block{{Type: window.BlockText, Text: it.Text}}}})
			if err != nil {
				return row, fmt.Errorf("%s: %w", s.key, err)
			}
			if res.Used > res.Budget {
				row.OverBudget++
			}
		}
		items, err := m.Context(ctx, s.key)
		if err != nil {
			return row, err
		}
		var got []window.Message
		for _, it := range items {
			if it.Message != nil {
				got = append(got, *it.Message)
				continue
			}
			if it.RefID == "" {
				continue // an excerpt of messages under the marker beside it
			}
			back, err := m.Expand(ctx, it.RefID)
			if err != nil {
				return row, fmt.Errorf("%s: expand %s: %w", s.key, it.RefID, err)
			}
			row.Refs++
			row.Evicted += len(back)
			got = append(got, back...)
		}
		for i, it := range s.items {
			row.Messages++
			row.Bytes += int64(len(it.Text))
			if i >= len(got) || len(got[i].Blocks) != 1 || got[i].Blocks[0].Text != it.Text {
				row.Mismatches++
			}
		}
		row.Mismatches += max(0, len(got)-len(s.items))
	}
	row.Seconds = time.Since(start).Seconds()
	return row, nil
}
