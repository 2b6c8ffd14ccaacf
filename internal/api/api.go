// Package api holds the operations engram's front ends offer (the MCP
// tools, the HTTP JSON API), transport-neutral: each takes its input
// struct and returns its output, a compact text rendering for a model, and
// an error. Front ends decode, call, encode; the field tags here are both
// the JSON names and the schemas' descriptions. Numeric inputs are checked
// here, against their Range (limits.go), so that every front end refuses
// the same values with the same message. Context windows' operations are
// in window.go, a turn's assembly in assemble.go, and the turns it keeps,
// their diffs and a window's status with its latest turn in snapshot.go.
package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// Ops runs the operations for one caller: an identity (a session, and an
// agent whose archivalist handle writes to it) over an engine.
type Ops struct {
	Eng *engine.Engine
	// Session returns the session the caller writes to.
	Session func() string
	// Handle returns the caller's archivalist handle.
	Handle func(ctx context.Context) (*archive.Handle, error)
	// Agent is the agent recorded with content the caller records.
	Agent string
	// Metrics, if set, records searches and briefings, references expanded
	// and pre-fetches served.
	Metrics *metrics.Metrics
	// Windows keeps the context windows of Eng's store, configured; nil
	// means a Manager with the built-in models and defaults.
	Windows *window.Manager
	// Assembler assembles turns' contexts; nil makes one per call, whose
	// summarizer's background work the call waits for.
	Assembler *assemble.Assembler
	// Index is the live state of this process's watcher, which
	// IndexStatus reports; nil when the process does not index.
	Index *index.Activity
	// Version is engram's version, which Status reports.
	Version string
	// Operator says the caller is the server's operator (its token, a
	// trusted loopback caller, the dashboard's sign-in), not an agent
	// with its own key: Status names the store's location (a path on the
	// server's machine) to the operator alone.
	Operator bool
}

// IsolationError refuses a write that names another session than the
// caller's.
type IsolationError struct{ Session, Named string }

func (e *IsolationError) Error() string {
	return fmt.Sprintf("this caller writes to session %s, not %s", e.Session, e.Named)
}

// InputError is an operation's refusal of its input: the caller's
// mistake, not the server's (HTTP 400).
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func bad(format string, args ...any) error { return &InputError{Msg: fmt.Sprintf(format, args...)} }

// checkSession refuses a write naming another session.
func (o *Ops) checkSession(named string) error {
	if named == "" || named == o.Session() {
		return nil
	}
	return &IsolationError{Session: o.Session(), Named: named}
}

// Inputs and outputs. Field descriptions become the JSON schemas'
// descriptions: they are what a model reads, so they are short.

type SearchIn struct {
	Query   string   `json:"query" jsonschema:"what to find: words, identifiers, paths"`
	Limit   int      `json:"limit,omitempty" jsonschema:"most results, 1-50 (default 10)"`
	Session string   `json:"session,omitempty" jsonschema:"only content seen in this session"`
	Types   []string `json:"types,omitempty" jsonschema:"only these content types, such as code_file, tool_result, user_prompt"`
	Paths   []string `json:"paths,omitempty" jsonschema:"only content about these files, directories or globs"`
	History bool     `json:"history,omitempty" jsonschema:"include old versions of files"`
	// Files ranks distinct places (files, or other entries) instead of
	// chunks, each with its best spans.
	Files bool `json:"files,omitempty"`
	// Spans is how many of its best spans a place carries (1-5, default 3).
	Spans int `json:"spans,omitempty"`
}

// PlacesIn is a search for distinct places: what the MCP search tool takes.
type PlacesIn struct {
	Query   string   `json:"query" jsonschema:"what to find: words, identifiers, paths"`
	Limit   int      `json:"limit,omitempty" jsonschema:"most places (files or records), 1-50 (default 10)"`
	Spans   int      `json:"spans,omitempty" jsonschema:"best spans per place, 1-5 (default 3)"`
	Session string   `json:"session,omitempty" jsonschema:"only content seen in this session"`
	Types   []string `json:"types,omitempty" jsonschema:"only these content types, such as code_file, tool_result, user_prompt"`
	Paths   []string `json:"paths,omitempty" jsonschema:"only content about these files, directories or globs"`
	History bool     `json:"history,omitempty" jsonschema:"include old versions of files"`
}

// PlaceOut is one distinct place of a search for places: a file (Where is
// its path) or another entry (Where says where it was seen).
type PlaceOut struct {
	Where string  `json:"where"`
	Entry string  `json:"entry"`
	Type  string  `json:"type"`
	Score float64 `json:"score"`
	// Spans are its best hits, best first: the first with up to 400
	// bytes of its text, the others with 120, pointers to read on.
	Spans []PlaceSpan `json:"spans"`
}

