package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/backend"
)

// Forgetting (see store.PurgeStore). A purge runs in one write transaction
// with secure_delete on, so that SQLite overwrites what it deletes with
// zeros rather than leaving it in free pages. Two things still hold removed
// bytes after the commit: the full-text tables, which are contentless and
// only mark a deleted row until their segments are merged, and the
// write-ahead log, whose older frames hold the pages as they were. With
// Compact, a purge then rewrites the full-text tables it touched
// ('optimize', also with secure_delete) and truncates the log; both are
// transactions of their own, so a crash between them leaves a store that
// opens and holds every acknowledged write, with only the compaction left
// undone.

// counterPurges counts committed purges (see Store.Purges).
const counterPurges = "purges"

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// purge is the state of one purge transaction.
type purge struct {
	ctx    context.Context
	tx     *sql.Tx
	b      *batch // for indexEntry
	counts store.Counts
	// deltas are counter changes; tables, the full-text tables touched.
	deltas map[string]int64
	tables map[string]bool
	// survivors are entries that lost occurrences but are kept: their
	// full-text rows and contexts are worked out again at the end.
	survivors map[int64]bool
	// points are where occurrences were removed or changed, by session:
	// the entries that follow them may have had contexts made from them.
	points map[string][]occPoint
	// sessions are archive scopes whose version must advance (a session's
	// state changed).
	sessions map[string]bool
	// reactivated are records whose superseding record was forgotten.
	reactivated []string
	// dead are entries removed, by ID, for references.
	dead map[string]bool
	// ftsRows are the full-text rows to delete, by table: deleted together
	// (see flushFTS).
	ftsRows map[string][]int64
	// stmts are the statements prepared in the transaction, by query: a
	// purge runs the same few for every entry.
	stmts map[string]*sql.Stmt
}

// occPoint is an occurrence's place in its session.
type occPoint struct {
	turn int
	seq  int64
}

func newPurge(ctx context.Context, tx *sql.Tx) *purge {
	return &purge{ctx: ctx, tx: tx, b: newBatch(ctx, tx), deltas: map[string]int64{}, tables: map[string]bool{},
		survivors: map[int64]bool{}, points: map[string][]occPoint{}, sessions: map[string]bool{}, dead: map[string]bool{},
		stmts: map[string]*sql.Stmt{}, ftsRows: map[string][]int64{}}
}

// flushFTS deletes the full-text rows of removed chunks, many to a
// statement: FTS5 writes what it holds in memory at every statement, so
// a statement per row would write a segment per row.
func (p *purge) flushFTS() error {
	for _, table := range []string{ftsTable(ftsMain), ftsTable(ftsHistory)} {
		rows := p.ftsRows[table]
		if len(rows) == 0 {
			continue
		}
		slices.Sort(rows)
		ids, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		// One statement for all: the rows as a JSON array.
		if _, err := p.exec(`DELETE FROM `+table+` WHERE rowid IN (SELECT value FROM json_each(?))`, string(ids)); err != nil {
			return err
		}
		delete(p.ftsRows, table)
	}
	return nil
}

// stmt returns q prepared in the purge's transaction.
func (p *purge) stmt(q string) (*sql.Stmt, error) {
	if st, ok := p.stmts[q]; ok {
		return st, nil
	}
	st, err := p.tx.PrepareContext(p.ctx, q)
	if err != nil {
		return nil, err
	}
	p.stmts[q] = st
	return st, nil
}

func (p *purge) close() {
	p.b.close()
	for _, st := range p.stmts {
		st.Close()
	}
}

