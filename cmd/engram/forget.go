package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// purgeFlags are the flags every forget and redaction takes.
type purgeFlags struct {
	dryRun, yes, jsonOut, noCompact bool
	actor                           string
}

func (f *purgeFlags) add(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "print what would be removed, and remove nothing")
	fl.BoolVarP(&f.yes, "yes", "y", false, "remove without asking (needed without a terminal)")
	fl.BoolVar(&f.jsonOut, "json", false, "print the report as JSON")
	fl.BoolVar(&f.noCompact, "no-compact", false, "leave the full-text indexes as they are: faster, but the removed words stay in the file until its segments merge")
	fl.StringVar(&f.actor, "actor", "", "who removes, for the audit (default $USER@hostname)")
}

// actor is who is removing, for the audit: --actor, else $USER@hostname.
func (a *app) actor(flag string) string {
	if flag != "" {
		return flag
	}
	user := a.getenv("USER")
	if user == "" {
		user = a.getenv("LOGNAME")
	}
	if user == "" {
		user = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return user + "@" + host
}

// confirm asks on the terminal whether to go ahead with what was shown;
// without a terminal, yes must have been given.
func (a *app) confirm(what string, yes bool) error {
	if yes {
		return nil
	}
	in, ok := a.stdin.(*os.File)
	if !ok || !isTerminal(in) {
		return usagef("%s cannot be undone: pass --yes to go ahead (or run it on a terminal to be asked); --dry-run shows what would go", what)
	}
	fmt.Fprintf(a.stderr, "%s cannot be undone. Go ahead? [y/N] ", what)
	answer, _ := bufio.NewReader(in).ReadString('\n')
	if s := strings.ToLower(strings.TrimSpace(answer)); s != "y" && s != "yes" {
		return errors.New("nothing was removed")
	}
	return nil
}

func (a *app) forgetCmd() *cobra.Command {
	var (
		f         purgeFlags
		retention bool
	)
	cmd := &cobra.Command{
		Use:   "forget session ID... | entry ID... | record ID... | --retention",
		Short: "Remove sessions, entries or archivalist records from the store, for good",
		Long: `Remove what the store holds, for good, with everything made from it: an
operator's act (agents only ever add). Each run is one transaction, and the
audit (engram audit) records who removed what and how much, never what it
held.

  engram forget session S...     a session: its messages and tool events, the
                                 entries nothing else refers to (with their
                                 chunks, index rows and vectors), its agents,
                                 references, resume state, files, wants and
                                 rejects, and its events; --records also
                                 forgets the patterns, failures, insights,
                                 decisions and intents its agents wrote
  engram forget entry ID...      an entry (ID or unique prefix) wherever it
                                 was seen; an old version of a file leaves
                                 the file's history; a file's current version
                                 is refused (change or exclude the file and
                                 index it, or use engram redact)
  engram forget record ID...     a global record of the archivalist (pat-12);
                                 a failure takes its resolutions, an intent
                                 its completion; what it superseded is
                                 active again
  engram forget --retention      the sessions [retention] max_age and
                                 max_bytes say to forget

Entries that other sessions or files still use are kept and indexed again
without what was forgotten. Afterwards the full-text indexes are rewritten
so that the removed words leave the file too (--no-compact skips it).

It shows what it would remove and asks on a terminal; elsewhere it needs
--yes. --dry-run only shows.`,
		Example: `  engram forget session s-2026-03-01 --dry-run
  engram forget entry 3f9a2c --yes
  engram forget record pat-12 dec-40
  engram forget --retention --dry-run`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !retention {
				return usagef("name what to forget: engram forget session|entry|record ID..., or --retention")
			}
			if len(args) > 0 {
				return usagef("--retention takes no arguments")
			}
			return a.runRetention(cmd.Context(), f)
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&retention, "retention", false, "forget what the [retention] settings say to")
	var records bool
	sub := func(use, short string, req func(ids []string) engine.ForgetRequest) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  minArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.runForget(cmd.Context(), f, req(args))
			},
		}
	}
	session := sub("session ID...", "Forget sessions", func(ids []string) engine.ForgetRequest {
		return engine.ForgetRequest{Sessions: ids, SessionRecords: records}
	})
	session.Flags().BoolVar(&records, "records", false, "also forget the global records the sessions' agents wrote")
	cmd.AddCommand(session,
		sub("entry ID...", "Forget entries, by ID or unique prefix", func(ids []string) engine.ForgetRequest {
			return engine.ForgetRequest{Entries: ids}
		}),
		sub("record ID...", "Forget global records of the archivalist", func(ids []string) engine.ForgetRequest {
			return engine.ForgetRequest{Records: ids}
		}))
	return cmd
}

