package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

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

// The archivalist's writes, with several servers on one database.
//
// The contract asks more than unique versions: versions must be strictly
// increasing, never repeat across servers, and become visible in order
// (no reader ever sees version N+1 before N), and a reader tailing the
// events after a seq must never miss an event that commits later with a
// lower seq. Neither a sequence nor a row lock per scope gives that:
// nextval hands out N+1 while N's transaction is still open, and two
// transactions bumping different scopes (or only appending events) may
// commit in either order, so records' and events' seqs would not follow
// commit order.
//
// So every ArchiveWrite transaction takes one transaction-level advisory
// lock (archiveLock) in its first statement, before it reads anything:
// archive writes run and commit one at a time across every server on the
// database. Everything a write assigns (versions, UPDATE ... RETURNING on
// arch_versions; record and event seqs from their sequences) is then
// assigned in commit order. PostgreSQL releases the lock only after the
// commit is visible to other transactions, so the next writer (and any
// snapshot taken after it commits) sees every earlier write: what a
// reader sees of the archive is always a prefix of it. The transaction
// runs at READ COMMITTED whatever the database's default, so that each
// statement after the lock reads what the writer before committed (at
// REPEATABLE READ the snapshot would be taken while waiting for the lock,
// and every write after a wait would fail and retry).
//
// The cost is throughput: one archive writer at a time across all
// servers, as on SQLite, where the database has one writer anyway. An
// archive write is a few small statements, so the lock is held for a few
// round trips and one commit. The SQLite backend group-commits
// concurrent writes into one transaction, with savepoints, to share its
// fsync. BenchmarkArchiveWrite measures that on PostgreSQL (8 goroutines
// on one server, a record and an event per write; a test-only prototype
// of the group commit): about 2,100 acknowledged writes/s with a
// transaction per call, 3,600 with group commit, on a 2-core machine
// with the database local. Both are far above what agents write, so each
// call is its own transaction: no queue, no committer goroutine, and an
// error or a panic in fn touches no other caller's write. (Group commit
// would gain more with the database across a network, where the lock is
// held over each write's round trips; it is the first thing to try if
// archive writes ever queue.)
//
// Forgetting and redaction (purge.go) change archive rows and versions
// too: they take the same lock with lockArchive.

// archiveLock is the advisory lock key of archive writes ("ENGRAMAR").
const archiveLock int64 = 0x454e4752414d4152

// lockArchive takes the archive's write lock for the rest of tx.
func lockArchive(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", archiveLock); err != nil {
		return fmt.Errorf("lock the archive: %w", err)
	}
	return nil
}

// ArchiveWrite implements store.ArchiveStore. Each call is a transaction
// of its own: an error from fn rolls back everything fn wrote, and is
// returned as fn returned it. A panic in fn rolls the transaction back
// (releasing the lock) before it goes on up.
func (s *Store) ArchiveWrite(ctx context.Context, fn func(tx store.ArchiveTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var ferr error // fn's own error, of the last attempt
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	err := s.retry(ctx, func() error {
		ferr = nil
		return s.runTx(ctx, opts, func(tx pgx.Tx) (err error) {
			defer func() {
				if p := recover(); p != nil {
					_ = tx.Rollback(context.WithoutCancel(ctx))
					panic(p)
				}
			}()
			if err := lockArchive(ctx, tx); err != nil {
				return err
			}
			ferr = fn(&archTx{ctx: ctx, tx: tx})
			return ferr
		})
	})
	switch {
	case err == nil:
		return nil
	case ferr != nil && !retryable(ferr):
		return ferr
	}
	return fmt.Errorf("archive write: %w", err)
}

type archTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t *archTx) Versions(sessionID string) (uint64, uint64, error) {
	return archVersions(t.ctx, t.tx, sessionID)
}

func archVersions(ctx context.Context, q querier, sessionID string) (gv, sv uint64, err error) {
	err = q.QueryRow(ctx, `SELECT coalesce(max(version) FILTER (WHERE scope = ''), 0),
		coalesce(max(version) FILTER (WHERE scope = $1 AND $1 != ''), 0)
		FROM arch_versions WHERE scope IN ('', $1)`, sessionID).Scan(&gv, &sv)
	return gv, sv, err
}

