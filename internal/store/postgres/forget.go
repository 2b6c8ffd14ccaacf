package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// Forgetting (see store.PurgeStore.Forget, and purge.go for how a purge
// shares the database with other servers).

// sessionKinds are the kinds of the archive's session records: the newest
// per key is a session's state (resume, files, wants, rejects).
var sessionKinds = []string{string(store.KindResume), string(store.KindFile), string(store.KindWant), string(store.KindReject)}

// globalKinds are the kinds of the archive's global records.
var globalKinds = []string{string(store.KindPattern), string(store.KindFailure), string(store.KindResolution),
	string(store.KindInsight), string(store.KindDecision), string(store.KindIntent), string(store.KindIntentDone)}

// Forget implements store.Store.
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
		rep.Audit = 0
		// The sessions it changes first, as PutEntries locks them: their
		// writers wait for the purge rather than deadlock with it.
		touched, err := p.strs(`SELECT DISTINCT o.session_id FROM occurrences o JOIN entries e ON e.pk = o.entry
			WHERE e.id = ANY($1) AND o.session_id != ''`, req.Entries)
		if err != nil {
			return err
		}
		if err := p.lockSessions(append(touched, req.Sessions...)); err != nil {
			return err
		}
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

// forgetSession removes a session: its occurrences and what only they
// kept, its windows and snapshots, agents and references, and its archive
// state, agents and events; and with records, the global records its
// agents wrote.
func (p *purge) forgetSession(id string, records bool) error {
	// A session is there while something of it is left to forget; the
	// global records its agents wrote count only when they would go too.
	var found bool
	err := p.tx.QueryRow(p.ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)
		OR EXISTS (SELECT 1 FROM occurrences WHERE session_id = $1)
		OR EXISTS (SELECT 1 FROM arch_agents WHERE session_id = $1)
		OR EXISTS (SELECT 1 FROM arch_records WHERE session_id = $1 AND ($2 OR kind = ANY($3)))`,
		id, records, sessionKinds).Scan(&found)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	if err := p.lockSessions([]string{id}); err != nil {
		return err
	}
	p.counts.Sessions++
	if err := p.dropOccurrences(`o.session_id = $1`, id); err != nil {
		return err
	}
	// Windows: the heads first, as an append locks them, then their
	// ledgers and snapshots.
	if _, err := p.exec(`DELETE FROM windows WHERE session_id = $1`, id); err != nil {
		return err
	}
	for _, q := range []string{`DELETE FROM window_items WHERE session_id = $1`, `DELETE FROM window_readmits WHERE session_id = $1`,
		`DELETE FROM window_summaries WHERE session_id = $1`, `DELETE FROM window_appends WHERE session_id = $1`} {
		if _, err := p.exec(q, id); err != nil {
			return err
		}
	}
	dropped, err := p.dropSnapshots(`session_id = $1`, id)
	if err != nil {
		return err
	}
	p.counts.Snapshots += dropped
	for _, q := range []struct {
		sql string
		n   *int64
	}{
		{`DELETE FROM refs WHERE session_id = $1`, &p.counts.References},
		{`DELETE FROM agents WHERE session_id = $1`, &p.counts.Agents},
		{`DELETE FROM sessions WHERE id = $1`, nil},
	} {
		n, err := p.exec(q.sql, id)
		if err != nil {
			return err
		}
		if q.n != nil {
			*q.n += n
		}
	}
	p.touch("windows", "window_items", "window_readmits", "window_summaries", "window_appends", "refs", "agents", "sessions")
	// The archive: session state, and with records the global history the
	// session's agents wrote.
	if err := p.lockArchive(); err != nil {
		return err
	}
	if records {
		global, err := p.strs(`SELECT id FROM arch_records WHERE session_id = $1 AND id IS NOT NULL AND kind = ANY($2) ORDER BY seq`,
			id, globalKinds)
		if err != nil {
			return err
		}
		// Everything the session's agents wrote to the global history;
		// its failures take their resolutions with them, whoever wrote
		// those.
		if len(global) > 0 {
			if err := p.forgetRecords(global, false); err != nil {
				return err
			}
		}
	}
	n, err := p.exec(`DELETE FROM arch_records WHERE session_id = $1 AND kind = ANY($2)`, id, sessionKinds)
	if err != nil {
		return err
	}
	p.counts.Records += n
	if n, err = p.exec(`DELETE FROM arch_agents WHERE session_id = $1`, id); err != nil {
		return err
	}
	p.counts.Agents += n
	// Its events go, but those of the global records that stay: they are
	// those records' history.
	if n, err = p.exec(`DELETE FROM arch_events e WHERE e.session_id = $1
		AND (e.record_id = '' OR NOT EXISTS (SELECT 1 FROM arch_records r WHERE r.id = e.record_id))`, id); err != nil {
		return err
	}
	p.counts.Events += n
	p.touch("arch_records", "arch_agents", "arch_events")
	// The session's version stays, advanced: it is only a number, and a
	// version that started again from 1 would let a cache elsewhere serve
	// the forgotten state for a new one.
	p.sessions[id] = true
	return nil
}

// lockSessions locks the rows of sessions, in ID order, as PutEntries
// locks the sessions it writes to: a writer to one of them waits for the
// purge to commit, and then sees it.
func (p *purge) lockSessions(ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := p.exec(`SELECT 1 FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE`, unique(ids))
	return err
}

// dropSnapshots deletes the window snapshots that cond (on
// window_snapshots) selects, and the bodies no snapshot left refers to
// (see snapshot.go), and returns how many snapshots went.
func (p *purge) dropSnapshots(cond string, args ...any) (int64, error) {
	n, err := dropSnapshots(p.ctx, p.tx, cond, args...)
	if n > 0 {
		p.touch("window_snapshots", "snapshot_bodies")
	}
	return n, err
}

// forgetEntry removes an entry with all its occurrences. An old version of
// a file leaves the file's history; a current version is refused.
func (p *purge) forgetEntry(id string) error {
	var pk int64
	err := p.tx.QueryRow(p.ctx, `SELECT pk FROM entries WHERE id = $1 FOR UPDATE`, id).Scan(&pk)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	rows, err := p.tx.Query(p.ctx, `SELECT path, state FROM files WHERE entry = $1 ORDER BY path FOR UPDATE`, pk)
	if err != nil {
		return err
	}
	var (
		deleted     []string
		path, state string
	)
	_, err = pgx.ForEachRow(rows, []any{&path, &state}, func() error {
		if store.FileState(state) == store.FileCurrent {
			return &store.ConflictError{What: "entry " + id, Msg: fmt.Sprintf(
				"is the current version of %s, which the next index would store again: change or exclude the file and index it, then forget this old version; or remove a string from it with engram redact", path)}
		}
		deleted = append(deleted, path)
		return nil
	})
	if err != nil {
		return err
	}
	n, err := p.exec(`DELETE FROM file_versions WHERE entry = $1`, pk)
	if err != nil {
		return err
	}
	p.counts.FileVersions += n
	if n > 0 {
		p.touch("file_versions")
	}
	// A deleted file whose last version this was names the newest version
	// left, or leaves the manifest with its last version.
	for _, path := range deleted {
		n, err := p.exec(`UPDATE files SET entry = v.entry FROM (SELECT entry FROM file_versions WHERE path = $1 ORDER BY version DESC LIMIT 1) v
			WHERE files.path = $1`, path)
		if err != nil {
			return err
		}
		if n == 0 {
			if _, err := p.exec(`DELETE FROM files WHERE path = $1`, path); err != nil {
				return err
			}
		}
		p.touch("files")
	}
	// Nothing refers to it now but its occurrences, which go with it.
	if err := p.dropOccurrences(`o.entry = $1`, pk); err != nil {
		return err
	}
	if p.dead[id] {
		return nil
	}
	return p.dropEntries([]int64{pk})
}

// forgetRecords removes global records of the archivalist, with the
// resolutions of a failure and the completion of an intent (and, when
// named is false, quietly skips ids already gone), their index documents,
// supersessions, usage counts and events.
func (p *purge) forgetRecords(ids []string, named bool) error {
	if err := p.lockArchive(); err != nil {
		return err
	}
	type rec struct {
		seq               int64
		id, kind, session string
	}
	var recs []rec
	seen := map[string]bool{}
	load := func(q string, args ...any) error {
		rows, err := p.tx.Query(p.ctx, `SELECT seq, id, kind, session_id FROM arch_records WHERE `+q+` ORDER BY seq`, args...)
		if err != nil {
			return err
		}
		var r rec
		_, err = pgx.ForEachRow(rows, []any{&r.seq, &r.id, &r.kind, &r.session}, func() error {
			if !seen[r.id] {
				seen[r.id] = true
				recs = append(recs, r)
			}
			return nil
		})
		return err
	}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		n := len(recs)
		if err := load(`id = $1`, id); err != nil {
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
			if err := load(`ref = $1 AND kind = $2`, recs[i].id, string(store.KindResolution)); err != nil {
				return err
			}
		case store.KindIntent:
			if err := load(`ref = $1 AND kind = $2`, recs[i].id, string(store.KindIntentDone)); err != nil {
				return err
			}
		}
	}
	if len(recs) == 0 {
		return nil
	}
	rids := make([]string, len(recs))
	seqs := make([]int64, len(recs))
	for i, r := range recs {
		rids[i], seqs[i] = r.id, r.seq
		// The writer's session state shows the categories it wrote to.
		p.sessions[r.session] = true
	}
	// Records they had superseded are active again, unless they go too.
	olds, err := p.strs(`SELECT id FROM arch_superseded WHERE by = ANY($1) ORDER BY id`, rids)
	if err != nil {
		return err
	}
	for _, o := range olds {
		if !seen[o] && !slices.Contains(p.reactivated, o) {
			p.reactivated = append(p.reactivated, o)
		}
	}
	if err := unindexDocs(p.ctx, p.tx, spaceArchive, seqs); err != nil {
		return fmt.Errorf("unindex records: %w", err)
	}
	for _, q := range []string{`DELETE FROM arch_superseded WHERE id = ANY($1) OR by = ANY($1)`, `DELETE FROM arch_usage WHERE id = ANY($1)`} {
		if _, err := p.exec(q, rids); err != nil {
			return err
		}
	}
	n, err := p.exec(`DELETE FROM arch_records WHERE seq = ANY($1)`, seqs)
	if err != nil {
		return err
	}
	p.counts.Records += n
	if n, err = p.exec(`DELETE FROM arch_events WHERE record_id = ANY($1)`, rids); err != nil {
		return err
	}
	p.counts.Events += n
	p.touch("arch_records", "arch_superseded", "arch_usage", "arch_events", "fts_docs", "fts_postings")
	p.reactivated = slices.DeleteFunc(p.reactivated, func(id string) bool { return seen[id] })
	return nil
}