func (a *app) runForget(ctx context.Context, f purgeFlags, req engine.ForgetRequest) error {
	eng, err := a.engine(ctx, true)
	if err != nil {
		return err
	}
	req.Actor, req.Compact = a.actor(f.actor), !f.noCompact
	if f.dryRun || !f.yes {
		dry := req
		dry.DryRun = true
		plan, err := eng.Forget(ctx, dry)
		if err != nil {
			return err
		}
		if f.dryRun {
			return a.printPurge(plan, "would forget", f.jsonOut)
		}
		a.printCounts(a.stderr, "would forget", plan.Targets, plan.Counts, plan.Reactivated)
		if err := a.confirm("forgetting", f.yes); err != nil {
			return err
		}
	}
	rep, err := eng.Forget(ctx, req)
	if err != nil {
		return err
	}
	return a.printPurge(rep, "forgot", f.jsonOut)
}

func (a *app) runRetention(ctx context.Context, f purgeFlags) error {
	r := a.cfg.Retention
	if !r.On() {
		return errors.New("no retention is set: set [retention] max_age or max_bytes (see engram help forget)")
	}
	eng, err := a.engine(ctx, true)
	if err != nil {
		return err
	}
	req := engine.RetainRequest{MaxAge: r.MaxAge.Duration, MaxBytes: r.MaxBytes.Bytes, Actor: a.actor(f.actor), Compact: !f.noCompact}
	if f.dryRun || !f.yes {
		dry := req
		dry.DryRun = true
		plan, err := eng.Retain(ctx, dry)
		if err != nil {
			return err
		}
		if f.dryRun || len(plan.Sessions) == 0 {
			return a.printRetain(plan, "would forget", f.jsonOut)
		}
		a.printRetainText(a.stderr, plan, "would forget")
		if err := a.confirm("forgetting", f.yes); err != nil {
			return err
		}
	}
	rep, err := eng.Retain(ctx, req)
	if err != nil {
		return err
	}
	return a.printRetain(rep, "forgot", f.jsonOut)
}

// purgeJSON is a forget's or a redaction's report in --json.
type purgeJSON struct {
	DryRun      bool         `json:"dry_run"`
	Targets     []string     `json:"targets,omitempty"`
	Counts      store.Counts `json:"counts"`
	Reactivated []string     `json:"reactivated,omitempty"`
	Models      []string     `json:"models_dropped,omitempty"`
	Audit       int64        `json:"audit,omitempty"`
	Compacted   bool         `json:"compacted"`
}

func (a *app) printPurge(rep store.PurgeReport, verb string, jsonOut bool) error {
	return a.printPurgeModels(rep, nil, verb, jsonOut)
}

