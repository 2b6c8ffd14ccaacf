package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/backend"
	"github.com/engramhq/engram/internal/terms"
)

// applicationID marks an SQLite file as an engram store ("ENGR").
const applicationID = 0x454e4752

// migration is one forward-only schema step. Steps are never edited once
// released: a change is a new step.
type migration struct {
	version int
	name    string
	sql     string
	// run, if set, runs after sql in the same transaction: for steps that
	// SQL alone cannot do, such as rebuilding the full-text index when the
	// way terms are made changes.
	run func(ctx context.Context, tx *sql.Tx) error
}

// migrations are applied in order; the schema version is the version of the
// last one applied, kept in PRAGMA user_version.
var migrations = []migration{
	{1, "initial schema", schemaV1, nil},
	{2, "file index", schemaV2, nil},
	// Migration 6 rebuilds the full-text tables with the terms of today, so
	// the rebuild migration 3 did for its stems is left to it.
	{3, "full-text terms with stems and stop words", "", nil},
	{4, "vectors and blobs", schemaV4, nil},
	{5, "access tracking", schemaV5, nil},
	// Migration 8 works out the contexts with today's rule and rebuilds the
	// full-text tables, so the same work of migration 6 is left to it.
	{6, "conversation context", schemaV6, nil},
	{7, "archivalist", schemaV7, nil},
	{8, "conversation context from up to three entries back", "", buildContexts},
	{9, "irregular word forms indexed as their base form", "", rebuildTerms},
	{10, "the term sets of files of several chunks", schemaV10, buildEntryTerms},
	{11, "agent keys and credentials", "", agentCredentials},
	{12, "forgetting: the audit, redacted entries", schemaV12, addRedacted},
	{13, "context windows", schemaV13, nil},
	{14, "context windows' re-admissions and append times", schemaV14, addAppendedAt},
	{15, "rolling summaries of context windows", schemaV15, nil},
	{16, "turn snapshots", schemaV16, nil},
	{17, "vectors numbered in write order", "", addVectorSeq},
	{18, "keys of window appends", schemaV18, nil},
	{19, "the next place of a window's ledger", "", addNextPos},
}

// SchemaVersion is the schema version this build of engram writes.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

