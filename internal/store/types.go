package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ContentType says what kind of thing an agent saw.
type ContentType string

// The content types. The first eleven are the seed's; note, handoff_state and
// checkpoint are engram's own.
const (
	UserPrompt       ContentType = "user_prompt"
	AgentResponse    ContentType = "agent_response"
	ToolCall         ContentType = "tool_call"
	ToolResult       ContentType = "tool_result"
	CodeFile         ContentType = "code_file"
	WebFetch         ContentType = "web_fetch"
	ResearchPaper    ContentType = "research_paper"
	AgentMessage     ContentType = "agent_message"
	PlanWorkflow     ContentType = "plan_workflow"
	TestResult       ContentType = "test_result"
	InspectorFinding ContentType = "inspector_finding"
	Note             ContentType = "note"
	HandoffState     ContentType = "handoff_state"
	Checkpoint       ContentType = "checkpoint"
)

// ContentTypes returns every content type, in the order above.
func ContentTypes() []ContentType {
	return []ContentType{
		UserPrompt, AgentResponse, ToolCall, ToolResult, CodeFile, WebFetch,
		ResearchPaper, AgentMessage, PlanWorkflow, TestResult, InspectorFinding,
		Note, HandoffState, Checkpoint,
	}
}

// Valid reports whether t is one of the known content types.
func (t ContentType) Valid() bool {
	for _, k := range ContentTypes() {
		if t == k {
			return true
		}
	}
	return false
}

// Session is one conversation or working session of one or more agents.
type Session struct {
	ID         string
	Name       string
	CreatedAt  time.Time
	LastSeenAt time.Time
	Metadata   map[string]any
}

// Validate checks a session before it is written.
func (s Session) Validate() error {
	if s.ID == "" || len(s.ID) > MaxIdentifierBytes {
		return &ValidationError{Field: "id", Msg: fmt.Sprintf("session id must be 1 to %d bytes", MaxIdentifierBytes)}
	}
	return nil
}

// Agent is one agent instance within a session. Agents are keyed by
// (SessionID, ID): the same agent name in two sessions is two agents.
type Agent struct {
	SessionID string
	ID        string
	Name      string
	// Role is the agent's kind (engineer, librarian, ...), the seed's agent type.
	Role string
	// ParentID is the agent that spawned this one, in the same session.
	ParentID string
	// Model is the model the agent runs on, such as "claude-sonnet-4-5".
	Model string
	// ContextWindow is the agent's context window in tokens; zero if unknown.
	ContextWindow int
	RegisteredAt  time.Time
	LastSeenAt    time.Time
}

// Validate checks an agent before it is written.
func (a Agent) Validate() error {
	var errs []error
	if a.ID == "" || len(a.ID) > MaxIdentifierBytes {
		errs = append(errs, &ValidationError{Field: "id", Msg: fmt.Sprintf("agent id must be 1 to %d bytes", MaxIdentifierBytes)})
	}
	if a.SessionID == "" {
		errs = append(errs, &ValidationError{Field: "session", Msg: "an agent needs a session"})
	}
	if a.ParentID == a.ID && a.ID != "" {
		errs = append(errs, &ValidationError{Field: "parent", Msg: "an agent cannot be its own parent"})
	}
	if a.ContextWindow < 0 {
		errs = append(errs, &ValidationError{Field: "context_window", Msg: "is negative"})
	}
	return errors.Join(errs...)
}

// Entry is a piece of content an agent saw, stored once whatever the number
// of times it was seen. Its ID is the SHA-256 of Content, in lower-case hex.
// The embedded Occurrence says who saw it, when: on a read by ID it is the
// first occurrence; on a read by turn range, the occurrence in range.
type Entry struct {
	ID      string
	Content []byte
	// TokenCount is the number of tokens in Content, counted with the
	// store's encoding; encoded media in it (base64 that no chunk covers)
	// is estimated, 2 tokens in 3 of its bytes.
	TokenCount int
	// Chunks are the retrieval units of Content, in order. PutEntries needs
	// at least one; reads fill them only where documented.
	Chunks []Chunk
	// Redacted is set on reads of an entry an operator redacted (engram
	// redact): it keeps its ID, so that what refers to it still resolves,
	// but its Content is no longer what the ID is the hash of.
	Redacted bool
	Occurrence
}