// PlaceSpan is one of a place's best hits.
type PlaceSpan struct {
	Entry     string   `json:"entry"`
	Score     float64  `json:"score"`
	Rerank    *float64 `json:"rerank,omitempty"`
	StartLine int      `json:"start_line"`
	EndLine   int      `json:"end_line"`
	Text      string   `json:"text"`
}

type HitOut struct {
	Entry   string  `json:"entry"`
	Where   string  `json:"where"`
	Type    string  `json:"type"`
	Score   float64 `json:"score"`
	Lexical float64 `json:"lexical,omitempty"`
	Vector  float64 `json:"vector,omitempty"`
	// Rerank is the re-ranker's relevance, if one ordered the hit.
	Rerank    *float64 `json:"rerank,omitempty"`
	StartLine int      `json:"start_line"`
	EndLine   int      `json:"end_line"`
	Text      string   `json:"text"`
}

type SearchOut struct {
	Hits []HitOut `json:"hits"`
	// Places are set instead of Hits by a search for places.
	Places   []PlaceOut `json:"places,omitempty"`
	Degraded bool       `json:"degraded,omitempty"`
	Faults   []string   `json:"faults,omitempty"`
	// Span is the time the query pointed back to ("a week ago"), whose
	// hits were searched for and raised.
	Span *retrieve.Span `json:"span,omitempty"`
	// Relevance is, for a history search, how much of the query its best
	// hit holds against the relevance floor; Message says when it found
	// nothing.
	Relevance *engine.Relevance `json:"relevance,omitempty"`
	Message   string            `json:"message,omitempty"`
}

type GetFileIn struct {
	Path      string `json:"path" jsonschema:"the file, relative to the project root"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"first line (1-based); a large file needs a range"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"last line, inclusive"`
	Version   int    `json:"version,omitempty" jsonschema:"an older version; default the current one"`
}

type GetFileOut struct {
	Path    string `json:"path"`
	Entry   string `json:"entry"`
	Content string `json:"content"`
}

type PrefetchIn struct {
	Query     string `json:"query" jsonschema:"the prompt or task to find context for"`
	Budget    int    `json:"budget,omitempty" jsonschema:"tokens the block may take, 1-32000 (default 2000)"`
	Remaining int    `json:"remaining,omitempty" jsonschema:"tokens left in your window (budget is 10% of it)"`
}

type ItemOut struct {
	ID        string `json:"id"`
	Tokens    int    `json:"tokens"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty"`
}

type ItemsOut struct {
	Items  []ItemOut `json:"items"`
	Tokens int       `json:"tokens"`
	More   int       `json:"more,omitempty"`
}

type HistoryIn struct {
	Query       string `json:"query" jsonschema:"what to find in past messages and tool results"`
	ContentType string `json:"content_type,omitempty" jsonschema:"only this type, such as tool_result or user_prompt"`
	Session     string `json:"session,omitempty" jsonschema:"only this session (default all)"`
	MaxResults  int    `json:"max_results,omitempty" jsonschema:"most results, 1-50 (default 10)"`
}

type TurnsIn struct {
	Session   string `json:"session,omitempty" jsonschema:"the session (default yours)"`
	From      int    `json:"from" jsonschema:"first turn"`
	To        int    `json:"to" jsonschema:"last turn, inclusive"`
	MaxTokens int    `json:"max_tokens,omitempty" jsonschema:"most tokens returned, 100-8000 (default 4000)"`
}

type RecordIn struct {
	Type    string   `json:"type" jsonschema:"user_prompt, agent_response, tool_call, tool_result, note, ..."`
	Content string   `json:"content" jsonschema:"the content, kept byte for byte"`
	MsgID   string   `json:"msg_id,omitempty" jsonschema:"your id for it; recording it again is a no-op"`
	Parent  string   `json:"parent,omitempty" jsonschema:"the msg_id or entry id (or its first 12 digits) it answers (a tool call for a result)"`
	Files   []string `json:"files,omitempty" jsonschema:"files it is about"`
	Session string   `json:"session,omitempty" jsonschema:"must be your session if given"`
}

type RecordOut struct {
	ID       string   `json:"id"`
	Turn     int      `json:"turn"`
	New      bool     `json:"new"`
	Replayed bool     `json:"replayed,omitempty"`
	Redacted []string `json:"redacted,omitempty"`
}

type BriefingIn struct {
	Tier    string `json:"tier,omitempty" jsonschema:"micro (~20 tokens), standard (~500, default) or full (~2000)"`
	GV      uint64 `json:"gv,omitempty" jsonschema:"the gv of the briefing you hold: unchanged gets NOT_MODIFIED"`
	SV      uint64 `json:"sv,omitempty" jsonschema:"the sv of the briefing you hold"`
	Session string `json:"session,omitempty" jsonschema:"another session to read (default yours)"`
}