const schemaV1 = `
CREATE TABLE counters (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) STRICT;
INSERT INTO counters(name, value) VALUES
	('entries', 0), ('content_bytes', 0), ('tokens', 0), ('chunks', 0), ('occurrences', 0);

CREATE TABLE sessions (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL DEFAULT '',
	created_at   INTEGER NOT NULL,
	last_seen_at INTEGER NOT NULL,
	metadata     TEXT
) STRICT;

CREATE TABLE agents (
	session_id     TEXT NOT NULL,
	id             TEXT NOT NULL,
	name           TEXT NOT NULL DEFAULT '',
	role           TEXT NOT NULL DEFAULT '',
	parent_id      TEXT NOT NULL DEFAULT '',
	model          TEXT NOT NULL DEFAULT '',
	context_window INTEGER NOT NULL DEFAULT 0,
	registered_at  INTEGER NOT NULL,
	last_seen_at   INTEGER NOT NULL,
	PRIMARY KEY (session_id, id)
) STRICT;

-- entries hold each distinct content once. Other tables refer to an entry by
-- its pk, which takes 8 bytes where the hex ID takes 64.
CREATE TABLE entries (
	pk          INTEGER PRIMARY KEY,
	id          TEXT NOT NULL UNIQUE,
	content     BLOB NOT NULL,
	size        INTEGER NOT NULL,
	token_count INTEGER NOT NULL,
	created_at  INTEGER NOT NULL
) STRICT;

-- occurrences record every time an entry was seen.
CREATE TABLE occurrences (
	seq        INTEGER PRIMARY KEY,
	entry      INTEGER NOT NULL REFERENCES entries(pk),
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	agent_type TEXT NOT NULL,
	type       TEXT NOT NULL,
	turn       INTEGER NOT NULL,
	time       INTEGER NOT NULL,
	msg_id     TEXT,
	parent_id  TEXT,
	files      TEXT,
	keywords   TEXT,
	entities   TEXT,
	metadata   TEXT
) STRICT;
CREATE INDEX occurrences_entry ON occurrences(entry, seq);
CREATE INDEX occurrences_session_turn ON occurrences(session_id, turn, seq);
CREATE UNIQUE INDEX occurrences_msg ON occurrences(session_id, msg_id) WHERE msg_id IS NOT NULL;
CREATE INDEX occurrences_agent ON occurrences(agent_id, seq);
CREATE INDEX occurrences_type ON occurrences(type, seq);
CREATE INDEX occurrences_time ON occurrences(time);

-- chunks are byte ranges of an entry's content; their text is not stored
-- twice but cut from the content on read.
CREATE TABLE chunks (
	id          INTEGER PRIMARY KEY,
	entry       INTEGER NOT NULL REFERENCES entries(pk),
	ordinal     INTEGER NOT NULL,
	start_byte  INTEGER NOT NULL,
	end_byte    INTEGER NOT NULL,
	start_line  INTEGER NOT NULL,
	end_line    INTEGER NOT NULL,
	token_count INTEGER NOT NULL,
	symbols     TEXT,
	UNIQUE (entry, ordinal)
) STRICT;

-- chunks_fts indexes the terms of each chunk (body) and of its entry's
-- files, keywords, entities and the chunk's symbols (meta); its rowid is
-- the chunk's id. It is contentless: the text lives in entries.
CREATE VIRTUAL TABLE chunks_fts USING fts5(
	body, meta,
	content = '', contentless_delete = 1,
	tokenize = 'unicode61 remove_diacritics 2'
);
-- A 16 MiB pending-terms hash (default 1 MiB) lets a batch reach the index
-- in one segment: about 7% faster ingest, no cost to queries.
INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('hashsize', 16777216);
CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, row);

CREATE TABLE links (
	from_id    TEXT NOT NULL,
	to_id      TEXT NOT NULL,
	kind       TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (from_id, to_id, kind)
) STRICT, WITHOUT ROWID;
CREATE INDEX links_to ON links(to_id);

CREATE TABLE refs (
	id           TEXT PRIMARY KEY,
	type         TEXT NOT NULL,
	session_id   TEXT NOT NULL,
	agent_id     TEXT NOT NULL,
	content_ids  TEXT NOT NULL,
	summary      TEXT NOT NULL,
	tokens_saved INTEGER NOT NULL,
	turn_from    INTEGER NOT NULL,
	turn_to      INTEGER NOT NULL,
	created_at   INTEGER NOT NULL,
	topics       TEXT,
	entities     TEXT,
	query_hints  TEXT
) STRICT;
CREATE INDEX refs_session ON refs(session_id, agent_id);
`

const schemaV2 = `
-- fts says which full-text table holds an entry's chunks: 1 chunks_fts
-- (searched by default), 2 history_fts (old file versions, searched on
-- request).
ALTER TABLE entries ADD COLUMN fts INTEGER NOT NULL DEFAULT 1;

-- files is the manifest of the repository index: one row per path ever
-- seen, with its state and current version.
CREATE TABLE files (
	path       TEXT PRIMARY KEY,
	state      TEXT NOT NULL,
	reason     TEXT NOT NULL DEFAULT '',
	entry      INTEGER REFERENCES entries(pk),
	size       INTEGER NOT NULL,
	mtime      INTEGER NOT NULL,
	hash       TEXT NOT NULL DEFAULT '',
	language   TEXT NOT NULL DEFAULT '',
	version    INTEGER NOT NULL DEFAULT 0,
	indexed_at INTEGER NOT NULL
) STRICT;
CREATE INDEX files_entry ON files(entry);

CREATE TABLE file_versions (
	path       TEXT NOT NULL,
	version    INTEGER NOT NULL,
	entry      INTEGER NOT NULL REFERENCES entries(pk),
	size       INTEGER NOT NULL,
	mtime      INTEGER NOT NULL,
	indexed_at INTEGER NOT NULL,
	PRIMARY KEY (path, version)
) STRICT, WITHOUT ROWID;

CREATE VIRTUAL TABLE history_fts USING fts5(
	body, meta,
	content = '', contentless_delete = 1,
	tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;
`

