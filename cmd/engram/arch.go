package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/store"
)

// who is how a command names the writer: an agent registered with the
// archivalist, or, without --agent, the session's operator agent
// "cli@SESSION", registered by its first write that succeeds.
type who struct {
	session string
	agent   string
}

func (w *who) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&w.session, "session", "", "the session written to (default $ENGRAM_SESSION, else cli)")
	cmd.Flags().StringVar(&w.agent, "agent", "", "the registered agent writing (default: the session's operator agent cli@SESSION)")
}

func (a *app) archive(ctx context.Context) (*archive.Archive, error) {
	return a.openArchive(ctx, false)
}

// readArchive is the archive of a command that only reads: with no store
// yet it says so ("no store yet") rather than make one.
func (a *app) readArchive(ctx context.Context) (*archive.Archive, error) {
	return a.openArchive(ctx, true)
}

func (a *app) openArchive(ctx context.Context, mustExist bool) (*archive.Archive, error) {
	eng, err := a.engine(ctx, mustExist)
	if err != nil {
		return nil, err
	}
	return eng.Archive(ctx)
}

func (a *app) handle(ctx context.Context, w who) (*archive.Handle, error) {
	arc, err := a.archive(ctx)
	if err != nil {
		return nil, err
	}
	session := w.session
	if session == "" {
		session = a.getenv("ENGRAM_SESSION")
	}
	if w.agent != "" {
		return arc.HandleIn(ctx, session, w.agent)
	}
	if session == "" {
		session = "cli"
	}
	// Registered by its first write, in that write's transaction: a write
	// refused (bad input, a record that does not exist) registers nothing.
	return arc.ConnectOnWrite(ctx, archive.AgentSpec{ID: archive.AgentIDFor("cli", session), Name: "cli", SessionID: session, Role: "operator"})
}

func (a *app) printWrite(jsonOut bool, wr archive.WriteResult) error {
	if jsonOut {
		return writeJSON(a.stdout, wr)
	}
	switch {
	case wr.Status == "merged":
		fmt.Fprintf(a.stdout, "merged into %s (%s duplicate, similarity %.2f): %s\n", wr.ID, wr.Merged.Method, wr.Merged.Similarity, wr.Merged.Existing)
	case wr.ID == "": // session state
		fmt.Fprintf(a.stdout, "%s (sv %d, gv %d)\n", wr.Status, wr.SV, wr.GV)
	default:
		fmt.Fprintf(a.stdout, "%s %s (gv %d)\n", wr.Status, wr.ID, wr.GV)
	}
	if len(wr.Superseded) > 0 {
		fmt.Fprintf(a.stdout, "superseded %s\n", strings.Join(wr.Superseded, ", "))
	}
	for _, n := range wr.Notices {
		fmt.Fprintln(a.stdout, "note: "+n)
	}
	return nil
}

