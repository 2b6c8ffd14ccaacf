package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Forgetting and redaction are an operator's acts, not an agent's: agents
// only append. They remove what was stored (a session, an entry, a global
// record of the archivalist, a string wherever it is stored) together with
// everything derived from it, each in one transaction, and leave an audit
// record of who removed what and how much, never of the removed bytes.

// PurgeStore is the part of the store that removes what was stored.
type PurgeStore interface {
	// Forget removes what req names, in one transaction, and records it
	// in the audit. With req.DryRun it reports what it would remove and
	// removes nothing. A target that does not exist is an error wrapping
	// ErrNotFound; an entry that is a file's current version is a
	// *ConflictError. Either way nothing is removed.
	Forget(ctx context.Context, req ForgetRequest) (PurgeReport, error)
	// Redact replaces every occurrence of req.Text in what the store holds
	// with req.Marker, in one transaction, and records it in the audit.
	Redact(ctx context.Context, req RedactRequest) (PurgeReport, error)
	// Retain forgets whole sessions by req's policy, oldest activity first,
	// each session in its own transaction (with DryRun, all in one that is
	// rolled back), each with an audit record.
	Retain(ctx context.Context, req RetainRequest) (RetainReport, error)
	// Audit returns up to limit audit records after seq after, oldest
	// first; a negative after returns the last limit records.
	Audit(ctx context.Context, after int64, limit int) ([]AuditRecord, error)
}

// ForgetRequest names what Forget removes: any mix of sessions, entries and
// global records.
type ForgetRequest struct {
	// Sessions are forgotten whole: their occurrences, the entries no
	// other occurrence or file version refers to, their agents, references,
	// archivalist session state (resume, files, wants, rejects), archive
	// agents and events.
	Sessions []string
	// Entries are entry IDs (in full). An entry is removed with every
	// occurrence of it, its chunks and all that derives from them; an old
	// version of a file leaves that file's history. An entry that is a
	// file's current version is refused.
	Entries []string
	// Records are global records of the archivalist (pat-12). A failure
	// takes its resolutions with it and an intent its completion; records
	// it superseded become active again.
	Records []string
	// SessionRecords also forgets the global records (patterns, failures,
	// insights, decisions, intents) that the agents of Sessions wrote.
	SessionRecords bool
	// Actor is who forgets, for the audit: required.
	Actor string
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	// Compact rewrites the full-text indexes afterwards so that the terms
	// of what was removed leave the file too (see PurgeReport.Compacted).
	Compact bool
}

// Validate checks a request before anything is read.
func (r ForgetRequest) Validate() error {
	var errs []error
	if len(r.Sessions)+len(r.Entries)+len(r.Records) == 0 {
		errs = append(errs, &ValidationError{Field: "target", Msg: "name a session, an entry or a record to forget"})
	}
	for _, s := range r.Sessions {
		if s == "" || len(s) > MaxIdentifierBytes {
			errs = append(errs, &ValidationError{Field: "session", Msg: fmt.Sprintf("session id must be 1 to %d bytes", MaxIdentifierBytes)})
		}
	}
	for _, id := range r.Entries {
		if !ValidID(id) {
			errs = append(errs, &ValidationError{Field: "entry", Msg: fmt.Sprintf("%q is not a full entry ID", id)})
		}
	}
	for _, id := range r.Records {
		if id == "" || len(id) > MaxIdentifierBytes {
			errs = append(errs, &ValidationError{Field: "record", Msg: fmt.Sprintf("%q is not a record id", id)})
		}
	}
	if r.SessionRecords && len(r.Sessions) == 0 {
		errs = append(errs, &ValidationError{Field: "records", Msg: "forgetting a session's records needs a session"})
	}
	errs = append(errs, checkActor(r.Actor))
	return errors.Join(errs...)
}

func checkActor(actor string) error {
	if strings.TrimSpace(actor) == "" || len(actor) > MaxIdentifierBytes || !utf8.ValidString(actor) || strings.ContainsAny(actor, "\x00\n\r") {
		return &ValidationError{Field: "actor", Msg: fmt.Sprintf("who forgets must be named, in 1 to %d bytes on one line", MaxIdentifierBytes)}
	}
	return nil
}

