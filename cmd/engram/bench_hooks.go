package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/hook"
)

func (a *app) benchHooksCmd() *cobra.Command {
	var (
		sf             storeFlags
		runs, inRuns   int
		words, outputs int
	)
	cmd := &cobra.Command{
		Use:     "hooks",
		PreRunE: atLeast(map[string]int64{"runs": 1, "inprocess-runs": 1, "words": 1, "output": 1, "chunks": 1}),
		Short:   "Hook latency as a harness sees it, process start included, with and without the daemon",
		Long: `Build (or, with --reuse, reopen) a store of at least --chunks chunks from the
synthetic corpus and embed it, then run this engram binary as Claude Code
runs its hooks: a new process per event, the event's JSON on standard input.
Each round is a session: SessionStart, UserPromptSubmit (with the pre-fetch,
a prompt of --words corpus words), PostToolUse (a command's output of
--output bytes), PreCompact and Stop.

The first hook finds no daemon: it runs in-process and starts one (cold).
Then --runs rounds go through the daemon, and --inprocess-runs rounds with
ENGRAM_HOOK_DAEMON=off, each opening the store itself; 'engram version' is
timed in the same run as the floor: starting the process.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			if filepath.Base(exe) != "engram" {
				return fmt.Errorf("run the built engram (make build; ./bin/engram bench hooks), not %s: the hooks start the daemon from it", exe)
			}
			d, cleanup, err := benchDir(sf.dir)
			if err != nil {
				return err
			}
			defer cleanup()
			path := filepath.Join(d, fmt.Sprintf("hooks-%d.db", sf.chunks))
			st, built, err := a.benchStore(ctx, path, sf.chunks, sf.seed, sf.reuse)
			if err != nil {
				return err
			}
			stats, err := st.Stats(ctx)
			if err != nil {
				return errors.Join(err, st.Close())
			}
			fmt.Fprintf(a.stdout, "store: %s chunks, %s entries, %s (built in %v)\n", commas(stats.Chunks), commas(stats.Entries),
				humanBytes(stats.SizeBytes), built.Took.Round(time.Millisecond))
			eng, err := engine.New(st, a.engineOptions())
			if err != nil {
				return errors.Join(err, st.Close())
			}
			p := newProgress(a.stderr, "embedding", stats.Chunks)
			rep, err := eng.Embed(ctx, func(ep engine.EmbedProgress) {
				if ep.Phase == "embed" {
					p.update(ep.Done)
				}
			})
			p.done(fmt.Sprintf("%s chunks", commas(rep.Embedded)))
			if err = errors.Join(err, st.Close()); err != nil {
				return err
			}

			hb := hookBench{exe: exe, store: path, project: filepath.Join(d, "project"), corpus: bench.NewCorpus(sf.seed + 2000),
				words: words, output: outputs}
			if err := os.MkdirAll(hb.project, 0o755); err != nil {
				return err
			}
			defer hb.stopDaemon()
			hb.stopDaemon()
			cold, err := hb.run(ctx, "cold", hook.UserPromptSubmit, hb.payload(hook.UserPromptSubmit, "cold", 0), true)
			if err != nil {
				return err
			}
			if err := hb.waitDaemon(ctx); err != nil {
				return err
			}
			first, err := hb.run(ctx, "first", hook.UserPromptSubmit, hb.payload(hook.UserPromptSubmit, "first", 0), true)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "cold (no daemon: in-process, starting one): UserPromptSubmit %s ms; the daemon's first (loading the vectors): %s ms\n", ms(cold), ms(first))

			lat := map[string][]time.Duration{}
			var floor []time.Duration
			round := func(mode string, i int, daemon bool) error {
				session := fmt.Sprintf("%s-%d", mode, i)
				for _, ev := range hook.Events {
					took, err := hb.run(ctx, session, ev, hb.payload(ev, session, i), daemon)
					if err != nil {
						return err
					}
					lat[mode+"/"+ev] = append(lat[mode+"/"+ev], took)
				}
				t := time.Now()
				if out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput(); err != nil {
					return fmt.Errorf("engram version: %v: %s", err, out)
				}
				floor = append(floor, time.Since(t))
				return nil
			}
			progress := newProgress(a.stderr, "rounds", int64(runs+inRuns))
			for i := range max(runs, inRuns) {
				if i < runs {
					if err := round("daemon", i, true); err != nil {
						return err
					}
				}
				if i < inRuns {
					if err := round("in-process", i, false); err != nil {
						return err
					}
				}
				progress.update(int64(min(i+1, runs) + min(i+1, inRuns)))
			}
			progress.done(fmt.Sprintf("%d rounds", runs+inRuns))

			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(w, "\tdaemon (%d)\t\tin-process (%d)\t\t\n", runs, inRuns)
			fmt.Fprintln(w, "event\tp50\tp95\tp50\tp95\t")
			for _, ev := range hook.Events {
				dl, il := bench.Summarize(lat["daemon/"+ev]), bench.Summarize(lat["in-process/"+ev])
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t\n", ev, ms(dl.P50), ms(dl.P95), ms(il.P50), ms(il.P95))
			}
			fl := bench.Summarize(floor)
			fmt.Fprintf(w, "engram version\t%s\t%s\t\t\t\n", ms(fl.P50), ms(fl.P95))
			fmt.Fprintln(w, "(milliseconds, process start included)")
			return w.Flush()
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&runs, "runs", 50, "rounds through the daemon")
	f.IntVar(&inRuns, "inprocess-runs", 10, "rounds without the daemon")
	f.IntVar(&words, "words", 8, "words of each prompt")
	f.IntVar(&outputs, "output", 4000, "bytes of each command output")
	return cmd
}

// hookBench runs the hooks of a bench store as a harness would.
type hookBench struct {
	exe, store, project string
	corpus              *bench.Corpus
	words, output       int
}

func (hb *hookBench) payload(event, session string, i int) []byte {
	p := map[string]any{"session_id": session, "hook_event_name": event, "cwd": hb.project, "transcript_path": ""}
	switch event {
	case hook.SessionStart:
		p["source"] = "startup"
	case hook.UserPromptSubmit:
		ws := make([]string, hb.words)
		for j := range ws {
			ws[j] = hb.corpus.Word()
		}
		p["prompt"] = "why does " + strings.Join(ws, " ") + " fail?"
	case hook.PostToolUse:
		var out strings.Builder
		for out.Len() < hb.output {
			out.WriteString(hb.corpus.Word())
			out.WriteByte(' ')
			if out.Len()%80 < 8 {
				out.WriteByte('\n')
			}
		}
		p["tool_name"], p["tool_use_id"] = "Bash", fmt.Sprintf("toolu_bench_%s_%d", session, i)
		p["tool_input"] = map[string]any{"command": "go test ./...", "description": "run the tests"}
		p["tool_response"] = map[string]any{"stdout": out.String(), "stderr": "", "interrupted": false}
	case hook.PreCompact:
		p["trigger"] = "auto"
	case hook.Stop:
		p["stop_hook_active"], p["last_assistant_message"] = false, "Done."
	}
	b, _ := json.Marshal(p)
	return b
}

// run runs one hook and returns how long it took; a hook that reports an
// error on standard error fails the bench.
func (hb *hookBench) run(ctx context.Context, session, event string, payload []byte, daemon bool) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, hb.exe, "hook", hook.ClaudeCode, event, "--store", hb.store, "--project", hb.project)
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Env = os.Environ()
	if !daemon {
		cmd.Env = append(cmd.Env, "ENGRAM_HOOK_DAEMON=off")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t := time.Now()
	err := cmd.Run()
	took := time.Since(t)
	if err != nil || strings.Contains(stderr.String(), "engram hook") {
		return took, fmt.Errorf("hook %s of %s: %v: %s", event, session, err, stderr.String())
	}
	return took, nil
}

func (hb *hookBench) socket() string {
	a := &app{}
	a.cfg.Store.Path = hb.store
	return a.socketPath()
}

// waitDaemon waits for the daemon the cold hook started.
func (hb *hookBench) waitDaemon(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(hb.socket()); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("no daemon listens on %s a minute after the first hook (see daemon.log beside the store)", hb.socket())
}

// stopDaemon stops the store's daemon, if one runs.
func (hb *hookBench) stopDaemon() {
	a := &app{}
	a.cfg.Store.Path = hb.store
	c := a.daemonClient()
	c.Timeout = 2 * time.Second
	if r, err := c.Post("http://engram/stop", "text/plain", nil); err == nil {
		r.Body.Close()
		// Wait for its socket to go, so that the next hook starts afresh.
		for range 100 {
			if _, err := os.Stat(hb.socket()); errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
