package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/backend"
)

// Forgetting, redaction and retention (see store.PurgeStore). A purge is
// one transaction, all or nothing, at READ COMMITTED, while other servers
// go on writing. It takes its locks in the order ordinary writes take
// theirs, so that the two wait for each other rather than deadlock:
//
//   - the rows of the sessions it changes first (FOR UPDATE, in ID
//     order), as PutEntries and a window's append lock the sessions they
//     write to: a writer to a session being forgotten waits for the purge,
//     then finds the session gone and starts it anew;
//   - rows it removes are locked before it decides anything from them: an
//     entry (FOR UPDATE) before it asks whether anything still refers to
//     it, so that a writer adding an occurrence or a file version of it
//     (which locks it FOR KEY SHARE, as its foreign key check does)
//     either committed first, and is seen, or waits for the purge and
//     then stores the content anew; chunks before their vectors and
//     access counts; a window's head before its ledger, as an append
//     takes them; snapshot bodies as snapshot.go says;
//   - the archive's advisory lock (archiveLock) before any archive row,
//     as ArchiveWrite takes it, so that the archive's versions, records
//     and events stay in commit order;
//   - the full-text statistics (indexDocs, unindexDocs), then the
//     archive's versions, then the counters, in name order, last.
//
// A deadlock that remains (a writer that locks in another order) is
// broken by PostgreSQL and retried by s.write. A writer that refers to a
// row without locking it could still make the purge fail on a foreign
// key; runPurge then runs it again from the start, and the new row is
// seen and removed with the rest.
//
// Every committed purge bumps the counter purges (Purges) and the
// archive's global version in its own transaction: the caches of other
// servers (search results, briefings, the mirror of the global history)
// are keyed by them, and so learn of it at their next read.
//
// Compact: PostgreSQL keeps what a transaction removed in its data files
// as dead rows until VACUUM prunes them, and in its write-ahead log (and
// any WAL archive, replica or backup) for as long as the operator's
// configuration keeps them. With Compact, a purge VACUUMs the tables it
// touched once it has committed (outside the transaction, as VACUUM must
// run; plain VACUUM, which does not block other servers, not VACUUM FULL,
// which would lock the tables against every server while it rewrites
// them): their dead rows and index entries go and their space is
// reusable. It never reports Compacted: a pruned page may still hold the
// bytes until they are overwritten, and the WAL is the server's, not
// engram's, to empty (CHECKPOINT needs a superuser or pg_checkpoint, and
// archived WAL and backups are beyond it).

const schemaPurge = `
-- audit records every forget, redaction and retention run: who, when, what
-- and how much; never the bytes removed.
CREATE TABLE audit (
	seq     bigserial PRIMARY KEY,
	at      bigint NOT NULL,
	actor   text NOT NULL,
	action  text NOT NULL,
	targets text NOT NULL,
	counts  text NOT NULL
);
`

// counterPurges counts committed purges (see Store.Purges).
const counterPurges = "purges"

// purgeAttempts bounds the runs of a purge that failed on a foreign key
// because another server referred to what it removed meanwhile.
const purgeAttempts = 4

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("dry run")

// purge is the state of one purge transaction.
type purge struct {
	ctx    context.Context
	tx     pgx.Tx
	counts store.Counts
	// deltas are counter changes, written last (commitCounters).
	deltas map[string]int64
	// survivors are entries that lost occurrences but are kept: their
	// index documents and contexts are worked out again at the end.
	survivors map[int64]bool
	// points are where occurrences were removed or changed, by session:
	// the entries that follow them may have had contexts made from them.
	points map[string][]occPoint
	// sessions are archive scopes whose version must advance.
	sessions map[string]bool
	// reactivated are records whose superseding record was forgotten.
	reactivated []string
	// dead are the IDs of entries removed, for references and windows.
	dead map[string]bool
	// unindex are the index documents of removed chunks, by space:
	// removed together (flushIndex).
	unindex map[int16][]int64
	// tables are the tables changed, for Compact.
	tables map[string]bool
	// archLocked says the archive's advisory lock is held.
	archLocked bool
}