// listCmd lists global records of one kind.
func (a *app) listCmd(kind store.RecordKind) *cobra.Command {
	var (
		req     archive.GlobalRead
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: fmt.Sprintf("List the active %ss, newest first", kind),
		Long: fmt.Sprintf(`List the active %[1]ss of the shared history, newest first. --all adds
superseded ones. --since N reads a delta: only %[1]ss born after global
version N. --if-gv N prints NOT_MODIFIED if N is still the global version.`, kind),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			arc, err := a.readArchive(cmd.Context())
			if err != nil {
				return err
			}
			req.Kind = kind
			res, err := arc.ReadGlobal(cmd.Context(), req)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(a.stdout, res)
			}
			return a.printRecords(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Category, "category", "", "only this category and those under it")
	f.BoolVar(&req.All, "all", false, "include superseded records (and completed or expired intents)")
	f.Uint64Var(&req.Since, "since", 0, "only records born after this global version (a delta)")
	f.Uint64Var(&req.IfGV, "if-gv", 0, "print NOT_MODIFIED if this is still the global version")
	f.IntVar(&req.Limit, "limit", archive.DefaultReadLimit, "at most this many (a delta is bounded by the delta limit instead)")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

func (a *app) printRecords(res archive.GlobalResult) error {
	switch res.Status {
	case archive.StatusNotModified:
		fmt.Fprintf(a.stdout, "NOT_MODIFIED (gv %d)\n", res.GV)
		return nil
	case archive.StatusTooLarge:
		fmt.Fprintf(a.stdout, "TOO_LARGE (gv %d): %s\n", res.GV, res.Message)
		return nil
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	for _, r := range res.Records {
		cat := r.Category
		if cat == "" {
			cat = "-"
		}
		line := r.Text()
		switch {
		case r.Pattern != nil && r.Pattern.Authority != archive.Suggestion:
			line += " (" + string(r.Pattern.Authority) + ")"
		case r.Intent != nil && r.CompletedBy != "":
			line += fmt.Sprintf(" [%s] completed by %s at %s", strings.Join(append(append([]string{}, r.Intent.Paths...), r.Intent.Categories...), ", "),
				r.CompletedBy, r.CompletedAt.Local().Format(time.DateTime))
		case r.Intent != nil:
			line += fmt.Sprintf(" [%s] until %s", strings.Join(append(append([]string{}, r.Intent.Paths...), r.Intent.Categories...), ", "),
				r.Intent.ExpiresAt.Local().Format(time.TimeOnly))
		case r.Resolution != nil:
			line = fmt.Sprintf("for %s: %s (%s)", r.Ref, line, r.Resolution.Outcome)
		case r.Kind == store.KindIntentDone && line == "":
			line = "completes " + r.Ref
		}
		if r.SupersededBy != "" {
			line += " — superseded by " + r.SupersededBy
		}
		if r.Uses > 0 {
			line += fmt.Sprintf(" ×%d", r.Uses+1)
		}
		fmt.Fprintf(w, "%s\t%s\t%s (%s)\t%s\n", r.ID, cat, r.Agent, r.Session, line)
		for _, rr := range r.Resolutions {
			fmt.Fprintf(w, "\t\t\t  fix: %s (%d success, %d partial, %d failure; score %.2f)\n",
				rr.Approach, rr.Successes, rr.Partials, rr.Failures, rr.Score)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	more := ""
	if res.More {
		more = ", more with --limit"
	}
	fmt.Fprintf(a.stdout, "%s (gv %d%s)\n", plural(len(res.Records), "record"), res.GV, more)
	return nil
}

func (a *app) patternCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "pattern", Short: "Add and list patterns of the shared history"}
	var (
		p       archive.Pattern
		w       who
		jsonOut bool
	)
	add := &cobra.Command{
		Use:   "add PATTERN --category L1.L2",
		Short: "Add a pattern (a duplicate is merged; a contradiction must supersede)",
		Long: `Add a pattern to the history every session shares. A duplicate of an active
pattern (same words, or near-identical) is merged into it and named. A
pattern that contradicts an active one of the same category and scope is
refused with the conflicting ids: name them with --supersedes and say why
with --reason, or narrow --scope.

Categories are hierarchical, L1.L2: ` + strings.Join(archive.Categories(), ", ") + ` as L1.`,
		Example: `  engram pattern add "wrap errors with %w" --category error.handling
  engram pattern add "return errors unwrapped" --category error.handling --supersedes pat-3 --reason "callers compare with =="`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("pattern add needs the pattern, quoted")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := a.handle(cmd.Context(), w)
			if err != nil {
				return err
			}
			p.Pattern = args[0]
			wr, err := h.RecordPattern(cmd.Context(), p)
			if err != nil {
				return err
			}
			return a.printWrite(jsonOut, wr)
		},
	}
	f := add.Flags()
	f.StringVar(&p.Category, "category", "", "hierarchical category, such as error.handling (required)")
	f.StringVar(&p.Description, "description", "", "more about the pattern")
	f.StringVar(&p.Example, "example", "", "an example")
	f.StringSliceVar(&p.Scope, "scope", nil, "paths, directories or globs it applies to (default: everywhere)")
	f.StringVar((*string)(&p.Authority), "authority", "", "suggestion (default), established or mandated")
	f.StringSliceVar(&p.Supersedes, "supersedes", nil, "ids of active patterns this replaces")
	f.StringVar(&p.Reason, "reason", "", "why it supersedes them")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	w.flags(add)
	cmd.AddCommand(add, a.listCmd(store.KindPattern))
	return cmd
}

func (a *app) failureCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "failure", Short: "Record failures and their resolutions"}
	var (
		f       archive.Failure
		res     archive.Resolution
		w       who
		jsonOut bool
	)
	add := &cobra.Command{
		Use:   "add --approach A --reason R",
		Short: "Record an approach that failed, with its resolution if known",
		Example: `  engram failure add --approach "raw SQL in handlers" --reason "injection risk" \
      --resolution "parameterized queries" --outcome success --category database.sql`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if res.Approach == "" && res.Outcome != "" {
				return usagef("--outcome %q is of a resolution: give --resolution too (what was tried instead)", res.Outcome)
			}
			h, err := a.handle(cmd.Context(), w)
			if err != nil {
				return err
			}
			if res.Approach != "" || res.Outcome != "" {
				f.Resolution = &res
			}
			wr, err := h.RecordFailure(cmd.Context(), f)
			if err != nil {
				return err
			}
			return a.printWrite(jsonOut, wr)
		},
	}
	fl := add.Flags()
	fl.StringVar(&f.Approach, "approach", "", "what was tried (required)")
	fl.StringVar(&f.Reason, "reason", "", "why it failed (required)")
	fl.StringVar(&f.Context, "context", "", "what was being attempted")
	fl.StringVar(&f.Error, "error", "", "the error message")
	fl.StringSliceVar(&f.Files, "file", nil, "files involved")
	fl.StringVar(&f.Category, "category", "", "hierarchical category, such as database.sql")
	fl.StringVar(&res.Approach, "resolution", "", "what worked instead (or was tried)")
	fl.StringVar((*string)(&res.Outcome), "outcome", "", "how the resolution went: success, partial or failure")
	fl.StringVar(&res.Notes, "notes", "", "notes on the resolution")
	fl.BoolVar(&jsonOut, "json", false, "print as JSON")
	w.flags(add)

	var (
		r2  archive.Resolution
		w2  who
		js2 bool
	)
	resolve := &cobra.Command{
		Use:   "resolve FAILURE_ID --approach A --outcome success|partial|failure",
		Short: "Record a resolution tried against a recorded failure, and how it went",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("failure resolve needs the failure id")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := a.handle(cmd.Context(), w2)
			if err != nil {
				return err
			}
			wr, err := h.RecordResolution(cmd.Context(), args[0], r2)
			if err != nil {
				return err
			}
			return a.printWrite(js2, wr)
		},
	}
	rf := resolve.Flags()
	rf.StringVar(&r2.Approach, "approach", "", "what was tried (required)")
	rf.StringVar((*string)(&r2.Outcome), "outcome", "", "success, partial or failure (required)")
	rf.StringVar(&r2.Notes, "notes", "", "notes")
	rf.BoolVar(&js2, "json", false, "print as JSON")
	w2.flags(resolve)
	cmd.AddCommand(add, resolve, a.listCmd(store.KindFailure))
	return cmd
}

