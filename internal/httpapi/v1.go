package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/llm"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// MaxBodyBytes bounds a request body by default.
const MaxBodyBytes = 4 << 20

// v1 serves the JSON API: resource-style URLs over the same operations as
// the MCP tools. The caller's session is the one in the URL or the
// X-Engram-Session header; its agent is X-Engram-Agent, else http@SESSION.
type v1 struct {
	eng     *engine.Engine
	log     *slog.Logger
	maxBody int64
	metrics *metrics.Metrics
	windows *window.Manager
	// assembler assembles turns over windows; nil makes one per request.
	assembler *assemble.Assembler
	// activity is the watcher's live state; nil when the server does not
	// index. version is engram's.
	activity *index.Activity
	version  string
	// hub serves the event stream.
	hub *hub
}

// route is one route of the API: what serves it and what the OpenAPI
// document says of it, from the same table, so the two cannot drift.
type route struct {
	pattern string // METHOD /path, as http.ServeMux takes it
	summary string
	handler http.HandlerFunc
	body    any      // a zero value of the request body's type, or nil
	query   []string // query parameters, "name: description"
	status  int      // the success status
}

func (v *v1) table() []route {
	rs := []route{
		{"GET /v1/search", "Hybrid search over code and everything agents saw", v.search, nil,
			[]string{"q: what to find", "limit: most results", "session: only this session", "type: only this content type (repeatable)",
				"path: only content about these files (repeatable)", "history: true to include old versions",
				"files: true to rank distinct places (files or records), each with its best spans, instead of chunks",
				"spans: best spans per place with files=true, 1-5 (default 3)"}, 200},
		{"GET /v1/history", "Search past messages and tool results only; below the relevance floor, nothing found", v.history, nil,
			[]string{"q: what to find", "type: only this content type", "session: only this session", "limit: most results"}, 200},
		{"GET /v1/files/{path...}", "An indexed file, or some of its lines", v.getFile, nil,
			[]string{"start: first line", "end: last line", "version: an older version"}, 200},
		{"POST /v1/prefetch", "The context block for a task, within a budget", jsonOp(v, (*api.Ops).Prefetch, 200), api.PrefetchIn{}, nil, 200},
		{"POST /v1/retrieve", "Stored content byte for byte, with its lines and bytes: the chunks matching a query, an entry's lines, whole entries; images and PDFs as placeholders unless raw", jsonOp(v, (*api.Ops).RetrieveContext, 200), api.RetrieveIn{}, nil, 200},
		{"POST /v1/recall", "Ask the archivalist: an @arch: query or a question about the past", jsonOp(v, (*api.Ops).Recall, 200), api.RecallIn{}, nil, 200},
		{"GET /v1/sessions/{session}", "A session's state (ETag: its version)", v.session, nil, nil, 200},
		{"GET /v1/sessions/{session}/briefing", "A session's briefing (ETag: both versions)", v.briefing, nil, []string{"tier: micro, standard or full"}, 200},
		{"GET /v1/sessions/{session}/turns", "A session's turns, in order", v.turns, nil, []string{"from: first turn (required, 1 or more)", "to: last turn (required)", "max_tokens: most tokens"}, 200},
		{"POST /v1/sessions/{session}/records", "Record content in the session", jsonOp(v, (*api.Ops).Record, 201), api.RecordIn{}, nil, 201},
		{"PUT /v1/sessions/{session}/resume", "Update the session's resume point", jsonOp(v, (*api.Ops).UpdateResume, 200), api.ResumeIn{}, nil, 200},
		{"PUT /v1/sessions/{session}/files/{path...}", "Record what the session did to a file", v.putFile, api.FileIn{}, nil, 200},
		{"POST /v1/patterns", "Add a pattern", jsonOp(v, (*api.Ops).RecordPattern, 201), api.PatternIn{}, nil, 201},
		{"POST /v1/failures", "Add a failure, or a resolution to one", jsonOp(v, (*api.Ops).RecordFailure, 201), api.FailureIn{}, nil, 201},
		{"POST /v1/insights", "Add an insight", jsonOp(v, (*api.Ops).RecordInsight, 201), api.InsightIn{}, nil, 201},
		{"POST /v1/decisions", "Add a decision", jsonOp(v, (*api.Ops).RecordDecision, 201), api.DecisionIn{}, nil, 201},
		{"POST /v1/intents", "Declare cross-cutting work", jsonOp(v, (*api.Ops).DeclareIntent, 201), api.IntentIn{}, nil, 201},
		{"POST /v1/intents/{id}/complete", "Complete an intent of your session", v.completeIntent, nil, nil, 200},
		{"GET /v1/events", "The event log", v.events, nil, []string{"after: events after this sequence number", "limit: most events"}, 200},
		{streamRoute, "What changes, as server-sent events (text/event-stream): hello on connecting, then windows (windows opened, changed or gone), archive (the event log's new events) and index (chunks and embeddings counted anew); a page re-reads what changed through this API",
			v.hub.stream, nil, nil, 200},
		{"GET /v1/agents", "Registered agents", v.agents, nil, []string{"session: only this session's"}, 200},
		{"POST /v1/agents", "Register an agent and issue its key (shown once)", v.registerAgent, archive.AgentSpec{}, nil, 201},
		{"POST /v1/agents/{id}/key", "Issue an agent a new key, replacing its old one", v.agentKey, nil, nil, 201},
		{"GET /v1/windows", "Context windows, of one session or all", v.listWindows, nil, []string{"session: only this session's"}, 200},
		{"PUT /v1/windows/{session}/{agent}", "Open an agent's context window (a model or a limit), or change its settings; a model switch keeps its messages",
			v.openWindow, api.WindowOpenIn{}, nil, 200},
		{"GET /v1/windows/{session}/{agent}", "Where a window stands: its budget, use, thresholds and references", v.window, nil, nil, 200},
		{appendRoute, "Append messages to a window as one turn (engram, Anthropic or OpenAI shapes); past its threshold it evicts, leaving reference markers",
			v.appendWindow, api.WindowAppendIn{}, nil, 201},
		{"POST /v1/windows/{session}/{agent}/readmit", "Bring the messages a reference marker of the window stands for back into it, whole, in their places (409 when they cannot fit)",
			v.readmitWindow, api.WindowReadmitIn{}, nil, 200},
		{"POST /v1/windows/{session}/{agent}/handoff", "Hand an agent's window off to a new instance of it (pipeline roles are due at 75 %): a structured state, stored as a handoff_state entry chained by index, opens the next agent's window; the prior window stays (409 when the next agent's window exists)",
			v.handoffWindow, api.WindowHandoffIn{}, nil, 201},
		{"POST /v1/windows/{session}/{agent}/assemble", "A turn's context assembled to the window's budget: the messages to send, layer by layer (history, arc, retrieval, the message), and the report",
			v.assembleWindow, api.WindowAssembleIn{}, nil, 200},
		{"GET /v1/windows/{session}/{agent}/context", "A window's context, in order: its messages and a marker for each evicted run", v.windowContext, nil,
			[]string{"format: engram (default), anthropic or openai"}, 200},
		{"GET /v1/windows/{session}/{agent}/status", "Where a window stands, with its latest assembled turn: allocation per layer, strategy, markers, evictions, savings (assembled is null before the first)",
			v.windowTurnStatus, nil, nil, 200},
		{"GET /v1/windows/{session}/{agent}/snapshots", "A window's assembled turns, kept by the hash of their messages, newest first", v.windowSnapshots, nil,
			[]string{"limit: most snapshots, 1-1000 (default 20)"}, 200},
		{"GET /v1/windows/{session}/{agent}/snapshots/{snapshot}", "An assembled turn: its messages, exactly as sent, and its report; {snapshot} is a hash, a prefix of 8 hex digits or more, a number or latest",
			v.windowSnapshot, nil, []string{"format: engram (default), anthropic or openai"}, 200},
		{"GET /v1/windows/{session}/{agent}/snapshots/{snapshot}/diff/{other}", "Two assembled turns compared: a unified line diff of their contexts as text, and the changes of tokens, budget and each layer's allocation",
			v.windowSnapshotDiff, nil, nil, 200},
		{"GET /v1/windows/{session}/{agent}/timeline", "A window's history from its ledger: its newest turns with what the window held after each and the references each made, its events (evict, readmit, handoff_in, handoff_out, assembled) oldest first, and its fill level per turn",
			v.windowTimeline, nil, []string{"limit: most turns, newest kept, 1-5000 (default 500)"}, 200},
		{"GET /v1/sessions", "Every session, most recently seen first, with its agents and windows counted and its resume point", v.sessions, nil,
			[]string{"limit: most sessions, 1-1000 (default 100)"}, 200},
		{"GET /v1/index", "The repository index: files by state, chunks, embeddings' coverage, and the watcher's live state (watching is false when this server does not index)", v.indexStatus, nil, nil, 200},
		{"GET /v1/status", "The server at a glance: its store, sessions, windows and what their latest assembled turns saved (in all and per window), the archivalist's records, and this server's counters since it started",
			v.status, nil, nil, 200},
		{"GET /v1/refs/{id}", "The messages a reference marker stands for, byte for byte (POST /v1/retrieve takes a marker whole)", v.expandRef, nil,
			[]string{"format: engram (default), anthropic or openai"}, 200},
	}
	for _, kind := range []store.RecordKind{store.KindPattern, store.KindFailure, store.KindInsight, store.KindDecision, store.KindIntent} {
		rs = append(rs, route{"GET /v1/" + string(kind) + "s", "Active " + string(kind) + "s, newest first (ETag: the global version)",
			v.list(kind), nil, []string{"category: this category and below", "since: a delta after this global version",
				"all: true for superseded ones too", "limit: most records"}, 200})
	}
	return rs
}