// DefaultMarker replaces a redacted string.
const DefaultMarker = "[REDACTED]"

// MinRedactBytes is the shortest string Redact replaces: shorter ones
// match too much by accident.
const MinRedactBytes = 4

// RedactRequest says what Redact replaces, and how the parts of the store
// that only the engine knows how to make are made again.
type RedactRequest struct {
	// Text is the string to remove, at least MinRedactBytes long, matched
	// byte for byte.
	Text []byte
	// Marker replaces it; empty means DefaultMarker. It must not hold Text.
	Marker string
	// Actor is who redacts, for the audit: required.
	Actor string
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// Compact rewrites the full-text indexes afterwards, as for Forget.
	Compact bool
	// Rechunk makes the token count and chunks of an entry whose content
	// was redacted: it gets the entry with its new Content and its first
	// occurrence, and sets TokenCount and Chunks. Required.
	Rechunk func(e *Entry) error
	// Rederive, if set, works out again what an archive record derives
	// from its body (its hash and key) once the body is redacted.
	Rederive func(r *ArchiveRecord)
}

// Validate checks a request before anything is read.
func (r *RedactRequest) Validate() error {
	var errs []error
	if r.Marker == "" {
		r.Marker = DefaultMarker
	}
	switch {
	case len(r.Text) < MinRedactBytes:
		errs = append(errs, &ValidationError{Field: "text", Msg: fmt.Sprintf("is too short: at least %d bytes are needed, as a shorter string matches too much by accident", MinRedactBytes)})
	case len(bytes.TrimSpace(r.Text)) == 0:
		errs = append(errs, &ValidationError{Field: "text", Msg: "is only white space"})
	case strings.Contains(r.Marker, string(r.Text)):
		errs = append(errs, &ValidationError{Field: "text", Msg: fmt.Sprintf("is part of the marker %q: choose another marker", r.Marker)})
	}
	if r.Rechunk == nil {
		errs = append(errs, &ValidationError{Field: "rechunk", Msg: "is required"})
	}
	errs = append(errs, checkActor(r.Actor))
	return errors.Join(errs...)
}

// RetainRequest is a retention policy. Zero fields do not forget.
type RetainRequest struct {
	// MaxAge forgets the sessions whose last activity is older than it.
	MaxAge time.Duration
	// MaxBytes forgets further sessions, oldest last activity first, until
	// the store's content is at most this many bytes. A session active
	// within RetainGrace is never forgotten for size.
	MaxBytes int64
	// Now is the time the policy is applied at; zero means now.
	Now    time.Time
	Actor  string
	DryRun bool
	// Compact rewrites the full-text indexes once at the end, if anything
	// was forgotten.
	Compact bool
}

// Validate checks a policy.
func (r RetainRequest) Validate() error {
	var errs []error
	if r.MaxAge < 0 {
		errs = append(errs, &ValidationError{Field: "max_age", Msg: "must not be negative"})
	}
	if r.MaxBytes < 0 {
		errs = append(errs, &ValidationError{Field: "max_bytes", Msg: "must not be negative"})
	}
	errs = append(errs, checkActor(r.Actor))
	return errors.Join(errs...)
}

// RetainGrace is how recently active a session may be and still be
// forgotten for size: one active within it is probably in use.
const RetainGrace = time.Hour