func (a *app) printPurgeModels(rep store.PurgeReport, models []string, verb string, jsonOut bool) error {
	dry := strings.HasPrefix(verb, "would")
	if jsonOut {
		return writeJSON(a.stdout, purgeJSON{DryRun: dry, Targets: rep.Targets, Counts: rep.Counts, Reactivated: rep.Reactivated,
			Models: models, Audit: rep.Audit, Compacted: rep.Compacted})
	}
	a.printCounts(a.stdout, verb, rep.Targets, rep.Counts, rep.Reactivated)
	for _, m := range models {
		fmt.Fprintf(a.stdout, "dropped the corpus model %s, which had learned a word of it: engram embed trains a new one\n", m)
	}
	if rep.Counts != (store.Counts{}) {
		a.printAfter(rep.Audit, rep.Compacted, dry)
	}
	return nil
}

// printAfter says where the audit record is and whether the bytes left
// the files.
func (a *app) printAfter(audit int64, compacted, dry bool) {
	if dry {
		return
	}
	if audit > 0 {
		fmt.Fprintf(a.stdout, "audit record %d (engram audit)\n", audit)
	}
	switch {
	case compacted:
	case a.cfg.Store.Postgres():
		// VACUUM ran on the tables (see internal/store/postgres purge.go);
		// the rest is the database's, and no run of engram reaches it.
		fmt.Fprintln(a.stderr, "note: PostgreSQL may keep the removed bytes in freed pages until they are reused, and keeps them in its write-ahead log, replicas and backups: engram cannot reach those")
	default:
		fmt.Fprintln(a.stderr, "note: the store's files may still hold removed bytes: its full-text indexes were not rewritten, or another engram process kept its log in use; run engram forget or redact again later to compact")
	}
}

// printCounts prints what a purge removed (or would), one line per kind,
// under a line of what it was.
func (a *app) printCounts(w io.Writer, verb string, targets []string, c store.Counts, reactivated []string) {
	if len(targets) > 0 {
		fmt.Fprintf(w, "%s %s\n", verb, strings.Join(targets, ", "))
	} else {
		fmt.Fprintf(w, "%s:\n", verb)
	}
	countLines(w, c)
	if len(reactivated) > 0 {
		fmt.Fprintf(w, "  active again (what they superseded): %s\n", strings.Join(reactivated, ", "))
	}
}

// countLines prints the counts that are not zero, one to a line.
func countLines(w io.Writer, c store.Counts) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		n := v.Field(i).Int()
		if n == 0 {
			continue
		}
		name := strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0]
		fmt.Fprintf(tw, "  %s\t%s\n", strings.ReplaceAll(name, "_", " "), commas(n))
	}
	_ = tw.Flush()
	if c == (store.Counts{}) {
		fmt.Fprintln(w, "  nothing")
	}
}

type retainJSON struct {
	DryRun       bool         `json:"dry_run"`
	Sessions     []string     `json:"sessions"`
	Counts       store.Counts `json:"counts"`
	ContentBytes int64        `json:"content_bytes"`
	Compacted    bool         `json:"compacted"`
}

func (a *app) printRetain(rep store.RetainReport, verb string, jsonOut bool) error {
	dry := strings.HasPrefix(verb, "would")
	if jsonOut {
		return writeJSON(a.stdout, retainJSON{DryRun: dry, Sessions: append([]string{}, rep.Sessions...), Counts: rep.Counts,
			ContentBytes: rep.ContentBytes, Compacted: rep.Compacted})
	}
	a.printRetainText(a.stdout, rep, verb)
	if len(rep.Sessions) > 0 && !dry && !rep.Compacted {
		a.printAfter(0, false, false)
	}
	return nil
}

func (a *app) printRetainText(w io.Writer, rep store.RetainReport, verb string) {
	if len(rep.Sessions) == 0 {
		fmt.Fprintf(w, "retention: nothing to forget (content %s)\n", humanBytes(rep.ContentBytes))
	} else {
		a.printCounts(w, verb+" by retention", nil, rep.Counts, nil)
		fmt.Fprintf(w, "  sessions: %s\n  content then %s\n", strings.Join(rep.Sessions, ", "), humanBytes(rep.ContentBytes))
	}
	if m := a.cfg.Retention.MaxBytes.Bytes; m > 0 && rep.ContentBytes > m {
		fmt.Fprintf(w, "still over max_bytes (%s): the rest is indexed files, content outside sessions and sessions active in the last hour\n", humanBytes(m))
	}
}

