package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/window"
)

// A window's timeline: its turns, what the window held after each, the
// references each made, re-admissions, handoffs and assembled turns, for
// the dashboard's chart of fill level over turns and its event list.

// TimelineLimitRange is the range of a timeline's turns: the newest are
// kept.
var TimelineLimitRange = Range{Name: "limit", Min: 1, Max: 5000, Default: 500}

// maxTimelineEvents caps a timeline's events: the newest are kept. A turn
// makes at most a few references, so within 5,000 turns it is not reached
// but by a window that re-admits without end.
const maxTimelineEvents = 20_000

// Timeline event kinds.
const (
	EventEvict      = "evict"
	EventReadmit    = "readmit"
	EventHandoffIn  = "handoff_in"
	EventHandoffOut = "handoff_out"
	EventAssembled  = "assembled"
)

// TimelineIn names a window and how many of its newest turns to show.
type TimelineIn struct {
	Session string `json:"session,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Limit   int    `json:"limit,omitempty" jsonschema:"most turns, newest kept, 1-5000 (default 500)"`
}

// TimelineRefOut is a reference a turn made: its ID (GET /v1/refs/{id}
// expands it), the messages it stands for and their tokens whole.
type TimelineRefOut struct {
	RefID    string `json:"ref_id"`
	Messages int    `json:"messages"`
	Tokens   int    `json:"tokens"`
}

// TimelineTurnOut is one turn (one append) of a window.
type TimelineTurnOut struct {
	// Version is the window's version the append made; At when it was
	// appended (left out for messages appended before engram kept it).
	Version int64      `json:"version"`
	At      *time.Time `json:"at,omitempty"`
	// Messages and Tokens are what the turn appended, Tokens as counted
	// then.
	Messages int `json:"messages"`
	Tokens   int `json:"tokens"`
	// Used is what the window showed right after the turn (its evictions
	// made): kept messages, the markers and excerpts of the rest, as
	// Status.Used counts them, from the window laid out again from its
	// ledger with its current settings (see window.Manager.History).
	Used int `json:"used"`
	// Evicted are the references the turn made.
	Evicted []TimelineRefOut `json:"evicted"`
}

// TimelineEventOut is an event of a window's history. Fields the ledger
// cannot tell are left out: a re-admission's time and version (the ledger
// keeps where it happened, between two turns, not when), a handoff's
// version.
type TimelineEventOut struct {
	Kind    string     `json:"kind"`
	At      *time.Time `json:"at,omitempty"`
	Version int64      `json:"version,omitempty"`
	RefID   string     `json:"ref_id,omitempty"`
	// Agent is the other agent of a handoff.
	Agent    string `json:"agent,omitempty"`
	Messages int    `json:"messages,omitempty"`
	Tokens   int    `json:"tokens,omitempty"`
	// Snapshot is an assembled turn's snapshot hash.
	Snapshot string `json:"snapshot,omitempty"`
	// Budget is an assembled turn's budget.
	Budget int `json:"budget,omitempty"`
}

// FillOut is a point of a window's fill level: what it held after a turn
// of a budget. Budget is the current settings' (the ledger keeps no
// earlier one).
type FillOut struct {
	Version int64      `json:"version"`
	At      *time.Time `json:"at,omitempty"`
	Used    int        `json:"used"`
	Budget  int        `json:"budget"`
}

// TimelineOut is a window's history, its newest Limit turns: TurnsTotal
// says how many there are in all, Events the events of the turns shown
// (and a handoff that opened the window), oldest first, Fill one point per
// turn shown.
type TimelineOut struct {
	Session    string             `json:"session"`
	Agent      string             `json:"agent"`
	Budget     int                `json:"budget"`
	EvictAt    int                `json:"evict_at"`
	Used       int                `json:"used"`
	Version    int64              `json:"version"`
	TurnsTotal int                `json:"turns_total"`
	Turns      []TimelineTurnOut  `json:"turns"`
	Events     []TimelineEventOut `json:"events"`
	Fill       []FillOut          `json:"fill"`
}

// timeOf is t for a JSON field that is left out when t is zero.
func timeOf(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// WindowTimeline returns a window's history from its ledger (see
// TimelineOut and window.Manager.History for what the ledger can tell):
// its newest turns, each with what the window held after it and the
// references it made; the events (evictions, re-admissions, the handoff
// that opened it and those it handed off to, its assembled turns, whose
// snapshots are kept: the newest KeepSnapshots), oldest first; and the
// fill level per turn. It costs a replay of the window's layout (every
// message read), one read of the session's windows and one of the
// window's snapshots.
func (o *Ops) WindowTimeline(ctx context.Context, in TimelineIn) (TimelineOut, string, error) {
	limit, err := TimelineLimitRange.Check(in.Limit)
	if err != nil {
		return TimelineOut{}, "", err
	}
	k, err := o.findKey(ctx, in.Session, in.Agent)
	if err != nil {
		return TimelineOut{}, "", err
	}
	m, err := o.windows()
	if err != nil {
		return TimelineOut{}, "", err
	}
	st, err := m.Status(ctx, k)
	if err != nil {
		return TimelineOut{}, "", err
	}
	settings, _, steps, err := m.History(ctx, k)
	if err != nil {
		return TimelineOut{}, "", err
	}
	out := TimelineOut{Session: k.SessionID, Agent: k.AgentID, Budget: st.Budget, EvictAt: st.EvictAt, Used: st.Used, Version: st.Version,
		Turns: []TimelineTurnOut{}, Events: []TimelineEventOut{}, Fill: []FillOut{}}

	// Events are ordered by the turn they follow (the version of the
	// last turn before them) and, within it, by rank: the turn's
	// evictions, then re-admissions after it, then turns assembled at
	// it, then handoffs out.
	type keyed struct {
		after int64
		rank  int
		ev    TimelineEventOut
	}
	var events []keyed
	var turnVersions []int64
	var turnTimes []time.Time
	var last int64
	for _, s := range steps {
		if s.Readmit != nil {
			msgs := s.Readmit.To - s.Readmit.From
			events = append(events, keyed{last, 1, TimelineEventOut{Kind: EventReadmit, RefID: s.ReadmitRef, Messages: msgs}})
			for _, r := range s.Evicted {
				events = append(events, keyed{last, 1, TimelineEventOut{Kind: EventEvict, RefID: r.ID, Messages: r.Messages, Tokens: r.Tokens}})
			}
			continue
		}
		last = s.Version
		turnVersions = append(turnVersions, s.Version)
		turnTimes = append(turnTimes, s.Time)
		t := TimelineTurnOut{Version: s.Version, At: timeOf(s.Time), Messages: s.Messages, Tokens: s.Tokens, Used: s.Used, Evicted: []TimelineRefOut{}}
		for _, r := range s.Evicted {
			t.Evicted = append(t.Evicted, TimelineRefOut{RefID: r.ID, Messages: r.Messages, Tokens: r.Tokens})
			events = append(events, keyed{last, 0, TimelineEventOut{Kind: EventEvict, At: t.At, Version: s.Version, RefID: r.ID, Messages: r.Messages, Tokens: r.Tokens}})
		}
		out.Turns = append(out.Turns, t)
	}
	// turnAt is the version of the last turn appended at or before t: a
	// handoff out is placed among the turns by its time.
	turnAt := func(t time.Time) int64 {
		i, _ := slices.BinarySearchFunc(turnTimes, t, func(a, b time.Time) int {
			if a.After(b) {
				return 1
			}
			return -1
		})
		if i == 0 {
			return 0
		}
		return turnVersions[i-1]
	}

	head, err := o.Eng.Store().Window(ctx, k)
	if err != nil {
		return TimelineOut{}, "", err
	}
	if h := settings.Handoff; h != nil {
		events = append(events, keyed{-1, 0, TimelineEventOut{Kind: EventHandoffIn, At: timeOf(head.CreatedAt), Agent: h.From}})
	}
	// The windows the agent handed off to: those of the session opened
	// by a handoff from it.
	ws, err := o.Eng.Store().Windows(ctx, k.SessionID)
	if err != nil {
		return TimelineOut{}, "", err
	}
	for _, w := range ws {
		var s window.Settings
		if w.AgentID == k.AgentID || json.Unmarshal(w.Settings, &s) != nil || s.Handoff == nil || s.Handoff.From != k.AgentID {
			continue
		}
		events = append(events, keyed{turnAt(w.CreatedAt), 3, TimelineEventOut{Kind: EventHandoffOut, At: timeOf(w.CreatedAt), Agent: w.AgentID}})
	}
	snaps, err := o.Eng.Store().Snapshots(ctx, k, 0)
	if err != nil {
		return TimelineOut{}, "", err
	}
	for _, snap := range snaps {
		r, err := readReport(snap)
		if err != nil {
			return TimelineOut{}, "", err
		}
		events = append(events, keyed{snap.Version, 2, TimelineEventOut{Kind: EventAssembled, At: timeOf(snap.CreatedAt), Version: snap.Version,
			Snapshot: snap.Hash, Tokens: r.Tokens, Budget: r.Budget}})
	}
	slices.SortStableFunc(events, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.after, b.after), cmp.Compare(a.rank, b.rank))
	})

	// The newest limit turns, and the events from the first of them on
	// (the handoff that opened the window always).
	out.TurnsTotal = len(out.Turns)
	if len(out.Turns) > limit {
		out.Turns = out.Turns[len(out.Turns)-limit:]
	}
	from := int64(-1)
	if out.TurnsTotal > len(out.Turns) {
		from = out.Turns[0].Version
	}
	for _, e := range events {
		if e.after >= from || e.ev.Kind == EventHandoffIn {
			out.Events = append(out.Events, e.ev)
		}
	}
	if n := len(out.Events); n > maxTimelineEvents {
		out.Events = out.Events[n-maxTimelineEvents:]
	}
	for _, t := range out.Turns {
		out.Fill = append(out.Fill, FillOut{Version: t.Version, At: t.At, Used: t.Used, Budget: st.Budget})
	}
	return out, out.Text(), nil
}

// Text is a timeline in a few lines: a line per turn shown, with its
// evictions, and a count of the other events.
func (t TimelineOut) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "window %s/%s: %d of %d tokens now (evicts at %d), version %d; %s",
		t.Session, t.Agent, t.Used, t.Budget, t.EvictAt, t.Version, plural(t.TurnsTotal, "turn"))
	if len(t.Turns) < t.TurnsTotal {
		fmt.Fprintf(&b, ", the newest %d shown", len(t.Turns))
	}
	b.WriteString("\n")
	for _, turn := range t.Turns {
		at := ""
		if turn.At != nil {
			at = " " + turn.At.Local().Format(time.DateTime)
		}
		fmt.Fprintf(&b, "v%d%s: +%s (%d tokens), %d used", turn.Version, at, plural(turn.Messages, "message"), turn.Tokens, turn.Used)
		for _, r := range turn.Evicted {
			fmt.Fprintf(&b, "; evicted %s (%d tokens) under %s", plural(r.Messages, "message"), r.Tokens, r.RefID)
		}
		b.WriteString("\n")
	}
	counts := map[string]int{}
	for _, e := range t.Events {
		counts[e.Kind]++
	}
	var parts []string
	for _, k := range []string{EventReadmit, EventHandoffIn, EventHandoffOut, EventAssembled} {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(&b, "events: %s\n", strings.Join(parts, ", "))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
