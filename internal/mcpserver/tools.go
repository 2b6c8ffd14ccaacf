package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

var startTime = time.Now()

// Inputs and outputs of the tools. Field descriptions become the JSON
// schemas' descriptions: they are what the model reads, so they are short.

type searchIn struct {
	Query   string   `json:"query" jsonschema:"what to find: words, identifiers, paths"`
	Limit   int      `json:"limit,omitempty" jsonschema:"most results (default 10)"`
	Session string   `json:"session,omitempty" jsonschema:"only content seen in this session"`
	Types   []string `json:"types,omitempty" jsonschema:"only these content types, such as code_file, tool_result, user_prompt"`
	Paths   []string `json:"paths,omitempty" jsonschema:"only content about these files, directories or globs"`
	History bool     `json:"history,omitempty" jsonschema:"include old versions of files"`
}

type hitOut struct {
	Entry     string  `json:"entry"`
	Where     string  `json:"where"`
	Type      string  `json:"type"`
	Score     float64 `json:"score"`
	Lexical   float64 `json:"lexical,omitempty"`
	Vector    float64 `json:"vector,omitempty"`
	StartLine int     `json:"start_line"`
	EndLine   int     `json:"end_line"`
	Text      string  `json:"text"`
}

type searchOut struct {
	Hits     []hitOut `json:"hits"`
	Degraded bool     `json:"degraded,omitempty"`
	Faults   []string `json:"faults,omitempty"`
}

type getFileIn struct {
	Path      string `json:"path" jsonschema:"the file, relative to the project root"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"first line (1-based)"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"last line, inclusive"`
	Version   int    `json:"version,omitempty" jsonschema:"an older version; default the current one"`
}

type getFileOut struct {
	Path    string `json:"path"`
	Entry   string `json:"entry"`
	Content string `json:"content"`
}

type prefetchIn struct {
	Query     string `json:"query" jsonschema:"the prompt or task to find context for"`
	Budget    int    `json:"budget,omitempty" jsonschema:"tokens the block may take"`
	Remaining int    `json:"remaining,omitempty" jsonschema:"tokens left in your window (budget is 10% of it)"`
}

type retrieveIn struct {
	RefID      string   `json:"ref_id,omitempty" jsonschema:"the id in a [CTX-REF:id] marker"`
	Query      string   `json:"query,omitempty" jsonschema:"words, to retrieve what matches instead"`
	ContentIDs []string `json:"content_ids,omitempty" jsonschema:"entry ids to retrieve"`
	MaxTokens  int      `json:"max_tokens,omitempty" jsonschema:"most tokens returned (default 4000)"`
}

type itemOut struct {
	ID        string `json:"id"`
	Tokens    int    `json:"tokens"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty"`
}

type itemsOut struct {
	Items  []itemOut `json:"items"`
	Tokens int       `json:"tokens"`
	More   int       `json:"more,omitempty"`
}

type historyIn struct {
	Query       string `json:"query" jsonschema:"what to find in past messages and tool results"`
	ContentType string `json:"content_type,omitempty" jsonschema:"only this type, such as tool_result or user_prompt"`
	Session     string `json:"session,omitempty" jsonschema:"only this session (default all)"`
	MaxResults  int    `json:"max_results,omitempty" jsonschema:"most results (default 10)"`
}

type turnsIn struct {
	Session   string `json:"session,omitempty" jsonschema:"the session (default yours)"`
	From      int    `json:"from" jsonschema:"first turn"`
	To        int    `json:"to" jsonschema:"last turn, inclusive"`
	MaxTokens int    `json:"max_tokens,omitempty" jsonschema:"most tokens returned (default 4000)"`
}

type recordIn struct {
	Type    string   `json:"type" jsonschema:"user_prompt, agent_response, tool_call, tool_result, note, ..."`
	Content string   `json:"content" jsonschema:"the content, kept byte for byte"`
	MsgID   string   `json:"msg_id,omitempty" jsonschema:"your id for it; recording it again is a no-op"`
	Parent  string   `json:"parent,omitempty" jsonschema:"the msg_id or entry id it answers (a tool call for a result)"`
	Files   []string `json:"files,omitempty" jsonschema:"files it is about"`
	Session string   `json:"session,omitempty" jsonschema:"must be your session if given"`
}

