package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/backend"
	"github.com/engramhq/engram/internal/terms"
)

// pending is an entry made ready for the write transaction: everything that
// costs CPU (terms, JSON) is done before the write lock is taken.
type pending struct {
	e        *store.Entry
	files    sql.NullString
	keywords sql.NullString
	entities sql.NullString
	metadata sql.NullString
	// bodies and metas are the FTS columns of each chunk; nil when the
	// content was already stored before this call.
	bodies, metas []string
	symbols       []sql.NullString
	// terms is a file's term set (see terms.Set); nil for one chunk, and
	// for content other than files.
	terms []byte
}

func jsonList(v []string) sql.NullString {
	if len(v) == 0 {
		return sql.NullString{}
	}
	b, _ := json.Marshal(v) // []string always marshals
	return sql.NullString{String: string(b), Valid: true}
}

func jsonObject(v map[string]any) (sql.NullString, error) {
	if len(v) == 0 {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return sql.NullString{}, &store.ValidationError{Field: "metadata", Msg: err.Error()}
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

func (s *Store) prepare(ctx context.Context, entries []store.Entry) ([]pending, error) {
	return backend.PrepareEntries(entries, func(e *store.Entry) (pending, error) {
		meta, err := jsonObject(e.Metadata)
		if err != nil {
			return pending{}, err
		}
		return pending{e: e, files: jsonList(e.Files), keywords: jsonList(e.Keywords),
			entities: jsonList(e.Entities), metadata: meta}, nil
	}, func(ids []string) (map[string]bool, error) { return s.existing(ctx, ids) }, (*pending).makeTerms)
}

// makeTerms computes the full-text fields of the entry's chunks (see
// backend.ChunkTerms), and the JSON of their symbols.
func (p *pending) makeTerms() {
	p.bodies, p.metas, p.terms = backend.ChunkTerms(p.e)
	p.symbols = make([]sql.NullString, len(p.e.Chunks))
	for k, c := range p.e.Chunks {
		if len(c.Symbols) > 0 {
			p.symbols[k] = jsonList(c.Symbols)
		}
	}
}

// existing returns which of ids are stored.
func (s *Store) existing(ctx context.Context, ids []string) (map[string]bool, error) {
	found := map[string]bool{}
	const batch = 500 // stay far below SQLite's limit on bound parameters
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		q := "SELECT id FROM entries WHERE id IN (" + placeholders(len(part)) + ")"
		err := s.read(ctx, func(db *sql.DB) error {
			rows, err := db.QueryContext(ctx, q, anySlice(part)...)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return errors.Join(err, rows.Close())
				}
				found[id] = true
			}
			return errors.Join(rows.Err(), rows.Close())
		})
		if err != nil {
			return nil, fmt.Errorf("look up entries: %w", err)
		}
	}
	return found, nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func anySlice[T any](v []T) []any {
	out := make([]any, len(v))
	for i := range v {
		out[i] = v[i]
	}
	return out
}

// PutEntries implements store.Store.
func (s *Store) PutEntries(ctx context.Context, entries []store.Entry) ([]store.PutResult, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	ps, err := s.prepare(ctx, entries)
	if err != nil {
		return nil, err
	}
	if s.afterPrepare != nil {
		s.afterPrepare()
	}
	var results []store.PutResult
	err = s.write(ctx, func(tx *sql.Tx) error {
		b := newBatch(ctx, tx)
		defer b.close()
		results = make([]store.PutResult, len(ps))
		for i := range ps {
			if results[i], err = b.put(&ps[i]); err != nil {
				return &store.ItemError{Index: i, Err: err}
			}
		}
		return b.finish()
	})
	if err != nil {
		return nil, fmt.Errorf("put entries: %w", err)
	}
	return results, nil
}

