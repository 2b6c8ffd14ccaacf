package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/hook"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/trajectory"
)

func (a *app) benchImportCmd() *cobra.Command {
	var (
		benchPath, dir string
		limitRuns      int
	)
	cmd := &cobra.Command{
		Use:     "import",
		PreRunE: atLeast(map[string]int64{"runs": 0}),
		Short:   "Transcript import speed: the shared agent runs as Claude Code transcripts, imported, then imported again",
		Long: `Write the shared bench's agent runs (trajectories) as Claude Code transcripts,
one session each: the task as the prompt, each action a Bash tool_use in the
assistant's message, each observation its tool_result. Then import them
into a new store (engram import claude-code), import them again (nothing
changed: nothing is read), and, as the floor in the same run, read every
line and decode it as JSON without storing anything.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			benchPath = a.benchSets(benchPath)
			runs, err := trajectory.Load(filepath.Join(benchPath, "trajectories", "trajectories.jsonl.gz"),
				filepath.Join(benchPath, "trajectories", "counts.o200k.jsonl"))
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w (set --bench-dir or ENGRAM_BENCH_DIR)", err)
			}
			if err != nil {
				return err
			}
			if limitRuns > 0 && len(runs) > limitRuns {
				runs = runs[:limitRuns]
			}
			d, cleanup, err := benchDir(dir)
			if err != nil {
				return err
			}
			defer cleanup()
			tdir, err := scratchDir(d, "transcripts")
			if err != nil {
				return err
			}
			size, lines, err := writeTranscripts(tdir, runs)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "transcripts: %d sessions, %s lines, %s\n", len(runs), commas(lines), humanBytes(size))

			t0 := time.Now()
			if err := decodeLines(tdir); err != nil {
				return err
			}
			floor := time.Since(t0)

			path := filepath.Join(d, "import.db")
			if err := removeStore(path); err != nil {
				return err
			}
			st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: a.log, Search: a.searchOptions()})
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, st.Close()) }()
			eng, err := engine.New(st, a.engineOptions())
			if err != nil {
				return err
			}
			prog := newProgress(a.stderr, "importing", size)
			var done int64
			im := hook.Importer{Eng: eng, Harness: hook.ClaudeCode, Progress: func(_ string, n, total int64) {
				if n == total {
					done += total
					prog.update(done)
				}
			}}
			t1 := time.Now()
			rep, err := im.Import(ctx, tdir)
			if err != nil {
				return err
			}
			took := time.Since(t1)
			prog.done(humanBytes(size))
			t2 := time.Now()
			again, err := im.Import(ctx, tdir)
			if err != nil {
				return err
			}
			took2 := time.Since(t2)
			if again.Bytes != 0 || again.Stored != 0 {
				return fmt.Errorf("the second import read %d bytes and stored %d records: want none", again.Bytes, again.Stored)
			}
			mb := float64(size) / (1 << 20)
			fmt.Fprintf(a.stdout, "import: %s records (%s new) in %v: %.1f MiB/s, %.0f records/s\n", commas(int64(rep.Records)), commas(int64(rep.Stored)),
				took.Round(time.Millisecond), mb/took.Seconds(), float64(rep.Records)/took.Seconds())
			fmt.Fprintf(a.stdout, "again: %d files, nothing read, nothing stored, in %v\n", again.Files, took2.Round(time.Millisecond))
			fmt.Fprintf(a.stdout, "floor (read and decode every line, store nothing): %v, %.1f MiB/s\n", floor.Round(time.Millisecond), mb/floor.Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&benchPath, "bench-dir", "", "the shared bench folder (default $ENGRAM_BENCH_DIR, else ../shared/bench)")
	f.StringVar(&dir, "dir", "", "directory for the transcripts and the store (default: a temporary one, removed after)")
	f.IntVar(&limitRuns, "runs", 0, "import only the first N runs (0: all)")
	return cmd
}

// writeTranscripts writes each run as a Claude Code transcript under dir.
func writeTranscripts(dir string, runs []trajectory.Run) (size, lines int64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	for _, run := range runs {
		var b strings.Builder
		line := func(typ string, i int, content any, meta bool) {
			m := map[string]any{"type": typ, "uuid": fmt.Sprintf("%s-%d", run.ID, i), "sessionId": run.ID,
				"timestamp": at.Add(time.Duration(i) * time.Second).Format(time.RFC3339Nano), "isSidechain": false,
				"message": map[string]any{"role": typ, "content": content}}
			if meta {
				m["isMeta"] = true
			}
			j, _ := json.Marshal(m)
			b.Write(j)
			b.WriteByte('\n')
			lines++
		}
		prompted := false
		toolID := ""
		for i, msg := range run.Messages {
			switch {
			case msg.Role == trajectory.Assistant:
				content := []any{map[string]any{"type": "text", "text": msg.Content}}
				toolID = ""
				if i+1 < len(run.Messages) && run.Messages[i+1].Role == trajectory.User {
					toolID = fmt.Sprintf("toolu_%s_%d", run.ID, i)
					content = append(content, map[string]any{"type": "tool_use", "id": toolID, "name": "Bash",
						"input": map[string]any{"command": lastLine(msg.Content)}})
				}
				line("assistant", i, content, false)
			case !prompted || toolID == "":
				line("user", i, msg.Content, msg.Role == trajectory.System)
				prompted = prompted || msg.Role == trajectory.User
			default:
				line("user", i, []any{map[string]any{"type": "tool_result", "tool_use_id": toolID, "content": msg.Content}}, false)
				toolID = ""
			}
		}
		if err := os.WriteFile(filepath.Join(dir, run.ID+".jsonl"), []byte(b.String()), 0o644); err != nil {
			return 0, 0, err
		}
		size += int64(b.Len())
	}
	return size, lines, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// decodeLines reads every line of the transcripts under dir and decodes
// it, storing nothing: the floor of an import.
func decodeLines(dir string) error {
	paths, problems, err := hook.Paths(dir)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return errors.New(problems[0].String())
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var v map[string]any
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	return nil
}
