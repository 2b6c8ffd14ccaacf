package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// WindowHandoffIn hands an agent's window off to a new instance of the
// agent.
type WindowHandoffIn struct {
	Session string `json:"session,omitempty" jsonschema:"must be your session if given"`
	Agent   string `json:"agent,omitempty" jsonschema:"the agent that hands off (default you)"`
	To      string `json:"to,omitempty" jsonschema:"the agent that takes over (default the agent's name with -2, or its number plus one)"`
}

// HandoffOut is a handoff made: the state, the entry that holds it, the
// new window (Key, and where it stands) and the prior one, as it stays.
type HandoffOut struct {
	State window.HandoffState `json:"state"`
	Entry string              `json:"entry"`
	// Key names the new window: session/agent.
	Key    string    `json:"key"`
	Window WindowOut `json:"window"`
	Prior  WindowOut `json:"prior"`
	// Fallback says why the state was built from the window alone (the
	// archivalist holds no state of the session).
	Fallback string `json:"fallback,omitempty"`
}

// maxHandoffDecisions caps the session's decisions a handoff carries.
const maxHandoffDecisions = 50

// WindowHandoff hands the window of an agent of the caller's session off
// to a new instance of the agent (seed 000's pipeline handoff): a
// structured state, built from the window and the archivalist's state of
// the session (its resume point, files and decisions, which win where
// both speak), is stored as a handoff_state entry chained by index, and
// the next agent's window opens with it, pinned, with the prior window's
// settings and system prompt; the prior window stays as it is. Without
// the archivalist's state, the state is the window's alone and Fallback
// says so. A window with no messages is refused; a next agent whose
// window exists is a conflict, with nothing written.
func (o *Ops) WindowHandoff(ctx context.Context, in WindowHandoffIn) (HandoffOut, string, error) {
	k, err := o.writeKey(in.Session, in.Agent)
	if err != nil {
		return HandoffOut{}, "", err
	}
	m, err := o.windows()
	if err != nil {
		return HandoffOut{}, "", err
	}
	facts, err := o.sessionFacts(ctx, k.SessionID)
	if err != nil {
		return HandoffOut{}, "", err
	}
	res, err := m.Handoff(ctx, k, window.HandoffOptions{To: in.To, Facts: facts})
	if err != nil {
		return HandoffOut{}, "", windowErr(err)
	}
	out := HandoffOut{State: res.State, Entry: res.Entry, Key: store.WindowKey{SessionID: res.Window.SessionID, AgentID: res.Window.AgentID}.String(),
		Window: windowOut(res.Window), Prior: windowOut(res.Prior), Fallback: res.Fallback}
	var b strings.Builder
	s := res.State
	fmt.Fprintf(&b, "handed off %s to %s (handoff %d, %s): state entry %s, %s over %s\n", k, out.Key, s.Index, s.Reason, res.Entry,
		plural(len(s.Refs), "reference"), plural(res.Prior.Messages+res.Prior.Evicted, "message"))
	if s.Previous != "" {
		fmt.Fprintf(&b, "previous state: entry %s\n", s.Previous)
	}
	if res.Fallback != "" {
		fmt.Fprintf(&b, "fallback: %s\n", res.Fallback)
	}
	b.WriteString(out.Window.Text())
	return out, b.String(), nil
}

// sessionFacts reads the archivalist's state of a session as a handoff
// takes it: nil when it holds none.
func (o *Ops) sessionFacts(ctx context.Context, session string) (*window.SessionFacts, error) {
	arc, err := o.Eng.Archive(ctx)
	if err != nil {
		return nil, err
	}
	sr, err := arc.ReadSession(ctx, session, 0)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := &window.SessionFacts{}
	if r := sr.Resume; r != nil {
		f.Task, f.Objective, f.Current = r.Task, r.Objective, r.Current
		f.Done, f.Next, f.Blockers, f.FilesToRead = r.Done, r.Next, r.Blockers, r.FilesToRead
	}
	for _, fs := range sr.Files {
		f.Files = append(f.Files, window.HandoffFile{Path: fs.Path, Status: string(fs.Status), Summary: fs.Summary})
	}
	for _, p := range sr.Wants {
		f.Wants = append(f.Wants, p.Text)
	}
	for _, p := range sr.Rejects {
		f.Rejects = append(f.Rejects, p.Text)
	}
	ds, err := arc.SessionDecisions(ctx, session, maxHandoffDecisions)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		f.Decisions = append(f.Decisions, decisionLine(d))
	}
	return f, nil
}

// decisionLine is a decision in a line: what was decided, and why.
func decisionLine(d archive.Decision) string {
	if d.Rationale != "" {
		return d.Decision + " (" + d.Rationale + ")"
	}
	return d.Decision
}