type RecallIn struct {
	Query  string `json:"query" jsonschema:"an @arch: query or a question about what was done, seen or learned"`
	Budget int    `json:"budget,omitempty" jsonschema:"most tokens per answer, 1-8000 (default 1000)"`
}

type RecallOut struct {
	Answers []archive.Answer `json:"answers"`
}

type PatternIn struct {
	Category    string   `json:"category" jsonschema:"L1.L2, such as error.handling; L1: api async auth build concurrency config data database deps docs error logging performance security structure style testing tooling ui workflow"`
	Pattern     string   `json:"pattern" jsonschema:"the pattern, one sentence"`
	Description string   `json:"description,omitempty"`
	Example     string   `json:"example,omitempty"`
	Scope       []string `json:"scope,omitempty" jsonschema:"paths or globs it applies to (default everywhere)"`
	Authority   string   `json:"authority,omitempty" jsonschema:"suggestion (default), established or mandated"`
	Supersedes  []string `json:"supersedes,omitempty" jsonschema:"ids of patterns it replaces (needed when it contradicts one)"`
	Reason      string   `json:"reason,omitempty" jsonschema:"why it supersedes them"`
}

type FailureIn struct {
	Approach   string   `json:"approach,omitempty" jsonschema:"what was tried (required unless failure_id)"`
	Reason     string   `json:"reason,omitempty" jsonschema:"why it failed (required unless failure_id)"`
	Context    string   `json:"context,omitempty" jsonschema:"what was being attempted"`
	Error      string   `json:"error,omitempty"`
	Files      []string `json:"files,omitempty"`
	Category   string   `json:"category,omitempty" jsonschema:"L1.L2, such as database.sql; L1: api async auth build concurrency config data database deps docs error logging performance security structure style testing tooling ui workflow"`
	Resolution string   `json:"resolution,omitempty" jsonschema:"what was tried instead"`
	Outcome    string   `json:"outcome,omitempty" jsonschema:"how the resolution went: success, partial or failure"`
	Notes      string   `json:"notes,omitempty"`
	FailureID  string   `json:"failure_id,omitempty" jsonschema:"add the resolution to this recorded failure instead"`
}

type InsightIn struct {
	Insight  string   `json:"insight"`
	Category string   `json:"category,omitempty" jsonschema:"L1.L2; L1: api async auth build concurrency config data database deps docs error logging performance security structure style testing tooling ui workflow"`
	Evidence string   `json:"evidence,omitempty"`
	Scope    []string `json:"scope,omitempty"`
}

type DecisionIn struct {
	Decision     string   `json:"decision"`
	Rationale    string   `json:"rationale,omitempty"`
	Alternatives []string `json:"alternatives,omitempty"`
	Category     string   `json:"category,omitempty" jsonschema:"L1.L2; L1: api async auth build concurrency config data database deps docs error logging performance security structure style testing tooling ui workflow"`
	Scope        []string `json:"scope,omitempty"`
	Supersedes   []string `json:"supersedes,omitempty" jsonschema:"ids of decisions it replaces"`
	Reason       string   `json:"reason,omitempty"`
}

type ResumeIn struct {
	Task        string   `json:"task,omitempty"`
	Objective   string   `json:"objective,omitempty"`
	Done        []string `json:"done,omitempty" jsonschema:"steps done (replaces the list)"`
	Current     string   `json:"current,omitempty"`
	Next        []string `json:"next,omitempty" jsonschema:"next steps (replaces the list)"`
	Blockers    []string `json:"blockers,omitempty" jsonschema:"blockers (replaces the list)"`
	FilesToRead []string `json:"files_to_read,omitempty"`
}

type FileIn struct {
	Path    string `json:"path"`
	Status  string `json:"status,omitempty" jsonschema:"read, modified (default), created or deleted"`
	Summary string `json:"summary,omitempty" jsonschema:"what changed, in a line"`
}

type IntentIn struct {
	Description string   `json:"description" jsonschema:"the cross-cutting work, such as a rename"`
	Paths       []string `json:"paths,omitempty" jsonschema:"paths it touches"`
	Categories  []string `json:"categories,omitempty" jsonschema:"categories it touches, L1 or L1.L2; L1: api async auth build concurrency config data database deps docs error logging performance security structure style testing tooling ui workflow"`
	Priority    string   `json:"priority,omitempty" jsonschema:"normal (default), high or critical"`
	TTLMinutes  int      `json:"ttl_minutes,omitempty" jsonschema:"minutes it stays if never completed, 1-10080 (default 30)"`
}