// batch holds the state of one PutEntries transaction.
type batch struct {
	ctx   context.Context
	tx    *sql.Tx
	now   time.Time
	stmts map[string]*sql.Stmt
	// pks maps entry IDs written or checked in this batch to their pk.
	pks map[string]int64
	// turns caches each session's latest turn; storedTurn its latest turn
	// in the store before the batch.
	turns, storedTurn map[string]int
	// recent holds each session's occurrences written in the batch, in
	// order, and recentContent their entries' content (see recentBefore).
	recent        map[string][]backend.RecentOcc
	recentContent map[int64][]byte
	sessions      map[string]bool
	agents        map[[2]string]bool
	// msgs maps (session, msg_id) written in this batch to its result.
	msgs map[[2]string]store.PutResult
	// refresh holds entries whose full-text rows must be worked out again
	// before commit (see refreshEntry); versioned, entries made a file's
	// version in this batch.
	refresh, versioned map[int64]bool
	// fts holds the full-text rows of the chunks written in the batch,
	// in order, until flushFTS writes them; ctxWork takes their contexts
	// to workers that turn them into terms (see contextTerms).
	fts     []*ftsRow
	ctxWork chan ctxJob
	ctxDone sync.WaitGroup
	// deltas are the counter increments; byType by content type.
	entries, bytes, tokens, chunks, occurrences int64
	byType                                      map[store.ContentType]store.TypeStats
}

var batchSQL = map[string]string{
	"insertEntry": `INSERT INTO entries(id, content, size, token_count, created_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(id) DO NOTHING`,
	"entryPK":     `SELECT pk FROM entries WHERE id = ?`,
	"entryFTS":    `SELECT fts FROM entries WHERE pk = ?`,
	"insertChunk": `INSERT INTO chunks(entry, ordinal, start_byte, end_byte, start_line, end_line, token_count, symbols) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
	"insertFTS":   `INSERT INTO chunks_fts(rowid, body, meta, ctx) VALUES (?, ?, ?, ?)`,
	"insertTerms": `INSERT INTO entry_terms(entry, terms) VALUES (?, ?)`,
	"prevEntries": `SELECT o.entry, length(e.content) FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = ? AND o.turn <= ? ORDER BY o.turn DESC, o.seq DESC LIMIT ?`,
	"tail":          `SELECT substr(content, ?) FROM entries WHERE pk = ?`,
	"insertContext": `INSERT INTO contexts(entry, text) VALUES (?, ?) ON CONFLICT(entry) DO NOTHING`,
	"insertOcc": `INSERT INTO occurrences(entry, session_id, agent_id, agent_type, type, turn, time, msg_id, parent_id, files, keywords, entities, metadata)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	"findMsg": `SELECT e.id, o.seq, o.turn FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = ? AND o.msg_id = ?`,
	"maxTurn": `SELECT coalesce(max(turn), 0) FROM occurrences WHERE session_id = ?`,
	"upsertSession": `INSERT INTO sessions(id, created_at, last_seen_at) VALUES (?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET last_seen_at = max(last_seen_at, excluded.last_seen_at)`,
	"upsertAgent": `INSERT INTO agents(session_id, id, role, registered_at, last_seen_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(session_id, id) DO UPDATE SET last_seen_at = max(last_seen_at, excluded.last_seen_at),
			role = CASE WHEN role = '' THEN excluded.role ELSE role END`,
	"insertLink": `INSERT INTO links(from_id, to_id, kind, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`,
	"counter": `INSERT INTO counters(name, value) VALUES (?, ?)
		ON CONFLICT(name) DO UPDATE SET value = value + excluded.value`,
	"fileRow":  `SELECT f.state, f.entry, e.id, f.version FROM files f LEFT JOIN entries e ON e.pk = f.entry WHERE f.path = ?`,
	"fileSame": `UPDATE files SET size = ?, mtime = ?, hash = ?, language = ?, reason = ?, indexed_at = ? WHERE path = ?`,
	"fileVersion": `INSERT INTO files(path, state, reason, entry, size, mtime, hash, language, version, indexed_at)
		VALUES (?, 'current', ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(path) DO UPDATE SET state = 'current', reason = excluded.reason, entry = excluded.entry, size = excluded.size,
			mtime = excluded.mtime, hash = excluded.hash, language = excluded.language, version = excluded.version,
			indexed_at = excluded.indexed_at`,
	"fileHistory": `INSERT INTO file_versions(path, version, entry, size, mtime, indexed_at) VALUES (?, ?, ?, ?, ?, ?)`,
	"fileTouch":   `UPDATE files SET size = ?, mtime = ?, hash = ?, indexed_at = ? WHERE path = ?`,
	"fileSkip": `INSERT INTO files(path, state, reason, entry, size, mtime, hash, language, version, indexed_at)
		VALUES (?, 'skipped', ?, NULL, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(path) DO UPDATE SET state = 'skipped', reason = excluded.reason, entry = NULL, size = excluded.size,
			mtime = excluded.mtime, hash = excluded.hash, language = excluded.language, indexed_at = excluded.indexed_at`,
	"fileDelete": `UPDATE files SET state = 'deleted', reason = ?, indexed_at = ? WHERE path = ?`,
}

