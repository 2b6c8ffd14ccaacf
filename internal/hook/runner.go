package hook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

// Options tunes what the hooks inject and replace. Zero values take the
// defaults.
type Options struct {
	// Briefing is the tier SessionStart injects: micro, standard
	// (default) or full; "none" injects none.
	Briefing string
	// PrefetchBudget is the most tokens of UserPromptSubmit's pre-fetch
	// block (default 1,500); negative turns pre-fetch off.
	PrefetchBudget int
	// MaxToolTokens is the size over which a tool's result is replaced
	// for the model by its head, its tail and a marker (default 8,000);
	// negative never replaces.
	MaxToolTokens int
	// KeepTokens is what a replaced result keeps of its head and tail
	// together (default 1,000: 60 % head, 40 % tail).
	KeepTokens int
	// MaxContextBytes bounds what one hook injects (default 9,500):
	// Claude Code cuts additionalContext at 10,000 characters.
	MaxContextBytes int
}

// Defaults.
const (
	DefaultPrefetchBudget  = 1500
	DefaultMaxToolTokens   = 8000
	DefaultKeepTokens      = 1000
	DefaultMaxContextBytes = 9500
)

func (o Options) withDefaults() Options {
	if o.Briefing == "" {
		o.Briefing = string(archive.Standard)
	}
	if o.PrefetchBudget == 0 {
		o.PrefetchBudget = DefaultPrefetchBudget
	}
	if o.MaxToolTokens == 0 {
		o.MaxToolTokens = DefaultMaxToolTokens
	}
	if o.KeepTokens <= 0 {
		o.KeepTokens = DefaultKeepTokens
	}
	if o.MaxContextBytes <= 0 {
		o.MaxContextBytes = DefaultMaxContextBytes
	}
	return o
}