type recordOut struct {
	ID       string   `json:"id"`
	Turn     int      `json:"turn"`
	New      bool     `json:"new"`
	Replayed bool     `json:"replayed,omitempty"`
	Redacted []string `json:"redacted,omitempty"`
}

type briefingIn struct {
	Tier    string `json:"tier,omitempty" jsonschema:"micro (~20 tokens), standard (~500, default) or full (~2000)"`
	GV      uint64 `json:"gv,omitempty" jsonschema:"the gv of the briefing you hold: unchanged gets NOT_MODIFIED"`
	SV      uint64 `json:"sv,omitempty" jsonschema:"the sv of the briefing you hold"`
	Session string `json:"session,omitempty" jsonschema:"another session to read (default yours)"`
}

type recallIn struct {
	Query  string `json:"query" jsonschema:"an @arch: query or a question about what was done, seen or learned"`
	Budget int    `json:"budget,omitempty" jsonschema:"most tokens per answer (default 1000)"`
}

type recallOut struct {
	Answers []archive.Answer `json:"answers"`
}

type patternIn struct {
	Category    string   `json:"category" jsonschema:"hierarchical, L1.L2, such as error.handling or database.orm"`
	Pattern     string   `json:"pattern" jsonschema:"the pattern, one sentence"`
	Description string   `json:"description,omitempty"`
	Example     string   `json:"example,omitempty"`
	Scope       []string `json:"scope,omitempty" jsonschema:"paths or globs it applies to (default everywhere)"`
	Authority   string   `json:"authority,omitempty" jsonschema:"suggestion (default), established or mandated"`
	Supersedes  []string `json:"supersedes,omitempty" jsonschema:"ids of patterns it replaces (needed when it contradicts one)"`
	Reason      string   `json:"reason,omitempty" jsonschema:"why it supersedes them"`
}

type failureIn struct {
	Approach   string   `json:"approach" jsonschema:"what was tried"`
	Reason     string   `json:"reason" jsonschema:"why it failed"`
	Context    string   `json:"context,omitempty" jsonschema:"what was being attempted"`
	Error      string   `json:"error,omitempty"`
	Files      []string `json:"files,omitempty"`
	Category   string   `json:"category,omitempty" jsonschema:"hierarchical, such as database.sql"`
	Resolution string   `json:"resolution,omitempty" jsonschema:"what was tried instead"`
	Outcome    string   `json:"outcome,omitempty" jsonschema:"how the resolution went: success, partial or failure"`
	Notes      string   `json:"notes,omitempty"`
	FailureID  string   `json:"failure_id,omitempty" jsonschema:"add the resolution to this recorded failure instead"`
}

type insightIn struct {
	Insight  string   `json:"insight"`
	Category string   `json:"category,omitempty"`
	Evidence string   `json:"evidence,omitempty"`
	Scope    []string `json:"scope,omitempty"`
}

type decisionIn struct {
	Decision     string   `json:"decision"`
	Rationale    string   `json:"rationale,omitempty"`
	Alternatives []string `json:"alternatives,omitempty"`
	Category     string   `json:"category,omitempty"`
	Scope        []string `json:"scope,omitempty"`
	Supersedes   []string `json:"supersedes,omitempty" jsonschema:"ids of decisions it replaces"`
	Reason       string   `json:"reason,omitempty"`
}

type resumeIn struct {
	Task        string   `json:"task,omitempty"`
	Objective   string   `json:"objective,omitempty"`
	Done        []string `json:"done,omitempty" jsonschema:"steps done (replaces the list)"`
	Current     string   `json:"current,omitempty"`
	Next        []string `json:"next,omitempty" jsonschema:"next steps (replaces the list)"`
	Blockers    []string `json:"blockers,omitempty" jsonschema:"blockers (replaces the list)"`
	FilesToRead []string `json:"files_to_read,omitempty"`
}

