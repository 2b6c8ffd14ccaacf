package postgres

import "strings"

// The schema keeps the meaning of the SQLite backend's (internal/store/
// sqlite/migrate.go), table for table, so that the two backends can be
// read side by side and `engram store copy` maps one onto the other.
// Times are nanoseconds since the epoch (bigint), JSON lists and objects
// are text, as there. Identifiers and other text compared by prefix or
// ordered for the contract are COLLATE "C": byte order, whatever the
// database's own collation.
//
// Each area of the store declares its tables beside its code; migration 2
// creates them all, in this order.
func schemaV2() string {
	return strings.Join([]string{schemaCore, schemaFTS, schemaFiles, schemaVectors, schemaArchive, schemaWindows, schemaPurge}, "\n")
}

// schemaCore: what PutEntries writes and the reads of entries need.
const schemaCore = `
-- counters hold the totals Stats reports, kept in each write's
-- transaction. They are hot rows: writers update them last, in name
-- order, so that they hold their locks for the shortest time and never
-- deadlock on them.
CREATE TABLE counters (
	name  text COLLATE "C" PRIMARY KEY,
	value bigint NOT NULL
);
INSERT INTO counters (name, value) VALUES
	('chunks', 0), ('content_bytes', 0), ('entries', 0), ('occurrences', 0), ('purges', 0), ('tokens', 0);

CREATE TABLE sessions (
	id           text COLLATE "C" PRIMARY KEY,
	name         text NOT NULL DEFAULT '',
	created_at   bigint NOT NULL,
	last_seen_at bigint NOT NULL,
	metadata     text
);

CREATE TABLE agents (
	session_id     text COLLATE "C" NOT NULL,
	id             text COLLATE "C" NOT NULL,
	name           text NOT NULL DEFAULT '',
	role           text NOT NULL DEFAULT '',
	parent_id      text NOT NULL DEFAULT '',
	model          text NOT NULL DEFAULT '',
	context_window bigint NOT NULL DEFAULT 0,
	registered_at  bigint NOT NULL,
	last_seen_at   bigint NOT NULL,
	PRIMARY KEY (session_id, id)
);

-- entries hold each distinct content once; other tables refer to an entry
-- by its pk. fts says where its chunks are searched: 1 by default, 2 only
-- with history (old file versions). redacted marks content an operator
-- redacted: its ID is no longer its SHA-256.
CREATE TABLE entries (
	pk          bigserial PRIMARY KEY,
	id          text COLLATE "C" NOT NULL UNIQUE,
	content     bytea NOT NULL,
	size        bigint NOT NULL,
	token_count bigint NOT NULL,
	created_at  bigint NOT NULL,
	fts         smallint NOT NULL DEFAULT 1,
	redacted    boolean NOT NULL DEFAULT false
);

CREATE TABLE occurrences (
	seq        bigserial PRIMARY KEY,
	entry      bigint NOT NULL REFERENCES entries (pk),
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	agent_type text NOT NULL,
	type       text NOT NULL,
	turn       bigint NOT NULL,
	time       bigint NOT NULL,
	msg_id     text COLLATE "C",
	parent_id  text,
	files      text,
	keywords   text,
	entities   text,
	metadata   text
);
CREATE INDEX occurrences_entry ON occurrences (entry, seq);
CREATE INDEX occurrences_session_turn ON occurrences (session_id, turn, seq);
CREATE UNIQUE INDEX occurrences_msg ON occurrences (session_id, msg_id) WHERE msg_id IS NOT NULL;
CREATE INDEX occurrences_agent ON occurrences (agent_id, seq);
CREATE INDEX occurrences_type ON occurrences (type, seq);
CREATE INDEX occurrences_time ON occurrences (time);

-- chunks are byte ranges of an entry's content, cut from it on read.
CREATE TABLE chunks (
	id          bigserial PRIMARY KEY,
	entry       bigint NOT NULL REFERENCES entries (pk),
	ordinal     integer NOT NULL,
	start_byte  integer NOT NULL,
	end_byte    integer NOT NULL,
	start_line  integer NOT NULL,
	end_line    integer NOT NULL,
	token_count integer NOT NULL,
	symbols     text,
	UNIQUE (entry, ordinal)
);

-- contexts hold the end of the previous entry of the session an entry was
-- first seen in, for entries too short to stand alone.
CREATE TABLE contexts (
	entry bigint PRIMARY KEY REFERENCES entries (pk),
	text  text NOT NULL
);

-- entry_terms holds the term set of each file of more than one chunk.
CREATE TABLE entry_terms (
	entry bigint PRIMARY KEY REFERENCES entries (pk),
	terms bytea NOT NULL
);

CREATE TABLE links (
	from_id    text COLLATE "C" NOT NULL,
	to_id      text COLLATE "C" NOT NULL,
	kind       text COLLATE "C" NOT NULL,
	created_at bigint NOT NULL,
	PRIMARY KEY (from_id, to_id, kind)
);
CREATE INDEX links_to ON links (to_id);

CREATE TABLE refs (
	id           text COLLATE "C" PRIMARY KEY,
	type         text NOT NULL,
	session_id   text COLLATE "C" NOT NULL,
	agent_id     text COLLATE "C" NOT NULL,
	content_ids  text NOT NULL,
	summary      text NOT NULL,
	tokens_saved bigint NOT NULL,
	turn_from    bigint NOT NULL,
	turn_to      bigint NOT NULL,
	created_at   bigint NOT NULL,
	topics       text,
	entities     text,
	query_hints  text
);
CREATE INDEX refs_session ON refs (session_id, agent_id);

CREATE TABLE settings (
	key   text COLLATE "C" PRIMARY KEY,
	value text NOT NULL
);

CREATE TABLE blobs (
	name       text COLLATE "C" PRIMARY KEY,
	data       bytea NOT NULL,
	created_at bigint NOT NULL
);

-- access counts the uses of chunks, for the hot tier of retrieval.
CREATE TABLE access (
	chunk   bigint PRIMARY KEY REFERENCES chunks (id),
	count   bigint NOT NULL,
	last_at bigint NOT NULL
);
CREATE INDEX access_last ON access (last_at);
`