// Occurrence records one sighting of an entry: which agent of which session
// saw it, at which turn and time, and what it relates to.
type Occurrence struct {
	// Seq is assigned by the store: it increases with every occurrence
	// written, so it orders occurrences by arrival.
	Seq     int64
	EntryID string
	// SessionID and AgentID name the session and agent; both may be empty
	// for content no agent saw yet, such as indexed files.
	SessionID string
	AgentID   string
	AgentType string
	Type      ContentType
	// Turn is the session turn, from 1. A zero Turn on write is assigned by
	// the store: a user prompt opens a new turn, anything else joins the
	// session's latest turn. Without a session, Turn stays zero.
	Turn int
	// Time is when the agent saw the content. Zero on write means now.
	Time time.Time
	// MsgID is the caller's own identifier for this message (a harness
	// message id, a tool-use id), unique within the session. Writing the same
	// MsgID again with the same content is a no-op that returns the first
	// occurrence; with other content it is a *ConflictError.
	MsgID string
	// ParentID is the entry that prompted this one (a tool result's tool
	// call). It must name a stored entry or one earlier in the same batch.
	ParentID string
	Files    []string
	Keywords []string
	Entities []string
	Metadata map[string]any
}

// Chunk is a retrieval unit of an entry: a byte range of its content that
// starts and ends on line boundaries, except where a single line is longer
// than a chunk may be.
type Chunk struct {
	// ID is assigned by the store when the chunk is written; vectors and
	// indexes refer to chunks by it.
	ID      int64
	EntryID string
	Ordinal int
	// Start and End are byte offsets into the entry's content, End exclusive.
	Start, End int
	// StartLine and EndLine are 1-based and inclusive.
	StartLine, EndLine int
	TokenCount         int
	// Symbols are names the chunk declares (functions, types), indexed with
	// extra weight.
	Symbols []string
	// Text is Content[Start:End]; filled on reads, ignored on writes.
	Text string
}

// LinkKind says how two entries relate.
type LinkKind string

// The link kinds.
const (
	// LinkParent: From prompted To (a tool call and its result).
	LinkParent LinkKind = "parent"
	// LinkDerivedFrom: From was made from To (a summary from its source).
	LinkDerivedFrom LinkKind = "derived_from"
	// LinkSupersedes: From replaces To (a new version of a file).
	LinkSupersedes LinkKind = "supersedes"
)

// Valid reports whether k is a known link kind.
func (k LinkKind) Valid() bool {
	return k == LinkParent || k == LinkDerivedFrom || k == LinkSupersedes
}

// Link is a directed relation between two entries.
type Link struct {
	FromID    string
	ToID      string
	Kind      LinkKind
	CreatedAt time.Time
}

// RefType is the kind of content a reference stands for.
type RefType string

// The reference types of the seed.
const (
	RefConversation   RefType = "conversation"
	RefResearch       RefType = "research"
	RefCodeAnalysis   RefType = "code_analysis"
	RefToolResults    RefType = "tool_results"
	RefPlanDiscussion RefType = "plan_discussion"
)

// Valid reports whether t is a known reference type.
func (t RefType) Valid() bool {
	switch t {
	case RefConversation, RefResearch, RefCodeAnalysis, RefToolResults, RefPlanDiscussion:
		return true
	}
	return false
}

// Reference records content evicted from an agent's window: what the
// [CTX-REF:…] marker left in its place expands back to.
type Reference struct {
	ID          string
	Type        RefType
	SessionID   string
	AgentID     string
	ContentIDs  []string
	Summary     string
	TokensSaved int
	TurnFrom    int
	TurnTo      int
	CreatedAt   time.Time
	Topics      []string
	Entities    []string
	QueryHints  []string
}

