package store

import (
	"context"
	"time"
)

// RecordKind says what an archive record is.
type RecordKind string

// Global kinds are shared by every session and advance the global version;
// session kinds belong to one session and advance its session version.
const (
	KindPattern    RecordKind = "pattern"
	KindFailure    RecordKind = "failure"
	KindResolution RecordKind = "resolution" // Ref: the failure it resolves
	KindInsight    RecordKind = "insight"
	KindDecision   RecordKind = "decision"
	KindIntent     RecordKind = "intent"      // cross-cutting work declared by a session
	KindIntentDone RecordKind = "intent_done" // Ref: the intent it completes

	KindResume RecordKind = "resume" // a session's resume state; the newest is current
	KindFile   RecordKind = "file"   // Key: the path; the newest per path is current
	KindWant   RecordKind = "want"   // Key: the normalised text; the newest per key is current
	KindReject RecordKind = "reject" // Key: as for KindWant, in the same key space
)

// Global reports whether records of kind k belong to the global history.
func (k RecordKind) Global() bool {
	switch k {
	case KindPattern, KindFailure, KindResolution, KindInsight, KindDecision, KindIntent, KindIntentDone:
		return true
	}
	return false
}

// ArchiveRecord is one immutable record of the archivalist. Nothing about
// it changes once written: supersession and usage are kept beside it, and
// the newer state of a session item is a newer record.
type ArchiveRecord struct {
	// Seq is the store's order of arrival, assigned on write.
	Seq int64
	// ID names a global record: its kind's prefix and the global version
	// it was born at (pat-12). Session records have none.
	ID   string
	Kind RecordKind
	// GV is the global version a global record was born at; SV the session
	// version a session record was born at.
	GV, SV    uint64
	SessionID string
	AgentID   string
	Model     string
	Category  string
	Key       string
	Ref       string
	// Hash is the hash of the normalised text, for duplicate detection.
	Hash string
	// Text is what full-text search indexes.
	Text string
	// Body holds the kind's fields as JSON.
	Body      []byte
	CreatedAt time.Time

	// Filled on reads: the record that superseded this one, if any, and
	// how often a duplicate of it was merged into it.
	SupersededBy string
	Uses         int64
}

// RecordQuery selects archive records. Zero fields do not filter.
type RecordQuery struct {
	Kinds     []RecordKind
	IDs       []string
	SessionID string
	// Category matches the category and its descendants: "auth" matches
	// "auth" and "auth.tokens".
	Category string
	Key      string
	Ref      string
	Hash     string
	AgentID  string
	// Credential keeps records written by the agents of that credential
	// (ArchiveAgent.Credential).
	Credential string
	// AfterGV keeps global records born after that version; UpToGV, if
	// set, those born at or before it.
	AfterGV, UpToGV uint64
	// UpToSV keeps session records born at or before that session
	// version (with Latest: the state at that version).
	UpToSV uint64
	// Since keeps records written at or after that time.
	Since time.Time
	// Active drops superseded records.
	Active bool
	// Latest keeps only the newest record per kind and key of the session
	// SessionID names (wants and rejects share their keys): the session's
	// current state. It needs SessionID.
	Latest bool
	// Newest orders newest first; the default is oldest first.
	Newest bool
	Limit  int
	// Offset skips that many records first.
	Offset int
}

// ArchiveAgent is an agent registered with the archivalist. Its ID is
// unique in the store and its session never changes. The JSON names are
// those the front ends serve.
type ArchiveAgent struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	SessionID    string    `json:"session"`
	ParentID     string    `json:"parent"`
	Model        string    `json:"model"`
	Role         string    `json:"role"`
	RegisteredAt time.Time `json:"registered_at"`
	// Credential is the agent whose key lineage this agent belongs to:
	// its own ID, unless the holder of another agent's key registered
	// it. Rate limits count per credential. Empty on PutAgent means ID.
	Credential string `json:"credential"`
	// HasKey says whether a key was issued to the agent (only its hash is
	// kept, never served); filled on reads.
	HasKey bool `json:"has_key"`
}