func (v *v1) routes(mux *http.ServeMux, wrap func(http.Handler) http.Handler) {
	for _, r := range v.table() {
		mux.Handle(r.pattern, wrap(r.handler))
	}
	mux.Handle("GET /v1/openapi.json", wrap(http.HandlerFunc(v.openapi)))
}

// readPOSTs are the routes that POST a query rather than a write.
var readPOSTs = map[string]bool{"POST /v1/prefetch": true, "POST /v1/retrieve": true, "POST /v1/recall": true}

// isWrite reports whether r writes: to the content store, a session's
// state or the shared history.
func isWrite(r *http.Request) bool {
	return r.Method != http.MethodGet && r.Method != http.MethodHead && !readPOSTs[r.Pattern]
}

// ops returns the operations for the caller of r. The operator (the
// server's token) acts as the session and agent the request names,
// registering the agent on first use; an agent (its key) acts as itself
// only: it may read any session, and write its own session alone.
func (v *v1) ops(r *http.Request) (*api.Ops, error) {
	inURL, inHeader := r.PathValue("session"), r.Header.Get("X-Engram-Session")
	session := firstOf(inURL, inHeader)
	agent := r.Header.Get("X-Engram-Agent")
	if p, _ := principalOf(r.Context()); p.agent != nil {
		me := p.agent.Agent()
		if agent != "" && agent != me.ID {
			return nil, v.refuse(r, me, session, "to act as agent "+agent)
		}
		for _, s := range []string{inURL, inHeader} {
			if s != "" && s != me.SessionID && isWrite(r) {
				return nil, v.refuse(r, me, s, r.Method+" "+r.URL.Path)
			}
		}
		// A window's content is stored as its agent's: a key writes its
		// own agent's window only.
		if wa := r.PathValue("agent"); wa != "" && wa != me.ID && isWrite(r) {
			return nil, v.refuse(r, me, session, "to write agent "+wa+"'s window")
		}
		if session == "" || isWrite(r) {
			session = me.SessionID
		}
		return &api.Ops{Eng: v.eng, Agent: me.ID, Metrics: v.metrics, Windows: v.windows, Assembler: v.assembler, Index: v.activity, Version: v.version,
			Session: func() string { return session },
			Handle:  func(context.Context) (*archive.Handle, error) { return p.agent, nil }}, nil
	}
	// A write goes to one session: a header that names another than the
	// URL's is refused, not overruled by it.
	if inURL != "" && inHeader != "" && inURL != inHeader && isWrite(r) {
		v.metrics.Refused("forbidden")
		return nil, &httpError{http.StatusForbidden, "other_session", fmt.Sprintf(
			"X-Engram-Session names session %s and the URL session %s: a write goes to one session; name it in the URL alone, or the same in both", inHeader, inURL)}
	}
	if agent == "" && session != "" {
		agent = "http@" + session
	}
	o := &api.Ops{Eng: v.eng, Agent: agent, Metrics: v.metrics, Windows: v.windows, Assembler: v.assembler, Index: v.activity, Version: v.version,
		Operator: true, Session: func() string { return session }}
	o.Handle = func(ctx context.Context) (*archive.Handle, error) {
		if session == "" {
			return nil, &httpError{http.StatusBadRequest, "validation", "name the session: X-Engram-Session"}
		}
		arc, err := v.eng.Archive(ctx)
		if err != nil {
			return nil, err
		}
		// Registered by its first write: a request refused registers no
		// agent.
		return arc.ConnectOnWrite(ctx, archive.AgentSpec{ID: agent, SessionID: session, Model: r.Header.Get("X-Engram-Model"), Role: "http"})
	}
	return o, nil
}

