package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/viterin/vek/vek32"

	"github.com/engramhq/engram/internal/store"
)

// Authority says how binding a pattern is.
type Authority string

// The seed's three levels.
const (
	Suggestion  Authority = "suggestion"
	Established Authority = "established"
	Mandated    Authority = "mandated"
)

// Pattern is a way of doing things that agents should follow.
type Pattern struct {
	Category    string    `json:"category"`
	Pattern     string    `json:"pattern"`
	Description string    `json:"description,omitempty"`
	Example     string    `json:"example,omitempty"`
	Scope       []string  `json:"scope,omitempty"`
	Authority   Authority `json:"authority,omitempty"`
	// Supersedes names the active patterns this one replaces; Reason
	// (required with it) says why.
	Supersedes []string `json:"supersedes,omitempty"`
	Reason     string   `json:"reason,omitempty"`
}

// Failure is an approach that did not work.
type Failure struct {
	Category string   `json:"category,omitempty"`
	Approach string   `json:"approach"`
	Reason   string   `json:"reason"`
	Context  string   `json:"context,omitempty"`
	Error    string   `json:"error,omitempty"`
	Files    []string `json:"files,omitempty"`
	// Resolution, if known, is recorded with the failure.
	Resolution *Resolution `json:"resolution,omitempty"`
}

// Outcome is how a resolution turned out.
type Outcome string

// Outcomes, ranked success > partial > failure.
const (
	Success        Outcome = "success"
	Partial        Outcome = "partial"
	OutcomeFailure Outcome = "failure"
)

// Resolution is what was tried against a failure, and how it went.
type Resolution struct {
	Approach string  `json:"approach"`
	Outcome  Outcome `json:"outcome"`
	Notes    string  `json:"notes,omitempty"`
}

// Insight is something learned.
type Insight struct {
	Category string   `json:"category,omitempty"`
	Insight  string   `json:"insight"`
	Evidence string   `json:"evidence,omitempty"`
	Scope    []string `json:"scope,omitempty"`
}

// Decision is a choice made, with why and what else was considered.
type Decision struct {
	Category     string   `json:"category,omitempty"`
	Decision     string   `json:"decision"`
	Rationale    string   `json:"rationale,omitempty"`
	Alternatives []string `json:"alternatives,omitempty"`
	Scope        []string `json:"scope,omitempty"`
	Supersedes   []string `json:"supersedes,omitempty"`
	Reason       string   `json:"reason,omitempty"`
}

// Intent announces cross-cutting work, so that other sessions whose files
// or categories it touches see it in their briefings. It never blocks.
type Intent struct {
	Description string   `json:"description"`
	Paths       []string `json:"paths,omitempty"`
	Categories  []string `json:"categories,omitempty"`
	// Priority is normal, high or critical.
	Priority string `json:"priority,omitempty"`
	// TTL is how long the intent stays active if never completed.
	TTL       time.Duration `json:"-"`
	ExpiresAt time.Time     `json:"expires_at"`
}

func checkCategory(cat string, required bool) error {
	if cat == "" && !required {
		return nil
	}
	if cat == "" {
		return invalid("category", "is required: L1.L2, such as error.handling, %s", categoryHelp())
	}
	if err := ValidateCategory(cat); err != nil {
		return &store.ValidationError{Field: "category", Msg: err.Error()}
	}
	return nil
}

func (p *Pattern) validate() error {
	if err := checkCategory(p.Category, true); err != nil {
		return err
	}
	if err := checkText("pattern", p.Pattern, true, MaxTextBytes); err != nil {
		return err
	}
	if err := checkText("description", p.Description, false, MaxNoteBytes); err != nil {
		return err
	}
	if err := checkText("example", p.Example, false, MaxNoteBytes); err != nil {
		return err
	}
	if err := checkList("scope", p.Scope, 1024); err != nil {
		return err
	}
	switch p.Authority {
	case "":
		p.Authority = Suggestion
	case Suggestion, Established, Mandated:
	default:
		return invalid("authority", "%q is not one of suggestion, established, mandated", p.Authority)
	}
	return checkSupersedes(p.Supersedes, p.Reason, "pat-")
}

func checkSupersedes(ids []string, reason, prefix string) error {
	if err := checkList("supersedes", ids, MaxIDBytes); err != nil {
		return err
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, prefix) {
			return invalid("supersedes", "%q is not a %s id", id, strings.TrimSuffix(prefix, "-"))
		}
	}
	if len(ids) > 0 {
		if err := checkText("reason", reason, true, MaxNoteBytes); err != nil {
			return invalid("reason", "is required to supersede %s: say why the new one is better", strings.Join(ids, ", "))
		}
	}
	return nil
}

