package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/harness"
	"github.com/engramhq/engram/internal/hook"
)

// hookTimeout bounds one hook's work: the harness waits on it. It is
// well under the time the harness gives a hook (harness.DefaultTimeout),
// so that a hook held up (a store locked by another process) gives up,
// and counts its failure in engram hooks status, before the harness kills
// it.
const hookTimeout = harness.DefaultTimeout * 2 / 3

func (a *app) hookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook HARNESS EVENT",
		Short: "Run engram inside a harness's hook (what 'engram hooks install' configures)",
		Long: `Run one hook event for a harness (claude-code or codex), reading the event's
JSON on standard input as the harness sends it, and printing what the
harness should add to the model's context or put in place of a tool's
output. Events: ` + strings.Join(hook.Events, ", ") + `.

A hook never breaks the agent's session: whatever goes wrong (a payload it
cannot read, a store it cannot open), it says why on standard error,
counts the failure (engram hooks status) and exits 0, printing nothing.

The project is --project, else the git work tree of the payload's cwd (or
the cwd itself, outside one).`,
		// Wrong arguments or flags are the hook's errors too: a harness
		// reads exit status 2 as "block the prompt".
		Args:               cobra.ArbitraryArgs,
		FParseErrWhitelist: cobra.FParseErrWhitelist{UnknownFlags: true},
		// The configuration is loaded once the payload names the project,
		// and its errors are the hook's, not the command's.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error { return nil },
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				fmt.Fprintf(a.stderr, "engram hook: want HARNESS EVENT, got %q (the session goes on without engram for this event)\n", args)
				return nil
			}
			a.runHook(cmd.Context(), args[0], args[1])
			return nil
		},
	}
	return cmd
}

// runHook runs one hook, reporting every failure on standard error and
// in the project's hook record, never as an exit status.
func (a *app) runHook(ctx context.Context, harness, event string) {
	start := time.Now()
	fail := func(err error) {
		fmt.Fprintf(a.stderr, "engram hook %s %s: %v (the session goes on without engram for this event)\n", harness, event, err)
	}
	if harness != hook.ClaudeCode && harness != hook.Codex {
		fail(fmt.Errorf("unknown harness %q: engram hooks claude-code and codex", harness))
		return
	}
	if !slices.Contains(hook.Events, event) && event != "SubagentStop" && event != "SessionEnd" {
		fail(fmt.Errorf("unknown event %q: engram handles %s", event, strings.Join(hook.Events, ", ")))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, hookTimeout)
	defer cancel()
	p, err := hook.ReadPayload(a.stdin, event)
	if err == nil {
		// The hook's shell and the harness: an MCP server the harness
		// started finds the session under its parent.
		p.Procs = hook.Ancestors(2)
		if a.flags.Project == "" && p.Cwd != "" {
			// The git work tree holding it, as every other command finds
			// its project: a harness started in a subdirectory (or whose
			// shell moved into one) is the same project, whose store its
			// MCP server reads.
			a.flags.Project = config.FindProject(p.Cwd)
		}
	}
	// A payload engram cannot read is still counted in the project's
	// record (the project from --project, $ENGRAM_PROJECT or the working
	// directory, as the harness runs its hooks there).
	if cerr := a.loadConfig(); cerr != nil {
		fail(cerr)
		return
	}
	var res hook.Result
	if err == nil {
		res, err = a.viaDaemon(ctx, harness, p)
		if errors.Is(err, errNoDaemon) {
			res, err = a.hookResult(ctx, harness, p)
		}
	}
	a.recordHookRun(harness, event, time.Since(start), err)
	if err != nil {
		fail(err)
		return
	}
	if a.log != nil {
		for _, n := range res.Notes {
			a.log.Warn("hook: "+n, "harness", harness, "event", event)
		}
	}
	if out := res.Output(event); out != nil {
		_, _ = a.stdout.Write(out)
	}
}

func (a *app) hookResult(ctx context.Context, harness string, p hook.Payload) (hook.Result, error) {
	eng, err := a.engine(ctx, false)
	if err != nil {
		return hook.Result{}, err
	}
	h := a.cfg.Hooks
	r := hook.Runner{Eng: eng, Harness: harness, Opts: hook.Options{Briefing: h.Briefing, PrefetchBudget: h.PrefetchBudget,
		MaxToolTokens: h.MaxToolTokens, KeepTokens: h.KeepTokens}}
	return r.Run(ctx, p)
}

// recordHookRun keeps the run in the project's hook record, for engram
// hooks status; a record that cannot be written is said on standard
// error and changes nothing else.
func (a *app) recordHookRun(name, event string, took time.Duration, runErr error) {
	if a.cfg.Store.Path == "" {
		return
	}
	if err := harness.RecordRun(a.hookRunsDir(), name, event, took, runErr); err != nil {
		fmt.Fprintf(a.stderr, "engram hook: cannot record the run: %v\n", err)
	}
}