// refuse audits an agent's request for another session or identity and
// returns the error that answers it (403).
func (v *v1) refuse(r *http.Request, agent store.ArchiveAgent, session, what string) error {
	arc, err := v.eng.Archive(r.Context())
	if err != nil {
		return err
	}
	return arc.Refuse(r.Context(), agent, session, what)
}

// registerAgent registers an agent and issues its key. The operator may
// register one in any session; an agent registers sub-agents in its own,
// which share its credential.
func (v *v1) registerAgent(w http.ResponseWriter, r *http.Request) {
	var spec archive.AgentSpec
	if err := v.decode(w, r, &spec); err != nil {
		v.fail(w, r, err)
		return
	}
	arc, err := v.eng.Archive(r.Context())
	if err != nil {
		v.fail(w, r, err)
		return
	}
	p, _ := principalOf(r.Context())
	h, key, err := arc.RegisterWithKey(r.Context(), spec, p.agent)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"agent": h.Agent(), "key": key})
}

// agentKey issues a new key to an agent, replacing its old one: the
// operator's act, or an agent's own (to rotate a leaked key).
func (v *v1) agentKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, _ := principalOf(r.Context())
	if p.agent != nil && p.agent.Agent().ID != id {
		v.fail(w, r, v.refuse(r, p.agent.Agent(), "", "to issue a key to agent "+id))
		return
	}
	arc, err := v.eng.Archive(r.Context())
	if err != nil {
		v.fail(w, r, err)
		return
	}
	key, err := arc.IssueKey(r.Context(), id)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"agent": id, "key": key})
}