func (f *Failure) validate() error {
	if err := checkCategory(f.Category, false); err != nil {
		return err
	}
	if err := checkText("approach", f.Approach, true, MaxTextBytes); err != nil {
		return err
	}
	if err := checkText("reason", f.Reason, true, MaxNoteBytes); err != nil {
		return err
	}
	for _, x := range []struct{ f, v string }{{"context", f.Context}, {"error", f.Error}} {
		if err := checkText(x.f, x.v, false, MaxNoteBytes); err != nil {
			return err
		}
	}
	if err := checkList("files", f.Files, 1024); err != nil {
		return err
	}
	if f.Resolution != nil {
		return f.Resolution.validate()
	}
	return nil
}

func (r *Resolution) validate() error {
	if err := checkText("resolution.approach", r.Approach, true, MaxTextBytes); err != nil {
		return err
	}
	switch r.Outcome {
	case Success, Partial, OutcomeFailure:
	case "":
		return invalid("resolution.outcome", "is required: success, partial or failure (a resolution without an outcome says nothing)")
	default:
		return invalid("resolution.outcome", "%q is not one of success, partial, failure", r.Outcome)
	}
	return checkText("resolution.notes", r.Notes, false, MaxNoteBytes)
}

func (i *Insight) validate() error {
	if err := checkCategory(i.Category, false); err != nil {
		return err
	}
	if err := checkText("insight", i.Insight, true, MaxTextBytes); err != nil {
		return err
	}
	if err := checkText("evidence", i.Evidence, false, MaxNoteBytes); err != nil {
		return err
	}
	return checkList("scope", i.Scope, 1024)
}

func (d *Decision) validate() error {
	if err := checkCategory(d.Category, false); err != nil {
		return err
	}
	if err := checkText("decision", d.Decision, true, MaxTextBytes); err != nil {
		return err
	}
	if err := checkText("rationale", d.Rationale, false, MaxNoteBytes); err != nil {
		return err
	}
	if err := checkList("alternatives", d.Alternatives, MaxTextBytes); err != nil {
		return err
	}
	if err := checkList("scope", d.Scope, 1024); err != nil {
		return err
	}
	return checkSupersedes(d.Supersedes, d.Reason, "dec-")
}

func (i *Intent) validate(now time.Time) error {
	if err := checkText("description", i.Description, true, MaxTextBytes); err != nil {
		return err
	}
	if err := checkList("paths", i.Paths, 1024); err != nil {
		return err
	}
	if err := checkList("categories", i.Categories, 100); err != nil {
		return err
	}
	for _, c := range i.Categories {
		if err := checkCategory(c, true); err != nil && !isL1(c) {
			return err
		}
	}
	if len(i.Paths) == 0 && len(i.Categories) == 0 {
		return invalid("scope", "an intent needs paths or categories: what it touches is how other sessions see it")
	}
	switch i.Priority {
	case "":
		i.Priority = "normal"
	case "normal", "high", "critical":
	default:
		return invalid("priority", "%q is not one of normal, high, critical", i.Priority)
	}
	if i.TTL < 0 {
		return invalid("ttl", "must not be negative")
	}
	if i.TTL == 0 {
		i.TTL = DefaultIntentTTL
	}
	i.ExpiresAt = now.Add(i.TTL).UTC()
	return nil
}

func isL1(c string) bool { return slices.Contains(categoryL1, c) }

var kindPrefix = map[store.RecordKind]string{
	store.KindPattern: "pat", store.KindFailure: "fail", store.KindResolution: "res",
	store.KindInsight: "ins", store.KindDecision: "dec", store.KindIntent: "int", store.KindIntentDone: "done",
}

// global describes one global write for the common path.
type global struct {
	kind     store.RecordKind
	category string
	text     string // deduplicated and searched
	search   string // extra searchable text
	ref      string
	key      string
	body     any
	scope    []string
	// dedup in the category (patterns) or the whole kind
	dedup      bool
	supersedes []string
	// check runs in the transaction before the append (conflicts, limits)
	check func(tx store.ArchiveTx, now time.Time) error
	// after runs in the transaction after the append
	after func(tx store.ArchiveTx, rec *store.ArchiveRecord) error
}

// RecordPattern adds a pattern to the global history. A duplicate (same
// normal form, or trigram or embedding similarity over the thresholds, in
// the same category) is merged: the result says so and names the pattern
// it matched. A pattern that contradicts an active one of the same category
// and overlapping scope is refused with a *ConflictError unless it names it
// in Supersedes, with a Reason.
func (h *Handle) RecordPattern(ctx context.Context, p Pattern) (WriteResult, error) {
	s, err := h.patternStep(ctx, nil, p)
	if err != nil {
		return WriteResult{}, err
	}
	return h.commitOne(ctx, s)
}

