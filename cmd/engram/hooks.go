package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/harness"
)

func (a *app) hooksCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hooks",
		Short: "Install engram's hooks and MCP server into Claude Code or Codex: install | uninstall | status",
		Long: `Install engram into an agent harness: its lifecycle hooks (SessionStart,
UserPromptSubmit, PostToolUse, PreCompact, Stop), which run 'engram hook',
and engram's MCP server, which runs 'engram mcp', written into the harness's
own settings files and merged with what they hold.

The scope is the project by default (files in the project's directory, whose
commands name it with --project) or, with --user, the user (files under the
home directory, for every project; engram then finds the project from the
directory the harness runs in):

  claude-code  project  .claude/settings.json (hooks), .mcp.json (MCP)
               user     ~/.claude/settings.json (hooks), ~/.claude.json (MCP)
  codex        project  .codex/hooks.json (hooks), .codex/config.toml (MCP)
               user     ~/.codex/hooks.json (hooks), ~/.codex/config.toml (MCP)

$CLAUDE_CONFIG_DIR and $CODEX_HOME move the user's files as they move the
harnesses'. A second install changes nothing; a file that changes is backed
up beside itself first (NAME.engram-backup-TIME). A file with comments or
that does not parse is left alone and named with its line and column, and
then nothing is written. uninstall removes exactly what install wrote: your
own hooks stay, and so does an entry of engram's that you have edited,
which is reported. status shows what is installed where, and what the hooks
did in this project: runs, errors, the last run, success and error.`,
		Example: `  engram hooks install claude-code
  engram hooks install codex --user --dry-run
  engram hooks status
  engram hooks uninstall claude-code`,
		Args: noArgs,
	}
	cmd.AddCommand(a.hooksInstallCmd(), a.hooksUninstallCmd(), a.hooksStatusCmd())
	return cmd
}

// hooksFlags are the flags install and uninstall share.
type hooksFlags struct {
	user, dryRun bool
}

func (f *hooksFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.user, "user", false, "the user's files, for every project, instead of the project's")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print what would change, and change nothing")
}

func (a *app) hooksInstallCmd() *cobra.Command {
	var f hooksFlags
	cmd := &cobra.Command{
		Use:   "install claude-code|codex",
		Short: "Write engram's hooks and MCP server into a harness's settings",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := harnessArg(args[0])
			if err != nil {
				return err
			}
			opts := a.harnessOptions(h, f, a.engramCommand())
			rep, err := harness.Install(opts)
			if err != nil {
				return err
			}
			// Both harnesses run the hooks of every scope: installed at
			// both, each hook would run twice.
			other := a.harnessOptions(h, hooksFlags{user: !f.user}, opts.Command)
			if st, err := harness.Status(other); err == nil {
				for _, fr := range st.Files {
					if fr.Items[0].State != harness.Absent && fr.Items[0].Name != harness.MCPItem {
						rep.Notes = append(rep.Notes, fmt.Sprintf("engram's hooks are also installed at %s scope (%s): %s runs both, so each would run twice; remove one with engram hooks uninstall %s%s",
							other.Scope, fr.Path, h, h, map[bool]string{true: " --user"}[other.Scope == harness.UserScope]))
					}
				}
			}
			return a.printHarnessReport(rep, f.dryRun)
		},
	}
	f.add(cmd)
	return cmd
}

func (a *app) hooksUninstallCmd() *cobra.Command {
	var f hooksFlags
	cmd := &cobra.Command{
		Use:   "uninstall [claude-code|codex]",
		Short: "Remove what engram hooks install wrote (both harnesses without an argument)",
		Args:  maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hs := harness.Harnesses
			if len(args) == 1 {
				h, err := harnessArg(args[0])
				if err != nil {
					return err
				}
				hs = []harness.Harness{h}
			}
			bin, _ := a.installedEngram()
			var all harness.Report
			for _, h := range hs {
				rep, err := harness.Uninstall(a.harnessOptions(h, f, bin))
				if err != nil {
					return err
				}
				all.Files = append(all.Files, rep.Files...)
				all.Notes = append(all.Notes, rep.Notes...)
			}
			return a.printHarnessReport(all, f.dryRun)
		},
	}
	f.add(cmd)
	return cmd
}

// hooksStatus is status's JSON.
type hooksStatus struct {
	Files    []harness.FileReport `json:"files"`
	Notes    []string             `json:"notes,omitempty"`
	RunsFile string               `json:"runs_file"`
	Runs     []harness.Run        `json:"runs"`
}

func (a *app) hooksStatusCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "What engram has installed in each harness and scope, and what its hooks did in this project",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			bin, _ := a.installedEngram()
			var st hooksStatus
			for _, h := range harness.Harnesses {
				for _, s := range harness.Scopes {
					rep, err := harness.Status(a.harnessOptions(h, hooksFlags{user: s == harness.UserScope}, bin))
					if err != nil {
						return err
					}
					st.Files = append(st.Files, rep.Files...)
					st.Notes = append(st.Notes, rep.Notes...)
				}
			}
			dir := a.hookRunsDir()
			st.RunsFile = filepath.Join(dir, harness.RunsFile)
			runs, err := harness.Runs(dir)
			if err != nil {
				return err
			}
			st.Runs = runs
			if jsonOut {
				if st.Runs == nil {
					st.Runs = []harness.Run{}
				}
				return writeJSON(a.stdout, st)
			}
			return a.printHooksStatus(st)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