// PutResult reports what PutEntries did with one entry.
type PutResult struct {
	ID  string
	Seq int64
	// Turn is the occurrence's turn, as given or as assigned.
	Turn int
	// NewContent is true when the content was not stored before.
	NewContent bool
	// Replayed is true when the entry's MsgID was already stored in its
	// session with the same content, so nothing was written.
	Replayed bool
}

// Query is a lexical search.
type Query struct {
	// Text is what to look for: words, identifiers, paths. Punctuation and
	// query-language characters carry no meaning.
	Text string
	// Limit is the most hits to return; zero means DefaultLimit.
	Limit  int
	Filter Filter
}

// DefaultLimit is the number of hits a Query returns when Limit is zero.
const DefaultLimit = 10

// Filter restricts a search to occurrences that match every field set.
type Filter struct {
	SessionID string
	AgentID   string
	AgentType string
	Types     []ContentType
	// TurnFrom and TurnTo bound the turn, inclusive; zero leaves a side open.
	TurnFrom, TurnTo int
	// Since and Until bound the occurrence time, inclusive; zero leaves a
	// side open.
	Since, Until time.Time
	// Paths keeps content about these files: each is a file or directory
	// path, matched as itself or as a prefix at a slash ("internal/store"
	// matches internal/store/types.go), or a glob pattern with *, ? or [
	// ("*.md", "cmd/*/main.go"; * also matches slashes). Content matches if
	// any of its files matches any of them.
	Paths []string
	// History includes content that is no longer current: old versions of
	// indexed files, and files deleted from the tree.
	History bool
}

// Validate reports a filter that cannot mean anything: an unknown content
// type, or a path holding a NUL byte, which no path can (and which SQLite
// would read as the end of the pattern, matching everything).
func (f Filter) Validate() error {
	if len(f.Types) > MaxFilterTypes {
		return &ValidationError{Field: "types", Msg: fmt.Sprintf("%d given; at most %d (there are fewer content types)", len(f.Types), MaxFilterTypes)}
	}
	if len(f.Paths) > MaxFilterPaths {
		return &ValidationError{Field: "paths", Msg: fmt.Sprintf("%d given; at most %d: name directories rather than files", len(f.Paths), MaxFilterPaths)}
	}
	for _, t := range f.Types {
		if !t.Valid() {
			return &ValidationError{Field: "type", Msg: fmt.Sprintf("unknown content type %q", t)}
		}
	}
	for _, p := range f.Paths {
		if strings.IndexByte(p, 0) >= 0 {
			return &ValidationError{Field: "path", Msg: fmt.Sprintf("path %q holds a NUL byte", p)}
		}
	}
	return nil
}

// A Filter's lists are bounded: each path and type is a term of the
// backends' queries, which have limits of their own (SQLite's expression
// depth), far above what a caller means.
const (
	MaxFilterTypes = 32
	MaxFilterPaths = 256
)

// IsZero reports whether f restricts nothing. History does not restrict:
// it widens.
func (f Filter) IsZero() bool {
	return f.SessionID == "" && f.AgentID == "" && f.AgentType == "" && len(f.Types) == 0 &&
		f.TurnFrom == 0 && f.TurnTo == 0 && f.Since.IsZero() && f.Until.IsZero() && len(f.Paths) == 0
}

// Hit is a chunk that matched a search.
type Hit struct {
	Chunk Chunk
	// Score is the lexical relevance (BM25); higher is better.
	Score float64
	// Coverage is the share of the query the chunk holds, each query word
	// weighted by its inverse document frequency, from 0 to 1: a
	// calibrated lexical confidence, unlike BM25, whose scale depends on
	// the query and the corpus. Zero for hits that are not from a text
	// search.
	Coverage float64
	// Occurrence is the latest occurrence of the chunk's entry that matches
	// the filter: where the content was seen.
	Occurrence Occurrence
	// EntryTokens is the token count of the whole entry.
	EntryTokens int
}

