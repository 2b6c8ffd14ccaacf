package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/backend"
	"github.com/engramhq/engram/internal/terms"
)

// Writing entries. PutEntries is prepare (validation and the CPU work:
// terms, JSON), then one transaction in which a batch puts each entry and
// finishes. Other writes that store entries inside their own transaction
// (PutFiles stores file versions as entries, AppendWindow a window's
// messages) use the same pieces:
//
//	ps, err := s.prepare(ctx, entries)           // outside any transaction
//	err = s.write(ctx, func(tx pgx.Tx) error {
//		b := newBatch(ctx, tx)
//		defer b.close()
//		b.lockSessions(ps)                       // optional: see lockSessions
//		for i := range ps { res, err := b.put(&ps[i]) ... }
//		return b.finish()                        // full-text rows, then counters
//	})
//
// Several servers write one database at once, so a batch is written to be
// correct against a concurrent twin:
//
//   - Content is inserted with ON CONFLICT (id) DO NOTHING: of two
//     transactions putting the same new content, the second waits for the
//     first and, if it committed, finds the row and writes nothing more
//     for it; only the inserter writes the chunks, terms and counters.
//   - Turns and msg_ids are per session: a batch locks each session's row
//     (an upsert of sessions, whose lock it holds to its end) before it
//     reads the session's latest turn or looks up a msg_id, so that two
//     prompts of one session never get the same turn and a msg_id is
//     never written twice. Every writer of occurrences of a session takes
//     the lock first; a batch takes its sessions' locks in ID order.
//   - Counters are updated at the end, in name order (finish).

// pending is an entry made ready for the write transaction: everything that
// costs CPU (terms, JSON) is done before the transaction begins.
type pending struct {
	e                                   *store.Entry
	files, keywords, entities, metadata *string
	// bodies and metas are the full-text fields of each chunk (terms as
	// terms.Append makes them); nil when the content was already stored
	// when prepare looked.
	bodies, metas []string
	symbols       []*string
	// terms is a file's term set (see terms.Set); nil for one chunk, and
	// for content other than files.
	terms []byte
	// space is where new content's chunks are searched (entries.fts):
	// zero is spaceMain. A caller may set it between prepare and put.
	space int16
}

// jsonObject is v as a JSON object, or NULL for none.
func jsonObject(v map[string]any) (*string, error) {
	if len(v) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &store.ValidationError{Field: "metadata", Msg: err.Error()}
	}
	s := string(b)
	return &s, nil
}

// prepare validates entries and does the CPU work (terms, JSON) outside any
// transaction. Errors are *store.ItemError, joined.
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
	p.symbols = make([]*string, len(p.e.Chunks))
	for k, c := range p.e.Chunks {
		if len(c.Symbols) > 0 {
			p.symbols[k] = jsonList(c.Symbols)
		}
	}
}