type fileIn struct {
	Path    string `json:"path"`
	Status  string `json:"status,omitempty" jsonschema:"read, modified (default), created or deleted"`
	Summary string `json:"summary,omitempty" jsonschema:"what changed, in a line"`
}

type intentIn struct {
	Description string   `json:"description" jsonschema:"the cross-cutting work, such as a rename"`
	Paths       []string `json:"paths,omitempty" jsonschema:"paths it touches"`
	Categories  []string `json:"categories,omitempty" jsonschema:"categories it touches"`
	Priority    string   `json:"priority,omitempty" jsonschema:"normal (default), high or critical"`
	TTLMinutes  int      `json:"ttl_minutes,omitempty" jsonschema:"minutes it stays if never completed (default 30)"`
}

type completeIn struct {
	IntentID string `json:"intent_id"`
}

func (s *Server) addTools() {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "search", Annotations: ro,
		Description: "Search the project's code and everything agents saw (messages, tool results), best first, lexical and semantic."}), s.search)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "get_file", Annotations: ro,
		Description: "Read an indexed file, or some of its lines, current or an older version."}), s.getFile)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "prefetch", Annotations: ro,
		Description: "The context block worth reading before a task: excerpts and one-line hints, within a token budget."}), s.prefetch)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "retrieve_context", Annotations: ro,
		Description: "Expand a [CTX-REF:id] marker, entry ids, or a query back into the exact stored content."}), s.retrieveContext)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "search_history", Annotations: ro,
		Description: "Search past messages and tool results only, by type and session."}), s.searchHistory)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "get_turn_range", Annotations: ro,
		Description: "Read a session's turns from one number to another, in order."}), s.turnRange)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record",
		Description: "Store a message, tool call or tool result in your session so it is kept and searchable."}), s.record)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "briefing", Annotations: ro,
		Description: "Your session's briefing: task, files, user wants, relevant patterns, failures and intents. Send gv and sv you hold to get NOT_MODIFIED."}), s.briefing)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "recall", Annotations: ro,
		Description: "Ask the shared memory about the past: an @arch: query (@arch:recall:failures?q=timeout) or a question such as \"what did we decide about X?\"."}), s.recall)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_pattern",
		Description: "Record a pattern every agent should follow. Duplicates merge; a contradiction must name what it supersedes."}), s.recordPattern)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_failure",
		Description: "Record an approach that failed, with its resolution and outcome if known, so no agent repeats it."}), s.recordFailure)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_insight", Description: "Record something learned."}), s.recordInsight)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "record_decision", Description: "Record a decision, why, and the alternatives."}), s.recordDecision)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "update_resume",
		Description: "Update where your session stands so the next agent can carry on; fields left out keep their values."}), s.updateResume)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "update_file", Description: "Record what your session did to a file."}), s.updateFile)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "declare_intent",
		Description: "Announce cross-cutting work (a rename, an API change) so other sessions touching it see it. Never blocks."}), s.declareIntent)
	mcp.AddTool(s.mcp, lean(&mcp.Tool{Name: "complete_intent", Description: "Mark one of your session's intents done."}), s.completeIntent)
}

// lean gives a tool the smallest output schema: an object. The inferred
// schemas of the outputs would triple the tool list's tokens, which every
// client sends the model; the structured content is still sent with
// every result, and the text is what the model reads.
func lean(t *mcp.Tool) *mcp.Tool {
	t.OutputSchema = &jsonschema.Schema{Type: "object"}
	return t
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
			return nil, fmt.Errorf("unknown content type %q; known: %s", n, strings.Join(all, ", "))
		}
		out = append(out, t)
	}
	return out, nil
}