// patternStep prepares RecordPattern's write as a step of b (nil: a write
// of its own).
func (h *Handle) patternStep(ctx context.Context, b *batch, p Pattern) (step, error) {
	if err := p.validate(); err != nil {
		return step{}, err
	}
	a := h.a
	g := global{kind: store.KindPattern, category: p.Category, text: p.Pattern,
		search: p.Description + " " + p.Example + " " + p.Category + " " + strings.Join(p.Scope, " "),
		body:   p, scope: p.Scope, dedup: true, supersedes: p.Supersedes}
	g.check = func(tx store.ArchiveTx, now time.Time) error {
		if err := a.rateLimit(tx, h.agent, store.KindPattern, a.opts.Limits.PatternsPerMinute, now); err != nil {
			return err
		}
		active, err := tx.Records(store.RecordQuery{Kinds: []store.RecordKind{store.KindPattern}, Category: p.Category, Active: true})
		if err != nil {
			return err
		}
		if err := checkSupersededExist(tx, p.Supersedes, store.KindPattern); err != nil {
			return err
		}
		var conflicts []string
		var lines []string
		for _, r := range active {
			var old Pattern
			if err := json.Unmarshal(r.Body, &old); err != nil {
				return err
			}
			if slices.Contains(p.Supersedes, r.ID) {
				continue
			}
			if scopesOverlap(old.Scope, p.Scope) && contradicts(p.Pattern, old.Pattern) {
				conflicts = append(conflicts, r.ID)
				lines = append(lines, fmt.Sprintf("%s (%q)", r.ID, old.Pattern))
			}
		}
		if len(conflicts) > 0 {
			return &ConflictError{Records: conflicts, Msg: fmt.Sprintf(
				"pattern contradicts active %s in %s: name it in supersedes with a reason, or narrow the scope",
				strings.Join(lines, ", "), p.Category)}
		}
		// The cap counts the writer's credential's own patterns, so that
		// one writer filling a category cannot lock the others out of it.
		mine, err := tx.Records(store.RecordQuery{Kinds: []store.RecordKind{store.KindPattern}, Category: p.Category,
			Active: true, Credential: credentialOf(h.agent)})
		if err != nil {
			return err
		}
		n := 0
		for _, r := range mine {
			if r.Category == p.Category && !slices.Contains(p.Supersedes, r.ID) {
				n++
			}
		}
		if n >= a.opts.Limits.ActivePerCategory {
			return &RateLimitError{Msg: fmt.Sprintf(
				"agent %s already has %d active patterns in category %s (the limit): supersede one, or use a narrower category",
				credentialOf(h.agent), n, p.Category)}
		}
		return nil
	}
	return h.globalStep(ctx, b, g, nil)
}

func checkSupersededExist(tx store.ArchiveTx, ids []string, kind store.RecordKind) error {
	if len(ids) == 0 {
		return nil
	}
	recs, err := tx.Records(store.RecordQuery{IDs: ids, Kinds: []store.RecordKind{kind}})
	if err != nil {
		return err
	}
	for _, id := range ids {
		i := slices.IndexFunc(recs, func(r store.ArchiveRecord) bool { return r.ID == id })
		if i < 0 {
			return invalid("supersedes", "%s does not exist", id)
		}
		if by := recs[i].SupersededBy; by != "" {
			return &ConflictError{Records: []string{id, by}, Msg: fmt.Sprintf("%s is already superseded by %s: supersede %s instead", id, by, by)}
		}
	}
	return nil
}

// RecordFailure adds a failure, with its resolution if one is known. A
// failure already recorded (same approach and reason, or over the
// similarity thresholds) is merged, and its resolution is added to the
// existing failure.
func (h *Handle) RecordFailure(ctx context.Context, f Failure) (WriteResult, error) {
	s, err := h.failureStep(ctx, nil, f)
	if err != nil {
		return WriteResult{}, err
	}
	return h.commitOne(ctx, s)
}

// failureStep prepares RecordFailure's write as a step of b (nil: a write
// of its own).
func (h *Handle) failureStep(ctx context.Context, b *batch, f Failure) (step, error) {
	if err := f.validate(); err != nil {
		return step{}, err
	}
	a := h.a
	res := f.Resolution
	f.Resolution = nil
	g := global{kind: store.KindFailure, category: f.Category, text: f.Approach + " — " + f.Reason,
		search: f.Context + " " + f.Error + " " + strings.Join(f.Files, " "), body: f, scope: f.Files, dedup: true}
	g.check = func(tx store.ArchiveTx, now time.Time) error {
		return a.rateLimit(tx, h.agent, "", a.opts.Limits.WritesPerMinute, now)
	}
	var resID string
	addRes := func(tx store.ArchiveTx, failureID string) error {
		if res == nil {
			return nil
		}
		rec, err := h.appendResolution(tx, failureID, *res)
		resID = rec.ID
		return err
	}
	g.after = func(tx store.ArchiveTx, rec *store.ArchiveRecord) error { return addRes(tx, rec.ID) }
	s, err := h.globalStep(ctx, b, g, addRes)
	if err != nil {
		return s, err
	}
	run := s.run
	s.run = func(tx store.ArchiveTx, done []WriteResult) (WriteResult, error) {
		resID = ""
		wr, err := run(tx, done)
		if err != nil || resID == "" {
			return wr, err
		}
		wr.Notices = append(wr.Notices, "resolution "+resID+" recorded")
		wr.GV, _, err = tx.Versions("")
		return wr, err
	}
	return s, nil
}

