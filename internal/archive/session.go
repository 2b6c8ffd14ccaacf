package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/store"
)

// Resume is where a session stands: what a fresh agent needs to carry on.
type Resume struct {
	Task        string   `json:"task,omitempty"`
	Objective   string   `json:"objective,omitempty"`
	Done        []string `json:"done,omitempty"`
	Current     string   `json:"current,omitempty"`
	Next        []string `json:"next,omitempty"`
	Blockers    []string `json:"blockers,omitempty"`
	FilesToRead []string `json:"files_to_read,omitempty"`
	// Agent is who wrote this state last (set by the archive).
	Agent string `json:"agent,omitempty"`
}

func (r *Resume) validate() error {
	for _, f := range []struct{ name, v string }{{"task", r.Task}, {"objective", r.Objective}, {"current", r.Current}} {
		if err := checkText(f.name, f.v, false, MaxTextBytes); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    []string
	}{{"done", r.Done}, {"next", r.Next}, {"blockers", r.Blockers}, {"files_to_read", r.FilesToRead}} {
		if err := checkList(f.name, f.v, MaxTextBytes); err != nil {
			return err
		}
	}
	return nil
}

// merge returns r over the previous state: fields r leaves unset (empty
// strings, nil lists) keep their previous values; an empty non-nil list
// clears.
func (r Resume) merge(prev Resume) Resume {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	list := func(a, b []string) []string {
		if a != nil {
			return a
		}
		return b
	}
	return Resume{Task: pick(r.Task, prev.Task), Objective: pick(r.Objective, prev.Objective),
		Done: list(r.Done, prev.Done), Current: pick(r.Current, prev.Current), Next: list(r.Next, prev.Next),
		Blockers: list(r.Blockers, prev.Blockers), FilesToRead: list(r.FilesToRead, prev.FilesToRead)}
}

// FileStatus is what a session did to a file.
type FileStatus string

// File statuses, weakest first.
const (
	Read     FileStatus = "read"
	Modified FileStatus = "modified"
	Created  FileStatus = "created"
	Deleted  FileStatus = "deleted"
)

func (s FileStatus) rank() int {
	return slices.Index([]FileStatus{Read, Modified, Created, Deleted}, s)
}

// FileState is a session's record of one file.
type FileState struct {
	Path    string     `json:"path"`
	Status  FileStatus `json:"status"`
	Summary string     `json:"summary,omitempty"`
	// Agents are the agents that touched it (set by the archive).
	Agents []string `json:"agents,omitempty"`
}

func (f *FileState) validate() error {
	if err := checkText("path", f.Path, true, 4096); err != nil {
		return err
	}
	f.Path = strings.TrimPrefix(strings.TrimSpace(f.Path), "./")
	if f.Status.rank() < 0 {
		return invalid("status", "%q is not one of read, modified, created, deleted", f.Status)
	}
	return checkText("summary", f.Summary, false, MaxNoteBytes)
}

// Preference is something the user wants or rejects in this session.
type Preference struct {
	Text string `json:"text"`
	// Reject is true for what the user does not want.
	Reject bool   `json:"reject,omitempty"`
	Agent  string `json:"agent,omitempty"`
}

// UpdateResume sets the session's resume state; unset fields keep their
// values. Agents of one session resolve conflicts by hierarchy: a parent
// overrides its sub-agents, a sub-agent cannot override state its parent
// (or an ancestor) wrote last, and siblings take turns (last write wins).
func (h *Handle) UpdateResume(ctx context.Context, r Resume) (WriteResult, error) {
	if err := r.validate(); err != nil {
		return WriteResult{}, err
	}
	return h.commitOne(ctx, h.sessionStep(store.KindResume, "", func(tx store.ArchiveTx, prev *store.ArchiveRecord) (any, string, error) {
		var old Resume
		if prev != nil {
			if err := h.checkOverride(tx, prev.AgentID, "the resume state"); err != nil {
				return nil, "", err
			}
			if err := json.Unmarshal(prev.Body, &old); err != nil {
				return nil, "", err
			}
		}
		next := r.merge(old)
		next.Agent = h.agent.ID
		return next, next.Task + " " + next.Current, nil
	}))
}