func (a *app) insightCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "insight", Short: "Add and list insights of the shared history"}
	var (
		in      archive.Insight
		w       who
		jsonOut bool
	)
	add := &cobra.Command{
		Use:   "add INSIGHT",
		Short: "Add something learned",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("insight add needs the insight, quoted")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := a.handle(cmd.Context(), w)
			if err != nil {
				return err
			}
			in.Insight = args[0]
			wr, err := h.RecordInsight(cmd.Context(), in)
			if err != nil {
				return err
			}
			return a.printWrite(jsonOut, wr)
		},
	}
	f := add.Flags()
	f.StringVar(&in.Category, "category", "", "hierarchical category")
	f.StringVar(&in.Evidence, "evidence", "", "what showed it")
	f.StringSliceVar(&in.Scope, "scope", nil, "paths it concerns")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	w.flags(add)
	cmd.AddCommand(add, a.listCmd(store.KindInsight))
	return cmd
}

func (a *app) decisionCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "decision", Short: "Add and list decisions of the shared history"}
	var (
		d       archive.Decision
		w       who
		jsonOut bool
	)
	add := &cobra.Command{
		Use:   "add DECISION",
		Short: "Add a decision, with its rationale and the alternatives considered",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("decision add needs the decision, quoted")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := a.handle(cmd.Context(), w)
			if err != nil {
				return err
			}
			d.Decision = args[0]
			wr, err := h.RecordDecision(cmd.Context(), d)
			if err != nil {
				return err
			}
			return a.printWrite(jsonOut, wr)
		},
	}
	f := add.Flags()
	f.StringVar(&d.Category, "category", "", "hierarchical category")
	f.StringVar(&d.Rationale, "rationale", "", "why")
	f.StringSliceVar(&d.Alternatives, "alternative", nil, "an alternative considered (repeatable)")
	f.StringSliceVar(&d.Scope, "scope", nil, "paths it concerns")
	f.StringSliceVar(&d.Supersedes, "supersedes", nil, "ids of decisions this replaces")
	f.StringVar(&d.Reason, "reason", "", "why it supersedes them")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	w.flags(add)
	cmd.AddCommand(add, a.listCmd(store.KindDecision))
	return cmd
}

