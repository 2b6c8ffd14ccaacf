// Package store defines what engram keeps and the contract its storage
// backends implement: content-addressed entries and their occurrences,
// chunks with a full-text index, links, references, sessions and agents,
// context windows and their turn snapshots (window.go), and the
// operator's removal of what was kept (PurgeStore: forgetting,
// redaction, retention and their audit; forget.go).
//
// The engine talks to a Store and never to a database. Backends live in
// subpackages (sqlite, the embedded default; postgres, for teams) and prove
// themselves against the contract suite in storetest. Validation that does
// not need the database (Entry.Prepare, Link.Validate, Reference.Validate)
// lives here, so that every backend accepts and refuses the same input.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Store is the storage contract. Implementations are safe for concurrent
// use, by several goroutines and by several processes on the same store.
// Every write is all-or-nothing: an error means nothing of the call was
// written.
type Store interface {
	// PutEntries stores entries in one transaction. Content already stored
	// is not stored again; every entry still records an occurrence, except a
	// replayed MsgID (see Occurrence.MsgID). Sessions and agents named by the
	// entries are registered if new. Results are in the order of entries.
	PutEntries(ctx context.Context, entries []Entry) ([]PutResult, error)
	// Entries returns the entries with the given IDs, in that order, with
	// their first occurrence and without chunks. A missing ID is an error
	// wrapping ErrNotFound.
	Entries(ctx context.Context, ids []string) ([]Entry, error)
	// ResolveID returns the one entry ID that starts with prefix (at least
	// MinPrefix hex digits). It returns ErrNotFound or *AmbiguousError.
	ResolveID(ctx context.Context, prefix string) (string, error)
	// MsgEntry returns the entry ID of the message msgID in a session, or
	// ErrNotFound.
	MsgEntry(ctx context.Context, sessionID, msgID string) (string, error)
	// Occurrences returns every occurrence of an entry, oldest first.
	Occurrences(ctx context.Context, id string) ([]Occurrence, error)
	// TurnRange returns the occurrences of a session whose turn is within
	// [from, to], with their content, ordered by turn then arrival. A zero
	// bound leaves that side open.
	TurnRange(ctx context.Context, sessionID string, from, to int) ([]Entry, error)
	// TurnIDs returns the IDs of the entries a session's occurrences name
	// from turn from on (zero: all), each once, in the order first seen:
	// TurnRange without the content, for what only needs to know them.
	TurnIDs(ctx context.Context, sessionID string, from int) ([]string, error)
	// LastTurn returns a session's latest turn; zero when it holds none.
	LastTurn(ctx context.Context, sessionID string) (int, error)
	// Chunks returns the chunks of an entry, with their text, in order.
	Chunks(ctx context.Context, id string) ([]Chunk, error)
	// Search returns the chunks that best match q, best first, at most one
	// hit per chunk. A query with no searchable words returns no hits.
	Search(ctx context.Context, q Query) ([]Hit, error)
	// EntryCoverage returns the share of the query that each of the
	// entries holds anywhere in its content, each word weighted by its
	// inverse document frequency as in Hit.Coverage, which measures one
	// chunk. Entries that are not stored are left out.
	EntryCoverage(ctx context.Context, text string, ids []string) (map[string]float64, error)

	// PutLinks stores links; both ends must be stored entries. Storing a
	// link that exists is a no-op.
	PutLinks(ctx context.Context, links []Link) error
	// Links returns the links from or to an entry.
	Links(ctx context.Context, id string) ([]Link, error)

	// PutReference stores a reference; its content IDs must be stored
	// entries. A reference ID is written once: a second write with the same
	// ID is a *ConflictError.
	PutReference(ctx context.Context, ref Reference) error
	// Reference returns the reference with the given ID, or ErrNotFound:
	// a stored one, else one a run reference's ID names, read from its
	// window's ledger (RunRefID, RunRefs).
	Reference(ctx context.Context, id string) (Reference, error)

	// PutWindow creates the context window of an agent of a session, or
	// replaces the settings of one that exists, keeping its items: a model
	// switch keeps the window. It returns the window's head.
	PutWindow(ctx context.Context, key WindowKey, settings []byte) (Window, error)
	// Window returns a window's head, or ErrNotFound.
	Window(ctx context.Context, key WindowKey) (Window, error)
	// Windows returns the windows of a session, or of all sessions if
	// sessionID is empty, the most recently changed first.
	Windows(ctx context.Context, sessionID string) ([]Window, error)
	// WindowItems returns the items of a window with from <= Pos < to,
	// in order, to the ledger's end when to is negative; ErrNotFound if
	// there is no such window.
	WindowItems(ctx context.Context, key WindowKey, from, to int) ([]WindowItem, error)
	// AppendWindow appends messages to a window in one transaction: it
	// stores a.Entries as PutEntries does, appends a.Items after the
	// window's last item, then, if evict is not nil, calls it with the
	// window's state and writes the references it returns,
	// marking their items evicted. The items of one append are contiguous
	// whatever other processes append at once. It returns the window's
	// head after, the items appended and the evictions made; on any error
	// (evict's included) nothing is written. An append under a key the
	// window holds (a.Key) writes nothing and fails with an
	// *AppendedError or a *ConflictError (see WindowAppend).
	AppendWindow(ctx context.Context, key WindowKey, a WindowAppend, evict Evictor) (Window, []WindowItem, []Eviction, error)
	// RelayWindow lays a window out anew, in one transaction: every item
	// back in it (the references stay, so their markers still expand),
	// then evict's evictions. It returns the window's head after and the
	// evictions made.
	RelayWindow(ctx context.Context, key WindowKey, evict Evictor) (Window, []Eviction, error)
	// WindowLedger returns a window's head, items and re-admissions, as
	// of one moment; ErrNotFound if there is no such window.
	WindowLedger(ctx context.Context, key WindowKey) (Window, []WindowItem, []WindowReadmit, error)
	// ReadmitWindow brings the messages a reference of the window stands
	// for back into it, in their places, in one transaction with evict,
	// which makes room (the reference stays, so its markers still
	// expand), and records the re-admission in the window's ledger. It
	// returns the window's head after and the evictions made;
	// ErrNotFound if the window holds no message under the reference.
	ReadmitWindow(ctx context.Context, key WindowKey, refID string, evict Evictor) (Window, []Eviction, error)
	// WindowSummaries returns a window's rolling summaries, by level and
	// place, and their epoch: how many times they were written (0 for
	// none). ErrNotFound if there is no such window.
	WindowSummaries(ctx context.Context, key WindowKey) (int64, []WindowSummary, error)
	// PutWindowSummaries writes rolling summaries of a window, each
	// replacing the one of its level and place, in one transaction, if
	// their epoch is still epoch, and returns the new epoch; else it
	// writes nothing and returns ErrStaleEpoch (a summarizer that started
	// before another's write never overwrites it).
	PutWindowSummaries(ctx context.Context, key WindowKey, epoch int64, sums []WindowSummary) (int64, error)
	// PutSnapshot records a turn's assembled context for a window, in one
	// transaction: its body stored once by its SHA-256 (which it sets as
	// the snapshot's Hash; a Hash given must match), however many
	// snapshots share it, and the snapshot numbered after the window's
	// last. With keep > 0, only the window's newest keep snapshots stay,
	// and bodies no snapshot refers to go. It returns the snapshot as
	// stored, without its body; ErrNotFound if there is no such window.
	PutSnapshot(ctx context.Context, snap WindowSnapshot, keep int) (WindowSnapshot, error)
	// Snapshots returns up to limit snapshots of a window (all if limit
	// is not positive), newest first, without their bodies; ErrNotFound
	// if there is no such window.
	Snapshots(ctx context.Context, key WindowKey, limit int) ([]WindowSnapshot, error)
	// Snapshot returns, with its body, the newest snapshot of a window
	// whose hash is hash or starts with it (MinSnapshotPrefix hex digits
	// at least). A malformed hash is a *ValidationError; a prefix of
	// several hashes an *AmbiguousError; none, ErrNotFound.
	Snapshot(ctx context.Context, key WindowKey, hash string) (WindowSnapshot, error)
	// SnapshotAt returns a window's snapshot number seq, with its body, or
	// ErrNotFound.
	SnapshotAt(ctx context.Context, key WindowKey, seq int64) (WindowSnapshot, error)

	// PutSession registers a session or updates its name and metadata.
	PutSession(ctx context.Context, s Session) error
	// Session returns a session, or ErrNotFound.
	Session(ctx context.Context, id string) (Session, error)
	// Sessions returns all sessions, most recently seen first.
	Sessions(ctx context.Context) ([]Session, error)
	// PutAgent registers an agent or updates its details.
	PutAgent(ctx context.Context, a Agent) error
	// Agents returns the agents of a session, or of all sessions if
	// sessionID is empty, in registration order.
	Agents(ctx context.Context, sessionID string) ([]Agent, error)

	// PutFiles applies changes to the file index in one transaction. A
	// version stores its content as PutEntries does (once, with an
	// occurrence of type code_file) and makes it the path's current
	// version; the version it replaces, like the last version of a deleted
	// file, stays retrievable but leaves default search unless it is
	// current elsewhere or was seen in a session.
	PutFiles(ctx context.Context, changes []FileChange) error
	// Files returns the manifest records that match f, by path.
	Files(ctx context.Context, f FileFilter) ([]File, error)
	// File returns the manifest record of one path, or ErrNotFound.
	File(ctx context.Context, path string) (File, error)
	// FileVersions returns a file's history, oldest first, or ErrNotFound.
	FileVersions(ctx context.Context, path string) ([]FileVersion, error)

	// PendingChunks returns up to limit chunks after the chunk ID after,
	// in ID order, that are in default search and have no vector under
	// model: the work queue of an embedder, durable because it is derived.
	PendingChunks(ctx context.Context, model string, after int64, limit int) ([]ChunkText, error)
	// PutVectors stores vectors of chunks under model, all of dimension
	// dim, replacing any a chunk had under it.
	PutVectors(ctx context.Context, model string, dim int, vecs []ChunkVector) error
	// Vectors returns up to limit vectors under model whose Seq is
	// greater than after, in Seq order: for loading an index and keeping
	// it up to date. Every write of a vector (a new one or a replacement)
	// gives it a Seq greater than that of every vector of the model
	// written before, and Seqs increase in commit order, so a reader that
	// passes the greatest Seq it has read (0 at first) as after sees every
	// write committed since, whatever its chunk ID, however many
	// processes write. A write is numbered after the vectors the model
	// holds, so the Seqs of vectors a purge removed may be given again,
	// and after DropVectors a model's vectors are numbered from 1 again:
	// a reader starts again from 0 after either (see Purges).
	Vectors(ctx context.Context, model string, after int64, limit int) ([]ChunkVector, error)
	// DropVectors deletes every vector under model.
	DropVectors(ctx context.Context, model string) error
	// VectorStats reports a model's coverage.
	VectorStats(ctx context.Context, model string) (VectorStats, error)
	// ChunkHits returns the hits of the chunks with the given IDs that
	// match filter (and are current, unless filter.History), in the order
	// of ids, with their provenance; Score is left zero.
	ChunkHits(ctx context.Context, ids []int64, filter Filter) ([]Hit, error)
	// FilterChunks returns the IDs of the chunks that match filter (and
	// are current, unless filter.History), at most limit+1 of them in no
	// particular order: more than limit says the filter is not selective.
	// Vector search scores the chunks of a selective filter exactly
	// rather than filtering the nearest neighbours of the whole store.
	FilterChunks(ctx context.Context, filter Filter, limit int) ([]int64, error)

	// RecordAccess counts a use of each chunk, at time at.
	RecordAccess(ctx context.Context, ids []int64, at time.Time) error
	// HotChunks returns up to limit chunks used at or after since, the
	// most recently used first.
	HotChunks(ctx context.Context, since time.Time, limit int) ([]Access, error)

	// PutBlob stores a named blob, such as a trained model.
	PutBlob(ctx context.Context, name string, data []byte) error
	// Blob returns a named blob, or ErrNotFound.
	Blob(ctx context.Context, name string) ([]byte, error)
	// DeleteBlob deletes a named blob, if there is one.
	DeleteBlob(ctx context.Context, name string) error

	// Setting returns a stored setting, or ErrNotFound.
	Setting(ctx context.Context, key string) (string, error)
	// PutSetting stores a setting.
	PutSetting(ctx context.Context, key, value string) error

	// Stats describes what the store holds.
	Stats(ctx context.Context) (Stats, error)
	// Ping reports whether the store answers a read, cheaply: nil, or an
	// error wrapping ErrUnavailable when it cannot be reached.
	Ping(ctx context.Context) error

	// The archivalist's records, agents, versions and events.
	ArchiveStore

	// Forgetting, redaction, retention and their audit.
	PurgeStore

	// Close releases the store. Calls after Close fail.
	Close() error
}