func (s *Server) runSearch(ctx context.Context, q retrieve.Query) (*mcp.CallToolResult, searchOut, error) {
	if strings.TrimSpace(q.Text) == "" {
		return nil, searchOut{}, errors.New("query is empty")
	}
	res, err := s.eng.Retrieve(ctx, q)
	if err != nil {
		return nil, searchOut{}, err
	}
	out := searchOut{Degraded: res.Degraded, Faults: res.Faults, Hits: []hitOut{}}
	var b strings.Builder
	if len(res.Hits) == 0 {
		b.WriteString("no results")
	}
	for i, h := range res.Hits {
		t := h.Chunk.Text
		short := clip(t, 600)
		out.Hits = append(out.Hits, hitOut{Entry: h.Chunk.EntryID[:12], Where: h.Provenance(), Type: string(h.Occurrence.Type),
			Score: round(h.Score), Lexical: round(h.Hit.Score), Vector: round(h.Vector), StartLine: h.Chunk.StartLine,
			EndLine: h.Chunk.EndLine, Text: short})
		fmt.Fprintf(&b, "%d. %s [%s %s]\n%s\n", i+1, h.Provenance(), h.Occurrence.Type, h.Chunk.EntryID[:12], indent(clip(t, 300)))
	}
	if res.Degraded {
		fmt.Fprintf(&b, "(degraded: %s)\n", strings.Join(res.Faults, "; "))
	}
	return text("%s", strings.TrimRight(b.String(), "\n")), out, nil
}

func (s *Server) search(ctx context.Context, req *mcp.CallToolRequest, in searchIn) (*mcp.CallToolResult, searchOut, error) {
	types, err := parseTypes(in.Types)
	if err != nil {
		return nil, searchOut{}, err
	}
	return s.runSearch(ctx, retrieve.Query{Text: in.Query, Limit: clampLimit(in.Limit),
		Filter: store.Filter{SessionID: in.Session, Types: types, Paths: in.Paths, History: in.History}})
}

func (s *Server) searchHistory(ctx context.Context, req *mcp.CallToolRequest, in historyIn) (*mcp.CallToolResult, searchOut, error) {
	f := store.Filter{SessionID: in.Session, History: true}
	if in.ContentType != "" {
		types, err := parseTypes([]string{in.ContentType})
		if err != nil {
			return nil, searchOut{}, err
		}
		f.Types = types
	} else {
		for _, t := range store.ContentTypes() {
			if t != store.CodeFile {
				f.Types = append(f.Types, t)
			}
		}
	}
	return s.runSearch(ctx, retrieve.Query{Text: in.Query, Limit: clampLimit(in.MaxResults), Filter: f})
}

func clampLimit(n int) int {
	switch {
	case n <= 0:
		return 10
	case n > 100:
		return 100
	}
	return n
}

func (s *Server) getFile(ctx context.Context, req *mcp.CallToolRequest, in getFileIn) (*mcp.CallToolResult, getFileOut, error) {
	if in.Path == "" {
		return nil, getFileOut{}, errors.New("path is required")
	}
	id, err := s.eng.Resolve(ctx, in.Path, in.Version)
	if err != nil {
		return nil, getFileOut{}, err
	}
	ent, err := s.eng.Entry(ctx, id)
	if err != nil {
		return nil, getFileOut{}, err
	}
	content := ent.Content
	if in.StartLine > 0 || in.EndLine > 0 {
		from, to := max(in.StartLine, 1), in.EndLine
		if to == 0 {
			to = from + 199
		}
		if to < from {
			return nil, getFileOut{}, fmt.Errorf("end_line %d is before start_line %d", to, from)
		}
		if content, err = engine.LineRange(content, from, to); err != nil {
			return nil, getFileOut{}, fmt.Errorf("%s: %w", in.Path, err)
		}
	}
	if !utf8.Valid(content) {
		return nil, getFileOut{}, fmt.Errorf("%s is not text", in.Path)
	}
	out := getFileOut{Path: in.Path, Entry: id[:12], Content: string(content)}
	return text("%s", out.Content), out, nil
}