// Provenance says where a hit was seen, in a line: path:lines for an
// indexed file, else session, turn, agent and lines.
func (h Hit) Provenance() string {
	c, o := h.Chunk, h.Occurrence
	lines := fmt.Sprintf("%d-%d", c.StartLine, c.EndLine)
	if c.StartLine == c.EndLine {
		lines = strconv.Itoa(c.StartLine)
	}
	if len(o.Files) > 0 && o.Type == CodeFile {
		return o.Files[0] + ":" + lines
	}
	var parts []string
	if o.SessionID != "" {
		parts = append(parts, "session "+o.SessionID)
		if o.Turn > 0 {
			parts = append(parts, "turn "+strconv.Itoa(o.Turn))
		}
	}
	if o.AgentID != "" {
		parts = append(parts, "agent "+o.AgentID)
	}
	if c.Ordinal > 0 || c.EndLine > c.StartLine {
		parts = append(parts, "lines "+lines)
	}
	if len(o.Files) > 0 {
		parts = append(parts, o.Files[0])
	}
	return strings.Join(parts, " · ")
}

// Stats describes what a store holds.
type Stats struct {
	// Location is where the store lives: a file path or a database URL
	// without credentials.
	Location      string
	SchemaVersion int
	SizeBytes     int64
	Sessions      int64
	Agents        int64
	Entries       int64
	Occurrences   int64
	Chunks        int64
	Links         int64
	References    int64
	// ContentBytes and Tokens sum over entries, each counted once.
	ContentBytes int64
	Tokens       int64
	ByType       map[ContentType]TypeStats
	First, Last  time.Time
	// Files counts the file index's records by state.
	Files map[FileState]int64
	// FreeBytes is the part of SizeBytes that is free space, which the
	// store reuses before it grows: what forgetting freed, since the file
	// itself does not shrink.
	FreeBytes int64
}

// TypeStats counts the occurrences of one content type.
type TypeStats struct {
	Occurrences int64
	Tokens      int64
}

// ID returns the entry ID of content: its SHA-256 in lower-case hex.
func ID(content []byte) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:])
}

// ValidID reports whether s is a well-formed entry ID.
func ValidID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// MaxIdentifierBytes bounds session, agent, message and other identifiers.
const MaxIdentifierBytes = 256

// MaxRefIDBytes bounds a reference's ID.
const MaxRefIDBytes = 64

// ValidRefID reports whether s can be a reference's ID: 1 to
// MaxRefIDBytes ASCII letters, digits, '-', '_' and '.'. These are the
// characters a [CTX-REF] marker can carry and an agent can type back
// without quoting (package ctxref holds the marker's grammar).
func ValidRefID(s string) bool {
	if len(s) == 0 || len(s) > MaxRefIDBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Prepare validates e for PutEntries and fills in its ID and the EntryID of
// its chunks. Backends call it on every entry they are given, so every
// backend accepts and refuses the same input. Errors are *ValidationError.
func (e *Entry) Prepare() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if len(e.Content) == 0 {
		bad("content", "is empty")
	}
	id := ID(e.Content)
	if e.ID != "" && e.ID != id {
		bad("id", "%s is not the SHA-256 of the content (%s)", e.ID, id)
	}
	e.ID, e.EntryID = id, id
	if !e.Type.Valid() {
		bad("type", "unknown content type %q", e.Type)
	}
	if e.TokenCount < 0 {
		bad("token_count", "is negative")
	}
	if e.Turn < 0 {
		bad("turn", "is negative")
	}
	if e.Turn > 0 && e.SessionID == "" {
		bad("turn", "is set without a session")
	}
	for field, v := range map[string]string{"session": e.SessionID, "agent": e.AgentID, "agent_type": e.AgentType, "msg_id": e.MsgID} {
		if len(v) > MaxIdentifierBytes {
			bad(field, "is longer than %d bytes", MaxIdentifierBytes)
		}
		if !utf8.ValidString(v) {
			bad(field, "is not valid UTF-8")
		}
	}
	if e.MsgID != "" && e.SessionID == "" {
		bad("msg_id", "is set without a session")
	}
	if e.ParentID != "" && !ValidID(e.ParentID) {
		bad("parent", "%q is not an entry ID", e.ParentID)
	}
	if len(e.Chunks) == 0 && len(e.Content) > 0 {
		bad("chunks", "none given")
	}
	prevEnd := 0
	for i := range e.Chunks {
		c := &e.Chunks[i]
		c.EntryID = id
		switch {
		case c.Ordinal != i:
			bad("chunks", "chunk %d has ordinal %d", i, c.Ordinal)
		case c.Start < prevEnd || c.End <= c.Start || c.End > len(e.Content):
			bad("chunks", "chunk %d has byte range [%d,%d) outside the content or out of order", i, c.Start, c.End)
		case c.StartLine < 1 || c.EndLine < c.StartLine:
			bad("chunks", "chunk %d has line range %d-%d", i, c.StartLine, c.EndLine)
		case c.TokenCount < 0:
			bad("chunks", "chunk %d has a negative token count", i)
		}
		prevEnd = c.End
	}
	return errors.Join(errs...)
}

