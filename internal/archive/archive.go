// Package archive is the archivalist: the memory many agents and sessions
// share. It keeps an append-only global history (patterns, failures with
// their resolutions and outcomes, insights, decisions, cross-cutting
// intents) and per-session state (resume point, files, what the user wants
// and rejects), with a monotonic global version and a version per session.
//
// Every record is written once and never changed: supersession, usage
// counts and the newer state of a session item are new records beside the
// old ones. Writes are all-or-nothing and durable when they return (the
// store group-commits them). Versions live in the store, so several engram
// processes share one archive; they are also the cache keys, so nothing
// cached is ever stale.
//
// Writes go through a Handle, which an agent gets for its own session
// only: a handle cannot name another session, so cross-session writes are
// impossible by construction, and asking for a handle in another session
// is refused and audited. Reads are global and versioned: a reader that
// sends the versions it holds gets NOT_MODIFIED, or a delta.
//
// Only an operator removes or rewrites records (forget.go): such a purge
// advances the versions and the store's purge count, and every process's
// mirror starts again when it sees the count change.
package archive

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/maypok86/otter/v2"

	"github.com/engramhq/engram/internal/embed"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// Limits bound what one session can write, so that many agents cannot
// flood the shared history. Zero fields take the defaults; a negative
// rate means no limit.
type Limits struct {
	// PatternsPerMinute is how many patterns one session may add per
	// minute (the seed's 10).
	PatternsPerMinute int
	// WritesPerMinute is how many global records of any kind one session
	// may add per minute.
	WritesPerMinute int
	// ActivePerCategory is how many active patterns one category may hold
	// (the seed's 50).
	ActivePerCategory int
}

// Dedup holds the thresholds of duplicate detection (the seed's values by
// default): trigram similarity above Trigram is a duplicate; between
// Suspect and Trigram, embedding similarity above Embedding is. engram
// adds Words: a Jaccard similarity of stemmed content words at or above
// it is a duplicate too (negative: off), which catches the rewordings
// trigrams miss (BENCHMARKS.md).
type Dedup struct {
	Trigram   float64
	Suspect   float64
	Embedding float64
	Words     float64
}