// MinPrefix is the shortest entry ID prefix ResolveID accepts.
const MinPrefix = 4

// ErrNotFound is returned when a requested record does not exist.
var ErrNotFound = errors.New("not found")

// ErrStaleEpoch is returned when a write expected an epoch that another
// write has moved on from.
var ErrStaleEpoch = errors.New("stale epoch: written meanwhile")

// ErrSchemaTooNew is returned when a store was written by a newer engram.
var ErrSchemaTooNew = errors.New("store written by a newer engram")

// ErrUnavailable marks the error of a call that could not reach the
// store, or found it locked for longer than it waits: the call wrote
// nothing, and may succeed if made again later. Front ends answer it as
// a temporary failure (HTTP 503 with Retry-After).
var ErrUnavailable = errors.New("store unavailable")

// Unavailable returns err marked as ErrUnavailable: errors.Is(e,
// ErrUnavailable) holds, and err's own chain is kept. Its message is err's.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{e.err, ErrUnavailable} }

// ValidationError says which field of a record is wrong and why.
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Msg }

// ConflictError is returned when a write contradicts what is stored.
type ConflictError struct {
	What string // what conflicts, such as "msg_id m-12 in session s1"
	Msg  string
	// Busy says that the write contradicts nothing: other writers kept
	// changing what it changes while it was tried, and the same write
	// may be tried again (the HTTP API answers 409 "busy" with a
	// Retry-After). Otherwise trying it again fails the same way.
	Busy bool
}

func (e *ConflictError) Error() string { return e.What + ": " + e.Msg }

// AmbiguousError is returned by ResolveID and Snapshot when a prefix
// matches several entries or snapshots.
type AmbiguousError struct {
	Prefix  string
	Matches []string // some of the matching IDs
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("prefix %s is ambiguous: matches %s", e.Prefix, strings.Join(e.Matches, ", "))
}

// ItemError locates an error in one item of a batch by its index.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("entry %d: %v", e.Index, e.Err) }
func (e *ItemError) Unwrap() error { return e.Err }