const schemaV4 = `
-- vector_models names the embedding models vectors were made with.
CREATE TABLE vector_models (
	id   INTEGER PRIMARY KEY,
	name TEXT NOT NULL UNIQUE,
	dim  INTEGER NOT NULL
) STRICT;

-- vectors hold one vector per chunk and model, as little-endian float32.
CREATE TABLE vectors (
	model INTEGER NOT NULL REFERENCES vector_models(id),
	chunk INTEGER NOT NULL REFERENCES chunks(id),
	vec   BLOB NOT NULL,
	PRIMARY KEY (model, chunk)
) STRICT, WITHOUT ROWID;

-- blobs hold named binary data, such as trained models.
CREATE TABLE blobs (
	name       TEXT PRIMARY KEY,
	data       BLOB NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
`

const schemaV5 = `
-- access counts the uses of chunks, for the hot tier of retrieval.
CREATE TABLE access (
	chunk   INTEGER PRIMARY KEY REFERENCES chunks(id),
	count   INTEGER NOT NULL,
	last_at INTEGER NOT NULL
) STRICT;
CREATE INDEX access_last ON access(last_at);
`

const schemaV6 = `
-- contexts hold the end of the previous entry of the session an entry was
-- first seen in, for entries too short to stand alone (see context.go).
CREATE TABLE contexts (
	entry INTEGER PRIMARY KEY REFERENCES entries(pk),
	text  TEXT NOT NULL
) STRICT;

-- The full-text tables gain a third column, ctx, for the context.
DROP TABLE chunks_vocab;
DROP TABLE chunks_fts;
DROP TABLE history_fts;
CREATE VIRTUAL TABLE chunks_fts USING fts5(
	body, meta, ctx,
	content = '', contentless_delete = 1,
	tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('hashsize', 16777216);
CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, row);
CREATE VIRTUAL TABLE history_fts USING fts5(
	body, meta, ctx,
	content = '', contentless_delete = 1,
	tokenize = 'unicode61 remove_diacritics 2'
);
`