type CompleteIn struct {
	IntentID string `json:"intent_id"`
}

func parseTypes(names []string) ([]store.ContentType, error) {
	var out []store.ContentType
	for _, n := range names {
		t := store.ContentType(n)
		if !t.Valid() {
			var all []string
			for _, k := range store.ContentTypes() {
				all = append(all, string(k))
			}
			return nil, bad("unknown content type %q; known: %s", n, strings.Join(all, ", "))
		}
		out = append(out, t)
	}
	return out, nil
}

// runSearch searches; with floor, hits whose best holds too little of
// the query (engine.Relevance) are no answer: nothing found.
func (o *Ops) runSearch(ctx context.Context, q retrieve.Query, floor bool) (SearchOut, string, error) {
	if strings.TrimSpace(q.Text) == "" {
		return SearchOut{}, "", bad("query is empty")
	}
	res, err := o.Eng.Retrieve(ctx, q)
	if err != nil {
		return SearchOut{}, "", err
	}
	o.Metrics.Search(res.Lexical, res.Vector, res.Degraded, res.Elapsed)
	out := SearchOut{Degraded: res.Degraded, Faults: res.Faults, Hits: []HitOut{}, Span: res.Span}
	if floor {
		rel, err := o.Eng.Relevance(ctx, q.Text, res)
		if err != nil {
			return SearchOut{}, "", err
		}
		out.Relevance = &rel
		switch {
		case len(res.Hits) == 0:
			out.Message = "nothing found"
		case !rel.Found():
			out.Message = fmt.Sprintf("nothing found: no hit holds %.0f%% of the query's words, by weight (the closest holds %.0f%%)",
				100*rel.Floor, 100*rel.Best)
			res.Hits = nil
		}
	}
	if err := o.ShowHits(ctx, res.Hits, nil); err != nil {
		return SearchOut{}, "", err
	}
	var b strings.Builder
	if res.Span != nil {
		fmt.Fprintf(&b, "(looked back to %s)\n", res.Span)
	}
	switch {
	case out.Message != "":
		b.WriteString(out.Message)
	case len(res.Hits) == 0:
		b.WriteString("no results")
	}
	for i, h := range res.Hits {
		t := h.Chunk.Text
		short := clip(t, 600)
		hit := HitOut{Entry: h.Chunk.EntryID[:12], Where: h.Provenance(), Type: string(h.Occurrence.Type),
			Score: round(h.Score), Lexical: round(h.Hit.Score), Vector: round(h.Vector), StartLine: h.Chunk.StartLine,
			EndLine: h.Chunk.EndLine, Text: short}
		if h.Reranked {
			r := round(h.Rerank)
			hit.Rerank = &r
		}
		out.Hits = append(out.Hits, hit)
		fmt.Fprintf(&b, "%d. %s [%s %s]\n%s\n", i+1, h.Provenance(), h.Occurrence.Type, h.Chunk.EntryID[:12], indent(clip(t, 300)))
	}
	if res.Degraded {
		fmt.Fprintf(&b, "(degraded: %s)\n", strings.Join(res.Faults, "; "))
	}
	return out, strings.TrimRight(b.String(), "\n"), nil
}

// Search finds code and everything agents saw, best first.
func (o *Ops) Search(ctx context.Context, in SearchIn) (SearchOut, string, error) {
	limit, err := LimitRange.Check(in.Limit)
	if err != nil {
		return SearchOut{}, "", err
	}
	types, err := parseTypes(in.Types)
	if err != nil {
		return SearchOut{}, "", err
	}
	q := retrieve.Query{Text: in.Query, Limit: limit,
		Filter: store.Filter{SessionID: in.Session, Types: types, Paths: in.Paths, History: in.History}}
	if in.Files {
		spans, err := SpansRange.Check(in.Spans)
		if err != nil {
			return SearchOut{}, "", err
		}
		return o.runPlaces(ctx, q, spans)
	}
	return o.runSearch(ctx, q, false)
}

// SearchPlaces finds the distinct places (files, or other entries) that
// match best, each with its best spans.
func (o *Ops) SearchPlaces(ctx context.Context, in PlacesIn) (SearchOut, string, error) {
	return o.Search(ctx, SearchIn{Query: in.Query, Limit: in.Limit, Session: in.Session, Types: in.Types,
		Paths: in.Paths, History: in.History, Files: true, Spans: in.Spans})
}