func newBatch(ctx context.Context, tx *sql.Tx) *batch {
	b := &batch{
		ctx: ctx, tx: tx, now: time.Now().UTC(),
		stmts: map[string]*sql.Stmt{}, pks: map[string]int64{}, turns: map[string]int{}, storedTurn: map[string]int{},
		recent: map[string][]backend.RecentOcc{}, recentContent: map[int64][]byte{},
		sessions: map[string]bool{}, agents: map[[2]string]bool{}, msgs: map[[2]string]store.PutResult{},
		byType:  map[store.ContentType]store.TypeStats{},
		refresh: map[int64]bool{}, versioned: map[int64]bool{},
	}
	return b
}

// stmt returns the prepared statement of batchSQL[name], preparing it on
// first use: a migration's batch uses only some of them, and must not
// prepare those of tables that later migrations make.
func (b *batch) stmt(name string) (*sql.Stmt, error) {
	if st, ok := b.stmts[name]; ok {
		return st, nil
	}
	st, err := b.tx.PrepareContext(b.ctx, batchSQL[name])
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", name, err)
	}
	b.stmts[name] = st
	return st, nil
}

func (b *batch) close() {
	b.stopWork()
	for _, st := range b.stmts {
		st.Close()
	}
}

// ftsRow is a chunk's row of the full-text index, ctx its context's terms.
type ftsRow struct {
	id              int64
	body, meta, ctx string
}

type ctxJob struct {
	row  *ftsRow
	text string
}

// contextTerms has row's ctx made from a context's text by a worker while
// the writer goes on: the terms of the contexts were a twentieth of a
// conversation import's time, all of it in the writer, which the import
// waits for.
func (b *batch) contextTerms(row *ftsRow, text string) {
	if b.ctxWork == nil {
		b.ctxWork = make(chan ctxJob, 256)
		for range runtime.GOMAXPROCS(0) {
			b.ctxDone.Go(func() {
				for j := range b.ctxWork {
					j.row.ctx = terms.String(j.text)
				}
			})
		}
	}
	b.ctxWork <- ctxJob{row, text}
}

// stopWork waits for the context workers to finish.
func (b *batch) stopWork() {
	if b.ctxWork != nil {
		close(b.ctxWork)
		b.ctxDone.Wait()
		b.ctxWork = nil
	}
}

// flushFTS writes the batch's full-text rows. They are written after the
// batch's other rows, in the order of their chunks, so that FTS5 takes
// ascending rowids (an insert below the last one written flushes its
// pending terms).
func (b *batch) flushFTS() error {
	b.stopWork()
	for _, r := range b.fts {
		if _, err := b.exec("insertFTS", r.id, r.body, r.meta, r.ctx); err != nil {
			return err
		}
	}
	b.fts = nil
	return nil
}

func (b *batch) exec(name string, args ...any) (sql.Result, error) {
	st, err := b.stmt(name)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(b.ctx, args...)
}

func (b *batch) row(name string, args ...any) *sql.Row {
	st, err := b.stmt(name)
	if err != nil {
		// The query unprepared: its Row carries the error to Scan.
		return b.tx.QueryRowContext(b.ctx, batchSQL[name], args...)
	}
	return st.QueryRowContext(b.ctx, args...)
}