// buildContexts works out the context of every stored entry as ingest
// would, replacing any it had, then rebuilds the full-text tables.
func buildContexts(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM contexts`); err != nil {
		return err
	}
	type first struct {
		pk, size, seq int64
		session       string
		turn          int
	}
	var todo []first
	rows, err := tx.QueryContext(ctx, `SELECT e.pk, length(e.content), o.seq, o.session_id, o.turn
		FROM entries e JOIN occurrences o ON o.seq = (SELECT min(seq) FROM occurrences WHERE entry = e.pk)
		WHERE o.session_id != '' AND o.type != ? AND length(e.content) <= ?
		ORDER BY e.pk`, string(store.CodeFile), backend.ContextBytes-backend.MinContextBytes)
	if err != nil {
		return err
	}
	for rows.Next() {
		var f first
		if err := rows.Scan(&f.pk, &f.size, &f.seq, &f.session, &f.turn); err != nil {
			return errors.Join(err, rows.Close())
		}
		todo = append(todo, f)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	prev, err := tx.PrepareContext(ctx, `SELECT o.entry, length(e.content) FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = ? AND (o.turn < ? OR o.turn = ? AND o.seq < ?) ORDER BY o.turn DESC, o.seq DESC LIMIT ?`)
	if err != nil {
		return err
	}
	defer prev.Close()
	tail := func(from, pk int64) (tail []byte, err error) {
		return tail, tx.QueryRowContext(ctx, `SELECT substr(content, ?) FROM entries WHERE pk = ?`, from, pk).Scan(&tail)
	}
	for _, f := range todo {
		rows, err := prev.QueryContext(ctx, f.session, f.turn, f.turn, f.seq, backend.ContextEntries)
		if err != nil {
			return err
		}
		prevs, err := scanPrevEntries(rows)
		if err != nil {
			return err
		}
		text, err := backend.ContextFrom(f.pk, f.size, prevs, tail, nil)
		if err != nil {
			return err
		}
		if text != "" {
			if _, err := tx.ExecContext(ctx, `INSERT INTO contexts(entry, text) VALUES (?, ?)`, f.pk, text); err != nil {
				return err
			}
		}
	}
	return rebuildFTS(ctx, tx)
}

// migrate brings the schema to SchemaVersion. Each step runs in its own
// write transaction that also bumps user_version, so concurrent openers
// serialise on the write lock and each step runs exactly once.
func (s *Store) migrate(ctx context.Context) error {
	for {
		done, err := s.migrateStep(ctx)
		if err != nil || done {
			return err
		}
	}
}

func (s *Store) migrateStep(ctx context.Context) (done bool, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		var version, appID int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
			return s.classifyOpenError(err)
		}
		if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
			return err
		}
		if version > SchemaVersion() {
			return fmt.Errorf("%w: schema version %d, this engram knows up to %d; upgrade engram to open it",
				store.ErrSchemaTooNew, version, SchemaVersion())
		}
		if version == 0 {
			var tables int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&tables); err != nil {
				return err
			}
			if tables > 0 || appID != 0 && appID != applicationID {
				return fmt.Errorf("not an engram store: the file holds another application's data")
			}
		} else if appID != applicationID {
			return fmt.Errorf("not an engram store: application_id is %#x", appID)
		}
		if version == SchemaVersion() {
			done = true
			return nil
		}
		m := migrations[version] // migrations[i] has version i+1
		// A step that rebuilds is the only slow one, and only on a store
		// that holds something: say so where the user will see it.
		level, entries := slog.LevelInfo, 0
		if m.run != nil && version > 0 {
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM entries").Scan(&entries); err != nil {
				return err
			}
			if entries > 0 {
				level = slog.LevelWarn
			}
		}
		s.log.Log(ctx, level, "migrating store: once per store; a step that rebuilds an index takes up to about 35 s per 100,000 entries",
			"from", version, "to", m.version, "step", m.name, "entries", entries)
		if m.sql != "" {
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
		}
		if m.run != nil {
			if err := m.run(ctx, tx); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", m.version)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID))
		return err
	})
	return done, err
}

// rebuildTerms indexes everything again with the current terms (the
// entries' full-text tables and the archive's), when the way terms are
// made has changed (terms.Version).
func rebuildTerms(ctx context.Context, tx *sql.Tx) error {
	if err := rebuildFTS(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO arch_fts(arch_fts) VALUES ('delete-all')`); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, kind, text FROM arch_records WHERE text != '' ORDER BY seq`)
	if err != nil {
		return err
	}
	type record struct {
		seq  int64
		text string
	}
	var recs []record
	for rows.Next() {
		var (
			r    record
			kind string
		)
		if err := rows.Scan(&r.seq, &kind, &r.text); err != nil {
			return errors.Join(err, rows.Close())
		}
		if store.RecordKind(kind).Global() { // as Append indexes them
			recs = append(recs, r)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, r := range recs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO arch_fts(rowid, body) VALUES (?, ?)`, r.seq, terms.String(r.text)); err != nil {
			return err
		}
	}
	return nil
}