// Validate checks a link before it is written.
func (l Link) Validate() error {
	var errs []error
	if !ValidID(l.FromID) {
		errs = append(errs, &ValidationError{Field: "from", Msg: fmt.Sprintf("%q is not an entry ID", l.FromID)})
	}
	if !ValidID(l.ToID) {
		errs = append(errs, &ValidationError{Field: "to", Msg: fmt.Sprintf("%q is not an entry ID", l.ToID)})
	}
	if !l.Kind.Valid() {
		errs = append(errs, &ValidationError{Field: "kind", Msg: fmt.Sprintf("unknown link kind %q", l.Kind)})
	}
	return errors.Join(errs...)
}

// Validate checks a reference before it is written.
func (r Reference) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if !ValidRefID(r.ID) {
		bad("id", "%q is not 1 to %d ASCII letters, digits, '-', '_' or '.'", r.ID, MaxRefIDBytes)
	}
	if !r.Type.Valid() {
		bad("type", "unknown reference type %q", r.Type)
	}
	if len(r.ContentIDs) == 0 {
		bad("content_ids", "none given")
	}
	for _, id := range r.ContentIDs {
		if !ValidID(id) {
			bad("content_ids", "%q is not an entry ID", id)
		}
	}
	if r.TurnFrom > r.TurnTo {
		bad("turn_range", "%d-%d runs backwards", r.TurnFrom, r.TurnTo)
	}
	if r.TokensSaved < 0 {
		bad("tokens_saved", "is negative")
	}
	return errors.Join(errs...)
}

// FileState says where an indexed file stands.
type FileState string

// The file states.
const (
	// FileCurrent: the file is indexed; its current version is searchable.
	FileCurrent FileState = "current"
	// FileDeleted: the file is gone from the tree; its versions stay
	// retrievable and are searchable only with Filter.History.
	FileDeleted FileState = "deleted"
	// FileSkipped: the file is known but not indexed (Reason says why).
	FileSkipped FileState = "skipped"
)

// File is an indexed file's record in the manifest.
type File struct {
	// Path is relative to the project root, slash-separated.
	Path  string
	State FileState
	// Reason says why a file was skipped, for a deleted file what became of
	// it ("renamed to x.go"), for a current one what was done to it
	// ("redacted: github_token").
	Reason string
	// EntryID is the entry of the current version; for a deleted file, of
	// the last version; empty for a skipped file.
	EntryID string
	Size    int64
	ModTime time.Time
	// Hash is the SHA-256 of the file's bytes on disk. It differs from
	// EntryID when secrets were redacted before storing.
	Hash     string
	Language string
	// Version counts the versions recorded; 0 for a file never indexed.
	Version   int
	IndexedAt time.Time
	// TokenCount and Chunks describe the version EntryID names.
	TokenCount int
	Chunks     int
}