// ArchiveEvent is one line of the archivalist's event log. The JSON names
// are those the front ends serve.
type ArchiveEvent struct {
	Seq       int64     `json:"seq"`
	Type      string    `json:"type"`
	GV        uint64    `json:"gv"`
	SV        uint64    `json:"sv"`
	SessionID string    `json:"session"`
	AgentID   string    `json:"agent"`
	Scope     string    `json:"scope"`
	RecordID  string    `json:"record"`
	Detail    string    `json:"detail"`
	At        time.Time `json:"at"`
}

// ArchiveHit is a record found by full-text search, best first.
type ArchiveHit struct {
	Record ArchiveRecord
	Score  float64 // BM25, higher is better
}

// ArchiveTx is what a write sees of the archive: reads of the state it
// changes and appends, all in one transaction.
type ArchiveTx interface {
	// Versions returns the global version and the session's version.
	Versions(sessionID string) (gv, sv uint64, err error)
	// NextGlobal advances the global version and returns the new value.
	NextGlobal() (uint64, error)
	// NextSession advances a session's version and returns the new value.
	NextSession(sessionID string) (uint64, error)
	// Append writes a record and sets its Seq; the Text of a global
	// record is indexed for ArchiveSearch.
	Append(r *ArchiveRecord) error
	// Records reads records as ArchiveRecords does.
	Records(q RecordQuery) ([]ArchiveRecord, error)
	// Supersede marks the record old as superseded by the record by.
	Supersede(old, by string) error
	// Use counts a merge of a duplicate into the record id.
	Use(id string, at time.Time) error
	// Agent returns a registered agent, or ErrNotFound.
	Agent(id string) (ArchiveAgent, error)
	// PutAgent registers an agent; an ID already registered is a
	// *ConflictError.
	PutAgent(a ArchiveAgent) error
	// SetAgentKey keeps the hash of an agent's new key, replacing any
	// earlier one; an unknown agent is ErrNotFound.
	SetAgentKey(id, keyHash string) error
	// AppendEvent writes an event and sets its Seq.
	AppendEvent(e *ArchiveEvent) error
}

// ArchiveStore is the storage of the archivalist. Its writes are
// all-or-nothing and durable when they return; versions are read from the
// store, so several processes share one archive correctly.
type ArchiveStore interface {
	// ArchiveWrite runs fn in a write transaction. Concurrent calls may
	// share one transaction and one commit, each in a savepoint of its
	// own: an error from fn undoes only fn's writes. fn may run more than
	// once (a busy store is retried), so it must set, not accumulate,
	// whatever it returns through its closure.
	ArchiveWrite(ctx context.Context, fn func(tx ArchiveTx) error) error
	// ArchiveVersions returns the global version and a session's version.
	ArchiveVersions(ctx context.Context, sessionID string) (gv, sv uint64, err error)
	// ArchiveRecords returns the records q selects.
	ArchiveRecords(ctx context.Context, q RecordQuery) ([]ArchiveRecord, error)
	// ArchiveSearch returns the records of the given kinds whose text best
	// matches text, best first.
	ArchiveSearch(ctx context.Context, text string, kinds []RecordKind, limit int) ([]ArchiveHit, error)
	// ArchiveAgent returns a registered agent, or ErrNotFound.
	ArchiveAgent(ctx context.Context, id string) (ArchiveAgent, error)
	// ArchiveAgentByKey returns the agent whose key hashes to keyHash, or
	// ErrNotFound.
	ArchiveAgentByKey(ctx context.Context, keyHash string) (ArchiveAgent, error)
	// ArchiveAgents returns the agents of a session, or of every session
	// if sessionID is empty, in registration order.
	ArchiveAgents(ctx context.Context, sessionID string) ([]ArchiveAgent, error)
	// ArchiveEvents returns up to limit events after seq after, oldest
	// first; a negative after returns the last limit events.
	ArchiveEvents(ctx context.Context, after int64, limit int) ([]ArchiveEvent, error)
	// Purges counts the forgets and redactions committed in the store: a
	// cache of what the store holds that sees it change must be rebuilt,
	// since records it holds may be gone or changed.
	Purges(ctx context.Context) (uint64, error)
}