// rebuildFTS empties both full-text tables and indexes every entry's chunks
// again with the current terms, each in the table it belongs in.
func rebuildFTS(ctx context.Context, tx *sql.Tx) error {
	for _, table := range []string{ftsTable(ftsMain), ftsTable(ftsHistory)} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+`(`+table+`) VALUES ('delete-all')`); err != nil {
			return err
		}
	}
	var pks []int64
	rows, err := tx.QueryContext(ctx, `SELECT pk FROM entries ORDER BY pk`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var pk int64
		if err := rows.Scan(&pk); err != nil {
			return errors.Join(err, rows.Close())
		}
		pks = append(pks, pk)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	b := newBatch(ctx, tx)
	defer b.close()
	for _, pk := range pks {
		if err := b.indexEntry(pk, true); err != nil {
			return err
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO counters(name, value) VALUES (?, 1)
		ON CONFLICT(name) DO UPDATE SET value = value + 1`, ftsGeneration)
	return err
}

const schemaV10 = `
-- entry_terms holds the term set of each file of more than one chunk:
-- sorted distinct 32-bit hashes of its index terms (see termSet).
CREATE TABLE IF NOT EXISTS entry_terms (
	entry INTEGER PRIMARY KEY REFERENCES entries(pk),
	terms BLOB NOT NULL
) STRICT;
`

// agentCredentials gives agents a credential, the agent whose key lineage
// each belongs to (its own id unless a key holder registered it; rate
// limits count by it), and the hash of the key issued to it, if any. It
// adds the columns only where they are missing, so that it can run again
// over a store whose version was set back.
func agentCredentials(ctx context.Context, tx *sql.Tx) error {
	have := map[string]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info('arch_agents')`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return errors.Join(err, rows.Close())
		}
		have[name] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	var stmts []string
	for _, col := range []string{"credential", "key_hash"} {
		if !have[col] {
			stmts = append(stmts, `ALTER TABLE arch_agents ADD COLUMN `+col+` TEXT NOT NULL DEFAULT ''`)
		}
	}
	stmts = append(stmts,
		`UPDATE arch_agents SET credential = id WHERE credential = ''`,
		`CREATE UNIQUE INDEX IF NOT EXISTS arch_agents_key ON arch_agents(key_hash) WHERE key_hash != ''`,
		`CREATE INDEX IF NOT EXISTS arch_agents_credential ON arch_agents(credential)`)
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

const schemaV12 = `
-- audit records every forget, redaction and retention run: who, when, what
-- (targets, a JSON list of ids) and how much (counts, a JSON object); never
-- the bytes removed.
CREATE TABLE IF NOT EXISTS audit (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	at      INTEGER NOT NULL,
	actor   TEXT NOT NULL,
	action  TEXT NOT NULL,
	targets TEXT NOT NULL,
	counts  TEXT NOT NULL
) STRICT;

-- purges counts committed forgets and redactions: caches of the store in
-- other processes compare it to know that what they hold may be gone.
INSERT INTO counters(name, value) VALUES ('purges', 0) ON CONFLICT(name) DO NOTHING;
`

// addRedacted adds entries.redacted, which marks the entries an operator
// redacted: they keep their ID, but their content is no longer what the
// ID is the SHA-256 of. (ALTER TABLE has no IF NOT EXISTS; the migration
// tests take stores back to older versions without removing it.)
// addAppendedAt adds the time of each window item's append (migration 14).
func addAppendedAt(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('window_items') WHERE name = 'appended_at'`).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE window_items ADD COLUMN appended_at INTEGER NOT NULL DEFAULT 0`)
	return err
}

func addRedacted(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('entries') WHERE name = 'redacted'`).Scan(&n); err != nil || n > 0 {
		return err
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE entries ADD COLUMN redacted INTEGER NOT NULL DEFAULT 0`)
	return err
}