func (s *Server) prefetch(ctx context.Context, req *mcp.CallToolRequest, in prefetchIn) (*mcp.CallToolResult, retrieve.Block, error) {
	if strings.TrimSpace(in.Query) == "" {
		return nil, retrieve.Block{}, errors.New("query is empty")
	}
	if in.Budget <= 0 && in.Remaining <= 0 {
		in.Budget = 2000
	}
	b, err := s.eng.Prefetch(ctx, in.Query, in.Remaining, retrieve.PrefetchOptions{Budget: in.Budget})
	if err != nil {
		return nil, retrieve.Block{}, err
	}
	if b.Text == "" {
		return text("nothing confident enough to inject (budget %d tokens)", b.Budget), b, nil
	}
	return text("%s", b.Text), b, nil
}

func (s *Server) retrieveContext(ctx context.Context, req *mcp.CallToolRequest, in retrieveIn) (*mcp.CallToolResult, itemsOut, error) {
	maxTokens := in.MaxTokens
	if maxTokens <= 0 {
		maxTokens = 4000
	}
	var ids []string
	switch {
	case in.RefID != "":
		ref, err := s.eng.Store().Reference(ctx, strings.TrimSuffix(strings.TrimPrefix(in.RefID, "[CTX-REF:"), "]"))
		if errors.Is(err, store.ErrNotFound) {
			return nil, itemsOut{}, fmt.Errorf("no reference %s", in.RefID)
		} else if err != nil {
			return nil, itemsOut{}, err
		}
		ids = ref.ContentIDs
	case len(in.ContentIDs) > 0:
		for _, p := range in.ContentIDs {
			id, err := s.eng.Store().ResolveID(ctx, p)
			if err != nil {
				return nil, itemsOut{}, fmt.Errorf("content id %s: %w", p, err)
			}
			ids = append(ids, id)
		}
	case strings.TrimSpace(in.Query) != "":
		res, err := s.eng.Retrieve(ctx, retrieve.Query{Text: in.Query, Limit: 10})
		if err != nil {
			return nil, itemsOut{}, err
		}
		seen := map[string]bool{}
		for _, h := range res.Hits {
			if !seen[h.Chunk.EntryID] {
				seen[h.Chunk.EntryID] = true
				ids = append(ids, h.Chunk.EntryID)
			}
		}
	default:
		return nil, itemsOut{}, errors.New("give ref_id, content_ids or query")
	}
	ents, err := s.eng.Store().Entries(ctx, ids)
	if err != nil {
		return nil, itemsOut{}, err
	}
	out := itemsOut{Items: []itemOut{}}
	var b strings.Builder
	for i, e := range ents {
		if out.Tokens >= maxTokens {
			out.More = len(ents) - i
			break
		}
		content := string(e.Content)
		it := itemOut{ID: e.ID[:12], Tokens: e.TokenCount, Content: content}
		if out.Tokens+e.TokenCount > maxTokens {
			// Cut at a line, to what the budget allows.
			enc := s.eng.Encoding()
			lines := strings.SplitAfter(content, "\n")
			var kept strings.Builder
			n := 0
			for _, l := range lines {
				c := enc.Count(l)
				if out.Tokens+n+c > maxTokens {
					break
				}
				kept.WriteString(l)
				n += c
			}
			it.Content, it.Tokens, it.Truncated = kept.String(), n, true
		}
		out.Items = append(out.Items, it)
		out.Tokens += it.Tokens
		fmt.Fprintf(&b, "--- %s (%d tokens%s)\n%s\n", it.ID, it.Tokens, map[bool]string{true: ", cut to the budget", false: ""}[it.Truncated], it.Content)
	}
	if out.More > 0 {
		fmt.Fprintf(&b, "(%d more over max_tokens)\n", out.More)
	}
	return text("%s", strings.TrimRight(b.String(), "\n")), out, nil
}