// jsonOp serves an operation whose input is the JSON body.
func jsonOp[In, Out any](v *v1, op func(*api.Ops, context.Context, In) (Out, string, error), status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var in In
		if err := v.decode(w, r, &in); err != nil {
			v.fail(w, r, err)
			return
		}
		o, err := v.ops(r)
		if err != nil {
			v.fail(w, r, err)
			return
		}
		out, _, err := op(o, r.Context(), in)
		if err != nil {
			v.fail(w, r, err)
			return
		}
		writeJSON(w, status, out)
	}
}

// decode reads a request's JSON body into dst, strictly: the body is
// UTF-8 (encoding/json would store each byte that is not as U+FFFD, and
// the README promises content byte for byte), one object, and names its
// fields exactly (encoding/json matches them in any case: "Budget" was
// taken for "budget" beside DisallowUnknownFields), each once in its
// object (encoding/json keeps the last value and drops the others).
func (v *v1) decode(w http.ResponseWriter, r *http.Request, dst any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, v.maxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &httpError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes", mbe.Limit)}
	case err != nil:
		return &httpError{http.StatusBadRequest, "validation", "the body could not be read: " + err.Error()}
	}
	invalid := func(msg string) error { return &httpError{http.StatusBadRequest, "validation", msg} }
	switch trimmed := bytes.TrimSpace(data); {
	case len(trimmed) == 0:
		return invalid("the body is empty: send a JSON object")
	case !utf8.Valid(data):
		return invalid(fmt.Sprintf("the body is not UTF-8 at byte offset %d: JSON is sent as UTF-8, other text escaped as \\uXXXX", api.InvalidUTF8At(data)))
	case trimmed[0] != '{':
		return invalid("the body is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return invalid("the body is not valid: " + api.JSONError(err))
	}
	if dec.More() {
		return invalid("the body holds more than one JSON value")
	}
	if name, at := api.DuplicateName(data); at >= 0 {
		return invalid(fmt.Sprintf("the body is not valid: the member %q is given twice in one object (again at byte offset %d): one of its values would be lost", name, at))
	}
	// Names in another case, at any depth: encoding/json took "Budget"
	// for "budget" beside DisallowUnknownFields.
	if err := api.ExactNames(data, reflect.TypeOf(dst)); err != nil {
		return invalid("the body is not valid: " + err.Error())
	}
	return nil
}

func (v *v1) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	in := api.SearchIn{Query: q.Get("q"), Session: q.Get("session"), Types: q["type"], Paths: q["path"]}
	if err := errors.Join(intParams(q, map[string]*int{"limit": &in.Limit, "spans": &in.Spans}),
		boolParams(q, map[string]*bool{"history": &in.History, "files": &in.Files})); err != nil {
		v.fail(w, r, err)
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.Search(r.Context(), in); return out, err })
}