func (a *app) redactCmd() *cobra.Command {
	var (
		f        purgeFlags
		fromFile string
		marker   string
	)
	cmd := &cobra.Command{
		Use:   "redact [--from-file FILE]",
		Short: "Replace a string wherever the store holds it, such as a secret that slipped in",
		Long: `Replace every occurrence of a string, byte for byte, wherever the store holds
it: in entries' content (their chunks, full-text rows and term sets are made
again, their vectors deleted and made again by engram embed), in what
occurrences say (files, keywords, entities, metadata), in conversation
contexts, in the archivalist's records, agents and events, in session names,
references and settings. A trained model that holds it is dropped. An entry
keeps its ID, so that what refers to it still resolves, and is marked
redacted. Secrets of known formats are redacted before they are stored;
this is for what slipped through.

The string is read from standard input (on a terminal it is not echoed), or
from --from-file; give it as an argument only if you accept that your shell
history keeps it. One trailing newline is dropped. It must be at least 4
bytes, and it is refused when it is part of an identifier (a session, agent
or message id, a file path): forget what those name instead.

It shows how much it would replace and asks on a terminal; elsewhere it
needs --yes. The audit records who redacted and how much, never the string
or its hash.`,
		Example: `  engram redact                              # type it; it is not echoed
  engram redact --from-file leaked.txt --yes
  printf %s "$TOKEN" | engram redact --yes --dry-run`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, fromStdin, err := a.redactText(args, fromFile)
			if err != nil {
				return err
			}
			if fromStdin && !f.yes && !f.dryRun {
				return usagef("the string came on standard input, so it cannot ask there: pass --yes (or --dry-run)")
			}
			ctx := cmd.Context()
			eng, err := a.engine(ctx, true)
			if err != nil {
				return err
			}
			req := engine.RedactRequest{Text: text, Marker: marker, Actor: a.actor(f.actor), Compact: !f.noCompact}
			if f.dryRun || !f.yes {
				dry := req
				dry.DryRun = true
				plan, err := eng.Redact(ctx, dry)
				if err != nil {
					return err
				}
				if f.dryRun || plan.Counts.Places == 0 {
					return a.printPurgeModels(plan.PurgeReport, nil, "would redact", f.jsonOut)
				}
				a.printCounts(a.stderr, "would redact", nil, plan.Counts, nil)
				if err := a.confirm("redacting", f.yes); err != nil {
					return err
				}
			}
			rep, err := eng.Redact(ctx, req)
			if err != nil {
				return err
			}
			return a.printPurgeModels(rep.PurgeReport, rep.Models, "redacted", f.jsonOut)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&fromFile, "from-file", "", "read the string from this file")
	cmd.Flags().StringVar(&marker, "marker", store.DefaultMarker, "what replaces it")
	return cmd
}

// redactText reads the string to redact: from a file, the argument (with a
// warning), or standard input, unechoed on a terminal. fromStdin says that
// standard input is spent, so it cannot ask for permission.
func (a *app) redactText(args []string, fromFile string) (text []byte, fromStdin bool, err error) {
	switch {
	case fromFile != "" && len(args) > 0:
		return nil, false, usagef("give the string once: --from-file or an argument")
	case fromFile != "":
		if text, err = os.ReadFile(fromFile); err != nil {
			return nil, false, err
		}
	case len(args) == 1:
		fmt.Fprintln(a.stderr, "warning: a string given as an argument stays in your shell history and the process list; use --from-file or standard input")
		text = []byte(args[0])
	default:
		if in, ok := a.stdin.(*os.File); ok && isTerminal(in) {
			fmt.Fprint(a.stderr, "string to redact (not echoed): ")
			text, err = term.ReadPassword(int(in.Fd()))
			fmt.Fprintln(a.stderr)
			if err != nil {
				return nil, false, err
			}
			return text, false, nil
		}
		if text, err = io.ReadAll(a.stdin); err != nil {
			return nil, false, err
		}
		fromStdin = true
	}
	text = bytes.TrimSuffix(text, []byte("\n"))
	text = bytes.TrimSuffix(text, []byte("\r"))
	if len(text) == 0 {
		return nil, fromStdin, usagef("no string to redact: give it on standard input or with --from-file")
	}
	return text, fromStdin, nil
}