func (a *app) intentCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "intent", Short: "Declare, complete and list cross-cutting work"}
	var (
		in      archive.Intent
		w       who
		jsonOut bool
	)
	declare := &cobra.Command{
		Use:   "declare DESCRIPTION --path P | --category C",
		Short: "Announce cross-cutting work; other sessions see it in their briefings",
		Long: `Announce cross-cutting work (a rename, an API change) so that other sessions
whose files or categories it touches see it in their briefings. Nothing
waits: overlapping intents of other sessions are printed as notes. The
intent stays until completed or until --ttl passes.`,
		Example: `  engram intent declare "rename auth.Token to auth.Credential" --path internal/auth --session s1`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("intent declare needs the description, quoted")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// As declare_intent's ttl_minutes: a minute to a week.
			if in.TTL < time.Minute || in.TTL > time.Duration(api.TTLMinutesRange.Max)*time.Minute {
				return usagef("--ttl is %s; it must be from 1m to %s", in.TTL, time.Duration(api.TTLMinutesRange.Max)*time.Minute)
			}
			h, err := a.handle(cmd.Context(), w)
			if err != nil {
				return err
			}
			in.Description = args[0]
			wr, err := h.DeclareIntent(cmd.Context(), in)
			if err != nil {
				return err
			}
			return a.printWrite(jsonOut, wr)
		},
	}
	f := declare.Flags()
	f.StringSliceVar(&in.Paths, "path", nil, "paths or directories it touches")
	f.StringSliceVar(&in.Categories, "category", nil, "categories it touches")
	f.StringVar(&in.Priority, "priority", "", "normal (default), high or critical")
	f.DurationVar(&in.TTL, "ttl", archive.DefaultIntentTTL, "how long it stays if never completed")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	w.flags(declare)

	var (
		w2  who
		js2 bool
	)
	complete := &cobra.Command{
		Use:   "complete INTENT_ID",
		Short: "Mark an intent of your session done",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("intent complete needs the intent id")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := a.handle(cmd.Context(), w2)
			if err != nil {
				return err
			}
			wr, err := h.CompleteIntent(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if !js2 && wr.Status == "updated" {
				wr.Status = "completed" // what the update was
			}
			return a.printWrite(js2, wr)
		},
	}
	complete.Flags().BoolVar(&js2, "json", false, "print as JSON")
	w2.flags(complete)
	cmd.AddCommand(declare, complete, a.listCmd(store.KindIntent))
	return cmd
}