func (v *v1) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	in := api.HistoryIn{Query: q.Get("q"), ContentType: q.Get("type"), Session: q.Get("session")}
	if err := intParams(q, map[string]*int{"limit": &in.MaxResults}); err != nil {
		v.fail(w, r, err)
		return
	}
	if _, err := api.MaxResultsRange.CheckAs("limit", in.MaxResults); err != nil {
		v.fail(w, r, err)
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.SearchHistory(r.Context(), in); return out, err })
}

func (v *v1) getFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	in := api.GetFileIn{Path: r.PathValue("path")}
	if err := intParams(q, map[string]*int{"start": &in.StartLine, "end": &in.EndLine, "version": &in.Version}); err != nil {
		v.fail(w, r, err)
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.GetFile(r.Context(), in); return out, err })
}

func (v *v1) turns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	in := api.TurnsIn{Session: r.PathValue("session")}
	if err := intParams(q, map[string]*int{"from": &in.From, "to": &in.To, "max_tokens": &in.MaxTokens}); err != nil {
		v.fail(w, r, err)
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.TurnRange(r.Context(), in); return out, err })
}

func (v *v1) putFile(w http.ResponseWriter, r *http.Request) {
	var in api.FileIn
	if err := v.decode(w, r, &in); err != nil {
		v.fail(w, r, err)
		return
	}
	if in.Path != "" && in.Path != r.PathValue("path") {
		v.fail(w, r, &httpError{http.StatusBadRequest, "validation", fmt.Sprintf("the body names file %q, the path %q", in.Path, r.PathValue("path"))})
		return
	}
	in.Path = r.PathValue("path")
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.UpdateFile(r.Context(), in); return out, err })
}

func (v *v1) listWindows(w http.ResponseWriter, r *http.Request) {
	in := api.WindowListIn{Session: r.URL.Query().Get("session")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowList(r.Context(), in); return out, err })
}

// pathWindow names the window of the path in a body's session and agent:
// a body may leave them out, or repeat them, not name another window.
func pathWindow(r *http.Request, session, agent *string) error {
	ps, pa := r.PathValue("session"), r.PathValue("agent")
	if (*session != "" && *session != ps) || (*agent != "" && *agent != pa) {
		return &httpError{http.StatusBadRequest, "validation", fmt.Sprintf("the body names window %s/%s, the path %s/%s", *session, *agent, ps, pa)}
	}
	*session, *agent = ps, pa
	return nil
}

// windowBody decodes a window route's body into in and checks that the
// window it names (session, agent) is the path's, answering the error and
// reporting false if not.
func (v *v1) windowBody(w http.ResponseWriter, r *http.Request, in any, session, agent *string) bool {
	if err := v.decode(w, r, in); err != nil {
		v.fail(w, r, err)
		return false
	}
	if err := pathWindow(r, session, agent); err != nil {
		v.fail(w, r, err)
		return false
	}
	return true
}

func (v *v1) openWindow(w http.ResponseWriter, r *http.Request) {
	var in api.WindowOpenIn
	if !v.windowBody(w, r, &in, &in.Session, &in.Agent) {
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowOpen(r.Context(), in); return out, err })
}

func (v *v1) window(w http.ResponseWriter, r *http.Request) {
	in := api.WindowIn{Session: r.PathValue("session"), Agent: r.PathValue("agent")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowStatus(r.Context(), in); return out, err })
}

func (v *v1) appendWindow(w http.ResponseWriter, r *http.Request) {
	var in api.WindowAppendIn
	if !v.windowBody(w, r, &in, &in.Session, &in.Agent) {
		return
	}
	// The append's key: the Idempotency-Key header (the IETF httpapi
	// draft's), or the body's key; both, they must agree.
	if h := r.Header.Values(idempotencyKey); len(h) > 0 {
		// The draft sends the key as a quoted string; a bare one is
		// taken as it is.
		k := strings.TrimSpace(h[0])
		if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
			k = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(k[1 : len(k)-1])
		}
		switch {
		case len(h) > 1 || in.Key != "" && in.Key != k:
			v.fail(w, r, &httpError{http.StatusBadRequest, "validation", "Idempotency-Key: one key, and the body's key, if any, the same"})
			return
		case k == "":
			v.fail(w, r, &httpError{http.StatusBadRequest, "validation", "Idempotency-Key is empty: send the append's key, or no header"})
			return
		}
		in.Key = k
	}
	o, err := v.ops(r)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	out, _, err := o.WindowAppend(r.Context(), in)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if out.Replayed {
		// Nothing was created: the first append was.
		w.Header().Set("Idempotent-Replayed", "true")
		status = http.StatusOK
	}
	writeJSON(w, status, out)
}