func (a *app) auditCmd() *cobra.Command {
	var (
		limit   int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List what was forgotten and redacted, by whom and when",
		Long: `List the audit of the store: every forget, redaction and retention run, with
who ran it (--actor, else $USER@hostname), when, what it named and how much
it removed or replaced. It never holds what was removed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usagef("--limit is %d; it must be 1 or more", limit)
			}
			eng, err := a.engine(cmd.Context(), true)
			if err != nil {
				return err
			}
			recs, err := eng.Audit(cmd.Context(), -1, limit)
			if err != nil {
				return err
			}
			if jsonOut {
				type auditJSON struct {
					Seq     int64        `json:"seq"`
					At      string       `json:"at"`
					Actor   string       `json:"actor"`
					Action  string       `json:"action"`
					Targets []string     `json:"targets"`
					Counts  store.Counts `json:"counts"`
				}
				out := make([]auditJSON, 0, len(recs))
				for _, r := range recs {
					out = append(out, auditJSON{Seq: r.Seq, At: r.At.Format(time.RFC3339Nano), Actor: r.Actor, Action: r.Action,
						Targets: append([]string{}, r.Targets...), Counts: r.Counts})
				}
				return writeJSON(a.stdout, out)
			}
			if len(recs) == 0 {
				fmt.Fprintln(a.stdout, "nothing was ever forgotten or redacted")
				return nil
			}
			for _, r := range recs {
				what := strings.Join(r.Targets, ", ")
				if what == "" {
					what = "a string"
				}
				fmt.Fprintf(a.stdout, "#%d %s %s %s %s\n", r.Seq, r.At.Local().Format(time.DateTime), r.Actor, r.Action, what)
				countLines(a.stdout, r.Counts)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 50, "how many of the newest records")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

// retainLoop applies the retention settings every interval and warns about
// the disk cap, until ctx ends: engram serve runs it beside the server.
// It forgets without compacting (see DESIGN.md): rewriting the full-text
// indexes holds the store's lock for seconds at a time.
func (a *app) retainLoop(ctx context.Context, eng *engine.Engine) {
	r := a.cfg.Retention
	if !r.On() && r.DiskCap.Bytes == 0 {
		return
	}
	log := a.log.With("component", "retention", "project", a.cfg.Project)
	actor := "engram serve (" + a.actor("") + ")"
	for {
		if r.On() {
			rep, err := eng.Retain(ctx, engine.RetainRequest{MaxAge: r.MaxAge.Duration, MaxBytes: r.MaxBytes.Bytes, Actor: actor})
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				log.Error("retention failed", "err", err)
			case len(rep.Sessions) > 0:
				log.Info("forgot sessions by retention", "sessions", len(rep.Sessions), "entries", rep.Counts.Entries,
					"content_bytes", rep.ContentBytes)
			}
		}
		if r.DiskCap.Bytes > 0 {
			if u, err := eng.Disk(ctx, r.DiskCap.Bytes); err != nil {
				log.Error("cannot measure the store", "err", err)
			} else if u.Level != engine.DiskOK {
				log.Warn("store near or over its disk cap: set [retention] max_age or max_bytes, or run engram forget",
					"level", u.Level, "used_bytes", u.UsedBytes, "cap_bytes", u.CapBytes)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.Every()):
		}
	}
}