func (a *app) briefingCmd() *cobra.Command {
	var (
		session, tier string
		have          archive.Versions
		jsonOut       bool
	)
	cmd := &cobra.Command{
		Use:   "briefing --session S [--tier micro|standard|full]",
		Short: "Print a session's briefing: where it stands and what the shared history says",
		Long: `Print what an agent needs to carry on a session's work: its resume point,
files, what the user wants and rejects, intents of other sessions that
touch it, and the active patterns and recent failures relevant to it.

Tiers: micro (a status line of about 20 tokens), standard (about 500) and
full (about 2,000, with everything and stats). With --if-gv and --if-sv set
to the versions a previous briefing printed, an unchanged briefing prints
NOT_MODIFIED.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if session == "" {
				session = a.getenv("ENGRAM_SESSION")
			}
			if session == "" {
				return usagef("briefing needs --session (or ENGRAM_SESSION)")
			}
			t, err := archive.ParseTier(tier)
			if err != nil {
				return err
			}
			arc, err := a.readArchive(cmd.Context())
			if err != nil {
				return err
			}
			var hv *archive.Versions
			if have.GV != 0 || have.SV != 0 {
				hv = &have
			}
			b, err := arc.Briefing(cmd.Context(), session, t, hv)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSON(a.stdout, b)
			}
			if b.Status == archive.StatusNotModified {
				fmt.Fprintf(a.stdout, "NOT_MODIFIED (gv %d, sv %d)\n", b.GV, b.SV)
				return nil
			}
			fmt.Fprintln(a.stdout, b.Text)
			if t != archive.Micro {
				fmt.Fprintf(a.stderr, "%d tokens (budget %d), gv %d, sv %d\n", b.Tokens, t.Budget(), b.GV, b.SV)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&session, "session", "", "the session (default $ENGRAM_SESSION)")
	f.StringVar(&tier, "tier", "standard", "micro, standard or full")
	f.Uint64Var(&have.GV, "if-gv", 0, "the global version you hold")
	f.Uint64Var(&have.SV, "if-sv", 0, "the session version you hold")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

func (a *app) agentsCmd() *cobra.Command {
	var (
		session string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List the agents registered with the archivalist, or register one",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			arc, err := a.readArchive(cmd.Context())
			if err != nil {
				return err
			}
			agents, err := arc.Agents(cmd.Context(), session)
			if err != nil {
				return err
			}
			if jsonOut {
				if agents == nil {
					agents = []store.ArchiveAgent{}
				}
				return writeJSON(a.stdout, agents)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSESSION\tPARENT\tMODEL\tNAME\tREGISTERED")
			for _, ag := range agents {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", ag.ID, ag.SessionID, dash(ag.ParentID), dash(ag.Model), ag.Name,
					ag.RegisteredAt.Local().Format(time.DateTime))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only this session's agents")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")

	var (
		spec    archive.AgentSpec
		js2     bool
		withKey bool
	)
	reg := &cobra.Command{
		Use:   "register --session S | --parent ID",
		Short: "Register an agent; a sub-agent (--parent) joins its parent's session",
		Long: `Register an agent with the archivalist. A sub-agent (--parent) joins its
parent's session. With --key, also issue the agent its key: the credential
it sends engram serve (Authorization: Bearer <key>), which lets it read the
store and write its own session's state only. The key is printed once;
engram keeps only its hash (engram agents key ID issues a new one).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			arc, err := a.archive(cmd.Context())
			if err != nil {
				return err
			}
			var h *archive.Handle
			var key string
			if withKey {
				h, key, err = arc.RegisterWithKey(cmd.Context(), spec, nil)
			} else {
				h, err = arc.Register(cmd.Context(), spec)
			}
			if err != nil {
				return err
			}
			if js2 {
				if key != "" {
					return writeJSON(a.stdout, map[string]any{"agent": h.Agent(), "key": key})
				}
				return writeJSON(a.stdout, h.Agent())
			}
			fmt.Fprintf(a.stdout, "registered %s in session %s\n", h.Agent().ID, h.Session())
			if key != "" {
				fmt.Fprintf(a.stdout, "key: %s\n(shown once: give it to the agent as its bearer token)\n", key)
			}
			return nil
		},
	}
	var keyJSON bool
	keyCmd := &cobra.Command{
		Use:   "key ID",
		Short: "Issue an agent a new key, replacing its old one (printed once)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arc, err := a.archive(cmd.Context())
			if err != nil {
				return err
			}
			key, err := arc.IssueKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if keyJSON {
				return writeJSON(a.stdout, map[string]string{"agent": args[0], "key": key})
			}
			fmt.Fprintln(a.stdout, key)
			return nil
		},
	}
	keyCmd.Flags().BoolVar(&keyJSON, "json", false, "print as JSON")
	cmd.AddCommand(keyCmd)
	f := reg.Flags()
	f.StringVar(&spec.ID, "id", "", "a short unique id (default: assigned, such as o1)")
	f.StringVar(&spec.Name, "name", "", "a readable name")
	f.StringVar(&spec.SessionID, "session", "", "the session (required without --parent)")
	f.StringVar(&spec.ParentID, "parent", "", "the parent agent's id, for a sub-agent")
	f.StringVar(&spec.Model, "model", "", "the model it runs on, such as claude-opus-4-5")
	f.StringVar(&spec.Role, "role", "", "its role")
	f.BoolVar(&js2, "json", false, "print as JSON")
	f.BoolVar(&withKey, "key", false, "also issue the agent its key for engram serve")
	cmd.AddCommand(reg)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) eventsCmd() *cobra.Command {
	var (
		limit   int
		follow  bool
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Tail the archivalist's event log",
		Long: `Print the last events of the archivalist's log: every write, with its type,
versions, agent, session, scope and time. --follow keeps printing new
events as they come, until interrupted.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 || limit == 0 && !follow || limit > archive.MaxEvents {
				// Not the archive's own range: there 0 is its default,
				// 100, which is not this command's (20).
				return usagef("--limit %d: give 1 to %d events", limit, archive.MaxEvents)
			}
			arc, err := a.readArchive(cmd.Context())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var evs []store.ArchiveEvent
			last := int64(0)
			if limit == 0 {
				// -f -n 0, as tail: only what comes from now on.
				evs, err = arc.Events(ctx, -1, 1)
				if len(evs) > 0 {
					last = evs[0].Seq
				}
				evs = nil
			} else {
				evs, err = arc.Events(ctx, -1, limit)
			}
			if err != nil {
				return err
			}
			for {
				for _, e := range evs {
					if err := a.printEvent(a.stdout, jsonOut, e); err != nil {
						return err
					}
					last = e.Seq
				}
				if !follow {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(250 * time.Millisecond):
				}
				if evs, err = arc.Events(ctx, last, 1000); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "how many of the last events to print, 1 to 1000 (0 with --follow: only new ones)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print one JSON object per line")
	return cmd
}

func (a *app) printEvent(w io.Writer, jsonOut bool, e store.ArchiveEvent) error {
	if jsonOut {
		return writeJSONLine(w, e)
	}
	// An agent in its session, AGENT@SESSION; an agent whose id names its
	// session already (cli@s1, claude-code@s1) as its id alone.
	who := e.AgentID
	if e.SessionID != "" && !strings.HasSuffix(who, "@"+e.SessionID) {
		who += "@" + e.SessionID
	}
	line := fmt.Sprintf("%s  %-20s gv %-5d sv %-4d %s %s", e.At.Local().Format("2006-01-02 15:04:05.000"), e.Type, e.GV, e.SV,
		who, e.Scope)
	if e.RecordID != "" {
		line += " " + e.RecordID
	}
	if e.Detail != "" {
		line += " — " + e.Detail
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func (a *app) archCmd() *cobra.Command {
	var (
		w       who
		budget  int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "arch QUERY",
		Short: "Ask the archivalist: an @arch: query or a question about what was done, seen or learned",
		Long: `Run an @arch: query, or several joined by ';':

  @arch:recall:DOMAIN[?key=value&...]   the most relevant records first
  @arch:check:DOMAIN[?key=value&...]    yes or no, with what matched
  @arch:store:DOMAIN{json}              record something (needs --session or --agent)

Domains: patterns, failures, decisions, files, learnings. Parameters: q (words
to search for), scope (a category such as auth, or words), category, id, path,
error, approach, agent, session, since (a global version), limit, all (true:
superseded too), budget (tokens).

A question in words is classified (intent, domain, time, entities) by the
chat model of [llm] when one is configured, else, or when it fails, by
rules, and answered if it is about the past or what the shared memory holds ("what
did we decide about X?", "what patterns do we have for error handling?"); a
question about what to do next ("how should we handle errors?") is refused:
the reason goes to standard error and the exit status is 1. An unsure one is
answered with the @arch: query to confirm.`,
		Example: `  engram arch '@arch:recall:patterns?scope=auth&limit=5'
  engram arch '@arch:check:failures?approach=recursive walk'
  engram arch '@arch:store:failure{approach:"recursive walk",outcome:"stack overflow",resolution:"explicit stack",resolution_outcome:"success"}' --session s1
  engram arch "what did we decide about API versioning?"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("arch needs a query or a question")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			input := strings.Join(args, " ")
			if _, err := api.RecallBudgetRange.Check(budget); err != nil {
				return &usageError{err}
			}
			// Only a store query writes: the others, asked of a project
			// with no store yet, say so rather than make an empty one.
			writes := archive.IsDSL(input) && strings.Contains(input, ":store:")
			arc, err := a.openArchive(cmd.Context(), !writes)
			if err != nil {
				return err
			}
			var h *archive.Handle
			if writes {
				if h, err = a.handle(cmd.Context(), w); err != nil {
					return err
				}
			}
			answers, err := arc.Ask(cmd.Context(), h, input, archive.AskOptions{Budget: budget})
			if err != nil {
				return err
			}
			// A refused question is not answered: its reason goes to
			// standard error and the exit status is 1, so that scripts
			// can tell. So does a read that failed after its request's
			// stores were written (their answers are printed).
			var refused []string
			for _, ans := range answers {
				switch ans.Status {
				case archive.StatusRefused:
					refused = append(refused, fmt.Sprintf("refused %q: %s", ans.Question, ans.Reason))
				case archive.StatusFailed:
					refused = append(refused, fmt.Sprintf("failed %s: %s", ans.Query, ans.Reason))
				}
			}
			var rerr error
			if len(refused) > 0 {
				rerr = errors.New(strings.Join(refused, "\n"))
			}
			if jsonOut {
				return errors.Join(writeJSON(a.stdout, answers), rerr)
			}
			for i, ans := range answers {
				if ans.Status == archive.StatusRefused || ans.Status == archive.StatusFailed {
					continue
				}
				if len(answers) > 1 {
					if i > 0 {
						fmt.Fprintln(a.stdout)
					}
					fmt.Fprintf(a.stdout, "## %s\n", ans.Query)
				}
				if c := ans.Classification; c != nil && c.Query != "" {
					fmt.Fprintf(a.stderr, "%s → %s\n", c.Query, c.Action)
				}
				fmt.Fprintln(a.stdout, ans.Text)
				if ans.Omitted > 0 {
					fmt.Fprintf(a.stdout, "(%d more over the budget)\n", ans.Omitted)
				}
			}
			return rerr
		},
	}
	w.flags(cmd)
	cmd.Flags().IntVar(&budget, "budget", archive.DefaultAskBudget, "most tokens per answer")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print as JSON")
	return cmd
}