const (
	appendRoute = "POST /v1/windows/{session}/{agent}/messages"
	// idempotencyKey is the header that makes an append idempotent.
	idempotencyKey = "Idempotency-Key"
)

func (v *v1) readmitWindow(w http.ResponseWriter, r *http.Request) {
	var in api.WindowReadmitIn
	if !v.windowBody(w, r, &in, &in.Session, &in.Agent) {
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowReadmit(r.Context(), in); return out, err })
}

func (v *v1) handoffWindow(w http.ResponseWriter, r *http.Request) {
	var in api.WindowHandoffIn
	if !v.windowBody(w, r, &in, &in.Session, &in.Agent) {
		return
	}
	// The handoff writes the next agent's window: an agent's key hands
	// off to its own next instance only, never into another agent's
	// context, even one registered in the session under the next
	// instance's name (unless it registered it, as its sub-agent).
	if p, _ := principalOf(r.Context()); p.agent != nil {
		me := p.agent.Agent()
		next := window.NextAgent(me.ID)
		to := cmp.Or(in.To, next)
		refused := to != next
		if !refused {
			other, err := v.eng.Store().ArchiveAgent(r.Context(), to)
			switch {
			case err == nil:
				refused = other.SessionID == me.SessionID && other.ParentID != me.ID
			case !errors.Is(err, store.ErrNotFound):
				v.fail(w, r, err)
				return
			}
		}
		if refused {
			v.fail(w, r, v.refuse(r, me, in.Session, "to hand off into agent "+to+"'s window"))
			return
		}
	}
	v.runStatus(w, r, http.StatusCreated, func(o *api.Ops) (any, error) { out, _, err := o.WindowHandoff(r.Context(), in); return out, err })
}

func (v *v1) assembleWindow(w http.ResponseWriter, r *http.Request) {
	var in api.WindowAssembleIn
	if !v.windowBody(w, r, &in, &in.Session, &in.Agent) {
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowAssemble(r.Context(), in); return out, err })
}

func (v *v1) windowContext(w http.ResponseWriter, r *http.Request) {
	in := api.WindowContextIn{Session: r.PathValue("session"), Agent: r.PathValue("agent"), Format: r.URL.Query().Get("format")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowContext(r.Context(), in); return out, err })
}

func (v *v1) windowTurnStatus(w http.ResponseWriter, r *http.Request) {
	in := api.WindowIn{Session: r.PathValue("session"), Agent: r.PathValue("agent")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowTurnStatus(r.Context(), in); return out, err })
}

func (v *v1) windowSnapshots(w http.ResponseWriter, r *http.Request) {
	in := api.SnapshotsIn{Session: r.PathValue("session"), Agent: r.PathValue("agent")}
	if err := intParams(r.URL.Query(), map[string]*int{"limit": &in.Limit}); err != nil {
		v.fail(w, r, err)
		return
	}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowSnapshots(r.Context(), in); return out, err })
}

func (v *v1) windowSnapshot(w http.ResponseWriter, r *http.Request) {
	in := api.SnapshotIn{Session: r.PathValue("session"), Agent: r.PathValue("agent"), Snapshot: r.PathValue("snapshot"),
		Format: r.URL.Query().Get("format")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowSnapshot(r.Context(), in); return out, err })
}

func (v *v1) windowSnapshotDiff(w http.ResponseWriter, r *http.Request) {
	in := api.SnapshotDiffIn{Session: r.PathValue("session"), Agent: r.PathValue("agent"), From: r.PathValue("snapshot"), To: r.PathValue("other")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowSnapshotDiff(r.Context(), in); return out, err })
}

func (v *v1) expandRef(w http.ResponseWriter, r *http.Request) {
	in := api.ExpandIn{RefID: r.PathValue("id"), Format: r.URL.Query().Get("format")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.WindowExpand(r.Context(), in); return out, err })
}

func (v *v1) completeIntent(w http.ResponseWriter, r *http.Request) {
	in := api.CompleteIn{IntentID: r.PathValue("id")}
	v.run(w, r, func(o *api.Ops) (any, error) { out, _, err := o.CompleteIntent(r.Context(), in); return out, err })
}