// FileVersion is one version in a file's history.
type FileVersion struct {
	Path      string    `json:"path"`
	Version   int       `json:"version"`
	EntryID   string    `json:"entry_id"`
	Size      int64     `json:"size"`
	ModTime   time.Time `json:"mtime"`
	IndexedAt time.Time `json:"indexed_at"`
}

// ChangeKind says what a FileChange does.
type ChangeKind string

// The kinds of file change.
const (
	// ChangeVersion records new content for a path (a new file, an edit, a
	// rename's new path): Entry holds it.
	ChangeVersion ChangeKind = "version"
	// ChangeTouch records that a file's size or time changed but not its
	// content.
	ChangeTouch ChangeKind = "touch"
	// ChangeSkip records a file that is not indexed, with a Reason.
	ChangeSkip ChangeKind = "skip"
	// ChangeDelete records that a file left the tree.
	ChangeDelete ChangeKind = "delete"
)

// FileChange is one change to the file index, written by PutFiles.
type FileChange struct {
	Kind     ChangeKind
	Path     string
	Size     int64
	ModTime  time.Time
	Hash     string
	Language string
	Reason   string
	// Entry is the content of a ChangeVersion, with its tokens and chunks.
	// Its occurrence is filled by the store: type code_file, no session,
	// Files naming the path.
	Entry *Entry
}

// FileFilter selects files from the manifest.
type FileFilter struct {
	// Prefix keeps paths that start with it ("internal/" for a directory).
	Prefix string
	// States keeps files in these states; none means all.
	States []FileState
	// Brief leaves EntryID, TokenCount and Chunks out, which cost a lookup
	// per file: enough to compare the manifest with a tree.
	Brief bool
}

// ValidPath reports whether p can name an indexed file: relative,
// slash-separated, clean, and not leaving the root.
func ValidPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsRune(p, 0) || !utf8.ValidString(p) {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

// Validate checks a file change before it is written; backends call it.
func (c *FileChange) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if !ValidPath(c.Path) {
		bad("path", "%q is not a clean relative path", c.Path)
	}
	if c.Size < 0 {
		bad("size", "is negative")
	}
	switch c.Kind {
	case ChangeVersion:
		if c.Entry == nil {
			bad("entry", "a version needs its content")
		} else {
			c.Entry.Type, c.Entry.SessionID, c.Entry.AgentID, c.Entry.Turn, c.Entry.MsgID = CodeFile, "", "", 0, ""
			c.Entry.Files = []string{c.Path}
			if err := c.Entry.Prepare(); err != nil {
				errs = append(errs, err)
			}
		}
	case ChangeTouch, ChangeDelete:
	case ChangeSkip:
		if c.Reason == "" {
			bad("reason", "a skipped file needs a reason")
		}
	default:
		bad("kind", "unknown change kind %q", c.Kind)
	}
	return errors.Join(errs...)
}

// ChunkText is a chunk to embed: its ID and text.
type ChunkText struct {
	ID   int64
	Text string
	// Path is the file the chunk is from, if it is from one.
	Path string
	// Context is the conversation context of an entry's first chunk: the
	// end of the entry before it in its session, for entries too short to
	// stand alone.
	Context string
}

// ChunkVector is a chunk's vector under some embedding model.
type ChunkVector struct {
	ID     int64
	Vector []float32
	// Seq is the vector's place in the order its model's vectors were
	// written: set by the store on read (Vectors), ignored on write.
	Seq int64
}

// VectorStats says how much of the store a model has embedded.
type VectorStats struct {
	// Chunks counts the chunks in default search; Embedded how many of them
	// have a vector under the model.
	Chunks, Embedded int64
	Dim              int
}

// Access records that chunks were used: shown to an agent, retrieved on
// request, or quoted in a response. Recently and often used content stays
// in the hot tier of retrieval.
type Access struct {
	ChunkID int64
	Count   int
	Last    time.Time
}