// runPlaces runs a search for distinct places.
func (o *Ops) runPlaces(ctx context.Context, q retrieve.Query, spans int) (SearchOut, string, error) {
	if strings.TrimSpace(q.Text) == "" {
		return SearchOut{}, "", bad("query is empty")
	}
	res, places, err := o.Eng.RetrievePlaces(ctx, q, spans)
	if err != nil {
		return SearchOut{}, "", err
	}
	o.Metrics.Search(res.Lexical, res.Vector, res.Degraded, res.Elapsed)
	out := SearchOut{Degraded: res.Degraded, Faults: res.Faults, Hits: []HitOut{}, Places: []PlaceOut{}, Span: res.Span}
	for _, p := range places {
		if err := o.ShowHits(ctx, p.Hits, nil); err != nil {
			return SearchOut{}, "", err
		}
	}
	var b strings.Builder
	if res.Span != nil {
		fmt.Fprintf(&b, "(looked back to %s)\n", res.Span)
	}
	if len(places) == 0 {
		b.WriteString("no results")
	}
	for i, p := range places {
		best := p.Hits[0]
		po := PlaceOut{Where: p.Key, Entry: best.Chunk.EntryID[:12], Type: string(best.Occurrence.Type), Score: round(p.Score)}
		if best.Occurrence.Type != store.CodeFile {
			po.Where = best.Provenance()
		}
		lines := make([]string, len(p.Hits))
		for j, h := range p.Hits {
			n := 400 // the best span; the others are pointers to read on
			if j > 0 {
				n = 120
			}
			sp := PlaceSpan{Entry: h.Chunk.EntryID[:12], Score: round(h.Score), StartLine: h.Chunk.StartLine,
				EndLine: h.Chunk.EndLine, Text: clip(h.Chunk.Text, n)}
			if h.Reranked {
				r := round(h.Rerank)
				sp.Rerank = &r
			}
			po.Spans = append(po.Spans, sp)
			lines[j] = fmt.Sprintf("%d-%d", h.Chunk.StartLine, h.Chunk.EndLine)
		}
		out.Places = append(out.Places, po)
		fmt.Fprintf(&b, "%d. %s [%s %s] lines %s\n%s\n", i+1, po.Where, po.Type, po.Entry, strings.Join(lines, ", "), indent(clip(best.Chunk.Text, 300)))
	}
	if res.Degraded {
		fmt.Fprintf(&b, "(degraded: %s)\n", strings.Join(res.Faults, "; "))
	}
	return out, strings.TrimRight(b.String(), "\n"), nil
}

// SearchHistory searches past messages and tool results only. When the
// best hit holds too little of the query (under the relevance floor), it
// answers nothing found, with no hits, rather than the least bad ones.
func (o *Ops) SearchHistory(ctx context.Context, in HistoryIn) (SearchOut, string, error) {
	limit, err := MaxResultsRange.Check(in.MaxResults)
	if err != nil {
		return SearchOut{}, "", err
	}
	f := store.Filter{SessionID: in.Session, History: true}
	if in.ContentType != "" {
		types, err := parseTypes([]string{in.ContentType})
		if err != nil {
			return SearchOut{}, "", err
		}
		if types[0] == store.CodeFile {
			return SearchOut{}, "", bad("content_type code_file: history is what agents saw and said; search finds indexed files")
		}
		f.Types = types
	} else {
		for _, t := range store.ContentTypes() {
			if t != store.CodeFile {
				f.Types = append(f.Types, t)
			}
		}
	}
	return o.runSearch(ctx, retrieve.Query{Text: in.Query, Limit: limit, Filter: f}, true)
}

// GetFile reads an indexed file, or some of its lines.
func (o *Ops) GetFile(ctx context.Context, in GetFileIn) (GetFileOut, string, error) {
	if in.Path == "" {
		return GetFileOut{}, "", bad("path is required")
	}
	for _, f := range []struct {
		name string
		v    int
		r    Range
	}{{"start_line", in.StartLine, LinesRange}, {"end_line", in.EndLine, LinesRange}, {"version", in.Version, VersionRange}} {
		if _, err := f.r.CheckAs(f.name, f.v); err != nil {
			return GetFileOut{}, "", err
		}
	}
	id, err := o.Eng.Resolve(ctx, in.Path, in.Version)
	if err != nil {
		return GetFileOut{}, "", err
	}
	ent, err := o.Eng.Entry(ctx, id)
	if err != nil {
		return GetFileOut{}, "", err
	}
	content := ent.Content
	if in.StartLine > 0 || in.EndLine > 0 {
		from, to := max(in.StartLine, 1), in.EndLine
		if to == 0 {
			to = from + 199
		}
		if to < from {
			return GetFileOut{}, "", bad("end_line %d is before start_line %d", to, from)
		}
		if content, err = engine.LineRange(content, from, to); err != nil {
			return GetFileOut{}, "", bad("%s: %v", in.Path, err)
		}
	}
	if !utf8.Valid(content) {
		return GetFileOut{}, "", bad("%s is not text", in.Path)
	}
	out := GetFileOut{Path: in.Path, Entry: id[:12], Content: string(content)}
	return out, out.Content, nil
}