func (p *purge) exec(q string, args ...any) (int64, error) {
	st, err := p.stmt(q)
	if err != nil {
		return 0, err
	}
	r, err := st.ExecContext(p.ctx, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// query runs q prepared.
func (p *purge) query(q string, args ...any) (*sql.Rows, error) {
	st, err := p.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(p.ctx, args...)
}

// row runs q prepared, for one row.
func (p *purge) row(q string, args ...any) *sql.Row {
	st, err := p.stmt(q)
	if err != nil {
		return p.tx.QueryRowContext(p.ctx, q, args...) // carries the error to Scan
	}
	return st.QueryRowContext(p.ctx, args...)
}

// ints runs a query of one integer column.
func (p *purge) ints(q string, args ...any) ([]int64, error) { return column[int64](p, q, args...) }

// strs runs a query of one text column.
func (p *purge) strs(q string, args ...any) ([]string, error) { return column[string](p, q, args...) }

// column runs a query of one column.
func column[T any](p *purge, q string, args ...any) ([]T, error) {
	rows, err := p.query(q, args...)
	if err != nil {
		return nil, err
	}
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		out = append(out, v)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

// following adds to todo the entries whose conversation context may have
// been made from an occurrence removed or changed in session: the next
// backend.ContextEntries after each point there.
func (p *purge) following(session string, todo map[int64]bool) error {
	for _, pt := range p.points[session] {
		next, err := p.ints(`SELECT entry FROM occurrences WHERE session_id = ? AND (turn > ? OR turn = ? AND seq > ?)
			ORDER BY turn, seq LIMIT ?`, session, pt.turn, pt.turn, pt.seq, backend.ContextEntries)
		if err != nil {
			return err
		}
		for _, pk := range next {
			todo[pk] = true
		}
	}
	return nil
}

// runPurge runs fn in a write transaction with secure_delete on; a dry run
// is rolled back. It returns the purge's state after fn.
func (s *Store) runPurge(ctx context.Context, dryRun bool, fn func(p *purge) error) (*purge, error) {
	var out *purge
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "PRAGMA secure_delete = ON"); err != nil {
			return err
		}
		p := newPurge(ctx, tx)
		defer p.close()
		out = p
		if err := fn(p); err != nil {
			return err
		}
		if dryRun {
			return errDryRun
		}
		return nil
	})
	// The pragma is the connection's, not the transaction's.
	if _, perr := s.w.ExecContext(context.WithoutCancel(ctx), "PRAGMA secure_delete = OFF"); perr != nil && err == nil {
		err = perr
	}
	if errors.Is(err, errDryRun) {
		err = nil
	}
	return out, err
}

// Forget implements store.PurgeStore.
func (s *Store) Forget(ctx context.Context, req store.ForgetRequest) (store.PurgeReport, error) {
	if err := req.Validate(); err != nil {
		return store.PurgeReport{}, fmt.Errorf("forget: %w", err)
	}
	// A target named twice is forgotten once.
	req.Sessions, req.Entries, req.Records = unique(req.Sessions), unique(req.Entries), unique(req.Records)
	var rep store.PurgeReport
	for _, id := range req.Sessions {
		rep.Targets = append(rep.Targets, "session:"+id)
	}
	for _, id := range req.Entries {
		rep.Targets = append(rep.Targets, "entry:"+id)
	}
	for _, id := range req.Records {
		rep.Targets = append(rep.Targets, "record:"+id)
	}
	p, err := s.runPurge(ctx, req.DryRun, func(p *purge) error {
		for _, id := range req.Entries {
			if err := p.forgetEntry(id); err != nil {
				return err
			}
		}
		for _, id := range req.Sessions {
			if err := p.forgetSession(id, req.SessionRecords); err != nil {
				return err
			}
		}
		if len(req.Records) > 0 {
			if err := p.forgetRecords(req.Records, true); err != nil {
				return err
			}
		}
		if err := p.finish(); err != nil {
			return err
		}
		if req.DryRun {
			return nil
		}
		var err error
		rep.Audit, err = p.audit("forget", req.Actor, rep.Targets)
		return err
	})
	if err != nil {
		return store.PurgeReport{}, fmt.Errorf("forget: %w", err)
	}
	rep.Counts, rep.Reactivated = p.counts, p.reactivated
	if req.Compact && !req.DryRun {
		if rep.Compacted, err = s.compact(ctx, p.tables); err != nil {
			return rep, fmt.Errorf("forget: %w", err)
		}
	}
	return rep, nil
}