func (b *batch) put(p *pending) (store.PutResult, error) {
	e := p.e
	res := store.PutResult{ID: e.ID}
	var msgKey [2]string
	if e.MsgID != "" {
		msgKey = [2]string{e.SessionID, e.MsgID}
		prev, ok := b.msgs[msgKey]
		if !ok {
			err := b.row("findMsg", e.SessionID, e.MsgID).Scan(&prev.ID, &prev.Seq, &prev.Turn)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return res, err
			}
			ok = err == nil
		}
		if ok {
			if prev.ID != e.ID {
				return res, &store.ConflictError{
					What: fmt.Sprintf("msg_id %q in session %q", e.MsgID, e.SessionID),
					Msg:  fmt.Sprintf("already names entry %s, which has other content", prev.ID),
				}
			}
			prev.NewContent, prev.Replayed = false, true
			return prev, nil
		}
	}

	turn, err := b.turn(e)
	if err != nil {
		return res, err
	}
	pk, isNew, err := b.content(p, turn)
	if err != nil {
		return res, err
	}
	res.NewContent = isNew

	if e.ParentID != "" {
		if _, err := b.entryPK(e.ParentID); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return res, &store.ValidationError{Field: "parent", Msg: fmt.Sprintf("entry %s is not stored", e.ParentID)}
			}
			return res, err
		}
	}

	t := e.Time
	if t.IsZero() {
		t = b.now
	}
	if e.SessionID != "" {
		if err := b.register(e.SessionID, e.AgentID, e.AgentType, t); err != nil {
			return res, err
		}
	}
	r, err := b.exec("insertOcc", pk, e.SessionID, e.AgentID, e.AgentType, string(e.Type), turn, unixNano(t),
		nullString(e.MsgID), nullString(e.ParentID), p.files, p.keywords, p.entities, p.metadata)
	if err != nil {
		return res, err
	}
	if res.Seq, err = r.LastInsertId(); err != nil {
		return res, err
	}
	res.Turn = turn
	if e.SessionID != "" {
		b.seen(e.SessionID, turn, pk, e.Content)
	}
	b.occurrences++
	ts := b.byType[e.Type]
	ts.Occurrences++
	ts.Tokens += int64(e.TokenCount)
	b.byType[e.Type] = ts
	if e.MsgID != "" {
		b.msgs[msgKey] = res
	}
	if e.ParentID != "" {
		if _, err := b.exec("insertLink", e.ParentID, e.ID, string(store.LinkParent), unixNano(b.now)); err != nil {
			return res, err
		}
	}
	return res, nil
}

// content stores the entry's content and chunks unless they are stored, and
// returns the entry's pk. New content seen in a session gets its context
// (see conversationContext) from the session's previous entry at or before
// turn.
func (b *batch) content(p *pending, turn int) (pk int64, isNew bool, err error) {
	e := p.e
	if pk, ok := b.pks[e.ID]; ok {
		return pk, false, nil
	}
	r, err := b.exec("insertEntry", e.ID, e.Content, len(e.Content), e.TokenCount, unixNano(b.now))
	if err != nil {
		return 0, false, err
	}
	if n, err := r.RowsAffected(); err != nil {
		return 0, false, err
	} else if n == 0 {
		pk, err := b.entryPK(e.ID)
		if err != nil {
			return 0, false, err
		}
		// Content that left default search (an old file version) comes
		// back when a session sees it again.
		if e.SessionID != "" {
			var fts int
			if err := b.row("entryFTS", pk).Scan(&fts); err != nil {
				return 0, false, err
			}
			if fts == ftsHistory {
				b.refreshLater(pk)
			}
		}
		return pk, false, nil
	}
	if pk, err = r.LastInsertId(); err != nil {
		return 0, false, err
	}
	b.pks[e.ID] = pk
	if p.bodies == nil {
		// Stored when prepare looked, and forgotten since (engram
		// forget): its terms are made here, under the write lock.
		p.makeTerms()
	}
	var ctxText string
	if e.SessionID != "" && e.Type != store.CodeFile {
		if ctxText, err = b.contextOf(pk, len(e.Content), e.SessionID, turn); err != nil {
			return 0, false, err
		}
		if ctxText != "" {
			if _, err := b.exec("insertContext", pk, ctxText); err != nil {
				return 0, false, err
			}
		}
	}
	for k, c := range e.Chunks {
		r, err := b.exec("insertChunk", pk, c.Ordinal, c.Start, c.End, c.StartLine, c.EndLine, c.TokenCount, p.symbols[k])
		if err != nil {
			return 0, false, err
		}
		id, err := r.LastInsertId()
		if err != nil {
			return 0, false, err
		}
		row := &ftsRow{id: id, body: p.bodies[k], meta: p.metas[k]}
		if k == 0 && ctxText != "" {
			b.contextTerms(row, ctxText)
		}
		b.fts = append(b.fts, row)
	}
	if p.terms != nil {
		if _, err := b.exec("insertTerms", pk, p.terms); err != nil {
			return 0, false, err
		}
	}
	b.entries++
	b.bytes += int64(len(e.Content))
	b.tokens += int64(e.TokenCount)
	b.chunks += int64(len(e.Chunks))
	return pk, true, nil
}