// hookRunsDir is the directory of the project's hook run record: its
// store's.
func (a *app) hookRunsDir() string {
	return a.cfg.StateDir()
}

// harnessArg reads a harness's name as --print-config does.
func harnessArg(name string) (harness.Harness, error) {
	switch clients[name] {
	case "claude-code":
		return harness.ClaudeCode, nil
	case "codex":
		return harness.Codex, nil
	}
	return "", usagef("%q is not a harness engram hooks knows: claude-code (or claude), codex", name)
}

// harnessOptions are the options of an install of h, with engram at bin.
func (a *app) harnessOptions(h harness.Harness, f hooksFlags, bin string) harness.Options {
	scope := harness.ProjectScope
	if f.user {
		scope = harness.UserScope
	}
	return harness.Options{
		Harness:         h,
		Scope:           scope,
		Project:         a.cfg.Project,
		Home:            a.getenv("HOME"),
		ClaudeConfigDir: a.getenv("CLAUDE_CONFIG_DIR"),
		CodexHome:       a.getenv("CODEX_HOME"),
		Command:         bin,
		// The MCP server writes in the session the hooks registered, as
		// their agent.
		MCPArgs: []string{"--harness", string(h)},
		// The timeout is part of the entry's shape, by which uninstall
		// knows it: the default, always.
		DryRun: f.dryRun,
	}
}

// printHarnessReport prints what install or uninstall did, file by file.
func (a *app) printHarnessReport(rep harness.Report, dryRun bool) error {
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	for _, f := range rep.Files {
		what := "unchanged"
		switch {
		case f.Deleted:
			what = "deleted (it held nothing else)"
		case f.Created:
			what = "created"
		case f.Changed:
			what = "updated"
		}
		if dryRun && f.Changed {
			what = "would be " + what
		}
		if f.Backup != "" {
			what += ", backup " + f.Backup
		}
		fmt.Fprintf(w, "%s %s: %s: %s\n", f.Harness, f.Scope, f.Path, what)
		for _, it := range f.Items {
			if it.Note != "" {
				fmt.Fprintf(w, "  %s\t%s\t%s\n", it.Name, it.State, it.Note)
			} else {
				fmt.Fprintf(w, "  %s\t%s\n", it.Name, it.State)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	printNotes(a.stdout, rep.Notes)
	return nil
}

func printNotes(w io.Writer, notes []string) {
	seen := map[string]bool{}
	for _, n := range notes {
		if !seen[n] {
			seen[n] = true
			fmt.Fprintln(w, "note: "+n)
		}
	}
}

func (a *app) printHooksStatus(st hooksStatus) error {
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "HARNESS\tSCOPE\tFILE\tENTRY\tSTATE")
	for _, f := range st.Files {
		absent := true
		for _, it := range f.Items {
			absent = absent && it.State == harness.Absent
		}
		switch {
		case f.Err != "":
			fmt.Fprintf(w, "%s\t%s\t%s\t-\tunreadable: %s\n", f.Harness, f.Scope, f.Path, f.Err)
		case absent:
			fmt.Fprintf(w, "%s\t%s\t%s\t-\tnot installed\n", f.Harness, f.Scope, f.Path)
		default:
			for _, it := range f.Items {
				state := string(it.State)
				if it.Note != "" {
					state += " (" + it.Note + ")"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", f.Harness, f.Scope, f.Path, it.Name, state)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	printNotes(a.stdout, st.Notes)
	fmt.Fprintln(a.stdout)
	if len(st.Runs) == 0 {
		fmt.Fprintf(a.stdout, "no hook has run in project %s yet (record: %s)\n", a.cfg.Project, st.RunsFile)
		return nil
	}
	fmt.Fprintf(a.stdout, "hook runs in project %s (record: %s):\n", a.cfg.Project, st.RunsFile)
	w = tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "HARNESS\tEVENT\tRUNS\tERRORS\tLAST RUN\tTOOK\tLAST SUCCESS\tLAST ERROR")
	now := time.Now()
	for _, r := range st.Runs {
		lastErr := "-"
		if r.LastError != "" {
			lastErr = ago(now, r.LastErrorAt) + ": " + oneLine(r.LastError, 120)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Harness, r.Event, r.Runs, r.Errors,
			ago(now, r.LastRun), r.LastTook.Round(time.Millisecond/10), ago(now, r.LastSuccess), lastErr)
	}
	return w.Flush()
}

// ago says when t was: its local time and how long ago; "never" for zero.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t).Round(time.Second)
	return t.Local().Format("2006-01-02 15:04:05") + " (" + d.String() + " ago)"
}

// oneLine shortens s to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