// Prefetch builds the context block for a task within a budget.
func (o *Ops) Prefetch(ctx context.Context, in PrefetchIn) (retrieve.Block, string, error) {
	if strings.TrimSpace(in.Query) == "" {
		return retrieve.Block{}, "", bad("query is empty")
	}
	if _, err := RemainingRange.Check(in.Remaining); err != nil {
		return retrieve.Block{}, "", err
	}
	if in.Budget != 0 || in.Remaining == 0 {
		var err error
		if in.Budget, err = PrefetchBudget.Check(in.Budget); err != nil {
			return retrieve.Block{}, "", err
		}
	}
	b, err := o.Eng.Prefetch(ctx, in.Query, in.Remaining, retrieve.PrefetchOptions{Budget: in.Budget})
	if err != nil {
		return retrieve.Block{}, "", err
	}
	o.Metrics.Prefetch(len(b.Excerpts) > 0)
	if b.Text == "" && b.Budget <= 0 {
		return b, fmt.Sprintf("no room to inject: the budget, a share of remaining (%d tokens), is 0 tokens", in.Remaining), nil
	}
	if b.Text == "" {
		return b, fmt.Sprintf("nothing confident enough to inject (budget %d tokens)", b.Budget), nil
	}
	return b, b.Text, nil
}

// TurnRange reads a session's turns in order, within max_tokens.
func (o *Ops) TurnRange(ctx context.Context, in TurnsIn) (ItemsOut, string, error) {
	if in.From < 1 || in.To < in.From {
		return ItemsOut{}, "", bad("want 1 <= from <= to, got from %d, to %d", in.From, in.To)
	}
	session := in.Session
	if session == "" {
		session = o.Session()
	}
	maxTokens, err := MaxTokensRange.Check(in.MaxTokens)
	if err != nil {
		return ItemsOut{}, "", err
	}
	ents, err := o.Eng.Store().TurnRange(ctx, session, in.From, in.To)
	if err != nil {
		return ItemsOut{}, "", err
	}
	if len(ents) == 0 {
		return ItemsOut{Items: []ItemOut{}}, "no turns in that range", nil
	}
	enc := o.Eng.Encoding()
	tb := newTextBudget(enc, maxTokens)
	out := ItemsOut{Items: []ItemOut{}}
	for i, e := range ents {
		// A turn's media (a picture a tool read) as a placeholder.
		content, tokens := string(e.Content), e.TokenCount
		if ms := mediaOf(e); len(ms) > 0 {
			content = showSpan(e.Content, 0, ms, always(readWhole(e.ID[:12]))).text
			tokens = enc.Count(content)
		}
		// A turn is whole or left out, so that turns stay turns; only the
		// first may be cut, so that one too large still shows something.
		kept, n, cut, ok := tb.fit(budgetItem{header: func(_ string, _ int, cut bool) string {
			return fmt.Sprintf("--- turn %d, %s by %s%s\n", e.Turn, e.Type, e.AgentID, cutNote(cut))
		}, content: content, tokens: tokens, mayCut: i == 0})
		if !ok {
			out.More = len(ents) - i
			break
		}
		out.Items = append(out.Items, ItemOut{ID: e.ID[:12], Tokens: n, Content: kept, Truncated: cut})
	}
	out.Tokens = tb.used
	return out, tb.text(out.More), nil
}

// maxFileName bounds a file's name in a record's files.
const maxFileName = 4096

// maxRecordFiles bounds a record's files, as a failure's, an intent's and
// a resume point's are bounded (archive.MaxListItems): they are kept with
// the record and decoded with each read of it, and a body of 4 MiB held
// 180,000 names (3.8 MB kept, a write of over a second under the store's
// single writer). A harness's hooks record one to three.
const maxRecordFiles = archive.MaxListItems