func (b *batch) entryPK(id string) (int64, error) {
	if pk, ok := b.pks[id]; ok {
		return pk, nil
	}
	var pk int64
	err := b.row("entryPK", id).Scan(&pk)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	b.pks[id] = pk
	return pk, nil
}

func (b *batch) register(session, agent, agentType string, t time.Time) error {
	if !b.sessions[session] {
		if _, err := b.exec("upsertSession", session, unixNano(t), unixNano(t)); err != nil {
			return err
		}
		b.sessions[session] = true
	}
	key := [2]string{session, agent}
	if agent != "" && !b.agents[key] {
		if _, err := b.exec("upsertAgent", session, agent, agentType, unixNano(t), unixNano(t)); err != nil {
			return err
		}
		b.agents[key] = true
	}
	return nil
}

// turn returns the entry's turn, assigning one if it has none: a user
// prompt opens a new turn, anything else joins the session's latest.
func (b *batch) turn(e *store.Entry) (int, error) {
	if e.SessionID == "" {
		return 0, nil
	}
	latest, ok := b.turns[e.SessionID]
	if !ok {
		if err := b.row("maxTurn", e.SessionID).Scan(&latest); err != nil {
			return 0, err
		}
		b.storedTurn[e.SessionID] = latest
	}
	turn := e.Turn
	switch {
	case turn > 0:
	case e.Type == store.UserPrompt || latest == 0:
		turn = latest + 1
	default:
		turn = latest
	}
	b.turns[e.SessionID] = max(latest, turn)
	return turn, nil
}

// Counter names: totals, and per content type typePrefix+type+":occurrences"
// and typePrefix+type+":tokens". ftsGeneration counts the write
// transactions that changed a full-text table; search caches depend on it.
const (
	typePrefix    = "type:"
	ftsGeneration = "fts_generation"
)

func (b *batch) finish() error {
	// Before refreshing: an entry refreshed may have rows among them.
	if err := b.flushFTS(); err != nil {
		return err
	}
	for pk := range b.refresh {
		if err := b.refreshEntry(pk); err != nil {
			return err
		}
	}
	deltas := map[string]int64{
		"entries": b.entries, "content_bytes": b.bytes, "tokens": b.tokens,
		"chunks": b.chunks, "occurrences": b.occurrences,
	}
	if b.chunks > 0 || len(b.refresh) > 0 {
		deltas[ftsGeneration] = 1 // the full-text tables changed
	}
	for t, ts := range b.byType {
		deltas[typePrefix+string(t)+":occurrences"] = ts.Occurrences
		deltas[typePrefix+string(t)+":tokens"] = ts.Tokens
	}
	for name, v := range deltas {
		if v == 0 {
			continue
		}
		if _, err := b.exec("counter", name, v); err != nil {
			return err
		}
	}
	return nil
}

func nullString(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}