// UpdateFile records what the session did to a file. Siblings' changes
// merge (the stronger status and both agents are kept); a parent's write
// replaces a sub-agent's; a sub-agent cannot override its ancestor's.
func (h *Handle) UpdateFile(ctx context.Context, f FileState) (WriteResult, error) {
	s, err := h.fileStep(f)
	if err != nil {
		return WriteResult{}, err
	}
	return h.commitOne(ctx, s)
}

// fileStep prepares UpdateFile's write as a step.
func (h *Handle) fileStep(f FileState) (step, error) {
	if err := f.validate(); err != nil {
		return step{}, err
	}
	return h.sessionStep(store.KindFile, f.Path, func(tx store.ArchiveTx, prev *store.ArchiveRecord) (any, string, error) {
		next := FileState{Path: f.Path, Status: f.Status, Summary: f.Summary, Agents: []string{h.agent.ID}}
		if prev != nil {
			var old FileState
			if err := json.Unmarshal(prev.Body, &old); err != nil {
				return nil, "", err
			}
			if err := h.checkOverride(tx, prev.AgentID, "file "+f.Path); err != nil {
				return nil, "", err
			}
			parent, err := isAncestor(tx, h.agent.ID, prev.AgentID)
			if err != nil {
				return nil, "", err
			}
			if !parent && prev.AgentID != h.agent.ID {
				// Siblings merge.
				if old.Status.rank() > next.Status.rank() {
					next.Status = old.Status
				}
				if next.Summary == "" {
					next.Summary = old.Summary
				}
			} else if next.Summary == "" {
				next.Summary = old.Summary
			}
			for _, ag := range old.Agents {
				if !slices.Contains(next.Agents, ag) {
					next.Agents = append(next.Agents, ag)
				}
			}
		}
		return next, next.Path + " " + next.Summary, nil
	}), nil
}

// AddPreference records what the user wants or rejects. The same text
// stated again replaces the earlier statement (a reject replaces a want).
func (h *Handle) AddPreference(ctx context.Context, p Preference) (WriteResult, error) {
	if err := checkText("text", p.Text, true, MaxTextBytes); err != nil {
		return WriteResult{}, err
	}
	kind := store.KindWant
	if p.Reject {
		kind = store.KindReject
	}
	return h.commitOne(ctx, h.sessionStep(kind, hashText("pref", p.Text), func(tx store.ArchiveTx, prev *store.ArchiveRecord) (any, string, error) {
		if prev != nil && prev.Kind != kind {
			if err := h.checkOverride(tx, prev.AgentID, "the preference "+fmt.Sprintf("%q", p.Text)); err != nil {
				return nil, "", err
			}
		}
		return Preference{Text: p.Text, Reject: p.Reject, Agent: h.agent.ID}, p.Text, nil
	}))
}

// checkOverride refuses a write over state an ancestor of the writer wrote.
func (h *Handle) checkOverride(tx store.ArchiveTx, lastWriter, what string) error {
	if lastWriter == "" || lastWriter == h.agent.ID {
		return nil
	}
	anc, err := isAncestor(tx, lastWriter, h.agent.ID)
	if err != nil {
		return err
	}
	if anc {
		return &ConflictError{Records: []string{lastWriter},
			Msg: fmt.Sprintf("%s was last written by %s, an ancestor of %s: a sub-agent cannot override its parent", what, lastWriter, h.agent.ID)}
	}
	return nil
}