func (t *archTx) NextGlobal() (uint64, error) { return t.next("") }

func (t *archTx) NextSession(sessionID string) (uint64, error) {
	if sessionID == "" {
		return 0, errors.New("next session version: no session")
	}
	return t.next(sessionID)
}

// next bumps a scope's version. Under the archive lock nothing else
// writes arch_versions, and the row lock the UPDATE takes is held to
// commit besides.
func (t *archTx) next(scope string) (uint64, error) {
	var v uint64
	err := t.tx.QueryRow(t.ctx, `INSERT INTO arch_versions (scope, version) VALUES ($1, 1)
		ON CONFLICT (scope) DO UPDATE SET version = arch_versions.version + 1 RETURNING version`, scope).Scan(&v)
	return v, err
}

func (t *archTx) Append(r *store.ArchiveRecord) error {
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now()
	}
	body := string(r.Body)
	if body == "" {
		body = "{}"
	}
	// ON CONFLICT DO NOTHING, not a unique violation: an error would
	// abort the whole transaction, where fn may want to go on.
	err := t.tx.QueryRow(t.ctx, `INSERT INTO arch_records (id, kind, gv, sv, session_id, agent_id, model,
		category, key, ref, hash, text, body, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (id) DO NOTHING RETURNING seq`,
		nullable(r.ID), string(r.Kind), int64(r.GV), int64(r.SV), r.SessionID, r.AgentID, r.Model, r.Category, r.Key, r.Ref,
		r.Hash, r.Text, body, unixNano(r.CreatedAt)).Scan(&r.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return &store.ConflictError{What: "archive record " + r.ID, Msg: "already exists"}
	}
	if err != nil {
		return err
	}
	// Only the global history is searched by words; session state is
	// read by key.
	if r.Text != "" && r.Kind.Global() {
		return indexDocs(t.ctx, t.tx, spaceArchive, []ftsDoc{{ID: r.Seq, Body: terms.String(r.Text)}})
	}
	return nil
}

func (t *archTx) Records(q store.RecordQuery) ([]store.ArchiveRecord, error) {
	return archRecords(t.ctx, t.tx, q)
}

func (t *archTx) Supersede(old, by string) error {
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO arch_superseded (id, by) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, old, by)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return &store.ConflictError{What: "record " + old, Msg: "is already superseded"}
	}
	return nil
}

func (t *archTx) Use(id string, at time.Time) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO arch_usage (id, count, last_at) VALUES ($1, 1, $2)
		ON CONFLICT (id) DO UPDATE SET count = arch_usage.count + 1, last_at = greatest(arch_usage.last_at, excluded.last_at)`,
		id, unixNano(at))
	return err
}

func (t *archTx) Agent(id string) (store.ArchiveAgent, error) { return archAgent(t.ctx, t.tx, id) }

func (t *archTx) PutAgent(a store.ArchiveAgent) error {
	if a.RegisteredAt.IsZero() {
		a.RegisteredAt = time.Now()
	}
	if a.Credential == "" {
		a.Credential = a.ID
	}
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO arch_agents (id, name, session_id, parent_id, model, role, registered_at, credential)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING`,
		a.ID, a.Name, a.SessionID, a.ParentID, a.Model, a.Role, unixNano(a.RegisteredAt), a.Credential)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return &store.ConflictError{What: "agent " + a.ID, Msg: "is already registered"}
	}
	return nil
}