// Record stores content in the caller's session.
func (o *Ops) Record(ctx context.Context, in RecordIn) (RecordOut, string, error) {
	if err := o.checkSession(in.Session); err != nil {
		return RecordOut{}, "", err
	}
	if store.ContentType(in.Type) == store.CodeFile {
		return RecordOut{}, "", bad("type code_file is the index's (engram index): record what an agent saw or said, such as a tool_result of the file's read")
	}
	if strings.ContainsFunc(in.MsgID, unicode.IsControl) {
		return RecordOut{}, "", bad("msg_id %q holds a control character", in.MsgID)
	}
	if len(in.Files) > maxRecordFiles {
		return RecordOut{}, "", bad("files: has %d items; at most %d: name the directories rather than each file", len(in.Files), maxRecordFiles)
	}
	for _, f := range in.Files {
		if strings.TrimSpace(f) == "" || len(f) > maxFileName || strings.ContainsFunc(f, unicode.IsControl) {
			return RecordOut{}, "", bad("files: %.80q is not a file's name: not empty, at most %d bytes, no control characters", f, maxFileName)
		}
	}
	agent := o.Agent
	if agent == "" {
		agent = archive.AgentIDFor("mcp", o.Session())
	}
	res, err := o.Eng.Add(ctx, []engine.Record{{Session: o.Session(), Agent: agent, Type: store.ContentType(in.Type),
		Content: []byte(in.Content), MsgID: in.MsgID, Parent: in.Parent, Files: in.Files}})
	if err != nil {
		var re *engine.RecordError
		if errors.As(err, &re) {
			return RecordOut{}, "", &InputError{Msg: re.Err.Error()}
		}
		return RecordOut{}, "", err
	}
	r := res[0]
	out := RecordOut{ID: r.ID[:12], Turn: r.Turn, New: r.NewContent, Replayed: r.Replayed, Redacted: r.Redacted}
	return out, recordText(out), nil
}

// recordText is what a record says to the model: what the structured
// form says, as a line (harnesses show the model one or the other).
func recordText(out RecordOut) string {
	text := fmt.Sprintf("recorded %s (turn %d", out.ID, out.Turn)
	switch {
	case out.Replayed:
		text += "; its msg_id was recorded before: nothing new stored"
	case !out.New:
		text += "; the same content was stored before"
	}
	if len(out.Redacted) > 0 {
		text += "; redacted: " + strings.Join(out.Redacted, ", ")
	}
	return text + ")"
}

// Briefing returns a session's briefing, or NOT_MODIFIED.
func (o *Ops) Briefing(ctx context.Context, in BriefingIn) (*archive.Briefing, string, error) {
	tier, err := archive.ParseTier(in.Tier)
	if err != nil {
		return nil, "", err
	}
	session := in.Session
	if session == "" {
		// Registering makes a new session's briefing exist.
		h, err := o.Handle(ctx)
		if err != nil {
			return nil, "", err
		}
		session = h.Session()
	}
	arc, err := o.Eng.Archive(ctx)
	if err != nil {
		return nil, "", err
	}
	var have *archive.Versions
	if in.GV != 0 || in.SV != 0 {
		have = &archive.Versions{GV: in.GV, SV: in.SV}
	}
	b, err := arc.Briefing(ctx, session, tier, have)
	if err != nil {
		return nil, "", err
	}
	o.Metrics.BriefingServed(b)
	if b.Status == archive.StatusNotModified {
		return b, fmt.Sprintf("NOT_MODIFIED gv=%d sv=%d", b.GV, b.SV), nil
	}
	return b, fmt.Sprintf("%s\n(gv=%d sv=%d)", b.Text, b.GV, b.SV), nil
}

// Recall asks the archivalist: an @arch: query or a question. Its stores
// are written all together or not at all (archive.Ask): an error means
// nothing of the request was written, and names the query that failed.
func (o *Ops) Recall(ctx context.Context, in RecallIn) (RecallOut, string, error) {
	budget, err := RecallBudgetRange.Check(in.Budget)
	if err != nil {
		return RecallOut{}, "", err
	}
	arc, err := o.Eng.Archive(ctx)
	if err != nil {
		return RecallOut{}, "", err
	}
	var h *archive.Handle
	if archive.IsDSL(in.Query) && strings.Contains(in.Query, ":store:") {
		if h, err = o.Handle(ctx); err != nil {
			return RecallOut{}, "", err
		}
	}
	answers, err := arc.Ask(ctx, h, in.Query, archive.AskOptions{Budget: budget})
	if err != nil {
		return RecallOut{}, "", err
	}
	var parts []string
	for _, a := range answers {
		t := a.Text
		if len(answers) > 1 {
			t = "## " + a.Query + "\n" + t
		}
		parts = append(parts, t)
	}
	return RecallOut{Answers: answers}, strings.Join(parts, "\n\n"), nil
}

// write runs an archivalist write with the client's handle and answers in
// a line.
func (o *Ops) write(ctx context.Context, fn func(h *archive.Handle) (archive.WriteResult, error)) (archive.WriteResult, string, error) {
	h, err := o.Handle(ctx)
	if err != nil {
		return archive.WriteResult{}, "", err
	}
	wr, err := fn(h)
	if err != nil {
		return archive.WriteResult{}, "", err
	}
	var line string
	switch {
	case wr.Status == "merged":
		line = fmt.Sprintf("merged into %s (%s, similarity %.2f): %s", wr.ID, wr.Merged.Method, wr.Merged.Similarity, wr.Merged.Existing)
	case wr.ID == "":
		line = fmt.Sprintf("%s (sv %d)", wr.Status, wr.SV)
	default:
		line = fmt.Sprintf("%s %s (gv %d)", wr.Status, wr.ID, wr.GV)
	}
	if len(wr.Superseded) > 0 {
		line += "; superseded " + strings.Join(wr.Superseded, ", ")
	}
	for _, n := range wr.Notices {
		line += "\nnote: " + n
	}
	return wr, line, nil
}