// existing returns which of ids are stored.
func (s *Store) existing(ctx context.Context, ids []string) (map[string]bool, error) {
	stored, err := collect(ctx, s, `SELECT id FROM entries WHERE id = ANY($1)`, []any{ids}, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up entries: %w", err)
	}
	found := make(map[string]bool, len(stored))
	for _, id := range stored {
		found[id] = true
	}
	return found, nil
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
	var results []store.PutResult
	err = s.write(ctx, func(tx pgx.Tx) error {
		b := newBatch(ctx, tx)
		defer b.close()
		if err := b.lockSessions(ps); err != nil {
			return err
		}
		results = make([]store.PutResult, len(ps))
		for i := range ps {
			var err error
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

// batch holds the state of one transaction's writing of entries.
type batch struct {
	ctx context.Context
	tx  pgx.Tx
	now time.Time
	// pks maps entry IDs written or checked in this batch to their pk.
	pks map[string]int64
	// locked holds the sessions whose row the batch locked (lockSession).
	locked map[string]bool
	// turns caches each session's latest turn; storedTurn its latest turn
	// in the store before the batch.
	turns, storedTurn map[string]int
	// recent holds each session's occurrences written in the batch, in
	// order, and recentContent their entries' content (see recentBefore).
	recent        map[string][]backend.RecentOcc
	recentContent map[int64][]byte
	agents        map[[2]string]bool
	// msgs maps (session, msg_id) written in this batch to its result.
	msgs map[[2]string]store.PutResult
	// refresh holds entries whose full-text documents must be worked out
	// again before commit (see refreshEntry).
	refresh map[int64]bool
	// fts holds the full-text documents of the chunks written in the
	// batch, in order, until finish indexes them; ctxWork takes their
	// contexts to workers that turn them into terms (see contextTerms).
	fts     []*ftsRow
	ctxWork chan ctxJob
	ctxDone sync.WaitGroup
	// deltas are the counter increments; byType by content type.
	entries, bytes, tokens, chunks, occurrences int64
	byType                                      map[store.ContentType]store.TypeStats
}

// newBatch begins writing entries in tx. The caller closes it (close) and,
// to commit what it put, calls finish last.
func newBatch(ctx context.Context, tx pgx.Tx) *batch {
	return &batch{
		ctx: ctx, tx: tx, now: time.Now().UTC(),
		pks: map[string]int64{}, locked: map[string]bool{}, turns: map[string]int{}, storedTurn: map[string]int{},
		recent: map[string][]backend.RecentOcc{}, recentContent: map[int64][]byte{},
		agents: map[[2]string]bool{}, msgs: map[[2]string]store.PutResult{},
		refresh: map[int64]bool{},
		byType:  map[store.ContentType]store.TypeStats{},
	}
}

// close stops the batch's workers; it writes nothing.
func (b *batch) close() { b.stopWork() }

// ftsRow is a chunk's full-text document, ctx its context's terms.
type ftsRow struct {
	space int16
	doc   ftsDoc
}

type ctxJob struct {
	row  *ftsRow
	text string
}

// contextTerms has row's ctx made from a context's text by a worker while
// the writer goes on (the terms of the contexts were a twentieth of a
// conversation import's time on SQLite, all of it in the writer).
func (b *batch) contextTerms(row *ftsRow, text string) {
	if b.ctxWork == nil {
		b.ctxWork = make(chan ctxJob, 256)
		for range runtime.GOMAXPROCS(0) {
			b.ctxDone.Go(func() {
				for j := range b.ctxWork {
					j.row.doc.Ctx = terms.String(j.text)
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

// entryTime is when an entry happened: its own time, or the batch's.
func (b *batch) entryTime(e *store.Entry) time.Time {
	if e.Time.IsZero() {
		return b.now
	}
	return e.Time
}

// lockSessions locks, in ID order, the sessions of the entries ps will
// put. put locks a session itself when it first meets it; locking them
// all first, in one order, keeps two batches of several sessions from
// deadlocking on each other's.
func (b *batch) lockSessions(ps []pending) error {
	first := map[string]time.Time{}
	for i := range ps {
		e := ps[i].e
		if _, ok := first[e.SessionID]; !ok && e.SessionID != "" {
			first[e.SessionID] = b.entryTime(e)
		}
	}
	ids := make([]string, 0, len(first))
	for id := range first {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := b.lockSession(id, first[id]); err != nil {
			return err
		}
	}
	return nil
}

// lockSession registers a session seen at t, and locks its row until the
// transaction ends: the upsert's lock is what serializes the writers of a
// session's turns and msg_ids, across servers.
func (b *batch) lockSession(id string, t time.Time) error {
	if b.locked[id] {
		return nil
	}
	_, err := b.tx.Exec(b.ctx, `INSERT INTO sessions (id, created_at, last_seen_at) VALUES ($1, $2, $2)
		ON CONFLICT (id) DO UPDATE SET last_seen_at = greatest(sessions.last_seen_at, excluded.last_seen_at)`,
		id, unixNano(t))
	if err != nil {
		return fmt.Errorf("lock session %s: %w", id, err)
	}
	b.locked[id] = true
	return nil
}

// raced is a serialization failure (40001) that says what another
// transaction did at once: write runs the transaction again, which then
// sees it. A msg_id written at once becomes one (found again, it is a
// replay or a conflict); the session lock leaves no room for that, and
// it is there for a writer that does not lock.
func raced(what string) error {
	return &pgconn.PgError{Code: "40001", Message: what + " by another transaction at once"}
}

// put stores one prepared entry: its content unless stored, and an
// occurrence, unless its msg_id is stored in its session already (a
// replay, or a *store.ConflictError for other content).
func (b *batch) put(p *pending) (store.PutResult, error) {
	e := p.e
	res := store.PutResult{ID: e.ID}
	t := b.entryTime(e)
	if e.SessionID != "" {
		if err := b.lockSession(e.SessionID, t); err != nil {
			return res, err
		}
	}
	var msgKey [2]string
	if e.MsgID != "" {
		msgKey = [2]string{e.SessionID, e.MsgID}
		prev, ok := b.msgs[msgKey]
		if !ok {
			err := b.tx.QueryRow(b.ctx, `SELECT e.id, o.seq, o.turn FROM occurrences o JOIN entries e ON e.pk = o.entry
				WHERE o.session_id = $1 AND o.msg_id = $2`, e.SessionID, e.MsgID).Scan(&prev.ID, &prev.Seq, &prev.Turn)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
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
	if e.SessionID != "" && e.AgentID != "" {
		if err := b.registerAgent(e.SessionID, e.AgentID, e.AgentType, t); err != nil {
			return res, err
		}
	}
	err = b.tx.QueryRow(b.ctx, `INSERT INTO occurrences (entry, session_id, agent_id, agent_type, type, turn, time,
			msg_id, parent_id, files, keywords, entities, metadata)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING seq`,
		pk, e.SessionID, e.AgentID, e.AgentType, string(e.Type), turn, unixNano(t),
		nullable(e.MsgID), nullable(e.ParentID), p.files, p.keywords, p.entities, p.metadata).Scan(&res.Seq)
	if err != nil {
		if uniqueViolation(err) && e.MsgID != "" {
			return res, fmt.Errorf("msg_id %q in session %q: %w", e.MsgID, e.SessionID, raced("written"))
		}
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
		if _, err := b.tx.Exec(b.ctx, `INSERT INTO links (from_id, to_id, kind, created_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT DO NOTHING`, e.ParentID, e.ID, string(store.LinkParent), unixNano(b.now)); err != nil {
			return res, err
		}
	}
	return res, nil
}

// content stores the entry's content and chunks unless they are stored, and
// returns the entry's pk. New content seen in a session gets its context
// (see contextOf) from the session's previous entries at or before turn.
func (b *batch) content(p *pending, turn int) (pk int64, isNew bool, err error) {
	e := p.e
	if pk, ok := b.pks[e.ID]; ok {
		return pk, false, nil
	}
	space := p.space
	if space == 0 {
		space = spaceMain
	}
	// Stored before, or by a transaction that committed while this one
	// waited on the same ID: only its inserter writes the rest. The row
	// found is locked FOR KEY SHARE, as a foreign key's check locks it,
	// so that it cannot be deleted (engram forget, on another server)
	// before the occurrence that refers to it is committed; one deleted
	// between the insert and the lock is inserted again.
	var fts int16
	for {
		err = b.tx.QueryRow(b.ctx, `INSERT INTO entries (id, content, size, token_count, created_at, fts)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING pk`,
			e.ID, e.Content, len(e.Content), e.TokenCount, unixNano(b.now), space).Scan(&pk)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
		err = b.tx.QueryRow(b.ctx, `SELECT pk, fts FROM entries WHERE id = $1 FOR KEY SHARE`, e.ID).Scan(&pk, &fts)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("entry %s: %w", e.ID, err)
		}
		b.pks[e.ID] = pk
		// Content that left default search (an old file version) comes
		// back when a session sees it again.
		if e.SessionID != "" && fts == spaceHistory {
			b.refreshLater(pk)
		}
		return pk, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	b.pks[e.ID] = pk
	if p.bodies == nil {
		// Stored when prepare looked, and forgotten since (engram
		// forget): its terms are made here.
		p.makeTerms()
	}
	var ctxText string
	if e.SessionID != "" && e.Type != store.CodeFile {
		if ctxText, err = b.contextOf(pk, len(e.Content), e.SessionID, turn); err != nil {
			return 0, false, err
		}
		if ctxText != "" {
			if _, err := b.tx.Exec(b.ctx, `INSERT INTO contexts (entry, text) VALUES ($1, $2) ON CONFLICT (entry) DO NOTHING`,
				pk, ctxText); err != nil {
				return 0, false, err
			}
		}
	}
	ids, err := b.insertChunks(pk, p)
	if err != nil {
		return 0, false, err
	}
	for k, id := range ids {
		row := &ftsRow{space: space, doc: ftsDoc{ID: id, Body: p.bodies[k], Meta: p.metas[k]}}
		if k == 0 && ctxText != "" {
			b.contextTerms(row, ctxText)
		}
		b.fts = append(b.fts, row)
	}
	if p.terms != nil {
		if _, err := b.tx.Exec(b.ctx, `INSERT INTO entry_terms (entry, terms) VALUES ($1, $2)`, pk, p.terms); err != nil {
			return 0, false, err
		}
	}
	b.entries++
	b.bytes += int64(len(e.Content))
	b.tokens += int64(e.TokenCount)
	b.chunks += int64(len(e.Chunks))
	return pk, true, nil
}

// insertChunks writes the chunks of new content pk in one statement and
// returns their IDs, in order.
func (b *batch) insertChunks(pk int64, p *pending) ([]int64, error) {
	n := len(p.e.Chunks)
	ordinal, start, end, sLine, eLine, tc := make([]int32, n), make([]int32, n), make([]int32, n),
		make([]int32, n), make([]int32, n), make([]int32, n)
	for k, c := range p.e.Chunks {
		ordinal[k], start[k], end[k] = int32(c.Ordinal), int32(c.Start), int32(c.End)
		sLine[k], eLine[k], tc[k] = int32(c.StartLine), int32(c.EndLine), int32(c.TokenCount)
	}
	rows, err := b.tx.Query(b.ctx, `INSERT INTO chunks (entry, ordinal, start_byte, end_byte, start_line, end_line, token_count, symbols)
		SELECT $1::bigint, * FROM unnest($2::integer[], $3::integer[], $4::integer[], $5::integer[], $6::integer[], $7::integer[], $8::text[])
		RETURNING id, ordinal`, pk, ordinal, start, end, sLine, eLine, tc, p.symbols)
	if err != nil {
		return nil, fmt.Errorf("insert chunks: %w", err)
	}
	ids := make([]int64, n)
	for rows.Next() {
		var id int64
		var k int32
		if err := rows.Scan(&id, &k); err != nil {
			rows.Close()
			return nil, fmt.Errorf("insert chunks: %w", err)
		}
		ids[k] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert chunks: %w", err)
	}
	return ids, nil
}

func (b *batch) entryPK(id string) (int64, error) {
	if pk, ok := b.pks[id]; ok {
		return pk, nil
	}
	var pk int64
	err := b.tx.QueryRow(b.ctx, `SELECT pk FROM entries WHERE id = $1 FOR KEY SHARE`, id).Scan(&pk)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	b.pks[id] = pk
	return pk, nil
}

// registerAgent registers an agent of a session seen at t; its role is
// the agent type it was first seen with.
func (b *batch) registerAgent(session, agent, agentType string, t time.Time) error {
	key := [2]string{session, agent}
	if b.agents[key] {
		return nil
	}
	_, err := b.tx.Exec(b.ctx, `INSERT INTO agents (session_id, id, role, registered_at, last_seen_at) VALUES ($1, $2, $3, $4, $4)
		ON CONFLICT (session_id, id) DO UPDATE SET last_seen_at = greatest(agents.last_seen_at, excluded.last_seen_at),
			role = CASE WHEN agents.role = '' THEN excluded.role ELSE agents.role END`,
		session, agent, agentType, unixNano(t))
	if err != nil {
		return err
	}
	b.agents[key] = true
	return nil
}

// turn returns the entry's turn, assigning one if it has none: a user
// prompt opens a new turn, anything else joins the session's latest. The
// session is locked (put), so the latest turn read here stays the latest
// until the transaction ends.
func (b *batch) turn(e *store.Entry) (int, error) {
	if e.SessionID == "" {
		return 0, nil
	}
	latest, ok := b.turns[e.SessionID]
	if !ok {
		if err := b.tx.QueryRow(b.ctx, `SELECT coalesce(max(turn), 0) FROM occurrences WHERE session_id = $1`,
			e.SessionID).Scan(&latest); err != nil {
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

// refreshLater marks an entry whose full-text documents must be worked
// out again when the batch finishes.
func (b *batch) refreshLater(pk int64) { b.refresh[pk] = true }

// refreshEntry puts an entry's chunks back in default search: content
// that was only an old file version (spaceHistory) and that a session
// sees again. Its documents are made again, as the SQLite backend's
// indexEntry makes them: their meta is what the entry's state says now
// (its current paths, else its first occurrence's files, then keywords
// and entities; see files_batch.go).
func (b *batch) refreshEntry(pk int64) error {
	tag, err := b.tx.Exec(b.ctx, `UPDATE entries SET fts = $2 WHERE pk = $1 AND fts = $3`, pk, spaceMain, spaceHistory)
	if err != nil {
		return fmt.Errorf("refresh entry %d: %w", pk, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	fb := &fileBatch{batch: b, ctx: b.ctx, tx: b.tx}
	st, err := fb.entryState(pk)
	if err != nil {
		return err
	}
	docs, err := fb.entryDocs(pk, st.words)
	if err != nil {
		return err
	}
	ids := make([]int64, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	if err := unindexDocs(b.ctx, b.tx, spaceHistory, ids); err != nil {
		return fmt.Errorf("refresh entry %d: %w", pk, err)
	}
	return indexDocs(b.ctx, b.tx, spaceMain, docs)
}

// Counter names: totals, and per content type typePrefix+type+":occurrences"
// and typePrefix+type+":tokens". ftsGeneration counts the write
// transactions that changed the full-text index; search caches depend on
// it.
const (
	typePrefix    = "type:"
	ftsGeneration = "fts_generation"
)

// finish writes what the batch deferred: the full-text documents of the
// chunks it wrote (indexDocs, by space, in the order of their chunks), the
// entries to refresh, and the counters last, in name order, so that
// concurrent writers hold those hot rows for the least time and take them
// in one order.
func (b *batch) finish() error {
	if err := b.flushDocs(); err != nil {
		return err
	}
	refresh := make([]int64, 0, len(b.refresh))
	for pk := range b.refresh {
		refresh = append(refresh, pk)
	}
	slices.Sort(refresh)
	for _, pk := range refresh {
		if err := b.refreshEntry(pk); err != nil {
			return err
		}
	}
	deltas := map[string]int64{
		"entries": b.entries, "content_bytes": b.bytes, "tokens": b.tokens,
		"chunks": b.chunks, "occurrences": b.occurrences,
	}
	if b.chunks > 0 || len(b.refresh) > 0 {
		deltas[ftsGeneration] = 1 // the full-text index changed
	}
	for t, ts := range b.byType {
		deltas[typePrefix+string(t)+":occurrences"] = ts.Occurrences
		deltas[typePrefix+string(t)+":tokens"] = ts.Tokens
	}
	return addCounters(b.ctx, b.tx, deltas)
}

// flushDocs indexes the documents of the chunks the batch wrote so far,
// as finish does first: finish then has none left to index.
func (b *batch) flushDocs() error {
	b.stopWork()
	bySpace := map[int16][]ftsDoc{}
	for _, r := range b.fts {
		bySpace[r.space] = append(bySpace[r.space], r.doc)
	}
	b.fts = nil
	for _, space := range []int16{spaceMain, spaceHistory, spaceArchive} {
		if docs := bySpace[space]; len(docs) > 0 {
			if err := indexDocs(b.ctx, b.tx, space, docs); err != nil {
				return fmt.Errorf("index chunks: %w", err)
			}
		}
	}
	return nil
}

// addCounters adds deltas to the counters, in name order, in one
// statement; zero deltas are left out.
func addCounters(ctx context.Context, tx pgx.Tx, deltas map[string]int64) error {
	names := make([]string, 0, len(deltas))
	for name, v := range deltas {
		if v != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	values := make([]int64, len(names))
	for i, name := range names {
		values[i] = deltas[name]
	}
	_, err := tx.Exec(ctx, `INSERT INTO counters (name, value)
		SELECT name, value FROM unnest($1::text[], $2::bigint[]) AS d(name, value) ORDER BY name COLLATE "C"
		ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value`, names, values)
	if err != nil {
		return fmt.Errorf("update counters: %w", err)
	}
	return nil
}