// RecordResolution adds what was tried against a recorded failure and how
// it went. Resolutions are ranked by their outcomes.
func (h *Handle) RecordResolution(ctx context.Context, failureID string, r Resolution) (WriteResult, error) {
	if err := r.validate(); err != nil {
		return WriteResult{}, err
	}
	var rec store.ArchiveRecord
	err := h.write(ctx, func(tx store.ArchiveTx) error {
		if err := h.a.rateLimit(tx, h.agent, "", h.a.opts.Limits.WritesPerMinute, h.a.now()); err != nil {
			return err
		}
		fs, err := tx.Records(store.RecordQuery{IDs: []string{failureID}, Kinds: []store.RecordKind{store.KindFailure}})
		if err != nil {
			return err
		}
		if len(fs) == 0 {
			return invalid("failure", "%s is not a recorded failure", failureID)
		}
		rec, err = h.appendResolution(tx, failureID, r)
		return err
	})
	if err != nil {
		return WriteResult{}, fmt.Errorf("record resolution: %w", err)
	}
	return WriteResult{Status: "created", ID: rec.ID, GV: rec.GV}, nil
}

func (h *Handle) appendResolution(tx store.ArchiveTx, failureID string, r Resolution) (store.ArchiveRecord, error) {
	gv, err := tx.NextGlobal()
	if err != nil {
		return store.ArchiveRecord{}, err
	}
	now := h.a.now()
	rec := store.ArchiveRecord{ID: fmt.Sprintf("res-%d", gv), Kind: store.KindResolution, GV: gv,
		SessionID: h.agent.SessionID, AgentID: h.agent.ID, Model: h.agent.Model, Ref: failureID,
		Key: hashText("res", r.Approach), Text: r.Approach + " " + r.Notes, Body: mustJSON(r), CreatedAt: now}
	if err := tx.Append(&rec); err != nil {
		return rec, err
	}
	return rec, tx.AppendEvent(&store.ArchiveEvent{Type: "resolution_add", GV: gv, SessionID: h.agent.SessionID,
		AgentID: h.agent.ID, Scope: "failures", RecordID: rec.ID, Detail: "for " + failureID + ": " + string(r.Outcome), At: now})
}

// RecordInsight adds something learned.
func (h *Handle) RecordInsight(ctx context.Context, in Insight) (WriteResult, error) {
	s, err := h.insightStep(ctx, nil, in)
	if err != nil {
		return WriteResult{}, err
	}
	return h.commitOne(ctx, s)
}

// insightStep prepares RecordInsight's write as a step of b (nil: a write
// of its own).
func (h *Handle) insightStep(ctx context.Context, b *batch, in Insight) (step, error) {
	if err := in.validate(); err != nil {
		return step{}, err
	}
	a := h.a
	g := global{kind: store.KindInsight, category: in.Category, text: in.Insight,
		search: in.Evidence + " " + strings.Join(in.Scope, " "), body: in, scope: in.Scope, dedup: true}
	g.check = func(tx store.ArchiveTx, now time.Time) error {
		return a.rateLimit(tx, h.agent, "", a.opts.Limits.WritesPerMinute, now)
	}
	return h.globalStep(ctx, b, g, nil)
}

// RecordDecision adds a decision. A decision may supersede earlier ones.
func (h *Handle) RecordDecision(ctx context.Context, d Decision) (WriteResult, error) {
	s, err := h.decisionStep(ctx, nil, d)
	if err != nil {
		return WriteResult{}, err
	}
	return h.commitOne(ctx, s)
}

// decisionStep prepares RecordDecision's write as a step of b (nil: a
// write of its own).
func (h *Handle) decisionStep(ctx context.Context, b *batch, d Decision) (step, error) {
	if err := d.validate(); err != nil {
		return step{}, err
	}
	a := h.a
	g := global{kind: store.KindDecision, category: d.Category, text: d.Decision,
		search: d.Rationale + " " + strings.Join(d.Alternatives, " ") + " " + strings.Join(d.Scope, " "),
		body:   d, scope: d.Scope, dedup: true, supersedes: d.Supersedes}
	g.check = func(tx store.ArchiveTx, now time.Time) error {
		if err := a.rateLimit(tx, h.agent, "", a.opts.Limits.WritesPerMinute, now); err != nil {
			return err
		}
		return checkSupersededExist(tx, d.Supersedes, store.KindDecision)
	}
	return h.globalStep(ctx, b, g, nil)
}