// unique returns ids without repeats, in their order.
func unique(ids []string) []string {
	var out []string
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// forgetSession removes a session: its occurrences and what only they kept,
// its agents and references, and its archive state, agents and events; and
// with records, the global records its agents wrote.
func (p *purge) forgetSession(id string, records bool) error {
	// A session is there while something of it is left to forget; the
	// global records its agents wrote count only when they would go too.
	var found bool
	err := p.row(`SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
		OR EXISTS (SELECT 1 FROM occurrences WHERE session_id = ?1)
		OR EXISTS (SELECT 1 FROM arch_agents WHERE session_id = ?1)
		OR EXISTS (SELECT 1 FROM arch_records WHERE session_id = ?1 AND (?2 OR kind IN (`+latestKinds+`)))`, id, records).Scan(&found)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	p.counts.Sessions++
	if err := p.dropOccurrences(`o.session_id = ?`, id); err != nil {
		return err
	}
	dropped, err := dropSnapshots(p.ctx, p.tx, `session_id = ?`, id)
	if err != nil {
		return err
	}
	p.counts.Snapshots += dropped
	for _, q := range []struct {
		sql string
		n   *int64
	}{
		{`DELETE FROM refs WHERE session_id = ?`, &p.counts.References},
		{`DELETE FROM window_items WHERE session_id = ?`, nil},
		{`DELETE FROM window_readmits WHERE session_id = ?`, nil},
		{`DELETE FROM window_summaries WHERE session_id = ?`, nil},
		{`DELETE FROM window_appends WHERE session_id = ?`, nil},
		{`DELETE FROM windows WHERE session_id = ?`, nil},
		{`DELETE FROM agents WHERE session_id = ?`, &p.counts.Agents},
		{`DELETE FROM sessions WHERE id = ?`, nil},
	} {
		n, err := p.exec(q.sql, id)
		if err != nil {
			return err
		}
		if q.n != nil {
			*q.n += n
		}
	}
	// The archive: session state, and with records the global history the
	// session's agents wrote.
	var global []string
	rows, err := p.query(`SELECT coalesce(id, ''), kind FROM arch_records WHERE session_id = ?`, id)
	if err != nil {
		return err
	}
	for rows.Next() {
		var rid, kind string
		if err := rows.Scan(&rid, &kind); err != nil {
			return errors.Join(err, rows.Close())
		}
		if store.RecordKind(kind).Global() && rid != "" {
			global = append(global, rid)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	if records && len(global) > 0 {
		// Everything the session's agents wrote to the global history;
		// its failures take their resolutions with them, whoever wrote
		// those.
		if err := p.forgetRecords(global, false); err != nil {
			return err
		}
	}
	n, err := p.exec(`DELETE FROM arch_records WHERE session_id = ? AND kind IN (`+latestKinds+`)`, id)
	if err != nil {
		return err
	}
	p.counts.Records += n
	if n, err = p.exec(`DELETE FROM arch_agents WHERE session_id = ?`, id); err != nil {
		return err
	}
	p.counts.Agents += n
	// Its events go, but those of the global records that stay: they are
	// those records' history.
	if n, err = p.exec(`DELETE FROM arch_events WHERE session_id = ?
		AND (record_id = '' OR record_id NOT IN (SELECT id FROM arch_records WHERE id IS NOT NULL))`, id); err != nil {
		return err
	}
	p.counts.Events += n
	// The session's version stays, advanced: it is only a number, and a
	// version that started again from 1 would let a cache elsewhere serve
	// the forgotten state for a new one.
	p.sessions[id] = true
	return nil
}

// forgetEntry removes an entry with all its occurrences. An old version of
// a file leaves the file's history; a current version is refused.
func (p *purge) forgetEntry(id string) error {
	pk, err := p.b.entryPK(id)
	if err != nil {
		return err
	}
	rows, err := p.query(`SELECT path, state FROM files WHERE entry = ? ORDER BY path`, pk)
	if err != nil {
		return err
	}
	var deleted []string
	for rows.Next() {
		var path, state string
		if err := rows.Scan(&path, &state); err != nil {
			return errors.Join(err, rows.Close())
		}
		if store.FileState(state) == store.FileCurrent {
			return errors.Join(&store.ConflictError{What: "entry " + id, Msg: fmt.Sprintf(
				"is the current version of %s, which the next index would store again: change or exclude the file and index it, then forget this old version; or remove a string from it with engram redact", path)},
				rows.Close())
		}
		deleted = append(deleted, path)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	n, err := p.exec(`DELETE FROM file_versions WHERE entry = ?`, pk)
	if err != nil {
		return err
	}
	p.counts.FileVersions += n
	// A deleted file whose last version this was names the newest version
	// left, or leaves the manifest with its last version.
	for _, path := range deleted {
		var last sql.NullInt64
		if err := p.row(`SELECT entry FROM file_versions WHERE path = ? ORDER BY version DESC LIMIT 1`, path).Scan(&last); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if last.Valid {
			_, err = p.exec(`UPDATE files SET entry = ? WHERE path = ?`, last.Int64, path)
		} else {
			_, err = p.exec(`DELETE FROM files WHERE path = ?`, path)
		}
		if err != nil {
			return err
		}
	}
	// Nothing refers to it now but its occurrences, which go with it.
	if err := p.dropOccurrences(`o.entry = ?`, pk); err != nil {
		return err
	}
	if p.dead[id] {
		return nil
	}
	return p.dropEntry(pk)
}

// dropOccurrences deletes the occurrences that cond (on occurrences o)
// selects, and the entries nothing refers to any more; the entries still
// referred to are kept as survivors.
func (p *purge) dropOccurrences(cond string, args ...any) error {
	rows, err := p.query(`SELECT o.seq, o.entry, o.session_id, o.turn, o.type, e.token_count
		FROM occurrences o JOIN entries e ON e.pk = o.entry WHERE `+cond, args...)
	if err != nil {
		return err
	}
	affected := map[int64]bool{}
	var seqs []int64
	for rows.Next() {
		var (
			seq, entry, tokens int64
			session, typ       string
			turn               int
		)
		if err := rows.Scan(&seq, &entry, &session, &turn, &typ, &tokens); err != nil {
			return errors.Join(err, rows.Close())
		}
		seqs = append(seqs, seq)
		affected[entry] = true
		p.deltas[typePrefix+typ+":occurrences"]--
		p.deltas[typePrefix+typ+":tokens"] -= tokens
		if session != "" {
			p.points[session] = append(p.points[session], occPoint{turn, seq})
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	n, err := p.exec(`DELETE FROM occurrences WHERE seq IN (SELECT o.seq FROM occurrences o WHERE `+cond+`)`, args...)
	if err != nil {
		return err
	}
	if n != int64(len(seqs)) {
		return fmt.Errorf("deleted %d occurrences of %d", n, len(seqs))
	}
	p.counts.Occurrences += n
	p.deltas["occurrences"] -= n
	pks := make([]int64, 0, len(affected))
	for pk := range affected {
		pks = append(pks, pk)
	}
	slices.Sort(pks)
	for _, pk := range pks {
		var used bool
		err := p.row(`SELECT EXISTS (SELECT 1 FROM occurrences WHERE entry = ?)
			OR EXISTS (SELECT 1 FROM files WHERE entry = ?)`, pk, pk).Scan(&used)
		if err != nil {
			return err
		}
		// A file version always has an occurrence (of type code_file), so
		// an entry without one is in no file's history either, unless it
		// was forgotten by ID, which removes its versions itself.
		if used {
			p.survivors[pk] = true
			continue
		}
		if err := p.dropEntry(pk); err != nil {
			return err
		}
	}
	return nil
}

// dropEntry deletes an entry and everything derived from it: chunks and
// their full-text rows, vectors and access counts, context, term set,
// links, and the parent links of the occurrences it prompted.
func (p *purge) dropEntry(pk int64) error {
	var (
		id           string
		fts          int
		size, tokens int64
	)
	if err := p.row(`SELECT id, fts, size, token_count FROM entries WHERE pk = ?`, pk).Scan(&id, &fts, &size, &tokens); err != nil {
		return fmt.Errorf("entry %d: %w", pk, err)
	}
	if err := p.dropChunks(pk, fts); err != nil {
		return err
	}
	for _, q := range []string{`DELETE FROM contexts WHERE entry = ?`, `DELETE FROM entry_terms WHERE entry = ?`} {
		if _, err := p.exec(q, pk); err != nil {
			return err
		}
	}
	// Occurrences it prompted keep their place but lose the parent; their
	// parent links are the links from it.
	children, err := p.strs(`SELECT to_id FROM links WHERE from_id = ? AND kind = ?`, id, string(store.LinkParent))
	if err != nil {
		return err
	}
	for _, child := range children {
		if _, err := p.exec(`UPDATE occurrences SET parent_id = NULL
			WHERE entry = (SELECT pk FROM entries WHERE id = ?) AND parent_id = ?`, child, id); err != nil {
			return err
		}
	}
	var links int64
	for _, q := range []string{`DELETE FROM links WHERE from_id = ?`, `DELETE FROM links WHERE to_id = ?`} {
		n, err := p.exec(q, id)
		if err != nil {
			return err
		}
		links += n
	}
	p.counts.Links += links
	if _, err := p.exec(`DELETE FROM entries WHERE pk = ?`, pk); err != nil {
		return err
	}
	delete(p.b.pks, id)
	delete(p.survivors, pk)
	p.dead[id] = true
	p.counts.Entries++
	p.counts.ContentBytes += size
	p.deltas["entries"]--
	p.deltas["content_bytes"] -= size
	p.deltas["tokens"] -= tokens
	return nil
}

// dropChunks deletes an entry's chunks, their rows in the full-text table
// fts, their vectors under every model and their access counts.
func (p *purge) dropChunks(pk int64, fts int) error {
	chunks, err := p.ints(`SELECT id FROM chunks WHERE entry = ? ORDER BY id`, pk)
	if err != nil {
		return err
	}
	table := ftsTable(fts)
	p.ftsRows[table] = append(p.ftsRows[table], chunks...)
	for _, c := range chunks {
		n, err := p.exec(`DELETE FROM vectors WHERE model IN (SELECT id FROM vector_models) AND chunk = ?`, c)
		if err != nil {
			return err
		}
		p.counts.Vectors += n
		if _, err := p.exec(`DELETE FROM access WHERE chunk = ?`, c); err != nil {
			return err
		}
	}
	if len(chunks) > 0 {
		p.tables[table] = true
	}
	if _, err := p.exec(`DELETE FROM chunks WHERE entry = ?`, pk); err != nil {
		return err
	}
	p.counts.Chunks += int64(len(chunks))
	p.deltas["chunks"] -= int64(len(chunks))
	return nil
}

// forgetRecords removes global records of the archivalist, with the
// resolutions of a failure and the completion of an intent (and, when
// named is false, quietly skips ids already gone), their full-text rows,
// supersessions, usage counts and events.
func (p *purge) forgetRecords(ids []string, named bool) error {
	type rec struct {
		seq               int64
		id, kind, session string
	}
	var recs []rec
	seen := map[string]bool{}
	load := func(q string, args ...any) error {
		rows, err := p.query(`SELECT seq, id, kind, session_id FROM arch_records WHERE `+q, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var r rec
			if err := rows.Scan(&r.seq, &r.id, &r.kind, &r.session); err != nil {
				return errors.Join(err, rows.Close())
			}
			if !seen[r.id] {
				seen[r.id] = true
				recs = append(recs, r)
			}
		}
		return errors.Join(rows.Err(), rows.Close())
	}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		n := len(recs)
		if err := load(`id = ?`, id); err != nil {
			return err
		}
		if len(recs) == n {
			if named {
				return fmt.Errorf("record %s: %w", id, store.ErrNotFound)
			}
			continue
		}
		if r := recs[len(recs)-1]; !store.RecordKind(r.kind).Global() {
			return &store.ValidationError{Field: "record", Msg: fmt.Sprintf("%s is a %s record of session %s: forget the session", id, r.kind, r.session)}
		}
	}
	// What refers to a record goes with it.
	for i := 0; i < len(recs); i++ {
		switch store.RecordKind(recs[i].kind) {
		case store.KindFailure:
			if err := load(`ref = ? AND kind = ?`, recs[i].id, string(store.KindResolution)); err != nil {
				return err
			}
		case store.KindIntent:
			if err := load(`ref = ? AND kind = ?`, recs[i].id, string(store.KindIntentDone)); err != nil {
				return err
			}
		}
	}
	for _, r := range recs {
		// Records it had superseded are active again, unless they go too.
		olds, err := p.strs(`SELECT id FROM arch_superseded WHERE by = ?`, r.id)
		if err != nil {
			return err
		}
		for _, o := range olds {
			if !seen[o] {
				p.reactivated = append(p.reactivated, o)
			}
		}
		if _, err := p.exec(`DELETE FROM arch_fts WHERE rowid = ?`, r.seq); err != nil {
			return err
		}
		if _, err := p.exec(`DELETE FROM arch_superseded WHERE id = ? OR by = ?`, r.id, r.id); err != nil {
			return err
		}
		if _, err := p.exec(`DELETE FROM arch_usage WHERE id = ?`, r.id); err != nil {
			return err
		}
		if _, err := p.exec(`DELETE FROM arch_records WHERE seq = ?`, r.seq); err != nil {
			return err
		}
		p.counts.Records++
		// The writer's session state shows the categories it wrote to.
		p.sessions[r.session] = true
	}
	if len(recs) > 0 {
		list := make([]any, len(recs))
		for i, r := range recs {
			list[i] = r.id
		}
		n, err := p.exec(`DELETE FROM arch_events WHERE record_id IN (`+placeholders(len(list))+`)`, list...)
		if err != nil {
			return err
		}
		p.counts.Events += n
		p.tables["arch_fts"] = true
	}
	p.reactivated = slices.DeleteFunc(p.reactivated, func(id string) bool { return seen[id] })
	return nil
}

// finish works out again what the survivors and the entries that followed
// a removed occurrence derive from what was removed, deletes the
// references to removed entries, and writes the counters and versions.
func (p *purge) finish() error {
	if err := p.flushFTS(); err != nil {
		return err
	}
	// Entries that followed a removed occurrence in its session may have
	// a context made from it: the next backend.ContextEntries left after each.
	todo := map[int64]bool{}
	for pk := range p.survivors {
		todo[pk] = true
	}
	sessions := make([]string, 0, len(p.points))
	for s := range p.points {
		sessions = append(sessions, s)
	}
	sort.Strings(sessions)
	for _, s := range sessions {
		var left bool
		if err := p.row(`SELECT EXISTS (SELECT 1 FROM occurrences WHERE session_id = ?)`, s).Scan(&left); err != nil {
			return err
		}
		if !left {
			continue
		}
		if err := p.following(s, todo); err != nil {
			return err
		}
	}
	pks := make([]int64, 0, len(todo))
	for pk := range todo {
		pks = append(pks, pk)
	}
	slices.Sort(pks)
	for _, pk := range pks {
		changed, err := p.recontext(pk)
		if err != nil {
			return err
		}
		if !changed && !p.survivors[pk] {
			continue
		}
		if changed {
			p.counts.Contexts++
			// The first chunk was embedded with its context.
			n, err := p.exec(`DELETE FROM vectors WHERE model IN (SELECT id FROM vector_models)
				AND chunk = (SELECT id FROM chunks WHERE entry = ? AND ordinal = 0)`, pk)
			if err != nil {
				return err
			}
			p.counts.Vectors += n
		}
		var fts int
		if err := p.row(`SELECT fts FROM entries WHERE pk = ?`, pk).Scan(&fts); err != nil {
			return err
		}
		if err := p.b.refreshEntry(pk); err != nil {
			return err
		}
		p.tables[ftsTable(fts)] = true
	}
	p.counts.EntriesKept = int64(len(p.survivors))
	if err := p.dropReferences(); err != nil {
		return err
	}
	if err := p.dropWindowItems(); err != nil {
		return err
	}
	return p.commitCounters()
}

// dropWindowItems deletes from windows' ledgers the messages whose content
// was removed, and those evicted under a reference that was dropped (no
// marker could bring them back), with the summaries over them and the
// turn snapshots since they came, and advances those windows' versions;
// then the snapshots of any window whose pre-fetch quoted what was
// removed.
func (p *purge) dropWindowItems() error {
	if len(p.dead) == 0 {
		return nil
	}
	type item struct {
		session, agent string
		pos, version   int64
		ids, ref       string
	}
	var all []item
	rows, err := p.query(`SELECT session_id, agent_id, pos, append_version, entry_ids, ref_id FROM window_items`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.session, &it.agent, &it.pos, &it.version, &it.ids, &it.ref); err != nil {
			return errors.Join(err, rows.Close())
		}
		all = append(all, it)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	var doomed []item
	for _, it := range all {
		var ids []string
		if err := json.Unmarshal([]byte(it.ids), &ids); err != nil {
			return fmt.Errorf("window %s/%s item %d: %w", it.session, it.agent, it.pos, err)
		}
		gone := slices.ContainsFunc(ids, func(id string) bool { return p.dead[id] })
		if !gone && it.ref != "" {
			var n int
			if err := p.row(`SELECT count(*) FROM refs WHERE id = ?`, it.ref).Scan(&n); err != nil {
				return err
			}
			gone = n == 0
		}
		if gone {
			doomed = append(doomed, it)
		}
	}
	for _, it := range doomed {
		if _, err := p.exec(`DELETE FROM window_items WHERE session_id = ? AND agent_id = ? AND pos = ?`, it.session, it.agent, it.pos); err != nil {
			return err
		}
		// A summary may quote the forgotten message.
		if _, err := p.exec(`DELETE FROM window_summaries WHERE session_id = ? AND agent_id = ? AND from_pos <= ? AND ? < to_pos`,
			it.session, it.agent, it.pos, it.pos); err != nil {
			return err
		}
		if _, err := p.exec(`UPDATE windows SET version = version + 1 WHERE session_id = ? AND agent_id = ?`, it.session, it.agent); err != nil {
			return err
		}
		// The window's turns since the message came may show it.
		n, err := dropSnapshots(p.ctx, p.tx, `session_id = ? AND agent_id = ? AND version >= ?`, it.session, it.agent, it.version)
		if err != nil {
			return err
		}
		p.counts.Snapshots += n
	}
	return p.dropSourcedSnapshots()
}

// dropSourcedSnapshots deletes the turn snapshots whose pre-fetch quoted
// a removed entry (the report's sources name it): another window's turn
// may have shown it.
func (p *purge) dropSourcedSnapshots() error {
	type snap struct {
		session, agent string
		seq            int64
	}
	var doomed []snap
	rows, err := p.query(`SELECT session_id, agent_id, seq, report FROM window_snapshots WHERE instr(report, '"sources":') > 0`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			s      snap
			report string
		)
		if err := rows.Scan(&s.session, &s.agent, &s.seq, &report); err != nil {
			return errors.Join(err, rows.Close())
		}
		if backend.SourcesAny(report, p.dead) {
			doomed = append(doomed, s)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, s := range doomed {
		n, err := dropSnapshots(p.ctx, p.tx, `session_id = ? AND agent_id = ? AND seq = ?`, s.session, s.agent, s.seq)
		if err != nil {
			return err
		}
		p.counts.Snapshots += n
	}
	return nil
}

// dropReferences takes the removed entries out of the references that
// name them: a reference left with none is deleted (its markers expand
// to nothing), one left with some keeps them, so that a window's evicted
// run loses only what was forgotten, and loses the entities and hints
// its marker named, which may have come from it.
func (p *purge) dropReferences() error {
	if len(p.dead) == 0 {
		return nil
	}
	type ref struct{ id, ids string }
	var refs []ref
	rows, err := p.query(`SELECT id, content_ids FROM refs`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var r ref
		if err := rows.Scan(&r.id, &r.ids); err != nil {
			return errors.Join(err, rows.Close())
		}
		refs = append(refs, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, r := range refs {
		var ids []string
		if err := json.Unmarshal([]byte(r.ids), &ids); err != nil {
			return fmt.Errorf("reference %s: %w", r.id, err)
		}
		left := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return p.dead[id] })
		switch {
		case len(left) == len(ids):
			continue
		case len(left) == 0:
			if _, err := p.exec(`DELETE FROM refs WHERE id = ?`, r.id); err != nil {
				return err
			}
			p.counts.References++
		default:
			if _, err := p.exec(`UPDATE refs SET content_ids = ?, summary = '', topics = NULL, entities = NULL, query_hints = NULL WHERE id = ?`,
				jsonList(left), r.id); err != nil {
				return err
			}
		}
	}
	return nil
}

// commitCounters writes the counter changes and advances the versions
// that caches are keyed by: the full-text generation, the purge count, the
// global version and the versions of the sessions whose state changed.
func (p *purge) commitCounters() error {
	p.deltas[counterPurges] = 1
	if len(p.tables) > 0 {
		p.deltas[ftsGeneration] = 1
	}
	names := make([]string, 0, len(p.deltas))
	for n, v := range p.deltas {
		if v != 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if _, err := p.b.exec("counter", n, p.deltas[n]); err != nil {
			return err
		}
	}
	// Every purge advances the global version, so that every briefing
	// cached by version, in any process, is made again; and the mirror of
	// the global history in each process sees the purge count change.
	if _, err := p.exec(`UPDATE arch_versions SET version = version + 1 WHERE scope = ''`); err != nil {
		return err
	}
	scopes := make([]string, 0, len(p.sessions))
	for s := range p.sessions {
		if s != "" {
			scopes = append(scopes, s)
		}
	}
	sort.Strings(scopes)
	for _, s := range scopes {
		if _, err := p.exec(`UPDATE arch_versions SET version = version + 1 WHERE scope = ?`, s); err != nil {
			return err
		}
	}
	return nil
}

// recontext works out the context of entry pk again from its first
// occurrence, as migration 8 does, and reports whether it changed.
func (p *purge) recontext(pk int64) (bool, error) {
	var old sql.NullString
	if err := p.row(`SELECT text FROM contexts WHERE entry = ?`, pk).Scan(&old); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	var (
		seq, size int64
		session   string
		turn      int
		typ       string
	)
	err := p.row(`SELECT o.seq, o.session_id, o.turn, o.type, length(e.content)
		FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.seq = (SELECT min(seq) FROM occurrences WHERE entry = ?)`, pk).Scan(&seq, &session, &turn, &typ, &size)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	text := ""
	if err == nil && session != "" && store.ContentType(typ) != store.CodeFile && size <= backend.ContextBytes-backend.MinContextBytes {
		rows, err := p.query(`SELECT o.entry, length(e.content) FROM occurrences o JOIN entries e ON e.pk = o.entry
			WHERE o.session_id = ? AND (o.turn < ? OR o.turn = ? AND o.seq < ?) ORDER BY o.turn DESC, o.seq DESC LIMIT ?`,
			session, turn, turn, seq, backend.ContextEntries)
		if err != nil {
			return false, err
		}
		prevs, err := scanPrevEntries(rows)
		if err != nil {
			return false, err
		}
		text, err = backend.ContextFrom(pk, size, prevs, func(from, pk int64) (tail []byte, err error) {
			return tail, p.row(`SELECT substr(content, ?) FROM entries WHERE pk = ?`, from, pk).Scan(&tail)
		}, nil)
		if err != nil {
			return false, err
		}
	}
	if text == old.String {
		return false, nil
	}
	if _, err := p.exec(`DELETE FROM contexts WHERE entry = ?`, pk); err != nil {
		return false, err
	}
	if text != "" {
		if _, err := p.exec(`INSERT INTO contexts(entry, text) VALUES (?, ?)`, pk, text); err != nil {
			return false, err
		}
	}
	return true, nil
}

// audit writes the purge's audit record and returns its sequence number.
func (p *purge) audit(action, actor string, targets []string) (int64, error) {
	t, err := json.Marshal(targets)
	if err != nil {
		return 0, err
	}
	if targets == nil {
		t = []byte("[]")
	}
	// Not the bytes a redaction replaced: with the places, they give the
	// string's length.
	counts := p.counts
	counts.Bytes = 0
	c, err := json.Marshal(counts)
	if err != nil {
		return 0, err
	}
	var seq int64
	err = p.row(`INSERT INTO audit(at, actor, action, targets, counts) VALUES (?, ?, ?, ?, ?) RETURNING seq`,
		unixNano(time.Now()), actor, action, string(t), string(c)).Scan(&seq)
	return seq, err
}

// compact rewrites the full-text tables a purge touched, with
// secure_delete on, so that the terms of what was removed leave the file,
// then the whole file (VACUUM), then checkpoints the write-ahead log and
// truncates it. It reports
// whether the log could be emptied: another process reading the store
// keeps it.
func (s *Store) compact(ctx context.Context, tables map[string]bool) (bool, error) {
	names := make([]string, 0, len(tables))
	for t := range tables {
		names = append(names, t)
	}
	sort.Strings(names)
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "PRAGMA secure_delete = ON"); err != nil {
			return err
		}
		for _, t := range names {
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+t+`(`+t+`) VALUES ('optimize')`); err != nil {
				return fmt.Errorf("optimize %s: %w", t, err)
			}
		}
		return nil
	})
	if _, perr := s.w.ExecContext(context.WithoutCancel(ctx), "PRAGMA secure_delete = OFF"); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return false, fmt.Errorf("compact: %w", err)
	}
	// secure_delete zeroes what a purge deletes, but not the copies that
	// cells left in the unused space of pages as they moved (a page split
	// or filled while it was off): only rewriting the file drops them.
	if err := s.retry(ctx, func() error {
		_, err := s.w.ExecContext(ctx, "VACUUM")
		return err
	}); err != nil {
		return false, fmt.Errorf("compact: vacuum: %w", err)
	}
	var busy, logFrames, done int
	err = s.retry(ctx, func() error {
		return s.w.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &done)
	})
	if err != nil {
		return false, fmt.Errorf("checkpoint: %w", err)
	}
	return busy == 0, nil
}