func (t *archTx) SetAgentKey(id, keyHash string) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE arch_agents SET key_hash = $1 WHERE id = $2`, keyHash, id)
	if uniqueViolation(err) {
		return &store.ConflictError{What: "agent " + id, Msg: "key is another agent's"}
	}
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("agent %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func (t *archTx) AppendEvent(e *store.ArchiveEvent) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return t.tx.QueryRow(t.ctx, `INSERT INTO arch_events (type, gv, sv, session_id, agent_id, scope, record_id, detail, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq`,
		e.Type, int64(e.GV), int64(e.SV), e.SessionID, e.AgentID, e.Scope, e.RecordID, e.Detail, unixNano(e.At)).Scan(&e.Seq)
}

// ArchiveVersions implements store.ArchiveStore.
//
// Both versions come from one statement, which reads one snapshot: no
// transaction is needed, so a briefing's check of the versions, which
// every briefing makes, even one served from cache, costs one round trip
// rather than three (BEGIN, the read, COMMIT).
func (s *Store) ArchiveVersions(ctx context.Context, sessionID string) (gv, sv uint64, err error) {
	err = s.retry(ctx, func() error {
		gv, sv, err = archVersions(ctx, s.pool, sessionID)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("archive versions: %w", err)
	}
	return gv, sv, nil
}

// ArchiveRecords implements store.ArchiveStore.
func (s *Store) ArchiveRecords(ctx context.Context, q store.RecordQuery) ([]store.ArchiveRecord, error) {
	var out []store.ArchiveRecord
	err := s.read(ctx, func(tx pgx.Tx) (err error) {
		out, err = archRecords(ctx, tx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("archive records: %w", err)
	}
	return out, nil
}

const archColumns = `r.seq, coalesce(r.id, ''), r.kind, r.gv, r.sv, r.session_id, r.agent_id, r.model, r.category,
	r.key, r.ref, r.hash, r.text, r.body, r.created_at, coalesce(x.by, ''), coalesce(u.count, 0)`

const archFrom = ` FROM arch_records r LEFT JOIN arch_superseded x ON x.id = r.id LEFT JOIN arch_usage u ON u.id = r.id`

// latestKinds are the kinds whose newest record per key is the current
// state; wants and rejects share one key space, so a reject replaces the
// want of the same text.
const latestKinds = `'resume', 'file', 'want', 'reject'`

func archRecords(ctx context.Context, db querier, q store.RecordQuery) ([]store.ArchiveRecord, error) {
	var where []string
	var a args
	if len(q.Kinds) > 0 {
		where = append(where, "r.kind = ANY("+a.add(kindStrings(q.Kinds))+")")
	}
	if len(q.IDs) > 0 {
		where = append(where, "r.id = ANY("+a.add(q.IDs)+")")
	}
	eq := func(col, v string) {
		if v != "" {
			where = append(where, col+" = "+a.add(v))
		}
	}
	eq("r.session_id", q.SessionID)
	eq("r.key", q.Key)
	eq("r.ref", q.Ref)
	eq("r.hash", q.Hash)
	eq("r.agent_id", q.AgentID)
	if q.Credential != "" {
		where = append(where, "r.agent_id IN (SELECT id FROM arch_agents WHERE credential = "+a.add(q.Credential)+")")
	}
	if q.Category != "" {
		where = append(where, "(r.category = "+a.add(q.Category)+" OR starts_with(r.category, "+a.add(q.Category+".")+"))")
	}
	if q.AfterGV > 0 {
		where = append(where, "r.gv > "+a.add(int64(q.AfterGV)))
	}
	if q.UpToGV > 0 {
		where = append(where, "r.gv <= "+a.add(int64(q.UpToGV)))
	}
	if !q.Since.IsZero() {
		where = append(where, "r.created_at >= "+a.add(unixNano(q.Since)))
	}
	if q.Active {
		where = append(where, "x.by IS NULL")
	}
	if q.UpToSV > 0 {
		where = append(where, "r.sv <= "+a.add(int64(q.UpToSV)))
	}
	if q.Latest {
		if q.SessionID == "" {
			return nil, errors.New("archive records: Latest needs a session")
		}
		sub := `r.seq IN (SELECT max(l.seq) FROM arch_records l WHERE l.session_id = ` + a.add(q.SessionID) +
			` AND l.kind IN (` + latestKinds + `)`
		if q.UpToSV > 0 {
			sub += ` AND l.sv <= ` + a.add(int64(q.UpToSV))
		}
		where = append(where, sub+` GROUP BY CASE WHEN l.kind IN ('want', 'reject') THEN 'pref' ELSE l.kind END, l.key)`)
	}
	query := "SELECT " + archColumns + archFrom
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	if q.Newest {
		query += " ORDER BY r.seq DESC"
	} else {
		query += " ORDER BY r.seq"
	}
	if q.Limit > 0 {
		query += " LIMIT " + strconv.Itoa(q.Limit)
	}
	if q.Offset > 0 {
		query += " OFFSET " + strconv.Itoa(q.Offset)
	}
	return queryArchRecords(ctx, db, query, a...)
}

func queryArchRecords(ctx context.Context, db querier, query string, a ...any) ([]store.ArchiveRecord, error) {
	rows, err := db.Query(ctx, query, a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.ArchiveRecord
	for rows.Next() {
		r, err := scanArchRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func kindStrings(kinds []store.RecordKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = string(k)
	}
	return out
}

// scanArchRecord reads the archColumns, then extra.
func scanArchRecord(sc scanner, extra ...any) (store.ArchiveRecord, error) {
	var (
		r        store.ArchiveRecord
		kind     string
		body     string
		gv, sv   int64
		at, uses int64
	)
	dest := append([]any{&r.Seq, &r.ID, &kind, &gv, &sv, &r.SessionID, &r.AgentID, &r.Model, &r.Category,
		&r.Key, &r.Ref, &r.Hash, &r.Text, &body, &at, &r.SupersededBy, &uses}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return r, err
	}
	r.Kind = store.RecordKind(kind)
	r.GV, r.SV = uint64(gv), uint64(sv)
	r.Body = []byte(body)
	r.CreatedAt = fromUnixNano(at)
	r.Uses = uses
	return r, nil
}

// ArchiveAgent implements store.ArchiveStore.
func (s *Store) ArchiveAgent(ctx context.Context, id string) (a store.ArchiveAgent, err error) {
	err = s.read(ctx, func(tx pgx.Tx) error {
		a, err = archAgent(ctx, tx, id)
		return err
	})
	return a, err
}

func archAgent(ctx context.Context, db querier, id string) (store.ArchiveAgent, error) {
	agents, err := queryArchAgents(ctx, db, `SELECT `+agentColumns+` FROM arch_agents WHERE id = $1`, id)
	if err != nil {
		return store.ArchiveAgent{}, err
	}
	if len(agents) == 0 {
		return store.ArchiveAgent{}, fmt.Errorf("agent %s: %w", id, store.ErrNotFound)
	}
	return agents[0], nil
}

// ArchiveAgentByKey implements store.ArchiveStore.
func (s *Store) ArchiveAgentByKey(ctx context.Context, keyHash string) (a store.ArchiveAgent, err error) {
	if keyHash == "" {
		return a, fmt.Errorf("agent key: %w", store.ErrNotFound)
	}
	err = s.read(ctx, func(tx pgx.Tx) error {
		agents, err := queryArchAgents(ctx, tx, `SELECT `+agentColumns+` FROM arch_agents WHERE key_hash = $1`, keyHash)
		if err != nil {
			return err
		}
		if len(agents) == 0 {
			return fmt.Errorf("agent key: %w", store.ErrNotFound)
		}
		a = agents[0]
		return nil
	})
	return a, err
}

// ArchiveAgents implements store.ArchiveStore.
func (s *Store) ArchiveAgents(ctx context.Context, sessionID string) ([]store.ArchiveAgent, error) {
	var out []store.ArchiveAgent
	err := s.read(ctx, func(tx pgx.Tx) (err error) {
		q := `SELECT ` + agentColumns + ` FROM arch_agents`
		var a args
		if sessionID != "" {
			q += ` WHERE session_id = ` + a.add(sessionID)
		}
		out, err = queryArchAgents(ctx, tx, q+` ORDER BY registered_at, id`, a...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("archive agents: %w", err)
	}
	return out, nil
}

const agentColumns = `id, name, session_id, parent_id, model, role, registered_at, credential, key_hash != ''`

func queryArchAgents(ctx context.Context, db querier, query string, a ...any) ([]store.ArchiveAgent, error) {
	rows, err := db.Query(ctx, query, a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.ArchiveAgent
	for rows.Next() {
		var ag store.ArchiveAgent
		var at int64
		if err := rows.Scan(&ag.ID, &ag.Name, &ag.SessionID, &ag.ParentID, &ag.Model, &ag.Role, &at, &ag.Credential, &ag.HasKey); err != nil {
			return nil, err
		}
		ag.RegisteredAt = fromUnixNano(at)
		out = append(out, ag)
	}
	return out, rows.Err()
}

// ArchiveEvents implements store.ArchiveStore. Events are written under
// the archive lock, so their seqs follow commit order: a tail that asks
// for the events after the last seq it saw misses none.
func (s *Store) ArchiveEvents(ctx context.Context, after int64, limit int) ([]store.ArchiveEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	const cols = `seq, type, gv, sv, session_id, agent_id, scope, record_id, detail, at`
	query, a := `SELECT `+cols+` FROM arch_events WHERE seq > $1 ORDER BY seq LIMIT $2`, args{after, limit}
	if after < 0 {
		query, a = `SELECT * FROM (SELECT `+cols+` FROM arch_events ORDER BY seq DESC LIMIT $1) last ORDER BY seq`, args{limit}
	}
	var out []store.ArchiveEvent
	err := s.read(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, query, a...)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			var e store.ArchiveEvent
			var gv, sv, at int64
			if err := rows.Scan(&e.Seq, &e.Type, &gv, &sv, &e.SessionID, &e.AgentID, &e.Scope, &e.RecordID, &e.Detail, &at); err != nil {
				return err
			}
			e.GV, e.SV = uint64(gv), uint64(sv)
			e.At = fromUnixNano(at)
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("archive events: %w", err)
	}
	return out, nil
}

// ArchiveSearch implements store.ArchiveStore. Records are ranked by BM25
// over the archive's space of the index, as the SQLite backend ranks its
// one-column arch_fts: statistics over every indexed record, the kinds
// filtered after ranking, so scores agree between the backends.
func (s *Store) ArchiveSearch(ctx context.Context, text string, kinds []store.RecordKind, limit int) ([]store.ArchiveHit, error) {
	var groups []terms.Group
	all := terms.Query(text)
	for _, g := range all {
		if g.Stop && len(all) > 1 {
			continue
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 || limit <= 0 {
		return nil, nil
	}
	var hits []store.ArchiveHit
	err := s.read(ctx, func(tx pgx.Tx) error {
		hits = hits[:0]
		ranked, err := rankAll(ctx, tx, spaceArchive, groups, [3]float64{1, 1, 1})
		if err != nil {
			return err
		}
		// Read the records best first, a page at a time, until limit of
		// them are of the kinds asked for.
		page := max(2*limit, 64)
		for len(ranked) > 0 && len(hits) < limit {
			n := min(page, len(ranked))
			batch := ranked[:n]
			ranked = ranked[n:]
			seqs := make([]int64, len(batch))
			for i, d := range batch {
				seqs[i] = d.Doc
			}
			var a args
			query := "SELECT " + archColumns + archFrom + " WHERE r.seq = ANY(" + a.add(seqs) + ")"
			if len(kinds) > 0 {
				query += " AND r.kind = ANY(" + a.add(kindStrings(kinds)) + ")"
			}
			recs, err := queryArchRecords(ctx, tx, query, a...)
			if err != nil {
				return err
			}
			bySeq := make(map[int64]store.ArchiveRecord, len(recs))
			for _, r := range recs {
				bySeq[r.Seq] = r
			}
			for _, d := range batch {
				if r, ok := bySeq[d.Doc]; ok && len(hits) < limit {
					hits = append(hits, store.ArchiveHit{Record: r, Score: d.Score})
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("archive search: %w", err)
	}
	return hits, nil
}