// occPoint is an occurrence's place in its session.
type occPoint struct {
	turn int64
	seq  int64
}

func newPurge(ctx context.Context, tx pgx.Tx) *purge {
	return &purge{ctx: ctx, tx: tx, deltas: map[string]int64{}, survivors: map[int64]bool{},
		points: map[string][]occPoint{}, sessions: map[string]bool{}, dead: map[string]bool{},
		unindex: map[int16][]int64{}, tables: map[string]bool{}}
}

// exec runs q and returns the rows it affected.
func (p *purge) exec(q string, args ...any) (int64, error) {
	tag, err := p.tx.Exec(p.ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ints runs a query of one bigint column.
func (p *purge) ints(q string, args ...any) ([]int64, error) {
	rows, err := p.tx.Query(p.ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collectRows(rows, pgx.RowTo[int64])
}

// strs runs a query of one text column.
func (p *purge) strs(q string, args ...any) ([]string, error) {
	rows, err := p.tx.Query(p.ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return collectRows(rows, pgx.RowTo[string])
}

// touch notes tables changed, for Compact.
func (p *purge) touch(tables ...string) {
	for _, t := range tables {
		p.tables[t] = true
	}
}

// lockArchive takes the archive's advisory lock, once per transaction,
// before the purge reads or changes an archive row.
func (p *purge) lockArchive() error {
	if p.archLocked {
		return nil
	}
	if err := lockArchive(p.ctx, p.tx); err != nil {
		return err
	}
	p.archLocked = true
	return nil
}

// runPurge runs fn in a write transaction; a dry run is rolled back. It
// returns the purge's state after fn. A purge that failed on a foreign
// key (another server referred to a row it removed, after it looked) is
// run again from the start.
func (s *Store) runPurge(ctx context.Context, dryRun bool, fn func(p *purge) error) (*purge, error) {
	var out *purge
	var err error
	for attempt := 1; ; attempt++ {
		err = s.write(ctx, func(tx pgx.Tx) error {
			p := newPurge(ctx, tx)
			out = p
			if err := fn(p); err != nil {
				return err
			}
			if dryRun {
				return errDryRun
			}
			return nil
		})
		if errCode(err) != "23503" || attempt == purgeAttempts || ctx.Err() != nil {
			break
		}
		s.log.Debug("purge met a new reference to what it removes, running it again", "attempt", attempt, "err", err)
	}
	if errors.Is(err, errDryRun) {
		err = nil
	}
	return out, err
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

// dropOccurrences deletes the occurrences that cond (on occurrences o)
// selects, and the entries nothing refers to any more; the entries still
// referred to are kept as survivors. The occurrences are deleted and
// returned by one statement, so that what is counted is what went, even
// while other servers write.
func (p *purge) dropOccurrences(cond string, args ...any) error {
	rows, err := p.tx.Query(p.ctx, `DELETE FROM occurrences o USING entries e WHERE e.pk = o.entry AND `+cond+`
		RETURNING o.seq, o.entry, o.session_id, o.turn, o.type, e.token_count`, args...)
	if err != nil {
		return err
	}
	affected := map[int64]bool{}
	var n int64
	var (
		seq, entry, turn, tokens int64
		session, typ             string
	)
	_, err = pgx.ForEachRow(rows, []any{&seq, &entry, &session, &turn, &typ, &tokens}, func() error {
		n++
		affected[entry] = true
		p.deltas[typePrefix+typ+":occurrences"]--
		p.deltas[typePrefix+typ+":tokens"] -= tokens
		if session != "" {
			p.points[session] = append(p.points[session], occPoint{turn, seq})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	p.touch("occurrences")
	p.counts.Occurrences += n
	p.deltas["occurrences"] -= n
	// Lock the entries before asking what still refers to them: a writer
	// adding an occurrence or a file version of one holds it (its foreign
	// key check) until it commits, and is then seen here.
	pks := slices.Sorted(maps.Keys(affected))
	if _, err := p.exec(`SELECT 1 FROM entries WHERE pk = ANY($1) ORDER BY pk FOR UPDATE`, pks); err != nil {
		return err
	}
	used, err := p.ints(`SELECT e.pk FROM entries e WHERE e.pk = ANY($1)
		AND (EXISTS (SELECT 1 FROM occurrences o WHERE o.entry = e.pk) OR EXISTS (SELECT 1 FROM files f WHERE f.entry = e.pk))`, pks)
	if err != nil {
		return err
	}
	// A file version always has an occurrence (of type code_file), so an
	// entry without one is in no file's history either, unless it was
	// forgotten by ID, which removes its versions itself.
	var unused []int64
	for _, pk := range pks {
		if slices.Contains(used, pk) {
			p.survivors[pk] = true
		} else {
			unused = append(unused, pk)
		}
	}
	return p.dropEntries(unused)
}

// dropEntries deletes entries and everything derived from them: chunks
// and their index documents, vectors and access counts, contexts, term
// sets, links, and the parent links of the occurrences they prompted.
func (p *purge) dropEntries(pks []int64) error {
	if len(pks) == 0 {
		return nil
	}
	rows, err := p.tx.Query(p.ctx, `SELECT pk, id, size, token_count FROM entries WHERE pk = ANY($1) ORDER BY pk FOR UPDATE`, pks)
	if err != nil {
		return err
	}
	var ids []string
	var (
		pk, size, tokens int64
		id               string
	)
	_, err = pgx.ForEachRow(rows, []any{&pk, &id, &size, &tokens}, func() error {
		ids = append(ids, id)
		delete(p.survivors, pk)
		p.dead[id] = true
		p.counts.Entries++
		p.counts.ContentBytes += size
		p.deltas["entries"]--
		p.deltas["content_bytes"] -= size
		p.deltas["tokens"] -= tokens
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := p.dropChunks(pks); err != nil {
		return err
	}
	for _, q := range []string{`DELETE FROM contexts WHERE entry = ANY($1)`, `DELETE FROM entry_terms WHERE entry = ANY($1)`} {
		if _, err := p.exec(q, pks); err != nil {
			return err
		}
	}
	// Occurrences they prompted keep their place but lose the parent;
	// their parent links are the links from them.
	if _, err := p.exec(`UPDATE occurrences o SET parent_id = NULL
		FROM links l JOIN entries c ON c.id = l.to_id
		WHERE l.from_id = ANY($1) AND l.kind = $2 AND o.entry = c.pk AND o.parent_id = l.from_id`,
		ids, string(store.LinkParent)); err != nil {
		return err
	}
	n, err := p.exec(`DELETE FROM links WHERE from_id = ANY($1) OR to_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	p.counts.Links += n
	if _, err := p.exec(`DELETE FROM entries WHERE pk = ANY($1)`, pks); err != nil {
		return err
	}
	p.touch("entries", "contexts", "entry_terms", "links")
	return nil
}

// dropChunks deletes the chunks of entries pks, their index documents,
// their vectors under every model and their access counts, and returns
// how many went.
func (p *purge) dropChunks(pks []int64) (int64, error) {
	rows, err := p.tx.Query(p.ctx, `SELECT c.id, e.fts FROM chunks c JOIN entries e ON e.pk = c.entry
		WHERE c.entry = ANY($1) ORDER BY c.id FOR UPDATE OF c`, pks)
	if err != nil {
		return 0, err
	}
	var chunks []int64
	var (
		id    int64
		space int16
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &space}, func() error {
		chunks = append(chunks, id)
		p.unindex[space] = append(p.unindex[space], id)
		return nil
	})
	if err != nil || len(chunks) == 0 {
		return 0, err
	}
	n, err := p.exec(`DELETE FROM vectors WHERE chunk = ANY($1)`, chunks)
	if err != nil {
		return 0, err
	}
	p.counts.Vectors += n
	if _, err := p.exec(`DELETE FROM access WHERE chunk = ANY($1)`, chunks); err != nil {
		return 0, err
	}
	if _, err := p.exec(`DELETE FROM chunks WHERE id = ANY($1)`, chunks); err != nil {
		return 0, err
	}
	p.touch("chunks", "vectors", "access", "fts_docs", "fts_postings")
	p.counts.Chunks += int64(len(chunks))
	p.deltas["chunks"] -= int64(len(chunks))
	return int64(len(chunks)), nil
}

// flushIndex removes the index documents of the chunks removed so far.
func (p *purge) flushIndex() error {
	for _, space := range slices.Sorted(maps.Keys(p.unindex)) {
		ids := p.unindex[space]
		if len(ids) == 0 {
			continue
		}
		slices.Sort(ids)
		if err := unindexDocs(p.ctx, p.tx, space, ids); err != nil {
			return fmt.Errorf("unindex: %w", err)
		}
	}
	clear(p.unindex)
	return nil
}

// following adds to todo the entries whose conversation context may have
// been made from an occurrence removed or changed in session: the next
// backend.ContextEntries after each point there.
func (p *purge) following(session string, todo map[int64]bool) error {
	pts := p.points[session]
	if len(pts) == 0 {
		return nil
	}
	turns, seqs := make([]int64, len(pts)), make([]int64, len(pts))
	for i, pt := range pts {
		turns[i], seqs[i] = pt.turn, pt.seq
	}
	next, err := p.ints(`SELECT DISTINCT n.entry FROM unnest($2::bigint[], $3::bigint[]) AS pt(turn, seq)
		CROSS JOIN LATERAL (SELECT o.entry FROM occurrences o WHERE o.session_id = $1
			AND (o.turn > pt.turn OR o.turn = pt.turn AND o.seq > pt.seq) ORDER BY o.turn, o.seq LIMIT $4) n`,
		session, turns, seqs, backend.ContextEntries)
	if err != nil {
		return err
	}
	for _, pk := range next {
		todo[pk] = true
	}
	return nil
}

// finish works out again what the survivors and the entries that followed
// a removed occurrence derive from what was removed, deletes the
// references to removed entries and the window messages made of them,
// and writes the versions and counters.
func (p *purge) finish() error {
	if err := p.flushIndex(); err != nil {
		return err
	}
	todo := map[int64]bool{}
	for pk := range p.survivors {
		todo[pk] = true
	}
	for _, s := range slices.Sorted(maps.Keys(p.points)) {
		if err := p.following(s, todo); err != nil {
			return err
		}
	}
	for _, pk := range slices.Sorted(maps.Keys(todo)) {
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
			n, err := p.exec(`DELETE FROM vectors WHERE chunk = (SELECT id FROM chunks WHERE entry = $1 AND ordinal = 0)`, pk)
			if err != nil {
				return err
			}
			p.counts.Vectors += n
			p.touch("contexts", "vectors")
		}
		if err := reindexEntry(p.ctx, p.tx, pk, false); err != nil {
			return err
		}
		p.touch("fts_docs", "fts_postings")
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

// deadIDs returns the removed entries' IDs, in order.
func (p *purge) deadIDs() []string { return slices.Sorted(maps.Keys(p.dead)) }

// dropReferences takes the removed entries out of the references that
// name them: a reference left with none is deleted (its markers expand
// to nothing), one left with some keeps them, so that a window's evicted
// run loses only what was forgotten, and loses the entities and hints
// its marker named, which may have come from it.
func (p *purge) dropReferences() error {
	if len(p.dead) == 0 {
		return nil
	}
	rows, err := p.tx.Query(p.ctx, `SELECT id, content_ids FROM refs WHERE content_ids::jsonb ?| $1 ORDER BY id FOR UPDATE`, p.deadIDs())
	if err != nil {
		return err
	}
	type ref struct{ id, ids string }
	var (
		refs []ref
		r    ref
	)
	if _, err := pgx.ForEachRow(rows, []any{&r.id, &r.ids}, func() error {
		refs = append(refs, r)
		return nil
	}); err != nil {
		return err
	}
	for _, r := range refs {
		var ids []string
		if err := json.Unmarshal([]byte(r.ids), &ids); err != nil {
			return fmt.Errorf("reference %s: %w", r.id, err)
		}
		left := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return p.dead[id] })
		if len(left) == 0 {
			if _, err := p.exec(`DELETE FROM refs WHERE id = $1`, r.id); err != nil {
				return err
			}
			p.counts.References++
		} else {
			b, err := json.Marshal(left)
			if err != nil {
				return err
			}
			if _, err := p.exec(`UPDATE refs SET content_ids = $1, summary = '', topics = NULL, entities = NULL, query_hints = NULL WHERE id = $2`,
				string(b), r.id); err != nil {
				return err
			}
		}
		p.touch("refs")
	}
	return nil
}

// dropWindowItems deletes from windows' ledgers the messages whose content
// was removed, and those evicted under a reference that was dropped (no
// marker could bring them back), with the summaries that may quote them,
// and advances those windows' versions. The windows' heads are locked
// first, as an append locks them.
func (p *purge) dropWindowItems() error {
	if len(p.dead) == 0 {
		return nil
	}
	const doomed = `(w.entry_ids::jsonb ?| $1 OR w.ref_id != '' AND NOT EXISTS (SELECT 1 FROM refs r WHERE r.id = w.ref_id))`
	dead := p.deadIDs()
	rows, err := p.tx.Query(p.ctx, `SELECT DISTINCT session_id, agent_id FROM window_items w WHERE `+doomed+` ORDER BY 1, 2`, dead)
	if err != nil {
		return err
	}
	type key struct{ session, agent string }
	var (
		keys []key
		k    key
	)
	if _, err := pgx.ForEachRow(rows, []any{&k.session, &k.agent}, func() error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := p.exec(`SELECT 1 FROM windows WHERE session_id = $1 AND agent_id = $2 FOR UPDATE`, k.session, k.agent); err != nil {
			return err
		}
		rows, err := p.tx.Query(p.ctx, `DELETE FROM window_items w WHERE w.session_id = $2 AND w.agent_id = $3 AND `+doomed+` RETURNING w.pos, w.append_version`,
			dead, k.session, k.agent)
		if err != nil {
			return err
		}
		var (
			positions []int64
			pos, ver  int64
			since     = int64(-1) // the first version that held one of them
		)
		if _, err := pgx.ForEachRow(rows, []any{&pos, &ver}, func() error {
			positions = append(positions, pos)
			if since < 0 || ver < since {
				since = ver
			}
			return nil
		}); err != nil {
			return err
		}
		if len(positions) == 0 {
			continue
		}
		// The window's turns since the first of them came may show them.
		n, err := p.dropSnapshots(`session_id = $1 AND agent_id = $2 AND version >= $3`, k.session, k.agent, since)
		if err != nil {
			return err
		}
		p.counts.Snapshots += n
		// A summary may quote the forgotten message.
		if _, err := p.exec(`DELETE FROM window_summaries s WHERE s.session_id = $1 AND s.agent_id = $2
			AND EXISTS (SELECT 1 FROM unnest($3::bigint[]) AS d(pos) WHERE s.from_pos <= d.pos AND d.pos < s.to_pos)`,
			k.session, k.agent, positions); err != nil {
			return err
		}
		if _, err := p.exec(`UPDATE windows SET version = version + 1 WHERE session_id = $1 AND agent_id = $2`, k.session, k.agent); err != nil {
			return err
		}
		p.touch("window_items", "window_summaries")
	}
	return p.dropSourcedSnapshots()
}

// dropSourcedSnapshots deletes the turn snapshots whose pre-fetch quoted
// a removed entry (the report's sources name it): another window's turn
// may have shown it.
func (p *purge) dropSourcedSnapshots() error {
	rows, err := p.tx.Query(p.ctx, `SELECT session_id, agent_id, seq, report FROM window_snapshots
		WHERE strpos(report, '"sources":') > 0 ORDER BY session_id, agent_id, seq`)
	if err != nil {
		return err
	}
	type snap struct {
		session, agent string
		seq            int64
	}
	var (
		doomed []snap
		s      snap
		report string
	)
	if _, err := pgx.ForEachRow(rows, []any{&s.session, &s.agent, &s.seq, &report}, func() error {
		if backend.SourcesAny(report, p.dead) {
			doomed = append(doomed, s)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, s := range doomed {
		n, err := p.dropSnapshots(`session_id = $1 AND agent_id = $2 AND seq = $3`, s.session, s.agent, s.seq)
		if err != nil {
			return err
		}
		p.counts.Snapshots += n
	}
	return nil
}

// commitCounters advances the versions that caches are keyed by (the
// archive's global version and the versions of the sessions whose state
// changed), then writes the counter changes with the purge count, in name
// order: they are the hottest rows, locked last.
func (p *purge) commitCounters() error {
	if err := p.lockArchive(); err != nil {
		return err
	}
	// Every purge advances the global version, so that every briefing
	// cached by version, on any server, is made again.
	if _, err := p.exec(`UPDATE arch_versions SET version = version + 1 WHERE scope = ''`); err != nil {
		return err
	}
	for _, s := range slices.Sorted(maps.Keys(p.sessions)) {
		if s == "" {
			continue
		}
		if _, err := p.exec(`UPDATE arch_versions SET version = version + 1 WHERE scope = $1`, s); err != nil {
			return err
		}
	}
	p.deltas[counterPurges] = 1
	if p.tables["fts_postings"] {
		p.deltas[ftsGeneration] = 1 // the full-text index changed
	}
	return addCounters(p.ctx, p.tx, p.deltas)
}

// reindexEntry makes the index documents of entry pk again, from its
// content, chunks, meta and context as they are now, in the space it
// belongs in (see the files area's refreshEntry); with fresh, its chunks
// are new and have no documents to remove.
func reindexEntry(ctx context.Context, tx pgx.Tx, pk int64, fresh bool) error {
	fb := newFileBatch(ctx, tx)
	st, err := fb.entryState(pk)
	if err != nil {
		return err
	}
	docs, err := fb.entryDocs(pk, st.words)
	if err != nil {
		return err
	}
	if !fresh {
		ids := make([]int64, len(docs))
		for i, d := range docs {
			ids[i] = d.ID
		}
		if err := unindexDocs(ctx, tx, st.space, ids); err != nil {
			return fmt.Errorf("unindex entry %d: %w", pk, err)
		}
	}
	if err := indexDocs(ctx, tx, st.target, docs); err != nil {
		return fmt.Errorf("index entry %d: %w", pk, err)
	}
	if st.target != st.space {
		if _, err := tx.Exec(ctx, `UPDATE entries SET fts = $1 WHERE pk = $2`, st.target, pk); err != nil {
			return err
		}
	}
	return nil
}

// recontext works out the context of entry pk again from its first
// occurrence, as PutEntries made it (see contextFrom), and reports whether
// it changed.
func (p *purge) recontext(pk int64) (bool, error) {
	var old *string
	if err := p.tx.QueryRow(p.ctx, `SELECT text FROM contexts WHERE entry = $1`, pk).Scan(&old); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, err
	}
	var (
		seq, size, turn int64
		session, typ    string
	)
	err := p.tx.QueryRow(p.ctx, `SELECT o.seq, o.session_id, o.turn, o.type, e.size
		FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.seq = (SELECT min(seq) FROM occurrences WHERE entry = $1)`, pk).Scan(&seq, &session, &turn, &typ, &size)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, err
	}
	text := ""
	if err == nil && session != "" && store.ContentType(typ) != store.CodeFile && size <= backend.ContextBytes-backend.MinContextBytes {
		rows, err := p.tx.Query(p.ctx, `SELECT o.entry, e.size FROM occurrences o JOIN entries e ON e.pk = o.entry
			WHERE o.session_id = $1 AND (o.turn < $2 OR o.turn = $2 AND o.seq < $3) ORDER BY o.turn DESC, o.seq DESC LIMIT $4`,
			session, turn, seq, backend.ContextEntries)
		if err != nil {
			return false, err
		}
		var prevs []backend.PrevEntry
		var pe backend.PrevEntry
		if _, err := pgx.ForEachRow(rows, []any{&pe.PK, &pe.Size}, func() error {
			prevs = append(prevs, pe)
			return nil
		}); err != nil {
			return false, err
		}
		text, err = contextFrom(pk, size, prevs, func(from, pk int64) (tail []byte, err error) {
			return tail, p.tx.QueryRow(p.ctx, `SELECT substring(content FROM $1::integer) FROM entries WHERE pk = $2`, from, pk).Scan(&tail)
		})
		if err != nil {
			return false, err
		}
	}
	if old != nil && text == *old || old == nil && text == "" {
		return false, nil
	}
	if _, err := p.exec(`DELETE FROM contexts WHERE entry = $1`, pk); err != nil {
		return false, err
	}
	if text != "" {
		if _, err := p.exec(`INSERT INTO contexts (entry, text) VALUES ($1, $2)`, pk, text); err != nil {
			return false, err
		}
	}
	return true, nil
}

// audit writes the purge's audit record and returns its sequence number.
func (p *purge) audit(action, actor string, targets []string) (int64, error) {
	if targets == nil {
		targets = []string{}
	}
	t, err := json.Marshal(targets)
	if err != nil {
		return 0, err
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
	err = p.tx.QueryRow(p.ctx, `INSERT INTO audit (at, actor, action, targets, counts) VALUES ($1, $2, $3, $4, $5) RETURNING seq`,
		unixNano(time.Now()), actor, action, string(t), string(c)).Scan(&seq)
	return seq, err
}

// compact VACUUMs the tables a purge changed, once it has committed (see
// the comment at the top of this file). It reports whether what was
// removed is gone from the store's files: never, on PostgreSQL.
func (s *Store) compact(ctx context.Context, tables map[string]bool) (bool, error) {
	names := slices.Sorted(maps.Keys(tables))
	if len(names) == 0 {
		return false, nil
	}
	for i, n := range names {
		names[i] = pgx.Identifier{n}.Sanitize()
	}
	// VACUUM runs outside a transaction block; Exec without arguments
	// sends it as a simple query, so it is not wrapped in one.
	if _, err := s.pool.Exec(ctx, "VACUUM "+strings.Join(names, ", ")); err != nil {
		return false, fmt.Errorf("compact: %w", err)
	}
	return false, nil
}

// Purges implements store.Store.
func (s *Store) Purges(ctx context.Context) (uint64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT value FROM counters WHERE name = $1), 0)`, counterPurges).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("purges: %w", err)
	}
	return uint64(n), nil
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, after int64, limit int) ([]store.AuditRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT seq, at, actor, action, targets, counts FROM audit WHERE seq > $1 ORDER BY seq LIMIT $2`
	args := []any{after, limit}
	if after < 0 {
		q = `SELECT * FROM (SELECT seq, at, actor, action, targets, counts FROM audit ORDER BY seq DESC LIMIT $1) a ORDER BY seq`
		args = []any{limit}
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var (
		out             []store.AuditRecord
		r               store.AuditRecord
		at              int64
		targets, counts string
	)
	_, err = pgx.ForEachRow(rows, []any{&r.Seq, &at, &r.Actor, &r.Action, &targets, &counts}, func() error {
		rec := store.AuditRecord{Seq: r.Seq, At: fromUnixNano(at), Actor: r.Actor, Action: r.Action}
		if err := json.Unmarshal([]byte(targets), &rec.Targets); err != nil {
			return fmt.Errorf("audit %d: %w", rec.Seq, err)
		}
		if err := json.Unmarshal([]byte(counts), &rec.Counts); err != nil {
			return fmt.Errorf("audit %d: %w", rec.Seq, err)
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}
