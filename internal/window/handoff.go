package window

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// HandoffOptions say how to hand a window off.
type HandoffOptions struct {
	// To is the agent that takes over; default NextAgent of the prior.
	To string
	// Facts are the archivalist's state of the session; nil or empty: the
	// state is built from the window alone (HandoffResult.Fallback).
	Facts *SessionFacts
}

// HandoffResult is a handoff made: its state, the entry that holds it,
// and the windows before and after.
type HandoffResult struct {
	State HandoffState
	// Entry is the ID of the handoff_state entry.
	Entry string
	// Prior is the window handed off (as it stays), Window the new one.
	Prior, Window Status
	// Fallback says why the state was built from the window alone; empty
	// when the archivalist's state was used.
	Fallback string
}

// ErrEmptyWindow is returned by Handoff for a window with no messages
// but its system prompt: there is nothing to hand off (the state would
// know no task, and the next window would open with the same prompt).
var ErrEmptyWindow = fmt.Errorf("%w: the window has no messages but its system prompt: nothing to hand off", ErrInvalid)

// Handoff hands the window of an agent off to a new instance of it: it
// builds the HandoffState (BuildHandoff, with references that together
// stand for every message of the window), stores it as a handoff_state
// entry of the session (metadata: handoff_index, from_agent, to_agent,
// previous), and opens the next agent's window, in the same session, with
// the prior window's settings (role, model, limits, policy), its first
// messages the prior window's system prompt, if any, and the state as
// text, pinned. The prior window is not changed.
//
// A window that already holds messages for the next agent is a
// *store.ConflictError, with nothing written; a window with no messages
// but its system prompt is ErrEmptyWindow; an unknown one
// store.ErrNotFound.
//
// Writes, in an order that is safe to repeat: the references of the
// prior window first (named by window, places and content, so a second
// write is the same reference), then the new window's head, whose
// settings name the handoff (its index and state entry), then, in one
// transaction, the state's entry and the new window's messages. A handoff
// cut short between the last two leaves the new window empty with the
// handoff's settings; a handoff tried again takes that window over, where
// any other window of the next agent is a conflict. The new window's
// append also refuses a window that another process filled meanwhile.
func (m *Manager) Handoff(ctx context.Context, from store.WindowKey, o HandoffOptions) (HandoffResult, error) {
	if err := from.Validate(); err != nil {
		return HandoffResult{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	to := store.WindowKey{SessionID: from.SessionID, AgentID: cmp.Or(o.To, NextAgent(from.AgentID))}
	if err := checkAgent(to.AgentID); err != nil {
		return HandoffResult{}, err
	}
	if to == from {
		return HandoffResult{}, fmt.Errorf("%w: agent %q cannot hand off to itself", ErrInvalid, to.AgentID)
	}
	prior, msgs, _, err := m.Messages(ctx, from)
	if err != nil {
		return HandoffResult{}, err
	}
	if !slices.ContainsFunc(msgs, func(m Message) bool { return m.Role != RoleSystem }) {
		return HandoffResult{}, fmt.Errorf("window %s: %w", from, ErrEmptyWindow)
	}
	s := prior.Settings
	link := HandoffLink{Index: 1, From: from.AgentID}
	prev := ""
	if s.Handoff != nil {
		link.Index, prev = s.Handoff.Index+1, s.Handoff.Entry
	}
	// Checked before anything is written, and again under the lock.
	if err := m.checkNext(ctx, to, link); err != nil {
		return HandoffResult{}, err
	}
	refs, err := m.ledgerRefs(ctx, from, msgs)
	if err != nil {
		return HandoffResult{}, err
	}
	state := BuildHandoff(s.Role, msgs, o.Facts)
	if prev != "" {
		if err := m.carryOver(ctx, prev, &state, o.Facts); err != nil {
			return HandoffResult{}, err
		}
	}
	state.Session, state.FromAgent, state.ToAgent, state.Index, state.Previous = from.SessionID, from.AgentID, to.AgentID, link.Index, prev
	state.Reason, state.CreatedAt, state.Refs = ReasonRequested, m.now().UTC().Truncate(time.Second), refs
	if prior.HandoffDue {
		state.Reason = reasonDue(s.Policy.Handoff)
	}
	fallback := ""
	if o.Facts.empty() {
		fallback = fmt.Sprintf("the archivalist holds no state of session %s: the handoff state was built from the window alone", from.SessionID)
	}
	if strings.EqualFold(s.Role, "orchestrator") {
		if state.Orchestrator, err = m.agentsOf(ctx, from, to); err != nil {
			return HandoffResult{}, err
		}
	}
	body, err := json.Marshal(state)
	if err != nil {
		return HandoffResult{}, err
	}
	rec := engine.Record{Session: from.SessionID, Agent: from.AgentID, AgentType: s.Role, Type: store.HandoffState, Content: body,
		Time: state.CreatedAt, Metadata: map[string]any{"handoff_index": link.Index, "from_agent": from.AgentID, "to_agent": to.AgentID,
			"previous": prev, "handoff_reason": state.Reason}}
	// The entry's ID, as the store will keep it (secrets redacted), names
	// the state in the new window's settings.
	batch, err := m.eng.Prepare(ctx, []engine.Record{rec})
	if err != nil {
		return HandoffResult{}, err
	}
	link.Entry = store.ID(batch.Entries()[0].Content)
	next := Settings{Role: s.Role, Model: s.Model, Encoding: s.Encoding, Limits: s.Limits, Policy: s.Policy, Handoff: &link}
	raw, err := json.Marshal(next)
	if err != nil {
		return HandoffResult{}, err
	}
	var first []Message
	for _, msg := range msgs {
		if msg.Role != RoleSystem {
			break
		}
		msg.Tokens, msg.Entities, msg.Time, msg.Blocks = 0, nil, time.Time{}, slices.Clone(msg.Blocks)
		first = append(first, msg)
	}
	first = append(first, Message{Role: RoleUser, Pinned: true, Blocks: []Block{{Type: BlockText, Text: state.Render()}}})
	// The next agent's window must not be, but for one this very handoff
	// left empty, cut short; this Manager's changes to it wait meanwhile
	// (nothing here takes another window's lock, which may be the same).
	defer m.lock(to)()
	if err := m.checkNext(ctx, to, link); err != nil {
		return HandoffResult{}, err
	}
	if _, err := m.eng.Store().PutWindow(ctx, to, raw); err != nil {
		return HandoffResult{}, err
	}
	res, entries, err := m.appendWith(ctx, to, first, "", []engine.Record{rec}, true)
	if err != nil {
		return HandoffResult{}, fmt.Errorf("open window %s with the handoff: %w", to, err)
	}
	return HandoffResult{State: state, Entry: entries[0].ID, Prior: prior, Window: res.Status, Fallback: fallback}, nil
}

// carryOver takes into a state what the state before it in the lineage
// (the entry prev) knew and the window cannot: the task (the window's
// first prompt is the state itself) and the objective, unless the
// archivalist's facts say them; its decisions and files after the
// state's own; what is done, next steps, blockers and open questions
// where the state has none.
func (m *Manager) carryOver(ctx context.Context, prev string, st *HandoffState, facts *SessionFacts) error {
	es, err := m.eng.Store().Entries(ctx, []string{prev})
	if errors.Is(err, store.ErrNotFound) {
		return nil // forgotten: the window's own say is all there is
	}
	if err != nil {
		return err
	}
	var before HandoffState
	if err := json.Unmarshal(es[0].Content, &before); err != nil {
		return nil // redacted or not a state: as if forgotten
	}
	if facts == nil || facts.Task == "" {
		st.Task = cmp.Or(before.Task, st.Task)
	}
	if facts == nil || facts.Objective == "" {
		st.Objective = cmp.Or(before.Objective, st.Objective)
	}
	for _, d := range before.Decisions {
		if !slices.Contains(st.Decisions, d) && len(st.Decisions) < 2*handoffItems {
			st.Decisions = append(st.Decisions, d)
		}
	}
	// What neither the window nor the facts say any more, the state
	// before still does.
	for _, l := range []struct{ now, was *[]string }{{&st.Progress.Done, &before.Progress.Done}, {&st.Next, &before.Next},
		{&st.Blockers, &before.Blockers}, {&st.Questions, &before.Questions}} {
		if len(*l.now) == 0 && len(*l.was) > 0 {
			*l.now = *l.was
		}
	}
	for _, f := range before.Files {
		if !slices.ContainsFunc(st.Files, func(g HandoffFile) bool { return g.Path == f.Path }) && len(st.Files) < 2*handoffFiles {
			st.Files = append(st.Files, f)
		}
	}
	return nil
}

// checkNext refuses a handoff to a window that exists, but for one this
// handoff (link: same index, from the same agent) left empty.
func (m *Manager) checkNext(ctx context.Context, to store.WindowKey, link HandoffLink) error {
	w, err := m.eng.Store().Window(ctx, to)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	conflict := &store.ConflictError{What: "window " + to.String(), Msg: "exists already: name another agent to hand off to"}
	var s Settings
	if err := json.Unmarshal(w.Settings, &s); err != nil || s.Handoff == nil || s.Handoff.From != link.From || s.Handoff.Index != link.Index {
		return conflict
	}
	items, err := m.eng.Store().WindowItems(ctx, to, 0, -1)
	if err != nil {
		return err
	}
	if len(items) > 0 {
		return conflict
	}
	return nil
}

// ledgerRefs stands markers for the whole of a window's ledger: runs of
// whole units (a tool call with its results) of at most the policy's cap
// on a reference, as Refer makes them, which expand from the ledger.
func (m *Manager) ledgerRefs(ctx context.Context, key store.WindowKey, msgs []Message) ([]HandoffRef, error) {
	marks, err := m.Refer(ctx, key, 0, len(msgs), 0)
	if err != nil {
		return nil, err
	}
	out := []HandoffRef{}
	for _, it := range marks {
		mk, err := ctxref.Parse(it.Marker)
		if err != nil {
			return nil, fmt.Errorf("window %s: marker %q: %w", key, it.Marker, err)
		}
		out = append(out, HandoffRef{ID: it.RefID, Marker: it.Marker, From: mk.TurnFrom - 1, To: mk.TurnTo - 1,
			Messages: mk.TurnTo - mk.TurnFrom + 1, Tokens: mk.Tokens})
	}
	return out, nil
}

// agentsOf returns where the session's other windows stand, for an
// orchestrator's handoff.
func (m *Manager) agentsOf(ctx context.Context, from, to store.WindowKey) (*OrchestratorHandoff, error) {
	ws, err := m.eng.Store().Windows(ctx, from.SessionID)
	if err != nil {
		return nil, err
	}
	out := &OrchestratorHandoff{Agents: []AgentSnapshot{}}
	for _, w := range ws {
		if w.WindowKey == from || w.WindowKey == to {
			continue
		}
		st, err := m.Status(ctx, w.WindowKey)
		if err != nil {
			return nil, err
		}
		out.Agents = append(out.Agents, AgentSnapshot{Agent: w.AgentID, Role: st.Settings.Role, Used: st.Used, Budget: st.Budget, HandoffDue: st.HandoffDue})
	}
	slices.SortFunc(out.Agents, func(a, b AgentSnapshot) int { return strings.Compare(a.Agent, b.Agent) })
	return out, nil
}