// DeclareIntent announces cross-cutting work. It never waits for anyone:
// active intents of other sessions that overlap it come back as notices,
// and other sessions see it in their briefings until it is completed or
// expires.
func (h *Handle) DeclareIntent(ctx context.Context, in Intent) (WriteResult, error) {
	now := h.a.now()
	if err := in.validate(now); err != nil {
		return WriteResult{}, err
	}
	var notices []string
	g := global{kind: store.KindIntent, text: in.Description, search: strings.Join(in.Paths, " ") + " " + strings.Join(in.Categories, " "),
		body: in, scope: in.Paths}
	g.check = func(tx store.ArchiveTx, now time.Time) error {
		notices = nil
		if err := h.a.rateLimit(tx, h.agent, "", h.a.opts.Limits.WritesPerMinute, now); err != nil {
			return err
		}
		active, err := activeIntents(tx, now)
		if err != nil {
			return err
		}
		for _, o := range active {
			if o.rec.SessionID == h.agent.SessionID {
				continue
			}
			if intentsOverlap(o.intent, in) {
				notices = append(notices, fmt.Sprintf("overlaps %s of session %s (%s): %s",
					o.rec.ID, o.rec.SessionID, o.intent.Priority, o.intent.Description))
			}
		}
		return nil
	}
	s, err := h.globalStep(ctx, nil, g, nil)
	if err != nil {
		return WriteResult{}, err
	}
	// The notices are the last run's: check sets them afresh.
	run := s.run
	s.run = func(tx store.ArchiveTx, done []WriteResult) (WriteResult, error) {
		wr, err := run(tx, done)
		wr.Notices = append(wr.Notices, notices...)
		return wr, err
	}
	return h.commitOne(ctx, s)
}

type intentRec struct {
	rec    store.ArchiveRecord
	intent Intent
}

func activeIntents(tx store.ArchiveTx, now time.Time) ([]intentRec, error) {
	recs, err := tx.Records(store.RecordQuery{Kinds: []store.RecordKind{store.KindIntent, store.KindIntentDone},
		Since: now.Add(-24 * time.Hour * 365)})
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	for _, r := range recs {
		if r.Kind == store.KindIntentDone {
			done[r.Ref] = true
		}
	}
	var out []intentRec
	for _, r := range recs {
		if r.Kind != store.KindIntent || done[r.ID] {
			continue
		}
		var in Intent
		if err := json.Unmarshal(r.Body, &in); err != nil {
			return nil, err
		}
		if now.Before(in.ExpiresAt) {
			out = append(out, intentRec{r, in})
		}
	}
	return out, nil
}

func intentsOverlap(a, b Intent) bool {
	if len(a.Paths) > 0 && len(b.Paths) > 0 && scopesOverlap(a.Paths, b.Paths) {
		return true
	}
	for _, x := range a.Categories {
		for _, y := range b.Categories {
			if categoryRelated(x, y) {
				return true
			}
		}
	}
	return false
}

// categoryRelated reports whether one category is the other or under it.
func categoryRelated(x, y string) bool {
	return x == y || strings.HasPrefix(x, y+".") || strings.HasPrefix(y, x+".")
}

// CompleteIntent marks an intent of the handle's session done, which
// clears it from every briefing.
func (h *Handle) CompleteIntent(ctx context.Context, intentID string) (WriteResult, error) {
	if err := checkID("intent", intentID); err != nil {
		return WriteResult{}, err
	}
	var rec store.ArchiveRecord
	err := h.write(ctx, func(tx store.ArchiveTx) error {
		recs, err := tx.Records(store.RecordQuery{IDs: []string{intentID}, Kinds: []store.RecordKind{store.KindIntent}})
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return fmt.Errorf("intent %s: no intent of that ID was declared: %w", intentID, store.ErrNotFound)
		}
		if recs[0].SessionID != h.agent.SessionID {
			return &IsolationError{AgentID: h.agent.ID, AgentSession: h.agent.SessionID, Session: recs[0].SessionID}
		}
		done, err := tx.Records(store.RecordQuery{Kinds: []store.RecordKind{store.KindIntentDone}, Ref: intentID})
		if err != nil {
			return err
		}
		if len(done) > 0 {
			return &ConflictError{Records: []string{intentID, done[0].ID}, Msg: intentID + " is already completed (" + done[0].ID + ")"}
		}
		gv, err := tx.NextGlobal()
		if err != nil {
			return err
		}
		now := h.a.now()
		rec = store.ArchiveRecord{ID: fmt.Sprintf("done-%d", gv), Kind: store.KindIntentDone, GV: gv, SessionID: h.agent.SessionID,
			AgentID: h.agent.ID, Model: h.agent.Model, Ref: intentID, Body: []byte("{}"), CreatedAt: now}
		if err := tx.Append(&rec); err != nil {
			return err
		}
		return tx.AppendEvent(&store.ArchiveEvent{Type: "intent_complete", GV: gv, SessionID: h.agent.SessionID,
			AgentID: h.agent.ID, Scope: "intents", RecordID: intentID, At: now})
	})
	if err != nil {
		return WriteResult{}, fmt.Errorf("complete intent: %w", err)
	}
	return WriteResult{Status: "updated", ID: intentID, GV: rec.GV}, nil
}