// Purges implements store.ArchiveStore.
func (s *Store) Purges(ctx context.Context) (uint64, error) {
	var n uint64
	err := s.read(ctx, func(db *sql.DB) error {
		err := db.QueryRowContext(ctx, `SELECT value FROM counters WHERE name = ?`, counterPurges).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purges: %w", err)
	}
	return n, nil
}

// Audit implements store.PurgeStore.
func (s *Store) Audit(ctx context.Context, after int64, limit int) ([]store.AuditRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT seq, at, actor, action, targets, counts FROM audit WHERE seq > ? ORDER BY seq LIMIT ?`
	args := []any{after, limit}
	if after < 0 {
		q = `SELECT * FROM (SELECT seq, at, actor, action, targets, counts FROM audit ORDER BY seq DESC LIMIT ?) ORDER BY seq`
		args = []any{limit}
	}
	var out []store.AuditRecord
	err := s.query(ctx, q, args, func(rows *sql.Rows) error {
		var (
			r               store.AuditRecord
			at              int64
			targets, counts string
		)
		if err := rows.Scan(&r.Seq, &at, &r.Actor, &r.Action, &targets, &counts); err != nil {
			return err
		}
		r.At = fromUnixNano(at)
		if err := json.Unmarshal([]byte(targets), &r.Targets); err != nil {
			return fmt.Errorf("audit %d: %w", r.Seq, err)
		}
		if err := json.Unmarshal([]byte(counts), &r.Counts); err != nil {
			return fmt.Errorf("audit %d: %w", r.Seq, err)
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}