// Counts says how much a purge removed or, for a redaction, changed (the
// entries, occurrences, records... that held the string, the chunks made
// again, the vectors deleted). Zero fields are omitted from the audit.
type Counts struct {
	Sessions    int64 `json:"sessions,omitempty"`
	Occurrences int64 `json:"occurrences,omitempty"`
	// Entries removed; EntriesKept, entries of what was forgotten that
	// something else still refers to, indexed again without it.
	Entries      int64 `json:"entries,omitempty"`
	EntriesKept  int64 `json:"entries_kept,omitempty"`
	ContentBytes int64 `json:"content_bytes,omitempty"`
	Chunks       int64 `json:"chunks,omitempty"`
	Vectors      int64 `json:"vectors,omitempty"`
	// Contexts are conversation contexts worked out again, because what
	// they were made from changed.
	Contexts     int64 `json:"contexts,omitempty"`
	Links        int64 `json:"links,omitempty"`
	References   int64 `json:"references,omitempty"`
	FileVersions int64 `json:"file_versions,omitempty"`
	Agents       int64 `json:"agents,omitempty"`
	Records      int64 `json:"records,omitempty"`
	Events       int64 `json:"events,omitempty"`
	Settings     int64 `json:"settings,omitempty"`
	Blobs        int64 `json:"blobs,omitempty"`
	// Snapshots are windows' turn snapshots: a session's, or those whose
	// context held what was redacted.
	Snapshots int64 `json:"snapshots,omitempty"`
	// Summaries are windows' rolling summaries dropped: they quoted what
	// was removed, and are made again from what is left.
	Summaries int64 `json:"summaries,omitempty"`
	// Places and Bytes count a redaction's replacements: how many and how
	// many bytes they replaced (never the bytes themselves).
	Places int64 `json:"places,omitempty"`
	Bytes  int64 `json:"bytes,omitempty"`
}

// Add adds c2 to c.
func (c *Counts) Add(c2 Counts) {
	c.Sessions += c2.Sessions
	c.Occurrences += c2.Occurrences
	c.Entries += c2.Entries
	c.EntriesKept += c2.EntriesKept
	c.ContentBytes += c2.ContentBytes
	c.Chunks += c2.Chunks
	c.Vectors += c2.Vectors
	c.Contexts += c2.Contexts
	c.Links += c2.Links
	c.References += c2.References
	c.FileVersions += c2.FileVersions
	c.Agents += c2.Agents
	c.Records += c2.Records
	c.Events += c2.Events
	c.Settings += c2.Settings
	c.Blobs += c2.Blobs
	c.Snapshots += c2.Snapshots
	c.Summaries += c2.Summaries
	c.Places += c2.Places
	c.Bytes += c2.Bytes
}

// PurgeReport says what a Forget or Redact did, or would do.
type PurgeReport struct {
	// Targets are what was named: session, entry and record ids, each
	// prefixed by its kind ("session:s1", "entry:…", "record:pat-12").
	Targets []string
	Counts  Counts
	// Reactivated names the global records that become active again
	// because the record that superseded them was forgotten.
	Reactivated []string
	// Audit is the audit record's sequence number (zero on a dry run).
	Audit int64
	// Compacted is true when the full-text indexes were rewritten and the
	// write-ahead log emptied, so that what was removed is gone from the
	// store's files, not only from its tables. It is false on a dry run,
	// without Compact, or when another process kept the log in use.
	Compacted bool
}

// RetainReport says what Retain forgot, or would.
type RetainReport struct {
	// Sessions are the sessions forgotten, in order.
	Sessions []string
	Counts   Counts
	// ContentBytes is the store's content after the policy.
	ContentBytes int64
	Compacted    bool
}

// AuditRecord is one forget, redaction or retention run: who, when, what
// and how much, never the removed bytes.
type AuditRecord struct {
	Seq int64
	At  time.Time
	// Actor is who did it ("alice@laptop").
	Actor string
	// Action is forget, redact or retention.
	Action  string
	Targets []string
	Counts  Counts
}

// KeysError is a redaction's refusal of a string that is part of
// identifiers (found says which kinds: "a session id", "a file path"):
// keys, which other rows and processes hold, cannot be rewritten. It
// says what to do instead, and names no identifier: they hold the string.
func KeysError(found []string) *ValidationError {
	msg := fmt.Sprintf("is part of %s, which are keys and cannot be rewritten: forget what they name instead (engram forget session or entry)",
		strings.Join(found, ", "))
	if slices.Contains(found, "a file path") {
		// The current version of a file cannot be forgotten: the next
		// index would store it again.
		msg += "; for a file, rename it or leave it out of the index (.gitignore) and run engram index, then forget its old versions (engram forget entry)"
	}
	return &ValidationError{Field: "text", Msg: msg}
}
