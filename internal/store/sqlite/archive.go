package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// The archivalist's writes are group-committed: concurrent ArchiveWrite
// calls queue, one goroutine runs as many as are waiting (up to
// archBatchMax) in one transaction, each in a savepoint of its own, and
// commits once. With synchronous=FULL a commit costs an fsync, so this is
// what lets many agents' small writes be durable and still fast.
const archBatchMax = 256

type archReq struct {
	ctx   context.Context
	fn    func(tx store.ArchiveTx) error
	state atomic.Int32 // archQueued, archRunning or archCancelled
	err   error
	done  chan struct{}
}

const (
	archQueued int32 = iota
	archRunning
	archCancelled
)

type archCommitter struct {
	once sync.Once
	q    chan *archReq
	stop chan struct{}
	wg   sync.WaitGroup
}

// ArchiveWrite implements store.ArchiveStore.
func (s *Store) ArchiveWrite(ctx context.Context, fn func(tx store.ArchiveTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &s.arch
	c.once.Do(func() {
		c.q = make(chan *archReq, 4*archBatchMax)
		c.stop = make(chan struct{})
		c.wg.Add(1)
		go s.archCommit()
	})
	r := &archReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	select {
	case c.q <- r:
	case <-c.stop:
		return errors.New("archive write: store is closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		// A write that has not started never will; one that has is waited
		// for, so an error always means nothing was written.
		if r.state.CompareAndSwap(archQueued, archCancelled) {
			return ctx.Err()
		}
		<-r.done
		return r.err
	}
}

func (s *Store) archCommit() {
	c := &s.arch
	defer c.wg.Done()
	for {
		var first *archReq
		select {
		case first = <-c.q:
		case <-c.stop:
			// Fail what is still queued.
			for {
				select {
				case r := <-c.q:
					r.err = errors.New("archive write: store is closed")
					close(r.done)
				default:
					return
				}
			}
		}
		batch := []*archReq{first}
	drain:
		for len(batch) < archBatchMax {
			select {
			case r := <-c.q:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		s.archRun(batch)
	}
}

// archRun runs a batch in one transaction and acknowledges each request
// only after the commit.
func (s *Store) archRun(batch []*archReq) {
	var live []*archReq
	for _, r := range batch {
		if r.state.CompareAndSwap(archQueued, archRunning) {
			live = append(live, r)
		} else {
			close(r.done)
		}
	}
	if len(live) == 0 {
		return
	}
	// The transaction is not bound to any one caller's context: one
	// caller giving up must not undo the others.
	ctx := context.Background()
	// A batch runs first without savepoints (two statements fewer per
	// write); if any write fails, it is run again with one savepoint per
	// write, so that the failure undoes only its own.
	run := func(careful bool) (failed bool, err error) {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		atx := &archTx{ctx: ctx, tx: tx}
		for _, r := range live {
			r.err = nil
			if careful {
				if _, err := atx.ExecContext(ctx, "SAVEPOINT w"); err != nil {
					return false, errors.Join(err, rollback(tx))
				}
			}
			if ferr := r.fn(atx); ferr != nil {
				if busy(ferr) {
					return false, errors.Join(ferr, rollback(tx))
				}
				if !careful {
					return true, tx.Rollback()
				}
				r.err = ferr
				if _, err := atx.ExecContext(ctx, "ROLLBACK TO w"); err != nil {
					return false, errors.Join(err, rollback(tx))
				}
			}
			if careful {
				if _, err := atx.ExecContext(ctx, "RELEASE w"); err != nil {
					return false, errors.Join(err, rollback(tx))
				}
			}
		}
		return false, tx.Commit()
	}
	err := s.retry(ctx, func() error {
		failed, err := run(false)
		if err == nil && failed {
			_, err = run(true)
		}
		return err
	})
	for _, r := range live {
		if err != nil {
			r.err = fmt.Errorf("archive write: %w", err)
		}
		close(r.done)
	}
}

// closeArchive stops the committer after the writes already queued.
func (s *Store) closeArchive() {
	c := &s.arch
	c.once.Do(func() { c.stop = make(chan struct{}) }) // never started
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
}

// archQuerier is what both a transaction and the read pool offer.
type archQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type archTx struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts map[string]*sql.Stmt // closed with the transaction
}

// stmt returns query prepared in the transaction, once per transaction:
// the committer runs the same few statements for every write of a batch,
// and preparing them costs more than running them.
func (t *archTx) stmt(query string) (*sql.Stmt, error) {
	if st, ok := t.stmts[query]; ok {
		return st, nil
	}
	st, err := t.tx.PrepareContext(t.ctx, query)
	if err != nil {
		return nil, err
	}
	if t.stmts == nil {
		t.stmts = map[string]*sql.Stmt{}
	}
	t.stmts[query] = st
	return st, nil
}

func (t *archTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (t *archTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := t.stmt(query)
	if err != nil {
		// Let the row carry the error: prepare again through the
		// transaction, which fails the same way on Scan.
		return t.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (t *archTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (t *archTx) Versions(sessionID string) (uint64, uint64, error) {
	return archVersions(t.ctx, t, sessionID)
}

func archVersions(ctx context.Context, q archQuerier, sessionID string) (gv, sv uint64, err error) {
	if err := q.QueryRowContext(ctx, `SELECT version FROM arch_versions WHERE scope = ''`).Scan(&gv); err != nil {
		return 0, 0, err
	}
	if sessionID == "" {
		return gv, 0, nil
	}
	err = q.QueryRowContext(ctx, `SELECT version FROM arch_versions WHERE scope = ?`, sessionID).Scan(&sv)
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return gv, sv, err
}

func (t *archTx) NextGlobal() (uint64, error) { return t.next("") }

func (t *archTx) NextSession(sessionID string) (uint64, error) {
	if sessionID == "" {
		return 0, errors.New("next session version: no session")
	}
	return t.next(sessionID)
}

func (t *archTx) next(scope string) (uint64, error) {
	var v uint64
	err := t.QueryRowContext(t.ctx, `INSERT INTO arch_versions(scope, version) VALUES (?, 1)
		ON CONFLICT(scope) DO UPDATE SET version = version + 1 RETURNING version`, scope).Scan(&v)
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
	err := t.QueryRowContext(t.ctx, `INSERT INTO arch_records(id, kind, gv, sv, session_id, agent_id, model,
		category, key, ref, hash, text, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
		nullString(r.ID), string(r.Kind), r.GV, r.SV, r.SessionID, r.AgentID, r.Model, r.Category, r.Key, r.Ref,
		r.Hash, r.Text, body, unixNano(r.CreatedAt)).Scan(&r.Seq)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return &store.ConflictError{What: "archive record " + r.ID, Msg: "already exists"}
		}
		return err
	}
	// Only the global history is searched by words; session state is
	// read by key.
	if r.Text != "" && r.Kind.Global() {
		_, err = t.ExecContext(t.ctx, `INSERT INTO arch_fts(rowid, body) VALUES (?, ?)`, r.Seq, terms.String(r.Text))
	}
	return err
}

func (t *archTx) SetAgentKey(id, keyHash string) error {
	res, err := t.ExecContext(t.ctx, `UPDATE arch_agents SET key_hash = ? WHERE id = ?`, keyHash, id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("agent %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func (t *archTx) Records(q store.RecordQuery) ([]store.ArchiveRecord, error) {
	return archRecords(t.ctx, t, q)
}

func (t *archTx) Supersede(old, by string) error {
	res, err := t.ExecContext(t.ctx, `INSERT INTO arch_superseded(id, by) VALUES (?, ?) ON CONFLICT(id) DO NOTHING`, old, by)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return &store.ConflictError{What: "record " + old, Msg: "is already superseded"}
	}
	return nil
}

func (t *archTx) Use(id string, at time.Time) error {
	_, err := t.ExecContext(t.ctx, `INSERT INTO arch_usage(id, count, last_at) VALUES (?, 1, ?)
		ON CONFLICT(id) DO UPDATE SET count = count + 1, last_at = max(last_at, excluded.last_at)`, id, unixNano(at))
	return err
}

func (t *archTx) Agent(id string) (store.ArchiveAgent, error) { return archAgent(t.ctx, t, id) }

func (t *archTx) PutAgent(a store.ArchiveAgent) error {
	if a.RegisteredAt.IsZero() {
		a.RegisteredAt = time.Now()
	}
	if a.Credential == "" {
		a.Credential = a.ID
	}
	res, err := t.ExecContext(t.ctx, `INSERT INTO arch_agents(id, name, session_id, parent_id, model, role, registered_at, credential)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
		a.ID, a.Name, a.SessionID, a.ParentID, a.Model, a.Role, unixNano(a.RegisteredAt), a.Credential)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return &store.ConflictError{What: "agent " + a.ID, Msg: "is already registered"}
	}
	return nil
}

func (t *archTx) AppendEvent(e *store.ArchiveEvent) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return t.QueryRowContext(t.ctx, `INSERT INTO arch_events(type, gv, sv, session_id, agent_id, scope, record_id, detail, at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
		e.Type, e.GV, e.SV, e.SessionID, e.AgentID, e.Scope, e.RecordID, e.Detail, unixNano(e.At)).Scan(&e.Seq)
}

// ArchiveVersions implements store.ArchiveStore.
func (s *Store) ArchiveVersions(ctx context.Context, sessionID string) (gv, sv uint64, err error) {
	err = s.read(ctx, func(db *sql.DB) error {
		gv, sv, err = archVersions(ctx, db, sessionID)
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
	err := s.read(ctx, func(db *sql.DB) (err error) {
		out, err = archRecords(ctx, db, q)
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

func archRecords(ctx context.Context, db archQuerier, q store.RecordQuery) ([]store.ArchiveRecord, error) {
	var where []string
	var args []any
	if len(q.Kinds) > 0 {
		where = append(where, "r.kind IN ("+placeholders(len(q.Kinds))+")")
		for _, k := range q.Kinds {
			args = append(args, string(k))
		}
	}
	if len(q.IDs) > 0 {
		where = append(where, "r.id IN ("+placeholders(len(q.IDs))+")")
		for _, id := range q.IDs {
			args = append(args, id)
		}
	}
	eq := func(col, v string) {
		if v != "" {
			where = append(where, col+" = ?")
			args = append(args, v)
		}
	}
	eq("r.session_id", q.SessionID)
	eq("r.key", q.Key)
	eq("r.ref", q.Ref)
	eq("r.hash", q.Hash)
	eq("r.agent_id", q.AgentID)
	if q.Credential != "" {
		where = append(where, "r.agent_id IN (SELECT id FROM arch_agents WHERE credential = ?)")
		args = append(args, q.Credential)
	}
	if q.Category != "" {
		where = append(where, "(r.category = ? OR substr(r.category, 1, ?) = ?)")
		args = append(args, q.Category, len(q.Category)+1, q.Category+".")
	}
	if q.AfterGV > 0 {
		where = append(where, "r.gv > ?")
		args = append(args, q.AfterGV)
	}
	if q.UpToGV > 0 {
		where = append(where, "r.gv <= ?")
		args = append(args, q.UpToGV)
	}
	if !q.Since.IsZero() {
		where = append(where, "r.created_at >= ?")
		args = append(args, unixNano(q.Since))
	}
	if q.Active {
		where = append(where, "x.by IS NULL")
	}
	if q.UpToSV > 0 {
		where = append(where, "r.sv <= ?")
		args = append(args, q.UpToSV)
	}
	if q.Latest {
		if q.SessionID == "" {
			return nil, errors.New("archive records: Latest needs a session")
		}
		sub := `r.seq IN (SELECT max(l.seq) FROM arch_records l WHERE l.session_id = ? AND l.kind IN (` + latestKinds + `)`
		args = append(args, q.SessionID)
		if q.UpToSV > 0 {
			sub += ` AND l.sv <= ?`
			args = append(args, q.UpToSV)
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
	if q.Limit > 0 || q.Offset > 0 {
		query += fmt.Sprintf(" LIMIT %d OFFSET %d", max(q.Limit, -1), max(q.Offset, 0))
	}
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanArchRecords(rows)
}

// latestKinds are the kinds whose newest record per key is the current
// state; wants and rejects share one key space, so a reject replaces the
// want of the same text.
const latestKinds = `'resume', 'file', 'want', 'reject'`

func scanArchRecords(rows *sql.Rows) ([]store.ArchiveRecord, error) {
	var out []store.ArchiveRecord
	for rows.Next() {
		var r store.ArchiveRecord
		var kind, body string
		var at int64
		if err := rows.Scan(&r.Seq, &r.ID, &kind, &r.GV, &r.SV, &r.SessionID, &r.AgentID, &r.Model, &r.Category,
			&r.Key, &r.Ref, &r.Hash, &r.Text, &body, &at, &r.SupersededBy, &r.Uses); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		r.Kind = store.RecordKind(kind)
		r.Body = []byte(body)
		r.CreatedAt = fromUnixNano(at)
		out = append(out, r)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

// ArchiveSearch implements store.ArchiveStore.
func (s *Store) ArchiveSearch(ctx context.Context, text string, kinds []store.RecordKind, limit int) ([]store.ArchiveHit, error) {
	groups := terms.Query(text)
	var parts []string
	for _, g := range groups {
		if g.Stop && len(groups) > 1 {
			continue
		}
		parts = append(parts, matchGroup(g))
	}
	if len(parts) == 0 || limit <= 0 {
		return nil, nil
	}
	where := "arch_fts MATCH ?"
	args := []any{strings.Join(parts, " OR ")}
	if len(kinds) > 0 {
		where += " AND r.kind IN (" + placeholders(len(kinds)) + ")"
		for _, k := range kinds {
			args = append(args, string(k))
		}
	}
	args = append(args, limit)
	var hits []store.ArchiveHit
	err := s.read(ctx, func(db *sql.DB) error {
		rows, err := db.QueryContext(ctx, `SELECT `+archColumns+`, -bm25(arch_fts) FROM arch_fts
			JOIN arch_records r ON r.seq = arch_fts.rowid
			LEFT JOIN arch_superseded x ON x.id = r.id LEFT JOIN arch_usage u ON u.id = r.id
			WHERE `+where+` ORDER BY bm25(arch_fts) LIMIT ?`, args...)
		if err != nil {
			return err
		}
		hits = hits[:0]
		for rows.Next() {
			var h store.ArchiveHit
			r := &h.Record
			var kind, body string
			var at int64
			if err := rows.Scan(&r.Seq, &r.ID, &kind, &r.GV, &r.SV, &r.SessionID, &r.AgentID, &r.Model, &r.Category,
				&r.Key, &r.Ref, &r.Hash, &r.Text, &body, &at, &r.SupersededBy, &r.Uses, &h.Score); err != nil {
				return errors.Join(err, rows.Close())
			}
			r.Kind = store.RecordKind(kind)
			r.Body = []byte(body)
			r.CreatedAt = fromUnixNano(at)
			hits = append(hits, h)
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return nil, fmt.Errorf("archive search: %w", err)
	}
	return hits, nil
}

// ArchiveAgent implements store.ArchiveStore.
func (s *Store) ArchiveAgent(ctx context.Context, id string) (a store.ArchiveAgent, err error) {
	err = s.read(ctx, func(db *sql.DB) error {
		a, err = archAgent(ctx, db, id)
		return err
	})
	return a, err
}

func archAgent(ctx context.Context, db archQuerier, id string) (store.ArchiveAgent, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+agentColumns+` FROM arch_agents WHERE id = ?`, id)
	if err != nil {
		return store.ArchiveAgent{}, err
	}
	agents, err := scanArchAgents(rows)
	if err != nil {
		return store.ArchiveAgent{}, err
	}
	if len(agents) == 0 {
		return store.ArchiveAgent{}, fmt.Errorf("agent %s: %w", id, store.ErrNotFound)
	}
	return agents[0], nil
}

// ArchiveAgents implements store.ArchiveStore.
func (s *Store) ArchiveAgents(ctx context.Context, sessionID string) ([]store.ArchiveAgent, error) {
	var out []store.ArchiveAgent
	err := s.read(ctx, func(db *sql.DB) error {
		q := `SELECT ` + agentColumns + ` FROM arch_agents`
		var args []any
		if sessionID != "" {
			q += ` WHERE session_id = ?`
			args = append(args, sessionID)
		}
		rows, err := db.QueryContext(ctx, q+` ORDER BY registered_at, id`, args...)
		if err != nil {
			return err
		}
		out, err = scanArchAgents(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("archive agents: %w", err)
	}
	return out, nil
}

// ArchiveAgentByKey implements store.ArchiveStore.
func (s *Store) ArchiveAgentByKey(ctx context.Context, keyHash string) (a store.ArchiveAgent, err error) {
	if keyHash == "" {
		return a, fmt.Errorf("agent key: %w", store.ErrNotFound)
	}
	err = s.read(ctx, func(db *sql.DB) error {
		rows, err := db.QueryContext(ctx, `SELECT `+agentColumns+` FROM arch_agents WHERE key_hash = ?`, keyHash)
		if err != nil {
			return err
		}
		agents, err := scanArchAgents(rows)
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

const agentColumns = `id, name, session_id, parent_id, model, role, registered_at, credential, key_hash != ''`

func scanArchAgents(rows *sql.Rows) ([]store.ArchiveAgent, error) {
	var out []store.ArchiveAgent
	for rows.Next() {
		var a store.ArchiveAgent
		var at int64
		if err := rows.Scan(&a.ID, &a.Name, &a.SessionID, &a.ParentID, &a.Model, &a.Role, &at, &a.Credential, &a.HasKey); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		a.RegisteredAt = fromUnixNano(at)
		out = append(out, a)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

// ArchiveEvents implements store.ArchiveStore.
func (s *Store) ArchiveEvents(ctx context.Context, after int64, limit int) ([]store.ArchiveEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []store.ArchiveEvent
	err := s.read(ctx, func(db *sql.DB) error {
		const cols = `seq, type, gv, sv, session_id, agent_id, scope, record_id, detail, at`
		var rows *sql.Rows
		var err error
		if after < 0 {
			rows, err = db.QueryContext(ctx, `SELECT * FROM (SELECT `+cols+` FROM arch_events ORDER BY seq DESC LIMIT ?) ORDER BY seq`, limit)
		} else {
			rows, err = db.QueryContext(ctx, `SELECT `+cols+` FROM arch_events WHERE seq > ? ORDER BY seq LIMIT ?`, after, limit)
		}
		if err != nil {
			return err
		}
		out = out[:0]
		for rows.Next() {
			var e store.ArchiveEvent
			var at int64
			if err := rows.Scan(&e.Seq, &e.Type, &e.GV, &e.SV, &e.SessionID, &e.AgentID, &e.Scope, &e.RecordID, &e.Detail, &at); err != nil {
				return errors.Join(err, rows.Close())
			}
			e.At = fromUnixNano(at)
			out = append(out, e)
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return nil, fmt.Errorf("archive events: %w", err)
	}
	return out, nil
}