// RecordPattern adds a pattern to the shared history.
func (o *Ops) RecordPattern(ctx context.Context, in PatternIn) (archive.WriteResult, string, error) {
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.RecordPattern(ctx, archive.Pattern{Category: in.Category, Pattern: in.Pattern, Description: in.Description,
			Example: in.Example, Scope: in.Scope, Authority: archive.Authority(in.Authority), Supersedes: in.Supersedes, Reason: in.Reason})
	})
}

// RecordFailure adds a failure, or a resolution to a recorded one.
func (o *Ops) RecordFailure(ctx context.Context, in FailureIn) (archive.WriteResult, string, error) {
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) {
		var res *archive.Resolution
		if in.Resolution == "" && in.Outcome != "" {
			return archive.WriteResult{}, bad("outcome %q is of a resolution: give the resolution too (what was tried instead)", in.Outcome)
		}
		if in.Resolution != "" || in.Outcome != "" {
			res = &archive.Resolution{Approach: in.Resolution, Outcome: archive.Outcome(in.Outcome), Notes: in.Notes}
		}
		if in.FailureID != "" {
			if res == nil {
				return archive.WriteResult{}, bad("failure_id needs a resolution and its outcome")
			}
			if in.Approach != "" || in.Reason != "" || in.Context != "" || in.Error != "" || len(in.Files) > 0 || in.Category != "" {
				return archive.WriteResult{}, bad("failure_id adds a resolution to failure %s: approach, reason, context, error, files and category describe a new failure; leave them out", in.FailureID)
			}
			return h.RecordResolution(ctx, in.FailureID, *res)
		}
		return h.RecordFailure(ctx, archive.Failure{Category: in.Category, Approach: in.Approach, Reason: in.Reason,
			Context: in.Context, Error: in.Error, Files: in.Files, Resolution: res})
	})
}

// RecordInsight adds an insight.
func (o *Ops) RecordInsight(ctx context.Context, in InsightIn) (archive.WriteResult, string, error) {
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.RecordInsight(ctx, archive.Insight{Insight: in.Insight, Category: in.Category, Evidence: in.Evidence, Scope: in.Scope})
	})
}

// RecordDecision adds a decision.
func (o *Ops) RecordDecision(ctx context.Context, in DecisionIn) (archive.WriteResult, string, error) {
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.RecordDecision(ctx, archive.Decision{Decision: in.Decision, Rationale: in.Rationale, Alternatives: in.Alternatives,
			Category: in.Category, Scope: in.Scope, Supersedes: in.Supersedes, Reason: in.Reason})
	})
}

// UpdateResume updates the caller's session's resume point.
func (o *Ops) UpdateResume(ctx context.Context, in ResumeIn) (archive.WriteResult, string, error) {
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.UpdateResume(ctx, archive.Resume{Task: in.Task, Objective: in.Objective, Done: in.Done, Current: in.Current,
			Next: in.Next, Blockers: in.Blockers, FilesToRead: in.FilesToRead})
	})
}

// UpdateFile records what the caller's session did to a file.
func (o *Ops) UpdateFile(ctx context.Context, in FileIn) (archive.WriteResult, string, error) {
	if in.Status == "" {
		in.Status = string(archive.Modified)
	}
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.UpdateFile(ctx, archive.FileState{Path: in.Path, Status: archive.FileStatus(in.Status), Summary: in.Summary})
	})
}

// DeclareIntent announces cross-cutting work.
func (o *Ops) DeclareIntent(ctx context.Context, in IntentIn) (archive.WriteResult, string, error) {
	ttl, err := TTLMinutesRange.Check(in.TTLMinutes)
	if err != nil {
		return archive.WriteResult{}, "", err
	}
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.DeclareIntent(ctx, archive.Intent{Description: in.Description, Paths: in.Paths, Categories: in.Categories,
			Priority: in.Priority, TTL: time.Duration(ttl) * time.Minute})
	})
}

// CompleteIntent marks one of the session's intents done.
func (o *Ops) CompleteIntent(ctx context.Context, in CompleteIn) (archive.WriteResult, string, error) {
	return o.write(ctx, func(h *archive.Handle) (archive.WriteResult, error) { return h.CompleteIntent(ctx, in.IntentID) })
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func indent(s string) string {
	return "   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n   ")
}

func round(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