func (a *app) importCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "import HARNESS [PATH...]",
		Short: "Import a harness's transcripts (claude-code, codex) into the store",
		Long: `Import the transcripts a harness keeps, as sessions, messages and tool
events: Claude Code's (default ~/.claude/projects, every session of every
project; or the files and directories given) or Codex's session rollouts
(default ~/.codex/sessions).

An import is incremental: each file is read from where the last import of
it stopped, and every record is named by the transcript's own ids, so
importing again stores nothing twice, and nothing the hooks stored already.
Lines engram does not read (new line types, a corrupt line) are kept as
raw entries, never dropped. A record engram cannot store (over
ingest.max_content_bytes) is left out, and a tool result whose call's
line was corrupt is stored without its call: both are listed with their
line, and the rest is imported. A file or directory that cannot be read
is listed and the rest imported; the exit status is then 1.`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			harness, paths := args[0], args[1:]
			if harness == "claude" {
				harness = hook.ClaudeCode
			}
			if harness != hook.ClaudeCode && harness != hook.Codex {
				return usagef("unknown harness %q: engram imports claude-code and codex transcripts", harness)
			}
			if len(paths) == 0 {
				home := a.getenv("HOME")
				if home == "" {
					return errors.New("no PATH given and HOME is not set")
				}
				def, keeper := filepath.Join(home, ".claude", "projects"), "Claude Code keeps its transcripts there, or in $CLAUDE_CONFIG_DIR/projects"
				if harness == hook.Codex {
					def, keeper = filepath.Join(home, ".codex", "sessions"), "Codex keeps its sessions there, or in $CODEX_HOME/sessions"
					if ch := a.getenv("CODEX_HOME"); ch != "" {
						def = filepath.Join(ch, "sessions")
					}
				} else if cd := a.getenv("CLAUDE_CONFIG_DIR"); cd != "" {
					def = filepath.Join(cd, "projects")
				}
				// No transcripts here at all: say where engram looked, and
				// open no store for nothing.
				if _, err := os.Stat(def); errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("nothing was imported: %s does not exist (%s; or name the files to import)", def, keeper)
				}
				paths = []string{def}
			}
			eng, err := a.engine(cmd.Context(), false)
			if err != nil {
				return err
			}
			prog := newImportProgress(a.stderr)
			im := hook.Importer{Eng: eng, Harness: harness, Progress: prog.update, Files: prog.files}
			var rep hook.ImportReport
			var stopped error
			for _, p := range paths {
				r, err := im.Import(cmd.Context(), p)
				prog.finish()
				rep.Add(r)
				if err != nil {
					// What was done so far is reported too.
					stopped = fmt.Errorf("import %w (what was read before is stored; run the import again to go on)", err)
					break
				}
			}
			if rep.Sessions == nil {
				rep.Sessions = []string{}
			}
			failed := stopped
			switch {
			case failed != nil:
			case rep.Failed > 0 && rep.Files > 0:
				failed = fmt.Errorf("%d files or directories could not be read (the rest was imported)", rep.Failed)
			case rep.Failed > 0:
				failed = fmt.Errorf("nothing was imported: %d files or directories could not be read", rep.Failed)
			}
			if jsonOut {
				if err := writeJSON(a.stdout, rep); err != nil {
					return err
				}
				return failed
			}
			fmt.Fprintf(a.stdout, "%d files, %s read: %d lines, %d records (%d new), %d sessions", rep.Files, humanBytes(rep.Bytes),
				rep.Lines, rep.Records, rep.Stored, len(rep.Sessions))
			if rep.Raw > 0 {
				fmt.Fprintf(a.stdout, "; %d lines kept raw (%d corrupt)", rep.Raw, rep.Corrupt)
			}
			if rep.Injected > 0 {
				fmt.Fprintf(a.stdout, "; %d of engram's own injections skipped", rep.Injected)
			}
			if rep.Skipped > 0 {
				fmt.Fprintf(a.stdout, "; %d records engram cannot store left out", rep.Skipped)
			}
			fmt.Fprintln(a.stdout)
			for _, p := range rep.Problems {
				fmt.Fprintf(a.stderr, "  %s\n", shownPath(p.String()))
			}
			if rep.MoreProblems > 0 {
				fmt.Fprintf(a.stderr, "  (and %d more)\n", rep.MoreProblems)
			}
			return failed
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the report as JSON")
	return cmd
}

// importProgress shows a bar per large file on a terminal, nothing
// otherwise.
type importProgress struct {
	terminal bool
	w        *os.File
	bar      *progressbar.ProgressBar
	path     string
	// many is set while a bar counts the files of a directory of many:
	// it stands for the files' own bars.
	many bool
}

// files counts the files of an import in a bar of its own, when there
// are many (the files themselves mostly small: each read in no time).
func (p *importProgress) files(done, total int) {
	if !p.terminal || total < 20 {
		return
	}
	if !p.many {
		p.finish()
		p.many = true
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription("transcripts"),
			progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	_ = p.bar.Set(done)
	if done == total {
		p.many = false
		p.finish()
	}
}

func newImportProgress(w any) *importProgress {
	f, ok := w.(*os.File)
	return &importProgress{terminal: ok && isTerminal(f), w: f}
}

func (p *importProgress) update(path string, done, total int64) {
	if !p.terminal || total < 1<<20 || p.many {
		return
	}
	if p.path != path {
		p.finish()
		p.path = path
		p.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription(filepath.Base(path)),
			progressbar.OptionShowBytes(true), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	_ = p.bar.Set64(done)
}

func (p *importProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
	p.path, p.many = "", false
}