// briefing serves a session's briefing with its versions as the ETag:
// If-None-Match with them gets 304 Not Modified.
func (v *v1) briefing(w http.ResponseWriter, r *http.Request) {
	tier, err := archive.ParseTier(r.URL.Query().Get("tier"))
	if err != nil {
		v.fail(w, r, err)
		return
	}
	arc, err := v.eng.Archive(r.Context())
	if err != nil {
		v.fail(w, r, err)
		return
	}
	var have *archive.Versions
	if r.Header.Get("If-None-Match") != "" {
		now, err := arc.Versions(r.Context(), r.PathValue("session"))
		if err != nil {
			v.fail(w, r, err)
			return
		}
		if noneMatch(r, etag(now.GV, now.SV)) {
			have = &now
		}
	}
	b, err := arc.Briefing(r.Context(), r.PathValue("session"), tier, have)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	v.metrics.BriefingServed(b)
	w.Header().Set("ETag", etag(b.GV, b.SV))
	if b.Status == archive.StatusNotModified {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// session serves a session's state, with the session version as ETag.
func (v *v1) session(w http.ResponseWriter, r *http.Request) {
	arc, err := v.eng.Archive(r.Context())
	if err != nil {
		v.fail(w, r, err)
		return
	}
	var ifSV uint64
	if r.Header.Get("If-None-Match") != "" {
		now, err := arc.Versions(r.Context(), r.PathValue("session"))
		if err != nil {
			v.fail(w, r, err)
			return
		}
		if noneMatch(r, etag(0, now.SV)) {
			ifSV = now.SV
		}
	}
	sr, err := arc.ReadSession(r.Context(), r.PathValue("session"), ifSV)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(0, sr.SV))
	if sr.Status == archive.StatusNotModified {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, sr)
}

// list serves the global records of a kind; the global version is the
// ETag, and ?since=N a delta.
func (v *v1) list(kind store.RecordKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		req := archive.GlobalRead{Kind: kind, Category: q.Get("category")}
		var since int
		if err := errors.Join(intParams(q, map[string]*int{"since": &since, "limit": &req.Limit}),
			boolParams(q, map[string]*bool{"all": &req.All})); err != nil {
			v.fail(w, r, err)
			return
		}
		if since < 0 {
			v.fail(w, r, &httpError{http.StatusBadRequest, "validation", fmt.Sprintf("since is %d; it must be 0 or more", since)})
			return
		}
		req.Since = uint64(since)
		arc, err := v.eng.Archive(r.Context())
		if err != nil {
			v.fail(w, r, err)
			return
		}
		if r.Header.Get("If-None-Match") != "" {
			now, err := arc.Versions(r.Context(), "")
			if err != nil {
				v.fail(w, r, err)
				return
			}
			if noneMatch(r, etag(now.GV, 0)) {
				req.IfGV = now.GV
			}
		}
		res, err := arc.ReadGlobal(r.Context(), req)
		if err != nil {
			v.fail(w, r, err)
			return
		}
		w.Header().Set("ETag", etag(res.GV, 0))
		if res.Status == archive.StatusNotModified {
			v.metrics.Saved("not_modified", res.SavedTokens)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		v.metrics.Saved("delta", res.SavedTokens)
		writeJSON(w, http.StatusOK, res)
	}
}

func (v *v1) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after, limit int
	if err := intParams(q, map[string]*int{"after": &after, "limit": &limit}); err != nil {
		v.fail(w, r, err)
		return
	}
	switch {
	case q.Get("after") == "":
		after = -1 // the last events
	case after < 0:
		v.fail(w, r, &httpError{http.StatusBadRequest, "validation", fmt.Sprintf("after=%d: give an event's seq, 0 or more", after)})
		return
	}
	arc, err := v.eng.Archive(r.Context())
	if err != nil {
		v.fail(w, r, err)
		return
	}
	evs, err := arc.Events(r.Context(), int64(after), limit)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if evs == nil {
		evs = []store.ArchiveEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": evs})
}

func (v *v1) agents(w http.ResponseWriter, r *http.Request) {
	arc, err := v.eng.Archive(r.Context())
	if err != nil {
		v.fail(w, r, err)
		return
	}
	ags, err := arc.Agents(r.Context(), r.URL.Query().Get("session"))
	if err != nil {
		v.fail(w, r, err)
		return
	}
	if ags == nil {
		ags = []store.ArchiveAgent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": ags})
}

// run calls an operation with the caller's identity and writes its output.
func (v *v1) run(w http.ResponseWriter, r *http.Request, fn func(o *api.Ops) (any, error)) {
	v.runStatus(w, r, http.StatusOK, fn)
}

// runStatus is run, answering status on success.
func (v *v1) runStatus(w http.ResponseWriter, r *http.Request, status int, fn func(o *api.Ops) (any, error)) {
	o, err := v.ops(r)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	out, err := fn(o)
	if err != nil {
		v.fail(w, r, err)
		return
	}
	writeJSON(w, status, out)
}

// intParams reads the named query parameters into their destinations:
// whole numbers, whose ranges the operations check (as they check the
// same fields of a JSON body or an MCP call).
func intParams(q url.Values, dst map[string]*int) error {
	var errs []error
	for name, p := range dst {
		s := q.Get(name)
		if s == "" {
			*p = 0
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			errs = append(errs, &httpError{http.StatusBadRequest, "validation", fmt.Sprintf("%s=%q is not a whole number", name, s)})
		}
		*p = n
	}
	return errors.Join(errs...)
}

// boolParams reads true/false query parameters (1, t, true, TRUE, 0, f,
// false, ...; absent is false); anything else is refused, never read as
// false.
func boolParams(q url.Values, dst map[string]*bool) error {
	var errs []error
	for name, p := range dst {
		s := q.Get(name)
		if s == "" {
			*p = false
			continue
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			errs = append(errs, &httpError{http.StatusBadRequest, "validation", fmt.Sprintf("%s=%q: want true or false", name, s)})
		}
		*p = b
	}
	return errors.Join(errs...)
}

func etag(gv, sv uint64) string { return fmt.Sprintf(`"%d-%d"`, gv, sv) }

// noneMatch reports whether r's If-None-Match names tag, the answer's
// current ETag: one of its list (weak or strong, as RFC 9110's weak
// comparison), or "*". The versions of a tag the answer does not have
// (the global version in a session's "0-SV") are never taken for its own.
func noneMatch(r *http.Request, tag string) bool {
	for _, h := range r.Header.Values("If-None-Match") {
		for t := range strings.SplitSeq(h, ",") {
			t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
			if t == "*" || t == tag {
				return true
			}
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "<=" stays readable; the API serves no HTML
	_ = enc.Encode(v)
}

// httpError is an error with its HTTP status and code.
type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// fail maps an error to the API's error shape and status: 400 for bad
// input, 403 for another session, 404 for what does not exist, 409 for a
// conflict (code "busy" with Retry-After when other servers kept changing
// what the request changes, which may go again), 413 for an oversized body, 429 with Retry-After for a rate
// limit, 502 for a failing provider, 503 with Retry-After for a store
// that cannot be reached or a request past its deadline, 500 (without
// details) for the rest.
func (v *v1) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		he  *httpError
		ve  *store.ValidationError
		pe  *archive.ParseError
		ie  *archive.IsolationError
		aie *api.IsolationError
		bad *api.InputError
		ce  *archive.ConflictError
		sce *store.ConflictError
		rl  *archive.RateLimitError
		fe  *engine.FieldError
		de  *engine.DeletedError
	)
	switch {
	case errors.As(err, &he):
		writeError(w, he.status, he.code, he.msg)
	case errors.As(err, &rl):
		if rl.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((rl.RetryAfter+time.Second-1)/time.Second)))
		}
		writeError(w, http.StatusTooManyRequests, "rate_limited", err.Error())
	case errors.As(err, &ie), errors.As(err, &aie):
		v.metrics.Refused("forbidden")
		writeError(w, http.StatusForbidden, "other_session", err.Error())
	case errors.As(err, &sce) && sce.Busy:
		// Nothing wrong with the request: other servers kept changing
		// what it changes. The same request may go again.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusConflict, "busy", err.Error())
	case errors.As(err, &ce), errors.As(err, &sce):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case errors.As(err, &ve), errors.As(err, &pe), errors.As(err, &fe), errors.As(err, &bad):
		writeError(w, http.StatusBadRequest, "validation", err.Error())
	case errors.Is(err, store.ErrNotFound), errors.Is(err, archive.ErrUnknownAgent), errors.As(err, &de):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, llm.ErrBadAnswer):
		writeError(w, http.StatusBadGateway, "provider", err.Error())
	case errors.Is(err, store.ErrUnavailable):
		v.log.Error("the store is unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		writeUnavailable(w)
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil:
		// The request's own deadline (Options.RequestTimeout): the store,
		// or a provider, did not answer in time.
		v.log.Error("request timed out", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusServiceUnavailable, "timeout", "no answer in time (the store or a provider did not answer); retry later")
	case errors.Is(err, context.Canceled):
		// The client went away; nothing to answer.
	default:
		v.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error; the server's log has the details")
	}
}
