package postgres

import (
	"context"
	"time"

	"github.com/engramhq/engram/internal/store"
)

var _ = time.Time{}

const schemaArchive = `
-- arch_versions holds the archivalist's versions: scope '' is the global
-- version, any other a session's. A writer bumps them in its transaction
-- (UPDATE ... RETURNING), holding the row until it commits: versions are
-- handed out in commit order.
CREATE TABLE arch_versions (
	scope   text COLLATE "C" PRIMARY KEY,
	version bigint NOT NULL
);
INSERT INTO arch_versions (scope, version) VALUES ('', 0);

-- arch_records are the archivalist's records; never updated.
CREATE TABLE arch_records (
	seq        bigserial PRIMARY KEY,
	id         text COLLATE "C" UNIQUE,
	kind       text COLLATE "C" NOT NULL,
	gv         bigint NOT NULL,
	sv         bigint NOT NULL,
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	model      text NOT NULL,
	category   text COLLATE "C" NOT NULL,
	key        text COLLATE "C" NOT NULL,
	ref        text COLLATE "C" NOT NULL,
	hash       text COLLATE "C" NOT NULL,
	text       text NOT NULL,
	body       text NOT NULL,
	created_at bigint NOT NULL
);
CREATE INDEX arch_records_kind ON arch_records (kind, category);
CREATE INDEX arch_records_gv ON arch_records (gv) WHERE gv > 0;
CREATE INDEX arch_records_session ON arch_records (session_id, kind, key, seq);
CREATE INDEX arch_records_hash ON arch_records (hash);
CREATE INDEX arch_records_recent ON arch_records (session_id, kind, created_at);
CREATE INDEX arch_records_ref ON arch_records (ref) WHERE ref != '';

CREATE TABLE arch_superseded (
	id text COLLATE "C" PRIMARY KEY,
	by text COLLATE "C" NOT NULL
);

CREATE TABLE arch_usage (
	id      text COLLATE "C" PRIMARY KEY,
	count   bigint NOT NULL,
	last_at bigint NOT NULL
);

CREATE TABLE arch_agents (
	id            text COLLATE "C" PRIMARY KEY,
	name          text NOT NULL,
	session_id    text COLLATE "C" NOT NULL,
	parent_id     text NOT NULL,
	model         text NOT NULL,
	role          text NOT NULL,
	registered_at bigint NOT NULL,
	credential    text COLLATE "C" NOT NULL DEFAULT '',
	key_hash      text COLLATE "C" NOT NULL DEFAULT ''
);
CREATE INDEX arch_agents_session ON arch_agents (session_id);
CREATE UNIQUE INDEX arch_agents_key ON arch_agents (key_hash) WHERE key_hash != '';
CREATE INDEX arch_agents_credential ON arch_agents (credential);

CREATE TABLE arch_events (
	seq        bigserial PRIMARY KEY,
	type       text NOT NULL,
	gv         bigint NOT NULL,
	sv         bigint NOT NULL,
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	scope      text NOT NULL,
	record_id  text NOT NULL,
	detail     text NOT NULL,
	at         bigint NOT NULL
);
`

// ArchiveWrite implements store.Store.
func (s *Store) ArchiveWrite(ctx context.Context, fn func(tx store.ArchiveTx) error) (err error) {
	err = errNotYet("ArchiveWrite")
	return
}

// ArchiveVersions implements store.Store.
func (s *Store) ArchiveVersions(ctx context.Context, sessionID string) (gv, sv uint64, err error) {
	err = errNotYet("ArchiveVersions")
	return
}

// ArchiveRecords implements store.Store.
func (s *Store) ArchiveRecords(ctx context.Context, q store.RecordQuery) (_ []store.ArchiveRecord, err error) {
	err = errNotYet("ArchiveRecords")
	return
}

// ArchiveSearch implements store.Store.
func (s *Store) ArchiveSearch(ctx context.Context, text string, kinds []store.RecordKind, limit int) (_ []store.ArchiveHit, err error) {
	err = errNotYet("ArchiveSearch")
	return
}

// ArchiveAgent implements store.Store.
func (s *Store) ArchiveAgent(ctx context.Context, id string) (_ store.ArchiveAgent, err error) {
	err = errNotYet("ArchiveAgent")
	return
}

// ArchiveAgentByKey implements store.Store.
func (s *Store) ArchiveAgentByKey(ctx context.Context, keyHash string) (_ store.ArchiveAgent, err error) {
	err = errNotYet("ArchiveAgentByKey")
	return
}

// ArchiveAgents implements store.Store.
func (s *Store) ArchiveAgents(ctx context.Context, sessionID string) (_ []store.ArchiveAgent, err error) {
	err = errNotYet("ArchiveAgents")
	return
}

// ArchiveEvents implements store.Store.
func (s *Store) ArchiveEvents(ctx context.Context, after int64, limit int) (_ []store.ArchiveEvent, err error) {
	err = errNotYet("ArchiveEvents")
	return
}
