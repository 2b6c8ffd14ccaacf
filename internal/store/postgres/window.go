package postgres

import (
	"context"
	"time"

	"github.com/engramhq/engram/internal/store"
)

var _ = time.Time{}

const schemaWindows = `
-- windows: a context window's head, its settings (opaque to the store) and
-- a version bumped by every change; window_items its messages in append
-- order, each the form of the message and, once evicted, the reference it
-- went under.
CREATE TABLE windows (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	settings   bytea NOT NULL,
	version    bigint NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL,
	PRIMARY KEY (session_id, agent_id)
);

CREATE TABLE window_items (
	session_id     text COLLATE "C" NOT NULL,
	agent_id       text COLLATE "C" NOT NULL,
	pos            bigint NOT NULL,
	append_version bigint NOT NULL,
	form           bytea NOT NULL,
	entry_ids      text NOT NULL,
	tokens         bigint NOT NULL,
	pinned         boolean NOT NULL,
	ref_id         text COLLATE "C" NOT NULL DEFAULT '',
	appended_at    bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (session_id, agent_id, pos)
);
CREATE INDEX window_items_ref ON window_items (ref_id) WHERE ref_id != '';

CREATE TABLE window_readmits (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	seq        bigint NOT NULL,
	at_pos     bigint NOT NULL,
	from_pos   bigint NOT NULL,
	to_pos     bigint NOT NULL,
	PRIMARY KEY (session_id, agent_id, seq)
);

CREATE TABLE window_summaries (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	level      integer NOT NULL,
	from_pos   bigint NOT NULL,
	to_pos     bigint NOT NULL,
	digest     text NOT NULL,
	text       text NOT NULL,
	tokens     bigint NOT NULL,
	made_by    text NOT NULL,
	epoch      bigint NOT NULL,
	created_at bigint NOT NULL,
	PRIMARY KEY (session_id, agent_id, level, from_pos)
);

CREATE TABLE snapshot_bodies (
	hash text COLLATE "C" PRIMARY KEY,
	body bytea NOT NULL
);

CREATE TABLE window_snapshots (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	seq        bigint NOT NULL,
	hash       text COLLATE "C" NOT NULL,
	version    bigint NOT NULL,
	created_at bigint NOT NULL,
	report     text NOT NULL,
	PRIMARY KEY (session_id, agent_id, seq)
);
CREATE INDEX window_snapshots_hash ON window_snapshots (hash);
CREATE INDEX window_snapshots_window_hash ON window_snapshots (session_id, agent_id, hash);
`

// PutWindow implements store.Store.
func (s *Store) PutWindow(ctx context.Context, key store.WindowKey, settings []byte) (_ store.Window, err error) {
	err = errNotYet("PutWindow")
	return
}

// Window implements store.Store.
func (s *Store) Window(ctx context.Context, key store.WindowKey) (_ store.Window, err error) {
	err = errNotYet("Window")
	return
}

// Windows implements store.Store.
func (s *Store) Windows(ctx context.Context, sessionID string) (_ []store.Window, err error) {
	err = errNotYet("Windows")
	return
}

// WindowItems implements store.Store.
func (s *Store) WindowItems(ctx context.Context, key store.WindowKey, from int) (_ []store.WindowItem, err error) {
	err = errNotYet("WindowItems")
	return
}

// AppendWindow implements store.Store.
func (s *Store) AppendWindow(ctx context.Context, key store.WindowKey, a store.WindowAppend, evict store.Evictor) (_ store.Window, _ []store.WindowItem, _ []store.Eviction, err error) {
	err = errNotYet("AppendWindow")
	return
}

// RelayWindow implements store.Store.
func (s *Store) RelayWindow(ctx context.Context, key store.WindowKey, evict store.Evictor) (_ store.Window, _ []store.Eviction, err error) {
	err = errNotYet("RelayWindow")
	return
}

// WindowLedger implements store.Store.
func (s *Store) WindowLedger(ctx context.Context, key store.WindowKey) (_ store.Window, _ []store.WindowItem, _ []store.WindowReadmit, err error) {
	err = errNotYet("WindowLedger")
	return
}

// ReadmitWindow implements store.Store.
func (s *Store) ReadmitWindow(ctx context.Context, key store.WindowKey, refID string, evict store.Evictor) (_ store.Window, _ []store.Eviction, err error) {
	err = errNotYet("ReadmitWindow")
	return
}

// WindowSummaries implements store.Store.
func (s *Store) WindowSummaries(ctx context.Context, key store.WindowKey) (_ int64, _ []store.WindowSummary, err error) {
	err = errNotYet("WindowSummaries")
	return
}

// PutWindowSummaries implements store.Store.
func (s *Store) PutWindowSummaries(ctx context.Context, key store.WindowKey, epoch int64, sums []store.WindowSummary) (_ int64, err error) {
	err = errNotYet("PutWindowSummaries")
	return
}

// PutSnapshot implements store.Store.
func (s *Store) PutSnapshot(ctx context.Context, snap store.WindowSnapshot, keep int) (_ store.WindowSnapshot, err error) {
	err = errNotYet("PutSnapshot")
	return
}

// Snapshots implements store.Store.
func (s *Store) Snapshots(ctx context.Context, key store.WindowKey, limit int) (_ []store.WindowSnapshot, err error) {
	err = errNotYet("Snapshots")
	return
}

// Snapshot implements store.Store.
func (s *Store) Snapshot(ctx context.Context, key store.WindowKey, hash string) (_ store.WindowSnapshot, err error) {
	err = errNotYet("Snapshot")
	return
}

// SnapshotAt implements store.Store.
func (s *Store) SnapshotAt(ctx context.Context, key store.WindowKey, seq int64) (_ store.WindowSnapshot, err error) {
	err = errNotYet("SnapshotAt")
	return
}