// rateLimit refuses a write past limit records of kind (any global kind if
// empty) in the last minute by the agents of the writer's credential: the
// agent itself, or the key holder that registered it and the agents that
// share its key lineage. Not by session: a caller picks session names
// freely, so counting by them let a writer that rotated them write
// without bound. It reads one record: the limit-th newest of the minute,
// if there is one.
func (a *Archive) rateLimit(tx store.ArchiveTx, agent store.ArchiveAgent, kind store.RecordKind, limit int, now time.Time) error {
	if limit < 0 {
		return nil
	}
	q := store.RecordQuery{Credential: credentialOf(agent), Since: now.Add(-time.Minute), Newest: true, Limit: 1, Offset: limit - 1}
	if kind != "" {
		q.Kinds = []store.RecordKind{kind}
	} else {
		q.Kinds = []store.RecordKind{store.KindPattern, store.KindFailure, store.KindResolution, store.KindInsight,
			store.KindDecision, store.KindIntent}
	}
	nth, err := tx.Records(q)
	if err != nil {
		return err
	}
	if len(nth) == 0 {
		return nil
	}
	wait := max(nth[0].CreatedAt.Add(time.Minute).Sub(now), time.Second)
	what := "global records"
	if kind != "" {
		what = string(kind) + "s"
	}
	return &RateLimitError{Msg: fmt.Sprintf("agent %s wrote %d %s in the last minute (the limit)", credentialOf(agent), limit, what), RetryAfter: wait}
}

// credentialOf returns the credential an agent's writes count against.
func credentialOf(agent store.ArchiveAgent) string {
	if agent.Credential != "" {
		return agent.Credential
	}
	return agent.ID
}

// globalStep prepares the common path of a global write, as a step of
// batch b (nil: a write of its own), and returns the step; onMerge, if
// set, runs in the transaction when the write is merged into an existing
// record.
func (h *Handle) globalStep(ctx context.Context, b *batch, g global, onMerge func(tx store.ArchiveTx, existingID string) error) (step, error) {
	a := h.a
	body := mustJSON(g.body)
	if len(body) > maxRecordBody {
		return step{}, invalid(string(g.kind), "is %d bytes of JSON; at most %d", len(body), maxRecordBody)
	}
	hash := hashText(string(g.kind)+"\x00"+g.category, g.text)
	// Similar records are looked for before the transaction, so that the
	// one goroutine that commits every write never spends its time on
	// trigram sets or a slow embedder; in the transaction only the exact
	// hash and the records that arrived meanwhile are checked. The
	// earlier global writes of the batch are compared with here too: the
	// transaction merges into one of them if it created its record.
	var near *MergeInfo
	var nearIn *batchMatch
	if g.dedup {
		var err error
		if near, nearIn, err = a.similar(ctx, g, b); err != nil {
			return step{}, err
		}
	}
	run := func(tx store.ArchiveTx, done []WriteResult) (WriteResult, error) {
		now := a.now()
		if g.dedup {
			m, err := a.findDuplicate(tx, g, hash)
			if err != nil {
				return WriteResult{}, err
			}
			if m == nil {
				m = near
			}
			if nearIn != nil && done[nearIn.at].Status == "created" && (m == nil || nearIn.info.Similarity > m.Similarity) {
				mi := nearIn.info
				mi.ExistingID = done[nearIn.at].ID
				m = &mi
			}
			if m != nil {
				if err := tx.Use(m.ExistingID, now); err != nil {
					return WriteResult{}, err
				}
				if onMerge != nil {
					if err := onMerge(tx, m.ExistingID); err != nil {
						return WriteResult{}, err
					}
				}
				gv, _, err := tx.Versions("")
				if err != nil {
					return WriteResult{}, err
				}
				return WriteResult{Status: "merged", ID: m.ExistingID, GV: gv, Merged: m},
					tx.AppendEvent(&store.ArchiveEvent{Type: string(g.kind) + "_merge", GV: gv, SessionID: h.agent.SessionID,
						AgentID: h.agent.ID, Scope: scopeOf(g), RecordID: m.ExistingID,
						Detail: fmt.Sprintf("%s duplicate, similarity %.2f", m.Method, m.Similarity), At: now})
			}
		}
		if g.check != nil {
			if err := g.check(tx, now); err != nil {
				return WriteResult{}, err
			}
		}
		gv, err := tx.NextGlobal()
		if err != nil {
			return WriteResult{}, err
		}
		rec := store.ArchiveRecord{ID: fmt.Sprintf("%s-%d", kindPrefix[g.kind], gv), Kind: g.kind, GV: gv,
			SessionID: h.agent.SessionID, AgentID: h.agent.ID, Model: h.agent.Model, Category: g.category,
			Key: g.key, Ref: g.ref, Hash: hash, Text: strings.TrimSpace(g.text + " " + g.search), Body: body, CreatedAt: now}
		if err := tx.Append(&rec); err != nil {
			return WriteResult{}, err
		}
		for _, old := range g.supersedes {
			if err := tx.Supersede(old, rec.ID); err != nil {
				return WriteResult{}, err
			}
		}
		detail := ""
		if len(g.supersedes) > 0 {
			detail = "supersedes " + strings.Join(g.supersedes, ", ")
		}
		if err := tx.AppendEvent(&store.ArchiveEvent{Type: string(g.kind) + "_add", GV: gv, SessionID: h.agent.SessionID,
			AgentID: h.agent.ID, Scope: scopeOf(g), RecordID: rec.ID, Detail: detail, At: now}); err != nil {
			return WriteResult{}, err
		}
		wr := WriteResult{Status: "created", ID: rec.ID, GV: gv, Superseded: g.supersedes}
		if g.after != nil {
			return wr, g.after(tx, &rec)
		}
		return wr, nil
	}
	return step{what: "record " + string(g.kind), g: &g, run: run}, nil
}

