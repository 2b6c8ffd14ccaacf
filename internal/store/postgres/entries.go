package postgres

import (
	"context"
	"time"

	"github.com/engramhq/engram/internal/store"
)

var _ = time.Time{}

// TODO(entries): PutEntries and the reads of entries; see issue 27.

// PutEntries implements store.Store.
func (s *Store) PutEntries(ctx context.Context, entries []store.Entry) (_ []store.PutResult, err error) {
	err = errNotYet("PutEntries")
	return
}

// Entries implements store.Store.
func (s *Store) Entries(ctx context.Context, ids []string) (_ []store.Entry, err error) {
	err = errNotYet("Entries")
	return
}

// ResolveID implements store.Store.
func (s *Store) ResolveID(ctx context.Context, prefix string) (_ string, err error) {
	err = errNotYet("ResolveID")
	return
}

// MsgEntry implements store.Store.
func (s *Store) MsgEntry(ctx context.Context, sessionID, msgID string) (_ string, err error) {
	err = errNotYet("MsgEntry")
	return
}

// Occurrences implements store.Store.
func (s *Store) Occurrences(ctx context.Context, id string) (_ []store.Occurrence, err error) {
	err = errNotYet("Occurrences")
	return
}

// TurnRange implements store.Store.
func (s *Store) TurnRange(ctx context.Context, sessionID string, from, to int) (_ []store.Entry, err error) {
	err = errNotYet("TurnRange")
	return
}

// TurnIDs implements store.Store.
func (s *Store) TurnIDs(ctx context.Context, sessionID string, from int) (_ []string, err error) {
	err = errNotYet("TurnIDs")
	return
}

// LastTurn implements store.Store.
func (s *Store) LastTurn(ctx context.Context, sessionID string) (_ int, err error) {
	err = errNotYet("LastTurn")
	return
}

// Chunks implements store.Store.
func (s *Store) Chunks(ctx context.Context, id string) (_ []store.Chunk, err error) {
	err = errNotYet("Chunks")
	return
}

// PutLinks implements store.Store.
func (s *Store) PutLinks(ctx context.Context, links []store.Link) (err error) {
	err = errNotYet("PutLinks")
	return
}

// Links implements store.Store.
func (s *Store) Links(ctx context.Context, id string) (_ []store.Link, err error) {
	err = errNotYet("Links")
	return
}

// PutReference implements store.Store.
func (s *Store) PutReference(ctx context.Context, ref store.Reference) (err error) {
	err = errNotYet("PutReference")
	return
}

// PutReferences implements store.Store.
func (s *Store) PutReferences(ctx context.Context, refs []store.Reference) (err error) {
	err = errNotYet("PutReferences")
	return
}

// Reference implements store.Store.
func (s *Store) Reference(ctx context.Context, id string) (_ store.Reference, err error) {
	err = errNotYet("Reference")
	return
}

// PutSession implements store.Store.
func (s *Store) PutSession(ctx context.Context, ss store.Session) (err error) {
	err = errNotYet("PutSession")
	return
}

// Session implements store.Store.
func (s *Store) Session(ctx context.Context, id string) (_ store.Session, err error) {
	err = errNotYet("Session")
	return
}

// Sessions implements store.Store.
func (s *Store) Sessions(ctx context.Context) (_ []store.Session, err error) {
	err = errNotYet("Sessions")
	return
}

// PutAgent implements store.Store.
func (s *Store) PutAgent(ctx context.Context, a store.Agent) (err error) {
	err = errNotYet("PutAgent")
	return
}

// Agents implements store.Store.
func (s *Store) Agents(ctx context.Context, sessionID string) (_ []store.Agent, err error) {
	err = errNotYet("Agents")
	return
}

// RecordAccess implements store.Store.
func (s *Store) RecordAccess(ctx context.Context, ids []int64, at time.Time) (err error) {
	err = errNotYet("RecordAccess")
	return
}

// HotChunks implements store.Store.
func (s *Store) HotChunks(ctx context.Context, since time.Time, limit int) (_ []store.Access, err error) {
	err = errNotYet("HotChunks")
	return
}

// PutBlob implements store.Store.
func (s *Store) PutBlob(ctx context.Context, name string, data []byte) (err error) {
	err = errNotYet("PutBlob")
	return
}

// Blob implements store.Store.
func (s *Store) Blob(ctx context.Context, name string) (_ []byte, err error) {
	err = errNotYet("Blob")
	return
}

// DeleteBlob implements store.Store.
func (s *Store) DeleteBlob(ctx context.Context, name string) (err error) {
	err = errNotYet("DeleteBlob")
	return
}

// Setting implements store.Store.
func (s *Store) Setting(ctx context.Context, key string) (_ string, err error) {
	err = errNotYet("Setting")
	return
}

// PutSetting implements store.Store.
func (s *Store) PutSetting(ctx context.Context, key, value string) (err error) {
	err = errNotYet("PutSetting")
	return
}

// Stats implements store.Store.
func (s *Store) Stats(ctx context.Context) (_ store.Stats, err error) {
	err = errNotYet("Stats")
	return
}