// Options configure an Archive. The zero value works.
type Options struct {
	Limits Limits
	Dedup  Dedup
	// DeltaLimit is the most records a delta read returns; past it the
	// reader is told to read in full (the seed's 500).
	DeltaLimit int
	// Embedder, if set, settles borderline duplicates by cosine and adds
	// the vector signal to recall.
	Embedder embed.Embedder
	// Fusion merges recall's lexical and vector rankings.
	Fusion retrieve.FuseOptions
	// RelevanceFloor is the least share of a recall's words, each
	// weighted by its inverse document frequency among the records, that
	// its best record must hold: below it the recall finds nothing rather
	// than the least bad records. Zero means DefaultRelevanceFloor;
	// negative turns the floor off.
	RelevanceFloor float64
	// Classifier, if set, classifies questions in words instead of the
	// rules (which remain the fallback when it fails).
	Classifier Classifier
	// Encoding counts briefing tokens; nil means o200k_base.
	Encoding *tokens.Encoding
	// KeepSecrets stores what agents write as given; by default secrets
	// of known formats are redacted, as in messages and files.
	KeepSecrets bool
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Default values of Options.
const (
	DefaultPatternsPerMinute = 10
	DefaultWritesPerMinute   = 600
	DefaultActivePerCategory = 50
	DefaultDeltaLimit        = 500
	DefaultTrigram           = 0.90
	DefaultSuspect           = 0.50
	DefaultEmbedding         = 0.85
	DefaultWords             = 0.70
	// DefaultRelevanceFloor lets a record through that holds a third of
	// what a recall asks, by weight: one of three equally rare words, so
	// that a rewording that keeps a key word is found, and a question
	// whose telling words the records lack is not (BENCHMARKS.md measures
	// it on LoCoMo and LongMemEval as history search's floor).
	DefaultRelevanceFloor = 1.0 / 3
	// DefaultIntentTTL is how long an intent stays active if it is never
	// completed (the seed's 30 minutes).
	DefaultIntentTTL = 30 * time.Minute
)

// Size limits of what a record may hold.
const (
	MaxTextBytes  = 2_000  // a pattern, an approach, an insight, a decision
	MaxNoteBytes  = 16_000 // descriptions, contexts, rationales, summaries
	MaxListItems  = 100    // scope paths, steps, alternatives
	MaxIDBytes    = 64
	maxRecordBody = 64_000
)

// Archive is the archivalist over a store. It is safe for concurrent use.
type Archive struct {
	st   store.ArchiveStore
	opts Options
	enc  *tokens.Encoding
	log  *slog.Logger
	now  func() time.Time

	// mu guards mirror: global() updates it under the write lock; readers
	// hold the read lock while they use it.
	mu     sync.RWMutex
	mirror *mirror

	// sessions caches session state by session and version; briefings
	// caches rendered briefings by session, tier and both versions.
	sessions  *otter.Cache[string, *sessionState]
	briefings *otter.Cache[string, *Briefing]
	vecs      *otter.Cache[string, []float32]
	tris      *otter.Cache[string, map[string]struct{}]
}

// New returns the archivalist over st.
func New(st store.ArchiveStore, opts Options) (*Archive, error) {
	if opts.Limits.PatternsPerMinute == 0 {
		opts.Limits.PatternsPerMinute = DefaultPatternsPerMinute
	}
	if opts.Limits.WritesPerMinute == 0 {
		opts.Limits.WritesPerMinute = DefaultWritesPerMinute
	}
	if opts.Limits.ActivePerCategory <= 0 {
		opts.Limits.ActivePerCategory = DefaultActivePerCategory
	}
	if opts.Dedup.Trigram <= 0 {
		opts.Dedup.Trigram = DefaultTrigram
	}
	if opts.Dedup.Suspect <= 0 {
		opts.Dedup.Suspect = DefaultSuspect
	}
	if opts.Dedup.Embedding <= 0 {
		opts.Dedup.Embedding = DefaultEmbedding
	}
	if opts.Dedup.Words == 0 {
		opts.Dedup.Words = DefaultWords
	}
	if opts.RelevanceFloor == 0 {
		opts.RelevanceFloor = DefaultRelevanceFloor
	}
	if opts.DeltaLimit <= 0 {
		opts.DeltaLimit = DefaultDeltaLimit
	}
	a := &Archive{st: st, opts: opts, enc: opts.Encoding, log: opts.Logger, now: opts.Now, mirror: newMirror()}
	if a.enc == nil {
		enc, err := tokens.Get("o200k_base")
		if err != nil {
			return nil, err
		}
		a.enc = enc
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	var err error
	if a.sessions, err = otter.New(&otter.Options[string, *sessionState]{MaximumSize: 4096}); err != nil {
		return nil, err
	}
	if a.briefings, err = otter.New(&otter.Options[string, *Briefing]{MaximumSize: 4096}); err != nil {
		return nil, err
	}
	if a.vecs, err = otter.New(&otter.Options[string, []float32]{MaximumSize: 65536}); err != nil {
		return nil, err
	}
	if a.tris, err = otter.New(&otter.Options[string, map[string]struct{}]{MaximumSize: 65536}); err != nil {
		return nil, err
	}
	return a, nil
}

// ErrUnknownAgent is returned for an agent that was never registered.
var ErrUnknownAgent = errors.New("unknown agent")

// ErrBadKey is returned for a key no agent holds.
var ErrBadKey = errors.New("not an agent key engram issued")

// IsolationError refuses an agent's access to a session not its own.
type IsolationError struct {
	AgentID, AgentSession, Session string
	// What is the refused attempt, when it is not a write to Session as a
	// whole (another agent's window, another agent's key).
	What string
}

func (e *IsolationError) Error() string {
	if e.What != "" && (e.Session == "" || e.Session == e.AgentSession) {
		return fmt.Sprintf("agent %s may not %s: an agent's key acts as its own agent only", e.AgentID, strings.TrimPrefix(e.What, "to "))
	}
	return fmt.Sprintf("agent %s belongs to session %s and cannot write to session %s", e.AgentID, e.AgentSession, e.Session)
}

// ConflictError refuses a write that contradicts what is stored. Records
// names the conflicting records.
type ConflictError struct {
	Msg     string
	Records []string
}

func (e *ConflictError) Error() string { return e.Msg }

// RateLimitError refuses a write over a limit; RetryAfter says when the
// same write could succeed (zero: not by waiting).
type RateLimitError struct {
	Msg        string
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%s; retry after %s", e.Msg, e.RetryAfter.Round(time.Second))
	}
	return e.Msg
}

// invalid returns a validation error for a field.
func invalid(field, format string, args ...any) error {
	return &store.ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@/-]*$`)

func checkID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	if len(id) > MaxIDBytes {
		return invalid(field, "is %d bytes; at most %d", len(id), MaxIDBytes)
	}
	if !idPattern.MatchString(id) {
		return invalid(field, "%q may hold letters, digits and _ . : @ / - only", id)
	}
	return nil
}

// AgentIDFor is the ID of the agent a front end writes as in session
// when none is named (mcp@SESSION, cli@SESSION): prefix@session when that
// is a valid ID; else, for a session that holds what an ID may not (a
// space, a letter outside ASCII) or is too long, prefix@ and the session
// with each such character as '_', cut to fit, then '-' and a digest of
// the session, which keeps two sessions that read alike apart.
func AgentIDFor(prefix, session string) string {
	id := prefix + "@" + session
	if checkID("agent", id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(session))
	suffix := "-" + hex.EncodeToString(sum[:4])
	b := []byte(prefix + "@")
	for _, r := range session {
		if len(b) >= MaxIDBytes-len(suffix) {
			break
		}
		if r < utf8.RuneSelf && idPattern.MatchString("a"+string(r)) {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	return string(b) + suffix
}

// ClipID makes any string a valid agent ID, as the hooks name agents
// after a harness's session and sub-agent IDs: s itself when it is one;
// else s with each character an ID may not hold as '_', cut to leave
// room, then '-' and 16 hex digits of the SHA-256 of s, so that two
// strings that read alike stay apart. (A valid s that is only too long
// keeps its first bytes, as the hooks have always cut it.)
func ClipID(s string) string {
	if checkID("agent", s) == nil {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	suffix := "-" + hex.EncodeToString(sum[:8])
	b := make([]byte, 0, MaxIDBytes)
	for _, r := range s {
		if len(b) >= MaxIDBytes-len(suffix) {
			break
		}
		switch {
		case len(b) == 0 && (r >= utf8.RuneSelf || !idPattern.MatchString(string(r))):
			b = append(b, 'x')
		case r < utf8.RuneSelf && idPattern.MatchString("a"+string(r)):
			b = append(b, byte(r))
		default:
			b = append(b, '_')
		}
	}
	if len(b) == 0 {
		b = append(b, 'x')
	}
	return string(b) + suffix
}

func checkSession(id string) error {
	if id == "" {
		return invalid("session", "is required")
	}
	if len(id) > store.MaxIdentifierBytes {
		return invalid("session", "is %d bytes; at most %d", len(id), store.MaxIdentifierBytes)
	}
	if strings.TrimSpace(id) != id || strings.ContainsAny(id, "\x00\n\r\t") {
		return invalid("session", "%q must not hold white space at its ends or control characters", id)
	}
	return nil
}

func checkText(field, s string, required bool, max int) error {
	if strings.TrimSpace(s) == "" {
		if required {
			return invalid(field, "is required")
		}
		return nil
	}
	if len(s) > max {
		return invalid(field, "is %d bytes; at most %d", len(s), max)
	}
	if strings.ContainsRune(s, 0) {
		return invalid(field, "holds a NUL byte")
	}
	return nil
}

func checkList(field string, items []string, max int) error {
	if len(items) > MaxListItems {
		return invalid(field, "has %d items; at most %d", len(items), MaxListItems)
	}
	for i, s := range items {
		if err := checkText(fmt.Sprintf("%s[%d]", field, i), s, true, max); err != nil {
			return err
		}
	}
	return nil
}

// AgentSpec describes an agent to register.
type AgentSpec struct {
	// ID is a short unique id (o1, c2); empty assigns one.
	ID   string `json:"id,omitempty"`
	Name string `json:"name,omitempty"`
	// SessionID is required for a top-level agent; a sub-agent inherits
	// its parent's session.
	SessionID string `json:"session,omitempty"`
	ParentID  string `json:"parent,omitempty"`
	// Model is the model the agent runs on, such as claude-opus-4-5.
	Model string `json:"model,omitempty"`
	Role  string `json:"role,omitempty"`
}

// Register registers an agent and returns its handle. A sub-agent (one
// with a parent) joins its parent's session. It is the operator's
// registration (the CLI, a local MCP server, an HTTP caller holding the
// server's token): the agent is a credential of its own.
func (a *Archive) Register(ctx context.Context, spec AgentSpec) (*Handle, error) {
	h, _, err := a.register(ctx, spec, nil, false)
	return h, err
}

// RegisterWithKey registers an agent as Register does and issues it a key,
// the credential it presents to engram serve; the key is returned once and
// only its hash is kept. by, if not nil, is the key holder registering it:
// the new agent joins by's session, as by's sub-agent unless spec names
// another parent there, and shares by's credential, so that rate limits
// count them together and registering agents cannot multiply them.
func (a *Archive) RegisterWithKey(ctx context.Context, spec AgentSpec, by *Handle) (*Handle, string, error) {
	return a.register(ctx, spec, by, true)
}

func (a *Archive) register(ctx context.Context, spec AgentSpec, by *Handle, withKey bool) (*Handle, string, error) {
	if by != nil {
		if spec.SessionID != "" && spec.SessionID != by.agent.SessionID {
			return nil, "", a.Refuse(ctx, by.agent, spec.SessionID, "to register an agent")
		}
		spec.SessionID = by.agent.SessionID
		if spec.ParentID == "" {
			spec.ParentID = by.agent.ID
		}
	}
	var key, keyHash string
	if withKey {
		key, keyHash = newKey()
	}
	h, err := a.registerTx(ctx, spec, by, keyHash)
	if err != nil {
		return nil, "", err
	}
	return h, key, nil
}

func (a *Archive) registerTx(ctx context.Context, spec AgentSpec, by *Handle, keyHash string) (*Handle, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	var agent store.ArchiveAgent
	err := a.write(ctx, func(tx store.ArchiveTx) error {
		var err error
		agent, err = a.registerIn(tx, spec, by, keyHash)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("register agent: %w", err)
	}
	return &Handle{a: a, agent: agent}, nil
}

// checkSpec checks what an agent's registration names before its
// transaction.
func checkSpec(spec AgentSpec) error {
	if spec.ID != "" {
		if err := checkID("id", spec.ID); err != nil {
			return err
		}
	}
	if spec.ParentID == "" {
		// A new session's name must not read as another's; sessions
		// named before this check are still read (checkSession).
		if err := errors.Join(checkSession(spec.SessionID), store.CheckName("session", spec.SessionID)); err != nil {
			return err
		}
	}
	for _, f := range []struct{ name, v string }{{"name", spec.Name}, {"model", spec.Model}, {"role", spec.Role}} {
		// One line each, printed in lists: no control characters (an
		// escape sequence in a name drove the terminal that listed it).
		if err := cmp.Or(checkText(f.name, f.v, false, 200), store.CheckName(f.name, f.v)); err != nil {
			return err
		}
	}
	return nil
}

// registerIn registers the agent spec names in tx (checkSpec checked it).
func (a *Archive) registerIn(tx store.ArchiveTx, spec AgentSpec, by *Handle, keyHash string) (store.ArchiveAgent, error) {
	agent := store.ArchiveAgent{ID: spec.ID, Name: spec.Name, SessionID: spec.SessionID, ParentID: spec.ParentID,
		Model: spec.Model, Role: spec.Role, RegisteredAt: a.now()}
	if spec.ParentID != "" {
		parent, err := tx.Agent(spec.ParentID)
		if errors.Is(err, store.ErrNotFound) {
			return agent, fmt.Errorf("parent %s: %w", spec.ParentID, ErrUnknownAgent)
		} else if err != nil {
			return agent, err
		}
		if spec.SessionID != "" && spec.SessionID != parent.SessionID {
			return agent, invalid("session", "a sub-agent joins its parent's session %s, not %s", parent.SessionID, spec.SessionID)
		}
		agent.SessionID = parent.SessionID
	}
	if by != nil {
		agent.Credential = by.agent.Credential
	}
	if agent.ID == "" {
		id, err := shortID(tx, spec)
		if err != nil {
			return agent, err
		}
		agent.ID = id
	}
	if agent.Name == "" {
		agent.Name = agent.ID
	}
	if agent.Credential == "" {
		agent.Credential = agent.ID
	}
	if err := tx.PutAgent(agent); err != nil {
		return agent, err
	}
	if keyHash != "" {
		if err := tx.SetAgentKey(agent.ID, keyHash); err != nil {
			return agent, err
		}
		agent.HasKey = true
	}
	sv, err := tx.NextSession(agent.SessionID)
	if err != nil {
		return agent, err
	}
	gv, _, err := tx.Versions("")
	if err != nil {
		return agent, err
	}
	var details []string
	if agent.ParentID != "" {
		details = append(details, "parent "+agent.ParentID)
	}
	if by != nil {
		details = append(details, "registered by "+by.agent.ID)
	}
	if keyHash != "" {
		details = append(details, "key issued")
	}
	return agent, tx.AppendEvent(&store.ArchiveEvent{Type: "agent_register", GV: gv, SV: sv, SessionID: agent.SessionID,
		AgentID: agent.ID, Scope: "agents", Detail: strings.Join(details, ", "), At: agent.RegisteredAt})
}

// shortID assigns the seed's short ids: the first letter of the model
// family (o for opus, c for codex, ...) and a number.
func shortID(tx store.ArchiveTx, spec AgentSpec) (string, error) {
	letter := "a"
	src := strings.ToLower(spec.Model)
	switch {
	case strings.Contains(src, "opus"):
		letter = "o"
	case strings.Contains(src, "sonnet"):
		letter = "s"
	case strings.Contains(src, "haiku"):
		letter = "h"
	case strings.Contains(src, "codex"):
		letter = "c"
	case strings.Contains(src, "gpt"):
		letter = "g"
	case strings.Contains(src, "gemini"):
		letter = "m"
	case src != "" && src[0] >= 'a' && src[0] <= 'z':
		letter = src[:1]
	}
	for n := 1; n < 1_000_000; n++ {
		id := fmt.Sprintf("%s%d", letter, n)
		if _, err := tx.Agent(id); errors.Is(err, store.ErrNotFound) {
			return id, nil
		} else if err != nil {
			return "", err
		}
	}
	return "", errors.New("no free agent id")
}

// Handle returns the handle of a registered agent: its capability to
// write to its own session.
func (a *Archive) Handle(ctx context.Context, agentID string) (*Handle, error) {
	agent, err := a.st.ArchiveAgent(ctx, agentID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("agent %s: %w (register it first)", agentID, ErrUnknownAgent)
	} else if err != nil {
		return nil, err
	}
	return &Handle{a: a, agent: agent}, nil
}

// HandleIn returns an agent's handle for a session the caller names: the
// front ends' entry point, where a request names both. An agent of another
// session is refused with an *IsolationError, and the attempt is audited
// in the event log.
func (a *Archive) HandleIn(ctx context.Context, sessionID, agentID string) (*Handle, error) {
	h, err := a.Handle(ctx, agentID)
	if err != nil {
		return nil, err
	}
	if sessionID == "" || h.agent.SessionID == sessionID {
		return h, nil
	}
	ierr := &IsolationError{AgentID: agentID, AgentSession: h.agent.SessionID, Session: sessionID}
	audit := a.write(ctx, func(tx store.ArchiveTx) error {
		gv, sv, err := tx.Versions(h.agent.SessionID)
		if err != nil {
			return err
		}
		return tx.AppendEvent(&store.ArchiveEvent{Type: "isolation_violation", GV: gv, SV: sv, SessionID: h.agent.SessionID,
			AgentID: agentID, Scope: "session", Detail: "attempted session " + sessionID, At: a.now()})
	})
	if audit != nil {
		a.log.Error("cannot audit an isolation violation", "err", audit, "agent", agentID)
	}
	a.log.Warn("cross-session write refused", "agent", agentID, "agent_session", h.agent.SessionID, "session", sessionID)
	return nil, ierr
}

// Connect returns the handle of the agent spec names in spec's session,
// registering it there if it is new: the entry point of front ends whose
// clients name themselves (an MCP connection, an HTTP caller, the CLI's
// operator agent). An agent of another session is refused as HandleIn
// refuses it.
func (a *Archive) Connect(ctx context.Context, spec AgentSpec) (*Handle, error) {
	h, err := a.HandleIn(ctx, spec.SessionID, spec.ID)
	if !errors.Is(err, ErrUnknownAgent) {
		return h, err
	}
	h, err = a.Register(ctx, spec)
	var ce *store.ConflictError
	if errors.As(err, &ce) { // registered meanwhile, by another process
		return a.HandleIn(ctx, spec.SessionID, spec.ID)
	}
	return h, err
}

// ConnectOnWrite is Connect for a caller whose agent is registered by its
// first write rather than by connecting (an HTTP request naming its
// session): the handle of an agent not registered yet registers it in the
// transaction of its first write, so that a write refused (bad input,
// another session's record) leaves no registration behind. Reads through
// the handle register nothing.
func (a *Archive) ConnectOnWrite(ctx context.Context, spec AgentSpec) (*Handle, error) {
	h, err := a.HandleIn(ctx, spec.SessionID, spec.ID)
	if !errors.Is(err, ErrUnknownAgent) {
		return h, err
	}
	if spec.ID == "" || spec.ParentID != "" {
		return nil, invalid("id", "an agent registered by its first write is named, in its session, with no parent")
	}
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	// The agent as registerIn will make it.
	agent := store.ArchiveAgent{ID: spec.ID, Name: cmp.Or(spec.Name, spec.ID), SessionID: spec.SessionID,
		Model: spec.Model, Role: spec.Role, Credential: spec.ID, RegisteredAt: a.now()}
	return &Handle{a: a, agent: agent, pending: &spec}, nil
}

// Agents returns the registered agents of a session, or of all sessions.
func (a *Archive) Agents(ctx context.Context, sessionID string) ([]store.ArchiveAgent, error) {
	return a.st.ArchiveAgents(ctx, sessionID)
}

// Events returns up to limit events after seq (negative: the last limit).
// The limit is 1 to MaxEvents; zero means DefaultEvents.
func (a *Archive) Events(ctx context.Context, after int64, limit int) ([]store.ArchiveEvent, error) {
	if limit < 0 || limit > MaxEvents {
		return nil, invalid("limit", "is %d; it must be from 1 to %d, or 0 (the default, %d)", limit, MaxEvents, DefaultEvents)
	}
	if limit == 0 {
		limit = DefaultEvents
	}
	return a.st.ArchiveEvents(ctx, after, limit)
}

// How many events a read returns by default, and at most.
const (
	DefaultEvents = 100
	MaxEvents     = 1000
)

// Versions returns the current global version and a session's version.
func (a *Archive) Versions(ctx context.Context, sessionID string) (Versions, error) {
	gv, sv, err := a.st.ArchiveVersions(ctx, sessionID)
	return Versions{GV: gv, SV: sv}, err
}

// Versions are the two version dimensions a read reflects.
type Versions struct {
	GV uint64 `json:"gv"`
	SV uint64 `json:"sv"`
}

// Handle is an agent's capability: every write through it lands in the
// agent's own session, and it offers no way to name another.
type Handle struct {
	a     *Archive
	agent store.ArchiveAgent
	// pending is the registration of an agent that its first write makes
	// (ConnectOnWrite); nil once made.
	mu      sync.Mutex
	pending *AgentSpec
}

// write runs fn in a write transaction of the archive, registering the
// handle's agent first if its first write is to (ConnectOnWrite): when
// fn fails, neither stays. An agent registered meanwhile by another
// request is taken as it is, unless it is of another session.
func (h *Handle) write(ctx context.Context, fn func(tx store.ArchiveTx) error) error {
	h.mu.Lock()
	spec := h.pending
	h.mu.Unlock()
	if spec == nil {
		return h.a.write(ctx, fn)
	}
	err := h.a.write(ctx, func(tx store.ArchiveTx) error {
		ag, err := tx.Agent(spec.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if _, err := h.a.registerIn(tx, *spec, nil, ""); err != nil {
				return fmt.Errorf("register agent: %w", err)
			}
		case err != nil:
			return err
		case ag.SessionID != spec.SessionID:
			return &IsolationError{AgentID: spec.ID, AgentSession: ag.SessionID, Session: spec.SessionID}
		}
		return fn(tx)
	})
	if err == nil {
		h.mu.Lock()
		h.pending = nil
		h.mu.Unlock()
	}
	return err
}

// Agent returns the agent the handle belongs to.
func (h *Handle) Agent() store.ArchiveAgent { return h.agent }

// Session returns the handle's session.
func (h *Handle) Session() string { return h.agent.SessionID }

// WriteResult says what a write did and the versions after it.
type WriteResult struct {
	// Status is created, merged (a duplicate of ID), updated, or
	// unchanged: a session's state written again as it was, which writes
	// nothing and leaves its versions as they are.
	Status string `json:"status"`
	ID     string `json:"id,omitempty"`
	GV     uint64 `json:"gv"`
	SV     uint64 `json:"sv,omitempty"`
	// Merged explains a merge into an existing record.
	Merged *MergeInfo `json:"merged,omitempty"`
	// Superseded lists the records this write superseded.
	Superseded []string `json:"superseded,omitempty"`
	// Notices are things the writer should know, such as intents of other
	// sessions that overlap one just declared.
	Notices []string `json:"notices,omitempty"`
}

// MergeInfo describes the record a duplicate was merged into.
type MergeInfo struct {
	ExistingID string  `json:"existing_id"`
	Existing   string  `json:"existing"`
	Similarity float64 `json:"similarity"`
	// Method is hash, trigram or embedding.
	Method string `json:"method"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs of strings and numbers are marshalled
	}
	return b
}

// isAncestor reports whether agent anc is an ancestor of agent id (its
// parent, its parent's parent, ...).
func isAncestor(tx store.ArchiveTx, anc, id string) (bool, error) {
	seen := map[string]bool{}
	for cur := id; cur != "" && !seen[cur]; {
		seen[cur] = true
		ag, err := tx.Agent(cur)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if ag.ParentID == anc {
			return true, nil
		}
		cur = ag.ParentID
	}
	return false, nil
}