func (s *Server) turnRange(ctx context.Context, req *mcp.CallToolRequest, in turnsIn) (*mcp.CallToolResult, itemsOut, error) {
	if in.From < 1 || in.To < in.From {
		return nil, itemsOut{}, fmt.Errorf("want 1 <= from <= to, got from %d, to %d", in.From, in.To)
	}
	session := in.Session
	if session == "" {
		session = s.session(req)
	}
	maxTokens := in.MaxTokens
	if maxTokens <= 0 {
		maxTokens = 4000
	}
	ents, err := s.eng.Store().TurnRange(ctx, session, in.From, in.To)
	if err != nil {
		return nil, itemsOut{}, err
	}
	out := itemsOut{Items: []itemOut{}}
	var b strings.Builder
	for i, e := range ents {
		if out.Tokens+e.TokenCount > maxTokens {
			out.More = len(ents) - i
			break
		}
		out.Items = append(out.Items, itemOut{ID: e.ID[:12], Tokens: e.TokenCount, Content: string(e.Content)})
		out.Tokens += e.TokenCount
		fmt.Fprintf(&b, "--- turn %d, %s by %s\n%s\n", e.Turn, e.Type, e.AgentID, e.Content)
	}
	if len(ents) == 0 {
		b.WriteString("no turns in that range")
	}
	if out.More > 0 {
		fmt.Fprintf(&b, "(%d more over max_tokens)\n", out.More)
	}
	return text("%s", strings.TrimRight(b.String(), "\n")), out, nil
}

func (s *Server) record(ctx context.Context, req *mcp.CallToolRequest, in recordIn) (*mcp.CallToolResult, recordOut, error) {
	if err := s.checkSession(req, in.Session); err != nil {
		return nil, recordOut{}, err
	}
	agent := s.opts.Agent
	if agent == "" {
		agent = "mcp@" + s.session(req)
	}
	res, err := s.eng.Add(ctx, []engine.Record{{Session: s.session(req), Agent: agent, Type: store.ContentType(in.Type),
		Content: []byte(in.Content), MsgID: in.MsgID, Parent: in.Parent, Files: in.Files}})
	if err != nil {
		var re *engine.RecordError
		if errors.As(err, &re) {
			return nil, recordOut{}, re.Err
		}
		return nil, recordOut{}, err
	}
	r := res[0]
	out := recordOut{ID: r.ID[:12], Turn: r.Turn, New: r.NewContent, Replayed: r.Replayed, Redacted: r.Redacted}
	return text("recorded %s (turn %d)", out.ID, out.Turn), out, nil
}

func (s *Server) briefing(ctx context.Context, req *mcp.CallToolRequest, in briefingIn) (*mcp.CallToolResult, *archive.Briefing, error) {
	tier, err := archive.ParseTier(in.Tier)
	if err != nil {
		return nil, nil, err
	}
	session := in.Session
	if session == "" {
		// Registering makes a new session's briefing exist.
		h, err := s.archiveHandle(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		session = h.Session()
	}
	arc, err := s.eng.Archive(ctx)
	if err != nil {
		return nil, nil, err
	}
	var have *archive.Versions
	if in.GV != 0 || in.SV != 0 {
		have = &archive.Versions{GV: in.GV, SV: in.SV}
	}
	b, err := arc.Briefing(ctx, session, tier, have)
	if err != nil {
		return nil, nil, err
	}
	if b.Status == archive.StatusNotModified {
		return text("NOT_MODIFIED gv=%d sv=%d", b.GV, b.SV), b, nil
	}
	return text("%s\n(gv=%d sv=%d)", b.Text, b.GV, b.SV), b, nil
}

func (s *Server) recall(ctx context.Context, req *mcp.CallToolRequest, in recallIn) (*mcp.CallToolResult, recallOut, error) {
	arc, err := s.eng.Archive(ctx)
	if err != nil {
		return nil, recallOut{}, err
	}
	var h *archive.Handle
	if archive.IsDSL(in.Query) && strings.Contains(in.Query, ":store:") {
		if h, err = s.archiveHandle(ctx, req); err != nil {
			return nil, recallOut{}, err
		}
	}
	answers, err := arc.Ask(ctx, h, in.Query, archive.AskOptions{Budget: in.Budget})
	if err != nil {
		return nil, recallOut{}, err
	}
	var parts []string
	for _, a := range answers {
		t := a.Text
		if len(answers) > 1 {
			t = "## " + a.Query + "\n" + t
		}
		parts = append(parts, t)
	}
	return text("%s", strings.Join(parts, "\n\n")), recallOut{Answers: answers}, nil
}

// write runs an archivalist write with the client's handle and answers in
// a line.
func (s *Server) write(ctx context.Context, req *mcp.CallToolRequest, fn func(h *archive.Handle) (archive.WriteResult, error)) (*mcp.CallToolResult, archive.WriteResult, error) {
	h, err := s.archiveHandle(ctx, req)
	if err != nil {
		return nil, archive.WriteResult{}, err
	}
	wr, err := fn(h)
	if err != nil {
		return nil, archive.WriteResult{}, err
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
	return text("%s", line), wr, nil
}

func (s *Server) recordPattern(ctx context.Context, req *mcp.CallToolRequest, in patternIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.RecordPattern(ctx, archive.Pattern{Category: in.Category, Pattern: in.Pattern, Description: in.Description,
			Example: in.Example, Scope: in.Scope, Authority: archive.Authority(in.Authority), Supersedes: in.Supersedes, Reason: in.Reason})
	})
}