func (a *app) sessionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Show or update a session's state: resume point, files, what the user wants and rejects",
		Long: `A session's state is what its next agent needs: the resume point (task,
objective, steps done, current and next, blockers, files to read), the files
the session read, modified or created, and what the user wants and rejects.
Every update advances the session version; a sub-agent cannot override what
its parent wrote.`,
	}
	var (
		w       who
		r       archive.Resume
		jsonOut bool
	)
	resume := &cobra.Command{
		Use:   "resume",
		Short: "Update the resume point; flags left out keep their values",
		Example: `  engram session resume --session s1 --task "auth rewrite" --current "middleware" --next tests --next docs
  engram session resume --session s1 --done "middleware" --current "tests" --next docs`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := a.handle(cmd.Context(), w)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			// A list flag given replaces the list; one not given keeps it;
			// given only empty (--blocker=), it clears the list.
			for name, dst := range map[string]*[]string{"done": &r.Done, "next": &r.Next, "blocker": &r.Blockers, "read": &r.FilesToRead} {
				switch {
				case !f.Changed(name):
					*dst = nil
				case !slices.ContainsFunc(*dst, func(s string) bool { return strings.TrimSpace(s) != "" }):
					*dst = []string{}
				}
			}
			wr, err := h.UpdateResume(cmd.Context(), r)
			if err != nil {
				return err
			}
			return a.printWrite(jsonOut, wr)
		},
	}
	f := resume.Flags()
	f.StringVar(&r.Task, "task", "", "the task")
	f.StringVar(&r.Objective, "objective", "", "what done looks like")
	f.StringVar(&r.Current, "current", "", "the current step")
	f.StringArrayVar(&r.Done, "done", nil, "a step done (repeatable; replaces the list; --done= clears)")
	f.StringArrayVar(&r.Next, "next", nil, "a next step (repeatable; replaces the list; --next= clears)")
	f.StringArrayVar(&r.Blockers, "blocker", nil, "a blocker (repeatable; replaces the list; --blocker= clears)")
	f.StringArrayVar(&r.FilesToRead, "read", nil, "a file the next agent should read first (repeatable; replaces the list; --read= clears)")
	f.BoolVar(&jsonOut, "json", false, "print as JSON")
	w.flags(resume)

	var (
		w2  who
		fs  archive.FileState
		js2 bool
	)
	file := &cobra.Command{
		Use:   "file PATH --status read|modified|created|deleted",
		Short: "Record what the session did to a file",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("session file needs the path")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := a.handle(cmd.Context(), w2)
			if err != nil {
				return err
			}
			fs.Path = args[0]
			wr, err := h.UpdateFile(cmd.Context(), fs)
			if err != nil {
				return err
			}
			return a.printWrite(js2, wr)
		},
	}
	file.Flags().StringVar((*string)(&fs.Status), "status", "modified", "read, modified, created or deleted")
	file.Flags().StringVar(&fs.Summary, "summary", "", "what changed, in a line")
	file.Flags().BoolVar(&js2, "json", false, "print as JSON")
	w2.flags(file)

	pref := func(use, short string, reject bool) *cobra.Command {
		var (
			w3  who
			js3 bool
		)
		c := &cobra.Command{
			Use:   use + " TEXT",
			Short: short,
			Args: func(cmd *cobra.Command, args []string) error {
				if len(args) != 1 {
					return usagef("session %s needs the text, quoted", use)
				}
				return nil
			},
			RunE: func(cmd *cobra.Command, args []string) error {
				h, err := a.handle(cmd.Context(), w3)
				if err != nil {
					return err
				}
				wr, err := h.AddPreference(cmd.Context(), archive.Preference{Text: args[0], Reject: reject})
				if err != nil {
					return err
				}
				return a.printWrite(js3, wr)
			},
		}
		c.Flags().BoolVar(&js3, "json", false, "print as JSON")
		w3.flags(c)
		return c
	}

	var (
		session string
		ifSV    uint64
		js4     bool
	)
	show := &cobra.Command{
		Use:   "show --session S",
		Short: "Print a session's state (NOT_MODIFIED with --if-sv at the current version)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if session == "" {
				session = a.getenv("ENGRAM_SESSION")
			}
			if session == "" {
				return usagef("session show needs --session (or ENGRAM_SESSION)")
			}
			arc, err := a.readArchive(cmd.Context())
			if err != nil {
				return err
			}
			sr, err := arc.ReadSession(cmd.Context(), session, ifSV)
			if err != nil {
				return err
			}
			if js4 {
				return writeJSON(a.stdout, sr)
			}
			if sr.Status == archive.StatusNotModified {
				fmt.Fprintf(a.stdout, "NOT_MODIFIED (sv %d)\n", sr.SV)
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "session\t%s (sv %d, gv %d)\n", sr.Session, sr.SV, sr.GV)
			if r := sr.Resume; r != nil && r.Task+r.Current != "" {
				fmt.Fprintf(tw, "task\t%s\n", dash(r.Task))
				fmt.Fprintf(tw, "objective\t%s\n", dash(r.Objective))
				fmt.Fprintf(tw, "current\t%s (by %s)\n", dash(r.Current), dash(r.Agent))
				fmt.Fprintf(tw, "done\t%s\n", dash(strings.Join(r.Done, "; ")))
				fmt.Fprintf(tw, "next\t%s\n", dash(strings.Join(r.Next, "; ")))
				fmt.Fprintf(tw, "blockers\t%s\n", dash(strings.Join(r.Blockers, "; ")))
				fmt.Fprintf(tw, "read first\t%s\n", dash(strings.Join(r.FilesToRead, ", ")))
			}
			for _, f := range sr.Files {
				fmt.Fprintf(tw, "file\t%s (%s by %s) %s\n", f.Path, f.Status, strings.Join(f.Agents, ","), f.Summary)
			}
			for _, p := range sr.Wants {
				fmt.Fprintf(tw, "wants\t%s\n", p.Text)
			}
			for _, p := range sr.Rejects {
				fmt.Fprintf(tw, "rejects\t%s\n", p.Text)
			}
			var agents []string
			for _, ag := range sr.Agents {
				agents = append(agents, ag.ID)
			}
			fmt.Fprintf(tw, "agents\t%s\n", dash(strings.Join(agents, " ")))
			return tw.Flush()
		},
	}
	show.Flags().StringVar(&session, "session", "", "the session (default $ENGRAM_SESSION)")
	show.Flags().Uint64Var(&ifSV, "if-sv", 0, "print NOT_MODIFIED if this is still the session version")
	show.Flags().BoolVar(&js4, "json", false, "print as JSON")

	cmd.AddCommand(show, resume, file, pref("want", "Record something the user wants in this session", false),
		pref("reject", "Record something the user rejects in this session", true))
	return cmd
}