// addNextPos keeps, on a window's head, one past the greatest place it
// ever gave, which stays when its last items are forgotten: the window
// knows that messages were there (a tool call's result, say). A window's
// is one past its last item's until then. Like addAppendedAt, it adds the
// column only where it is missing.
func addNextPos(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('windows') WHERE name = 'next_pos'`).Scan(&n); err != nil || n > 0 {
		return err
	}
	for _, q := range []string{
		`ALTER TABLE windows ADD COLUMN next_pos INTEGER NOT NULL DEFAULT 0`,
		`UPDATE windows SET next_pos = (SELECT coalesce(max(pos) + 1, 0) FROM window_items i
			WHERE i.session_id = windows.session_id AND i.agent_id = windows.agent_id)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// addVectorSeq numbers vectors in the order they are written (vectors.seq,
// per model; see PutVectors), so that an index loaded from them can be
// kept up to date by asking for what came after the last one it read.
// The vectors stored before are numbered by their chunk ID, the order
// they were loaded in until then. Like addAppendedAt, it adds the column
// only where it is missing.
func addVectorSeq(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('vectors') WHERE name = 'seq'`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		for _, q := range []string{
			`ALTER TABLE vectors ADD COLUMN seq INTEGER NOT NULL DEFAULT 0`,
			`UPDATE vectors SET seq = chunk`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	_, err := tx.ExecContext(ctx, `CREATE UNIQUE INDEX IF NOT EXISTS vectors_seq ON vectors(model, seq)`)
	return err
}

const schemaV7 = `
-- arch_versions holds the archivalist's versions: scope '' is the global
-- version, any other scope a session's version.
CREATE TABLE arch_versions (
	scope   TEXT PRIMARY KEY,
	version INTEGER NOT NULL
) STRICT;
INSERT INTO arch_versions(scope, version) VALUES ('', 0);

-- arch_records are the archivalist's records; never updated or deleted.
CREATE TABLE arch_records (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT UNIQUE,
	kind       TEXT NOT NULL,
	gv         INTEGER NOT NULL,
	sv         INTEGER NOT NULL,
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	model      TEXT NOT NULL,
	category   TEXT NOT NULL,
	key        TEXT NOT NULL,
	ref        TEXT NOT NULL,
	hash       TEXT NOT NULL,
	text       TEXT NOT NULL,
	body       TEXT NOT NULL,
	created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX arch_records_kind ON arch_records(kind, category);
CREATE INDEX arch_records_gv ON arch_records(gv) WHERE gv > 0;
CREATE INDEX arch_records_session ON arch_records(session_id, kind, key, seq);
CREATE INDEX arch_records_hash ON arch_records(hash);
CREATE INDEX arch_records_recent ON arch_records(session_id, kind, created_at);
CREATE INDEX arch_records_ref ON arch_records(ref) WHERE ref != '';

-- arch_superseded says which record superseded which (a record beside the
-- records, so that they stay unchanged).
CREATE TABLE arch_superseded (
	id TEXT PRIMARY KEY,
	by TEXT NOT NULL
) STRICT;

-- arch_usage counts the duplicates merged into a record.
CREATE TABLE arch_usage (
	id      TEXT PRIMARY KEY,
	count   INTEGER NOT NULL,
	last_at INTEGER NOT NULL
) STRICT;

CREATE TABLE arch_agents (
	id            TEXT PRIMARY KEY,
	name          TEXT NOT NULL,
	session_id    TEXT NOT NULL,
	parent_id     TEXT NOT NULL,
	model         TEXT NOT NULL,
	role          TEXT NOT NULL,
	registered_at INTEGER NOT NULL
) STRICT;
CREATE INDEX arch_agents_session ON arch_agents(session_id);

CREATE TABLE arch_events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	type       TEXT NOT NULL,
	gv         INTEGER NOT NULL,
	sv         INTEGER NOT NULL,
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	scope      TEXT NOT NULL,
	record_id  TEXT NOT NULL,
	detail     TEXT NOT NULL,
	at         INTEGER NOT NULL
) STRICT;

-- arch_fts indexes the terms of record texts; its rowid is the record's seq.
CREATE VIRTUAL TABLE arch_fts USING fts5(
	body,
	content = '', contentless_delete = 1,
	tokenize = 'unicode61 remove_diacritics 2'
);
`

// schemaV13: context windows. A window's head holds its settings (opaque
// to the store) and a version bumped by every change; its items are its
// messages in append order, each the form of the message (its content is
// the entries named) and, once evicted, the reference it went under.
const schemaV13 = `
CREATE TABLE IF NOT EXISTS windows (
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	settings   BLOB NOT NULL,
	version    INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (session_id, agent_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS window_items (
	session_id     TEXT NOT NULL,
	agent_id       TEXT NOT NULL,
	pos            INTEGER NOT NULL,
	append_version INTEGER NOT NULL,
	form           BLOB NOT NULL,
	entry_ids      TEXT NOT NULL,
	tokens         INTEGER NOT NULL,
	pinned         INTEGER NOT NULL,
	ref_id         TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (session_id, agent_id, pos)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS window_items_ref ON window_items(ref_id) WHERE ref_id != '';
`

// schemaV14: the re-admissions of windows, in order: at is the place the
// window's next item would take when the items [from_pos, to_pos) came
// back, so that a window laid out again from its ledger (the window
// package's Layout) takes them back where it did; and when each item was
// appended (0 for those appended before), which markers show.
const schemaV14 = `

CREATE TABLE IF NOT EXISTS window_readmits (
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	at_pos     INTEGER NOT NULL,
	from_pos   INTEGER NOT NULL,
	to_pos     INTEGER NOT NULL,
	PRIMARY KEY (session_id, agent_id, seq)
) STRICT, WITHOUT ROWID;
`

// schemaV15: the rolling summaries of windows (issue 24): one per level
// and first place; epoch is the count of the window's summary writes when
// it was written, the greatest being the window's epoch, which a write
// must still find to succeed (compare-and-swap).
const schemaV15 = `

CREATE TABLE IF NOT EXISTS window_summaries (
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	level      INTEGER NOT NULL,
	from_pos   INTEGER NOT NULL,
	to_pos     INTEGER NOT NULL,
	digest     TEXT NOT NULL,
	text       TEXT NOT NULL,
	tokens     INTEGER NOT NULL,
	made_by    TEXT NOT NULL,
	epoch      INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (session_id, agent_id, level, from_pos)
) STRICT, WITHOUT ROWID;
`

// schemaV16: turn snapshots. A turn's assembled context is kept as its
// body, the messages sent (JSON), stored once under its SHA-256 however
// many turns share it, and a snapshot of the window: its number in the
// window, the body's hash, the window's version at assembly and the
// assembly's report (JSON).
const schemaV16 = `
CREATE TABLE IF NOT EXISTS snapshot_bodies (
	hash TEXT PRIMARY KEY,
	body BLOB NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS window_snapshots (
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	hash       TEXT NOT NULL,
	version    INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	report     TEXT NOT NULL,
	PRIMARY KEY (session_id, agent_id, seq)
) STRICT;
CREATE INDEX IF NOT EXISTS window_snapshots_hash ON window_snapshots(hash);
CREATE INDEX IF NOT EXISTS window_snapshots_window_hash ON window_snapshots(session_id, agent_id, hash);
`

// schemaV18: the keys of windows' idempotent appends: what the append
// was (the caller's digest of its items) and where its items went.
const schemaV18 = `
CREATE TABLE IF NOT EXISTS window_appends (
	session_id TEXT NOT NULL,
	agent_id   TEXT NOT NULL,
	key        TEXT NOT NULL,
	digest     TEXT NOT NULL,
	from_pos   INTEGER NOT NULL,
	items      INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (session_id, agent_id, key)
) STRICT, WITHOUT ROWID;
`

// FileSchemaVersion returns the schema version of the store file at path
// without migrating it or writing to it: 0 for a file engram never
// wrote. It is for reporting (engram migrate --check); Open migrates.
func FileSchemaVersion(ctx context.Context, path string) (int, error) {
	s := &Store{path: path, opts: Options{BusyTimeout: 5 * time.Second}}
	db, err := sql.Open("sqlite", s.dsn(true))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("store %s: %w", path, err)
	}
	return v, nil
}