func (s *Server) recordFailure(ctx context.Context, req *mcp.CallToolRequest, in failureIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) {
		var res *archive.Resolution
		if in.Resolution != "" || in.Outcome != "" {
			res = &archive.Resolution{Approach: in.Resolution, Outcome: archive.Outcome(in.Outcome), Notes: in.Notes}
		}
		if in.FailureID != "" {
			if res == nil {
				return archive.WriteResult{}, errors.New("failure_id needs a resolution and its outcome")
			}
			return h.RecordResolution(ctx, in.FailureID, *res)
		}
		return h.RecordFailure(ctx, archive.Failure{Category: in.Category, Approach: in.Approach, Reason: in.Reason,
			Context: in.Context, Error: in.Error, Files: in.Files, Resolution: res})
	})
}

func (s *Server) recordInsight(ctx context.Context, req *mcp.CallToolRequest, in insightIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.RecordInsight(ctx, archive.Insight{Insight: in.Insight, Category: in.Category, Evidence: in.Evidence, Scope: in.Scope})
	})
}

func (s *Server) recordDecision(ctx context.Context, req *mcp.CallToolRequest, in decisionIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.RecordDecision(ctx, archive.Decision{Decision: in.Decision, Rationale: in.Rationale, Alternatives: in.Alternatives,
			Category: in.Category, Scope: in.Scope, Supersedes: in.Supersedes, Reason: in.Reason})
	})
}

func (s *Server) updateResume(ctx context.Context, req *mcp.CallToolRequest, in resumeIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.UpdateResume(ctx, archive.Resume{Task: in.Task, Objective: in.Objective, Done: in.Done, Current: in.Current,
			Next: in.Next, Blockers: in.Blockers, FilesToRead: in.FilesToRead})
	})
}

func (s *Server) updateFile(ctx context.Context, req *mcp.CallToolRequest, in fileIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	if in.Status == "" {
		in.Status = string(archive.Modified)
	}
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.UpdateFile(ctx, archive.FileState{Path: in.Path, Status: archive.FileStatus(in.Status), Summary: in.Summary})
	})
}

func (s *Server) declareIntent(ctx context.Context, req *mcp.CallToolRequest, in intentIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	if in.TTLMinutes < 0 {
		return nil, archive.WriteResult{}, errors.New("ttl_minutes must not be negative")
	}
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) {
		return h.DeclareIntent(ctx, archive.Intent{Description: in.Description, Paths: in.Paths, Categories: in.Categories,
			Priority: in.Priority, TTL: time.Duration(in.TTLMinutes) * time.Minute})
	})
}

func (s *Server) completeIntent(ctx context.Context, req *mcp.CallToolRequest, in completeIn) (*mcp.CallToolResult, archive.WriteResult, error) {
	return s.write(ctx, req, func(h *archive.Handle) (archive.WriteResult, error) { return h.CompleteIntent(ctx, in.IntentID) })
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