func scopeOf(g global) string {
	if g.category != "" {
		return g.category
	}
	return string(g.kind) + "s"
}

// dedupWindow is how many of the newest candidate records of a kind (and
// category) a new record is compared with by similarity; the exact hash
// is checked against all of them. Patterns are capped per category well
// below it.
const dedupWindow = 1000

// batchMatch is the earlier write of a batch that a global write nearly
// duplicates: the step at, and how (its ExistingID is set once the step
// has run and created its record).
type batchMatch struct {
	at   int
	info MergeInfo
}

// similar finds the record g nearly duplicates, by trigram similarity
// over the threshold or, for borderline cases, by the cosine of their
// embeddings. It compares with this process's mirror of the global
// history and, apart, with the earlier global writes of batch b (which
// the mirror cannot hold: they commit with g).
func (a *Archive) similar(ctx context.Context, g global, b *batch) (*MergeInfo, *batchMatch, error) {
	gv, _, err := a.st.ArchiveVersions(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	m, err := a.global(ctx, gv)
	if err != nil {
		return nil, nil, err
	}
	now := a.now()
	mine := trigrams(g.text)
	myTerms := contentTerms(g.text)
	t := a.opts.Dedup.Trigram
	if a.opts.Embedder != nil {
		t = a.opts.Dedup.Suspect
	}
	// A candidate is a record of the mirror (at -1) or the earlier write
	// at of the batch.
	type cand struct {
		id, text string
		at       int
	}
	a.mu.RLock()
	pos := m.candidates(m.grams, g.kind, g.category, mine, t)
	if a.opts.Dedup.Words > 0 {
		pos = append(pos, m.candidates(m.terms, g.kind, g.category, myTerms, a.opts.Dedup.Words)...)
		slices.Sort(pos)
		pos = slices.Compact(pos)
	}
	if len(pos) > dedupWindow {
		pos = pos[len(pos)-dedupWindow:]
	}
	cands := make([]cand, 0, len(pos))
	for _, i := range pos {
		if r := &m.records[i]; m.active(r, now) {
			cands = append(cands, cand{id: r.ID, text: r.Text(), at: -1})
		}
	}
	a.mu.RUnlock()
	if b != nil {
		for j, s := range b.steps {
			if s.g != nil && s.g.dedup && s.g.kind == g.kind && s.g.category == g.category {
				cands = append(cands, cand{text: s.g.text, at: j})
			}
		}
	}
	// A near duplicate that takes the opposite stance is a contradiction,
	// not a duplicate: "enable X by default" and "disable X by default"
	// share every content word.
	stanced := g.kind == store.KindPattern || g.kind == store.KindDecision
	var best *MergeInfo
	var bestIn *batchMatch
	consider := func(c cand, sim float64, method string) {
		switch {
		case c.at >= 0 && (bestIn == nil || sim > bestIn.info.Similarity):
			bestIn = &batchMatch{at: c.at, info: MergeInfo{Existing: c.text, Similarity: sim, Method: method}}
		case c.at < 0 && (best == nil || sim > best.Similarity):
			best = &MergeInfo{ExistingID: c.id, Existing: c.text, Similarity: sim, Method: method}
		}
	}
	var suspects []cand
	for _, c := range cands {
		if stanced && contradicts(g.text, c.text) {
			continue
		}
		// The mirror's records never change, so their sets are cached by
		// id; the batch's are not records yet.
		var sim float64
		var words func() float64
		if c.at < 0 {
			sim = a.similarity(mine, c.id, c.text)
			words = func() float64 { return a.wordSimilarity(myTerms, c.id, c.text) }
		} else {
			sim = jaccard(mine, trigrams(c.text))
			words = func() float64 { return jaccard(myTerms, contentTerms(c.text)) }
		}
		switch {
		case sim > a.opts.Dedup.Trigram:
			consider(c, sim, "trigram")
		case a.opts.Dedup.Words > 0 && words() >= a.opts.Dedup.Words:
			consider(c, words(), "words")
		case sim > a.opts.Dedup.Suspect:
			suspects = append(suspects, c)
		}
	}
	if len(suspects) == 0 || a.opts.Embedder == nil {
		return best, bestIn, nil
	}
	// Embeddings settle the borderline cases of each source that has no
	// clear duplicate.
	suspects = slices.DeleteFunc(suspects, func(c cand) bool { return c.at < 0 && best != nil || c.at >= 0 && bestIn != nil })
	if len(suspects) == 0 {
		return best, bestIn, nil
	}
	texts := []string{g.text}
	for _, c := range suspects {
		texts = append(texts, c.text)
	}
	vecs, err := a.embedTexts(ctx, texts)
	if err != nil {
		a.log.Warn("embedding similarity unavailable; duplicates judged by trigrams only", "err", err)
		return best, bestIn, nil
	}
	for i, c := range suspects {
		if cos := float64(vek32.Dot(vecs[0], vecs[i+1])); cos > a.opts.Dedup.Embedding {
			consider(c, cos, "embedding")
		}
	}
	return best, bestIn, nil
}

// wordSimilarity is the Jaccard similarity of a text's content terms and
// a record's, cached like trigrams.
func (a *Archive) wordSimilarity(mine map[string]struct{}, id, text string) float64 {
	theirs, ok := a.tris.GetIfPresent("w\x00" + id)
	if !ok {
		theirs = contentTerms(text)
		a.tris.Set("w\x00"+id, theirs)
	}
	return jaccard(mine, theirs)
}

// similarity is the trigram similarity of a text's trigrams and a
// record's text; records never change, so their sets are cached by id.
func (a *Archive) similarity(mine map[string]struct{}, id, text string) float64 {
	theirs, ok := a.tris.GetIfPresent(id)
	if !ok {
		theirs = trigrams(text)
		a.tris.Set(id, theirs)
	}
	return jaccard(mine, theirs)
}

// findDuplicate looks, in the transaction, for an active record with the
// same hash. Near duplicates were looked for before the transaction
// (similar); two near duplicates written in the same instant by two agents
// can both be created, exact ones never.
func (a *Archive) findDuplicate(tx store.ArchiveTx, g global, hash string) (*MergeInfo, error) {
	same, err := tx.Records(store.RecordQuery{Hash: hash, Kinds: []store.RecordKind{g.kind}, Active: true, Limit: 1})
	if err != nil || len(same) == 0 {
		return nil, err
	}
	return &MergeInfo{ExistingID: same[0].ID, Existing: recordText(same[0]), Similarity: 1, Method: "hash"}, nil
}

func (a *Archive) embedTexts(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	var miss []string
	var at []int
	key := func(t string) string { return a.opts.Embedder.Model() + "\x00" + t }
	for i, t := range texts {
		if v, ok := a.vecs.GetIfPresent(key(t)); ok {
			out[i] = v
			continue
		}
		miss = append(miss, t)
		at = append(at, i)
	}
	if len(miss) > 0 {
		vecs, err := a.opts.Embedder.Embed(ctx, miss)
		if err != nil {
			return nil, err
		}
		if len(vecs) != len(miss) {
			return nil, errors.New("embedder returned the wrong number of vectors")
		}
		for j, v := range vecs {
			if len(v) != len(vecs[0]) {
				return nil, errors.New("embedder returned vectors of different dimensions")
			}
			out[at[j]] = v
			a.vecs.Set(key(miss[j]), v)
		}
	}
	return out, nil
}

// recordText is the text a record is deduplicated on.
func recordText(r store.ArchiveRecord) string {
	switch r.Kind {
	case store.KindPattern:
		var p Pattern
		if json.Unmarshal(r.Body, &p) == nil {
			return p.Pattern
		}
	case store.KindFailure:
		var f Failure
		if json.Unmarshal(r.Body, &f) == nil {
			return f.Approach + " — " + f.Reason
		}
	case store.KindInsight:
		var i Insight
		if json.Unmarshal(r.Body, &i) == nil {
			return i.Insight
		}
	case store.KindDecision:
		var d Decision
		if json.Unmarshal(r.Body, &d) == nil {
			return d.Decision
		}
	case store.KindIntent:
		var in Intent
		if json.Unmarshal(r.Body, &in) == nil {
			return in.Description
		}
	}
	return r.Text
}