// sessionStep returns the step that appends the next state of one
// session item. build gets the item's current record (nil if none) and
// returns the new body and its searchable text.
func (h *Handle) sessionStep(kind store.RecordKind, key string,
	build func(tx store.ArchiveTx, prev *store.ArchiveRecord) (any, string, error)) step {
	run := func(tx store.ArchiveTx, _ []WriteResult) (WriteResult, error) {
		q := store.RecordQuery{SessionID: h.agent.SessionID, Kinds: []store.RecordKind{kind}, Key: key, Newest: true, Limit: 1}
		if kind == store.KindWant || kind == store.KindReject {
			q.Kinds = []store.RecordKind{store.KindWant, store.KindReject}
		}
		cur, err := tx.Records(q)
		if err != nil {
			return WriteResult{}, err
		}
		var prev *store.ArchiveRecord
		if len(cur) > 0 {
			prev = &cur[0]
		}
		body, text, err := build(tx, prev)
		if err != nil {
			return WriteResult{}, err
		}
		b := mustJSON(body)
		if len(b) > maxRecordBody {
			return WriteResult{}, invalid(string(kind), "is %d bytes of JSON; at most %d", len(b), maxRecordBody)
		}
		if prev != nil && prev.Kind == kind && bytes.Equal(prev.Body, b) {
			// Written again as it is: no new version, so that a reader
			// holding this one gets NOT_MODIFIED.
			gv, sv, err := tx.Versions(h.agent.SessionID)
			return WriteResult{Status: "unchanged", GV: gv, SV: sv}, err
		}
		sv, err := tx.NextSession(h.agent.SessionID)
		if err != nil {
			return WriteResult{}, err
		}
		gv, _, err := tx.Versions("")
		if err != nil {
			return WriteResult{}, err
		}
		now := h.a.now()
		rec := store.ArchiveRecord{Kind: kind, SV: sv, SessionID: h.agent.SessionID, AgentID: h.agent.ID, Model: h.agent.Model,
			Key: key, Text: text, Body: b, CreatedAt: now}
		if err := tx.Append(&rec); err != nil {
			return WriteResult{}, err
		}
		status := "created"
		if prev != nil {
			status = "updated"
		}
		detail := key
		if kind == store.KindWant || kind == store.KindReject {
			detail = text
		}
		return WriteResult{Status: status, GV: gv, SV: sv}, tx.AppendEvent(&store.ArchiveEvent{Type: string(kind) + "_update",
			GV: gv, SV: sv, SessionID: h.agent.SessionID, AgentID: h.agent.ID, Scope: string(kind), Detail: truncate(detail, 200), At: now})
	}
	return step{what: "update " + string(kind), run: run}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// sessionState is a session's state at one session version.
type sessionState struct {
	sv      uint64
	resume  Resume
	files   []FileState
	wants   []Preference
	rejects []Preference
	agents  []store.ArchiveAgent
	// categories the session works in, inferred from its files, task and
	// the categories its agents wrote to.
	categories []string
	paths      []string
}

// session loads a session's state at version sv, from the cache or the
// store. Records newer than sv are ignored, so the state is exactly that
// version's.
func (a *Archive) session(ctx context.Context, sessionID string, sv uint64) (*sessionState, error) {
	key := fmt.Sprintf("%s\x00%d", sessionID, sv)
	if s, ok := a.sessions.GetIfPresent(key); ok {
		return s, nil
	}
	recs, err := a.st.ArchiveRecords(ctx, store.RecordQuery{SessionID: sessionID, Latest: true, UpToSV: sv,
		Kinds: []store.RecordKind{store.KindResume, store.KindFile, store.KindWant, store.KindReject}})
	if err != nil {
		return nil, err
	}
	st := &sessionState{sv: sv}
	latest := map[string]store.ArchiveRecord{}
	var order []string
	for _, r := range recs {
		if r.SV > sv {
			continue
		}
		k := string(r.Kind) + "\x00" + r.Key
		if r.Kind == store.KindWant || r.Kind == store.KindReject {
			k = "pref\x00" + r.Key
		}
		if _, ok := latest[k]; !ok {
			order = append(order, k)
		}
		latest[k] = r
	}
	for _, k := range order {
		r := latest[k]
		switch r.Kind {
		case store.KindResume:
			if err := json.Unmarshal(r.Body, &st.resume); err != nil {
				return nil, err
			}
		case store.KindFile:
			var f FileState
			if err := json.Unmarshal(r.Body, &f); err != nil {
				return nil, err
			}
			st.files = append(st.files, f)
		case store.KindWant, store.KindReject:
			var p Preference
			if err := json.Unmarshal(r.Body, &p); err != nil {
				return nil, err
			}
			if p.Reject {
				st.rejects = append(st.rejects, p)
			} else {
				st.wants = append(st.wants, p)
			}
		}
	}
	agents, err := a.st.ArchiveAgents(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	st.agents = agents
	cats := map[string]bool{}
	add := func(c string) {
		if c != "" && !cats[c] {
			cats[c] = true
			st.categories = append(st.categories, c)
		}
	}
	for _, f := range st.files {
		st.paths = append(st.paths, f.Path)
		for _, c := range categoriesOf(f.Path) {
			add(c)
		}
	}
	st.paths = append(st.paths, st.resume.FilesToRead...)
	for _, c := range categoriesOf(st.resume.Task + " " + st.resume.Objective + " " + st.resume.Current) {
		add(c)
	}
	// Categories this session's agents wrote patterns or failures in.
	own, err := a.st.ArchiveRecords(ctx, store.RecordQuery{SessionID: sessionID,
		Kinds: []store.RecordKind{store.KindPattern, store.KindFailure, store.KindInsight, store.KindDecision}, Newest: true, Limit: 200})
	if err != nil {
		return nil, err
	}
	for _, r := range own {
		if r.Category != "" {
			add(strings.SplitN(r.Category, ".", 2)[0])
		}
	}
	a.sessions.Set(key, st)
	return st, nil
}

// ReadSession returns a session's state, or NOT_MODIFIED when ifSV is the
// current session version.
func (a *Archive) ReadSession(ctx context.Context, sessionID string, ifSV uint64) (SessionRead, error) {
	if err := checkSession(sessionID); err != nil {
		return SessionRead{}, err
	}
	gv, sv, err := a.st.ArchiveVersions(ctx, sessionID)
	if err != nil {
		return SessionRead{}, err
	}
	if sv == 0 {
		// The shared memory's state of the session: its messages and
		// windows, if any, are the content store's.
		return SessionRead{}, fmt.Errorf("session %s: %w in the shared memory (no agent registered, no state written; its stored messages, if any, are under its windows and search)", sessionID, store.ErrNotFound)
	}
	out := SessionRead{Status: StatusOK, GV: gv, SV: sv, Session: sessionID}
	if ifSV != 0 && ifSV == sv {
		out.Status = StatusNotModified
		return out, nil
	}
	st, err := a.session(ctx, sessionID, sv)
	if err != nil {
		return SessionRead{}, err
	}
	out.Resume = &st.resume
	out.Files = st.files
	out.Wants = st.wants
	out.Rejects = st.rejects
	out.Agents = st.agents
	return out, nil
}

// SessionRead is a session's state at the versions it names.
type SessionRead struct {
	Status  string               `json:"status"`
	GV      uint64               `json:"gv"`
	SV      uint64               `json:"sv"`
	Session string               `json:"session"`
	Resume  *Resume              `json:"resume,omitempty"`
	Files   []FileState          `json:"files,omitempty"`
	Wants   []Preference         `json:"wants,omitempty"`
	Rejects []Preference         `json:"rejects,omitempty"`
	Agents  []store.ArchiveAgent `json:"agents,omitempty"`
}

// Read statuses.
const (
	StatusOK          = "OK"
	StatusNotModified = "NOT_MODIFIED"
	StatusTooLarge    = "TOO_LARGE"
)