// Runner runs one harness's hooks over an engine.
type Runner struct {
	Eng     *engine.Engine
	Harness string
	Opts    Options
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Result is what a hook did, and what it gives the harness.
type Result struct {
	// Context is injected before the model's next request
	// (additionalContext), marked.
	Context string `json:"context,omitempty"`
	// ToolOutput replaces the tool's output for the model
	// (updatedToolOutput), in the tool's own shape.
	ToolOutput json.RawMessage `json:"tool_output,omitempty"`
	// Stored counts the records written; Refs the references made.
	Stored int      `json:"stored"`
	Refs   []string `json:"refs,omitempty"`
	// Notes say what was skipped or degraded, for the hook's log.
	Notes []string `json:"notes,omitempty"`
}

// Output is the JSON the hook prints for the harness: its documented
// hookSpecificOutput, or nothing when there is nothing to say.
func (r Result) Output(event string) []byte {
	out := map[string]any{"hookEventName": event}
	if r.Context != "" {
		out["additionalContext"] = r.Context
	}
	if len(r.ToolOutput) > 0 {
		out["updatedToolOutput"] = r.ToolOutput
	}
	if len(out) == 1 {
		return nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the context is read by a model, and found by the importer
	_ = enc.Encode(map[string]any{"hookSpecificOutput": out})
	return b.Bytes()
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

// Run handles one event. Events engram has nothing to do for return an
// empty Result.
func (r *Runner) Run(ctx context.Context, p Payload) (Result, error) {
	opts := r.Opts.withDefaults()
	if p.AgentID != "" && p.Event != SessionStart {
		// A sub-agent is registered under the session's agent when it is
		// first seen.
		if _, err := r.handle(ctx, p); err != nil {
			return Result{}, err
		}
	}
	switch p.Event {
	case SessionStart:
		return r.sessionStart(ctx, p, opts)
	case UserPromptSubmit:
		return r.userPrompt(ctx, p, opts)
	case PostToolUse:
		return r.postToolUse(ctx, p, opts)
	case PreCompact:
		return r.preCompact(ctx, p)
	case Stop, "SubagentStop", "SessionEnd":
		return r.stop(ctx, p)
	}
	return Result{Notes: []string{"engram does nothing on " + p.Event}}, nil
}

// agent is who a payload's content is recorded as: the harness's agent
// of the session, or a sub-agent of it.
type agent struct{ id, kind, parent string }

func (r *Runner) agentOf(session, subID, subType string) agent {
	main := archive.ClipID(r.Harness + "@" + session)
	if subID == "" {
		return agent{id: main, kind: r.Harness}
	}
	kind := subType
	if kind == "" {
		kind = "subagent"
	}
	return agent{id: archive.ClipID(main + "/" + subID), kind: kind, parent: main}
}

// handle connects a payload's agent to the archivalist, registering it
// (and its parent, for a sub-agent) on first use.
func (r *Runner) handle(ctx context.Context, p Payload) (*archive.Handle, error) {
	arc, err := r.Eng.Archive(ctx)
	if err != nil {
		return nil, err
	}
	a := r.agentOf(p.SessionID, p.AgentID, p.AgentType)
	if a.parent != "" {
		if _, err := arc.Connect(ctx, archive.AgentSpec{ID: a.parent, SessionID: p.SessionID, Role: r.Harness, Model: p.Model}); err != nil {
			return nil, err
		}
	}
	return arc.Connect(ctx, archive.AgentSpec{ID: a.id, SessionID: p.SessionID, ParentID: a.parent, Role: a.kind, Model: p.Model})
}

func (r *Runner) sessionStart(ctx context.Context, p Payload, opts Options) (Result, error) {
	if _, err := r.handle(ctx, p); err != nil {
		return Result{}, err
	}
	if p.AgentID == "" {
		if err := r.recordSession(ctx, p.SessionID, p.Procs); err != nil {
			return Result{}, err
		}
	}
	var res Result
	var parts []string
	if opts.Briefing != "none" {
		text, err := r.briefing(ctx, p.SessionID, archive.Tier(opts.Briefing))
		if err != nil {
			res.Notes = append(res.Notes, "no briefing: "+err.Error())
		} else if text != "" {
			parts = append(parts, text)
		}
	}
	if p.Source == "compact" {
		refs, err := r.compactions(ctx, p.SessionID)
		if err != nil {
			return res, err
		}
		if len(refs) > 0 {
			var b strings.Builder
			b.WriteString("The turns the compactions summarized are stored whole. Each marker below expands to them exactly: pass its ref_id to engram's retrieve_context tool (with a query, to get only the matching parts). The latest compaction's first.\n")
			// Newest first: what does not fit the harness's limit is the
			// oldest.
			for _, ref := range slices.Backward(refs) {
				b.WriteString(ctxref.Render(ctxref.FromReference(ref)))
				b.WriteByte('\n')
				res.Refs = append(res.Refs, ref.ID)
			}
			// The markers go first: the briefing is cut before them.
			parts = append([]string{b.String()}, parts...)
		}
	}
	res.Context = Mark("session", strings.Join(parts, "\n"), opts.MaxContextBytes)
	return res, nil
}

// briefing is the session's briefing at tier and, for a session that has
// no resume point of its own, where the project's latest other session
// stopped.
func (r *Runner) briefing(ctx context.Context, session string, tier archive.Tier) (string, error) {
	arc, err := r.Eng.Archive(ctx)
	if err != nil {
		return "", err
	}
	b, err := arc.Briefing(ctx, session, tier, nil)
	if err != nil {
		return "", err
	}
	text := strings.TrimSpace(b.Text)
	if !strings.Contains(text, "\n") {
		text = "" // the heading alone: nothing to brief
	}
	sr, err := arc.ReadSession(ctx, session, 0)
	if err != nil {
		return "", err
	}
	if sr.Resume == nil || sr.Resume.Task == "" && sr.Resume.Current == "" {
		if prev := r.previousResume(ctx, arc, session); prev != "" {
			text = strings.TrimSpace(text + "\n" + prev)
		}
	}
	return text, nil
}

// previousResume describes the resume point of the project's most recent
// other session that has one, among the latest few.
func (r *Runner) previousResume(ctx context.Context, arc *archive.Archive, session string) string {
	sessions, err := r.Eng.Store().Sessions(ctx)
	if err != nil {
		return ""
	}
	slices.SortFunc(sessions, func(a, b store.Session) int { return b.LastSeenAt.Compare(a.LastSeenAt) })
	tried := 0
	for _, s := range sessions {
		if s.ID == session {
			continue
		}
		if tried++; tried > 5 {
			break
		}
		sr, err := arc.ReadSession(ctx, s.ID, 0)
		if err != nil || sr.Resume == nil || sr.Resume.Task == "" && sr.Resume.Current == "" {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "The last session (%s, %s) stopped at:", s.ID, s.LastSeenAt.UTC().Format("2006-01-02 15:04"))
		if sr.Resume.Task != "" {
			b.WriteString("\n  task: " + sr.Resume.Task)
		}
		if sr.Resume.Current != "" {
			b.WriteString("\n  current: " + sr.Resume.Current)
		}
		for _, n := range sr.Resume.Next {
			b.WriteString("\n  next: " + n)
		}
		if len(sr.Resume.FilesToRead) > 0 {
			b.WriteString("\n  files: " + strings.Join(sr.Resume.FilesToRead, ", "))
		}
		return b.String()
	}
	return ""
}

func (r *Runner) userPrompt(ctx context.Context, p Payload, opts Options) (Result, error) {
	var res Result
	a := r.agentOf(p.SessionID, p.AgentID, p.AgentType)
	id, err := r.promptID(ctx, p.SessionID, p.Prompt)
	if err != nil {
		return res, err
	}
	added, err := r.Eng.Add(ctx, []engine.Record{{Session: p.SessionID, Agent: a.id, AgentType: a.kind,
		Type: store.UserPrompt, Content: []byte(p.Prompt), MsgID: id, Time: r.now(),
		Metadata: map[string]any{"harness": r.Harness, "via": "hook"}}})
	if err != nil {
		return res, err
	}
	res.Stored = stored(added)
	if opts.PrefetchBudget < 0 {
		return res, nil
	}
	shown, err := r.inWindow(ctx, p.SessionID)
	if err != nil {
		return res, err
	}
	b, err := r.Eng.Prefetch(ctx, p.Prompt, 0, retrieve.PrefetchOptions{Budget: opts.PrefetchBudget, Exclude: shown})
	if err != nil {
		res.Notes = append(res.Notes, "no pre-fetch: "+err.Error())
		return res, nil
	}
	if b.Degraded {
		res.Notes = append(res.Notes, "pre-fetch degraded: "+strings.Join(b.Faults, "; "))
	}
	if strings.TrimSpace(b.Text) != "" {
		res.Context = Mark("prefetch", b.Text, opts.MaxContextBytes)
	}
	return res, nil
}

// inWindow is what the harness's window holds of the session: its
// entries since the last compaction (the prompt just stored among them),
// which a pre-fetch must not repeat.
func (r *Runner) inWindow(ctx context.Context, session string) (map[string]bool, error) {
	st, err := r.compactionState(ctx, session)
	if err != nil {
		return nil, err
	}
	ids, err := r.Eng.Store().TurnIDs(ctx, session, st.Turn+1)
	if err != nil {
		return nil, err
	}
	shown := make(map[string]bool, len(ids))
	for _, id := range ids {
		shown[id] = true
	}
	return shown, nil
}

// promptID names a prompt in its session by its text's hash and how many
// prompts of the same text the session held before it: the importer
// names the transcript's prompts alike (counting in the transcript), so
// the prompt the hook stored and its line in the transcript are one
// record.
func (r *Runner) promptID(ctx context.Context, session, prompt string) (string, error) {
	for k := 0; ; k++ {
		id := PromptMsgID(prompt, k)
		_, err := r.Eng.Store().MsgEntry(ctx, session, id)
		if errors.Is(err, store.ErrNotFound) {
			return id, nil
		}
		if err != nil {
			return "", err
		}
	}
}

// PromptMsgID is the message id of a session's k-th prompt (from 0) of
// this text.
func PromptMsgID(prompt string, k int) string {
	sum := sha256.Sum256([]byte(prompt))
	return fmt.Sprintf("prompt:%s:%d", hex.EncodeToString(sum[:8]), k)
}

func stored(res []engine.AddResult) int {
	n := 0
	for _, r := range res {
		if !r.Replayed {
			n++
		}
	}
	return n
}

// compactionKey names the store setting that lists a session's
// compaction references, oldest first.
func compactionKey(session string) string { return "hook.compactions." + session }

type compactionState struct {
	Refs []string `json:"refs"`
	// Turn is the last turn the references cover.
	Turn int `json:"turn"`
}

func (r *Runner) compactionState(ctx context.Context, session string) (compactionState, error) {
	var st compactionState
	v, err := r.Eng.Store().Setting(ctx, compactionKey(session))
	if errors.Is(err, store.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return compactionState{}, fmt.Errorf("setting %s: %w", compactionKey(session), err)
	}
	return st, nil
}

// compactions returns a session's compaction references, oldest first.
func (r *Runner) compactions(ctx context.Context, session string) ([]store.Reference, error) {
	st, err := r.compactionState(ctx, session)
	if err != nil {
		return nil, err
	}
	var refs []store.Reference
	for _, id := range st.Refs {
		ref, err := r.Eng.Store().Reference(ctx, id)
		if errors.Is(err, store.ErrNotFound) { // forgotten since
			continue
		}
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// Mark wraps what engram injects, so that a transcript importer knows it
// for engram's own, cut to fit limit bytes whole.
func Mark(kind, text string, limit int) string {
	text = strings.TrimSpace(text)
	if text == "" {
		return ""
	}
	open, closing := `<engram-context kind="`+kind+`">`+"\n", "\n</engram-context>"
	room := limit - len(open) - len(closing)
	if len(text) > room {
		const more = "\n[… cut to fit the harness's limit]"
		text = cutUTF8(text, room-len(more)) + more
	}
	return open + text + closing
}

// markOpen starts every marked injection.
const markOpen = "<engram-context kind="

// cutUTF8 cuts s to at most n bytes, at a line if one ends in its second
// half, never inside a character.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	s = s[:n]
	if i := strings.LastIndexByte(s, '\n'); i > n/2 {
		s = s[:i]
	}
	return s
}
