package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/backend"
	"github.com/engramhq/engram/internal/terms"
)

// Redaction (see store.PurgeStore.Redact). A redacted entry keeps its ID:
// references to it ([CTX-REF] markers, parents, links, file versions)
// must still resolve, and since the ID is the hash of the content as it
// was, content with the string stored again later is recognised as
// stored and does not bring the string back. The entry is marked
// redacted, so that nothing takes its content for what its ID hashes. Its
// size, token count, chunks, full-text rows and term set are made again
// from the new content, and its vectors are deleted, so that the embedder's
// queue makes them again.

// redaction is the state of one Redact transaction.
type redaction struct {
	*purge
	req    *store.RedactRequest
	needle []byte
	*backend.Replacer
	// rewritten are entries whose content changed; reindex, entries whose
	// full-text rows must be made again (meta or context changed).
	rewritten map[int64]bool
	reindex   map[int64]bool
}

// Redact implements store.PurgeStore.
func (s *Store) Redact(ctx context.Context, req store.RedactRequest) (store.PurgeReport, error) {
	if err := req.Validate(); err != nil {
		return store.PurgeReport{}, fmt.Errorf("redact: %w", err)
	}
	var rep store.PurgeReport
	p, err := s.runPurge(ctx, req.DryRun, func(p *purge) error {
		r := &redaction{purge: p, req: &req, needle: req.Text,
			Replacer:  backend.NewReplacer(req.Text, []byte(req.Marker), true, &p.counts.Places),
			rewritten: map[int64]bool{}, reindex: map[int64]bool{}}
		if err := r.run(); err != nil {
			return err
		}
		if req.DryRun || r.counts.Places == 0 {
			return nil
		}
		var err error
		rep.Audit, err = p.audit("redact", req.Actor, nil)
		return err
	})
	if err != nil {
		return store.PurgeReport{}, fmt.Errorf("redact: %w", err)
	}
	rep.Counts = p.counts
	if req.Compact && !req.DryRun && p.counts.Places > 0 {
		if rep.Compacted, err = s.compact(ctx, p.tables); err != nil {
			return rep, fmt.Errorf("redact: %w", err)
		}
	}
	return rep, nil
}

func (r *redaction) run() error {
	if err := r.checkIdentifiers(); err != nil {
		return err
	}
	if err := r.occurrences(); err != nil {
		return err
	}
	if err := r.entries(); err != nil {
		return err
	}
	if err := r.contexts(); err != nil {
		return err
	}
	if err := r.flushFTS(); err != nil {
		return err
	}
	// Full-text rows last: they are made from content, meta and context.
	pks := make([]int64, 0, len(r.reindex))
	for pk := range r.reindex {
		pks = append(pks, pk)
	}
	slices.Sort(pks)
	for _, pk := range pks {
		var fts int
		if err := r.row(`SELECT fts FROM entries WHERE pk = ?`, pk).Scan(&fts); err != nil {
			return err
		}
		r.tables[ftsTable(fts)] = true
		if err := r.b.indexEntry(pk, r.rewritten[pk]); err != nil {
			return err
		}
	}
	if err := r.records(); err != nil {
		return err
	}
	if err := r.rest(); err != nil {
		return err
	}
	if err := r.windows(); err != nil {
		return err
	}
	r.counts.Bytes = r.counts.Places * int64(len(r.needle))
	if r.counts.Places == 0 {
		return nil
	}
	return r.commitCounters()
}

// checkIdentifiers refuses a string that is part of an identifier: ids
// are keys, which other rows and other processes hold, and cannot be
// rewritten. The identifiers are not named in the error: they hold the
// string.
func (r *redaction) checkIdentifiers() error {
	places := []struct{ what, q string }{
		{"a session id", `SELECT count(*) FROM sessions WHERE instr(id, ?1) > 0`},
		{"a session id", `SELECT count(*) FROM (SELECT 1 FROM occurrences WHERE instr(session_id, ?1) > 0 LIMIT 1)`},
		{"an agent id", `SELECT count(*) FROM (SELECT 1 FROM occurrences WHERE instr(agent_id, ?1) > 0 LIMIT 1)`},
		{"a message id", `SELECT count(*) FROM (SELECT 1 FROM occurrences WHERE instr(msg_id, ?1) > 0 LIMIT 1)`},
		{"an agent id", `SELECT count(*) FROM agents WHERE instr(id, ?1) > 0`},
		{"a file path", `SELECT count(*) FROM files WHERE instr(path, ?1) > 0`},
		{"a file path", `SELECT count(*) FROM file_versions WHERE instr(path, ?1) > 0`},
		{"a reference id", `SELECT count(*) FROM refs WHERE instr(id, ?1) > 0`},
		{"an archive id", `SELECT count(*) FROM arch_records WHERE instr(coalesce(id, ''), ?1) > 0 OR instr(session_id, ?1) > 0 OR instr(agent_id, ?1) > 0 OR instr(ref, ?1) > 0`},
		{"an archive agent id", `SELECT count(*) FROM arch_agents WHERE instr(id, ?1) > 0 OR instr(session_id, ?1) > 0 OR instr(parent_id, ?1) > 0`},
		{"an archive id", `SELECT count(*) FROM arch_events WHERE instr(session_id, ?1) > 0 OR instr(agent_id, ?1) > 0 OR instr(record_id, ?1) > 0`},
		{"an archive session", `SELECT count(*) FROM arch_versions WHERE instr(scope, ?1) > 0`},
		{"a setting name", `SELECT count(*) FROM settings WHERE instr(key, ?1) > 0`},
		{"a blob name", `SELECT count(*) FROM blobs WHERE instr(name, ?1) > 0`},
		{"a vector model name", `SELECT count(*) FROM vector_models WHERE instr(name, ?1) > 0`},
	}
	var found []string
	for _, pl := range places {
		var n int64
		if err := r.row(pl.q, string(r.needle)).Scan(&n); err != nil {
			return err
		}
		if n > 0 && !slices.Contains(found, pl.what) {
			found = append(found, pl.what)
		}
	}
	if len(found) > 0 {
		return store.KeysError(found)
	}
	return nil
}

// replaceJSON is ReplaceJSON for a column that may be NULL.
func (r *redaction) replaceJSON(raw sql.NullString) (sql.NullString, bool, error) {
	if !raw.Valid {
		return raw, false, nil
	}
	s, ok, err := r.ReplaceJSON(raw.String)
	if !ok || err != nil {
		return raw, false, err
	}
	return sql.NullString{String: s, Valid: true}, true, nil
}

// jsonMatch is an SQL condition that a JSON column may hold the needle,
// with the needle's JSON forms as arguments from ?2 on.
func (r *redaction) jsonMatch(col string) string {
	var parts []string
	for i := range r.JSONNeedles() {
		parts = append(parts, fmt.Sprintf("instr(%s, ?%d) > 0", col, i+2))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " OR ")
}

// args are the needle and its JSON forms, for ?1 and jsonMatch.
func (r *redaction) args() []any {
	out := []any{string(r.needle)}
	for _, f := range r.JSONNeedles() {
		out = append(out, f)
	}
	return out
}

// occurrences redacts the agent type and the JSON columns of occurrences.
func (r *redaction) occurrences() error {
	rows, err := r.query(`SELECT seq, entry, agent_type, files, keywords, entities, metadata FROM occurrences
		WHERE instr(agent_type, ?1) > 0 OR `+r.jsonMatch("files")+` OR `+r.jsonMatch("keywords")+` OR `+
		r.jsonMatch("entities")+` OR `+r.jsonMatch("metadata"), r.args()...)
	if err != nil {
		return err
	}
	type occ struct {
		seq, entry int64
		agentType  string
		cols       [4]sql.NullString
	}
	var occs []occ
	for rows.Next() {
		var o occ
		if err := rows.Scan(&o.seq, &o.entry, &o.agentType, &o.cols[0], &o.cols[1], &o.cols[2], &o.cols[3]); err != nil {
			return errors.Join(err, rows.Close())
		}
		occs = append(occs, o)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, o := range occs {
		changed := false
		var ok bool
		o.agentType, ok = r.ReplaceString(o.agentType)
		changed = changed || ok
		for i := range o.cols {
			if o.cols[i], ok, err = r.replaceJSON(o.cols[i]); err != nil {
				return fmt.Errorf("occurrence %d: %w", o.seq, err)
			}
			changed = changed || ok
		}
		if !changed {
			continue
		}
		if _, err := r.exec(`UPDATE occurrences SET agent_type = ?, files = ?, keywords = ?, entities = ?, metadata = ? WHERE seq = ?`,
			o.agentType, o.cols[0], o.cols[1], o.cols[2], o.cols[3], o.seq); err != nil {
			return err
		}
		r.counts.Occurrences++
		r.reindex[o.entry] = true // meta holds files, keywords and entities
	}
	return nil
}

// entries redacts the content of entries, making their chunks, term sets
// and counters again and deleting their vectors.
func (r *redaction) entries() error {
	// Content is a BLOB: the needle and its JSON forms (content may be
	// JSON text, a tool call's input) are looked for as bytes.
	conds := []string{"instr(content, ?1) > 0"}
	args := []any{r.needle}
	for _, f := range r.JSONNeedles() {
		if f != string(r.needle) {
			args = append(args, []byte(f))
			conds = append(conds, fmt.Sprintf("instr(content, ?%d) > 0", len(args)))
		}
	}
	pks, err := r.ints(`SELECT pk FROM entries WHERE `+strings.Join(conds, " OR ")+` ORDER BY pk`, args...)
	if err != nil {
		return err
	}
	for _, pk := range pks {
		if err := r.entry(pk); err != nil {
			return err
		}
	}
	return nil
}

func (r *redaction) entry(pk int64) error {
	var (
		id           string
		content      []byte
		fts          int
		size, tokens int64
	)
	if err := r.row(`SELECT id, content, fts, size, token_count FROM entries WHERE pk = ?`, pk).
		Scan(&id, &content, &fts, &size, &tokens); err != nil {
		return err
	}
	redacted, _ := r.ReplaceContent(content)
	// The entry as the chunker sees it: as a file if it is one, else as
	// first seen.
	rows, err := r.query(`SELECT `+occColumns+` FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.entry = ? ORDER BY o.type = ? DESC, o.seq LIMIT 1`, pk, string(store.CodeFile))
	if err != nil {
		return err
	}
	var first store.Occurrence
	found := false
	for rows.Next() {
		if first, err = scanOccurrence(rows); err != nil {
			return errors.Join(err, rows.Close())
		}
		found = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("entry %s has no occurrence", id)
	}
	if first.Type == store.CodeFile {
		var path string
		err := r.row(`SELECT path FROM files WHERE entry = ? ORDER BY state = 'current' DESC, path LIMIT 1`, pk).Scan(&path)
		if err == nil {
			first.Files = []string{path}
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	e := store.Entry{Content: redacted, Occurrence: first}
	e.Turn, e.MsgID, e.ParentID = 0, "", "" // the chunker needs none of these
	if err := r.req.Rechunk(&e); err != nil {
		return fmt.Errorf("chunk redacted entry %s: %w", id, err)
	}
	check := e
	check.ID, check.Chunks = "", slices.Clone(e.Chunks)
	if err := check.Prepare(); err != nil {
		return fmt.Errorf("chunk redacted entry %s: %w", id, err)
	}
	made := r.counts.Chunks // Counts.Chunks is the chunks made again, not those replaced
	if err := r.dropChunks(pk, fts); err != nil {
		return err
	}
	r.counts.Chunks = made
	if _, err := r.exec(`DELETE FROM entry_terms WHERE entry = ?`, pk); err != nil {
		return err
	}
	if _, err := r.exec(`UPDATE entries SET content = ?, size = ?, token_count = ?, redacted = 1 WHERE pk = ?`,
		redacted, len(redacted), e.TokenCount, pk); err != nil {
		return err
	}
	bodies := make([]string, len(e.Chunks))
	for k, c := range e.Chunks {
		if _, err := r.exec(`INSERT INTO chunks(entry, ordinal, start_byte, end_byte, start_line, end_line, token_count, symbols)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, pk, c.Ordinal, c.Start, c.End, c.StartLine, c.EndLine, c.TokenCount, jsonList(c.Symbols)); err != nil {
			return err
		}
		bodies[k] = string(terms.Append(nil, string(redacted[c.Start:c.End])))
	}
	var isFile bool
	if err := r.row(`SELECT EXISTS (SELECT 1 FROM occurrences WHERE entry = ? AND type = ?)`, pk, string(store.CodeFile)).Scan(&isFile); err != nil {
		return err
	}
	if set := terms.Set(bodies); isFile && set != nil {
		if _, err := r.exec(`INSERT INTO entry_terms(entry, terms) VALUES (?, ?)`, pk, set); err != nil {
			return err
		}
	}
	// Counters: the entry's size, tokens and chunks, and the tokens of
	// each of its occurrences by type.
	r.deltas["content_bytes"] += int64(len(redacted)) - size
	r.deltas["tokens"] += int64(e.TokenCount) - tokens
	r.deltas["chunks"] += int64(len(e.Chunks))
	r.counts.Chunks += int64(len(e.Chunks)) // made again
	byType, err := r.query(`SELECT type, count(*) FROM occurrences WHERE entry = ? GROUP BY type`, pk)
	if err != nil {
		return err
	}
	for byType.Next() {
		var (
			typ string
			n   int64
		)
		if err := byType.Scan(&typ, &n); err != nil {
			return errors.Join(err, byType.Close())
		}
		r.deltas[typePrefix+typ+":tokens"] += n * (int64(e.TokenCount) - tokens)
	}
	if err := errors.Join(byType.Err(), byType.Close()); err != nil {
		return err
	}
	// Where it was seen: the entries after it may hold its end as context.
	occs, err := r.query(`SELECT session_id, turn, seq FROM occurrences WHERE entry = ? AND session_id != ''`, pk)
	if err != nil {
		return err
	}
	for occs.Next() {
		var (
			session string
			pt      occPoint
		)
		if err := occs.Scan(&session, &pt.turn, &pt.seq); err != nil {
			return errors.Join(err, occs.Close())
		}
		r.points[session] = append(r.points[session], pt)
	}
	if err := errors.Join(occs.Err(), occs.Close()); err != nil {
		return err
	}
	r.rewritten[pk] = true
	r.reindex[pk] = true
	r.counts.Entries++
	return nil
}

// contexts works out again the contexts of the entries that follow a
// redacted one in a session, and replaces the string in any context that
// still holds it (a string that spans two entries' ends).
func (r *redaction) contexts() error {
	todo := map[int64]bool{}
	for session := range r.points {
		if err := r.following(session, todo); err != nil {
			return err
		}
	}
	pks := make([]int64, 0, len(todo))
	for pk := range todo {
		pks = append(pks, pk)
	}
	slices.Sort(pks)
	changed := map[int64]bool{}
	for _, pk := range pks {
		ok, err := r.recontext(pk)
		if err != nil {
			return err
		}
		if ok {
			changed[pk] = true
		}
	}
	type ctxRow struct {
		pk   int64
		text string
	}
	var left []ctxRow
	rows, err := r.query(`SELECT entry, text FROM contexts WHERE instr(text, ?) > 0`, string(r.needle))
	if err != nil {
		return err
	}
	for rows.Next() {
		var c ctxRow
		if err := rows.Scan(&c.pk, &c.text); err != nil {
			return errors.Join(err, rows.Close())
		}
		left = append(left, c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, c := range left {
		text, _ := r.ReplaceString(c.text)
		if _, err := r.exec(`UPDATE contexts SET text = ? WHERE entry = ?`, text, c.pk); err != nil {
			return err
		}
		changed[c.pk] = true
	}
	for pk := range changed {
		r.counts.Contexts++
		r.reindex[pk] = true
		if r.rewritten[pk] {
			continue // its vectors are gone already
		}
		n, err := r.exec(`DELETE FROM vectors WHERE model IN (SELECT id FROM vector_models)
			AND chunk = (SELECT id FROM chunks WHERE entry = ? AND ordinal = 0)`, pk)
		if err != nil {
			return err
		}
		r.counts.Vectors += n
	}
	return nil
}

// records redacts the archivalist's records: text, body and the fields
// made from them, and their full-text rows.
func (r *redaction) records() error {
	rows, err := r.query(`SELECT `+archColumns+archFrom+`
		WHERE instr(r.text, ?1) > 0 OR instr(r.category, ?1) > 0 OR instr(r.key, ?1) > 0 OR instr(r.model, ?1) > 0
			OR instr(r.hash, ?1) > 0 OR `+r.jsonMatch("r.body"), r.args()...)
	if err != nil {
		return err
	}
	recs, err := scanArchRecords(rows)
	if err != nil {
		return err
	}
	for i := range recs {
		rec := &recs[i]
		changed := false
		for _, f := range []*string{&rec.Text, &rec.Category, &rec.Key, &rec.Model, &rec.Hash} {
			var ok bool
			*f, ok = r.ReplaceString(*f)
			changed = changed || ok
		}
		body, ok, err := r.ReplaceJSON(string(rec.Body))
		if err != nil {
			return fmt.Errorf("record %d: %w", rec.Seq, err)
		}
		changed = changed || ok
		if !changed {
			continue
		}
		rec.Body = []byte(body)
		if r.req.Rederive != nil {
			r.req.Rederive(rec)
		}
		if _, err := r.exec(`UPDATE arch_records SET text = ?, category = ?, key = ?, model = ?, hash = ?, body = ? WHERE seq = ?`,
			rec.Text, rec.Category, rec.Key, rec.Model, rec.Hash, string(rec.Body), rec.Seq); err != nil {
			return err
		}
		if rec.Kind.Global() {
			if _, err := r.exec(`DELETE FROM arch_fts WHERE rowid = ?`, rec.Seq); err != nil {
				return err
			}
			if rec.Text != "" {
				if _, err := r.exec(`INSERT INTO arch_fts(rowid, body) VALUES (?, ?)`, rec.Seq, terms.String(rec.Text)); err != nil {
					return err
				}
			}
			r.tables["arch_fts"] = true
		}
		r.counts.Records++
		r.sessions[rec.SessionID] = true
	}
	return nil
}

// rest redacts the text of sessions, agents, references, archive agents
// and events, settings and the manifest's reasons, and deletes the blobs
// (trained models) and turn snapshots that hold the string: they cannot
// be rewritten.
func (r *redaction) rest() error {
	type column struct {
		table, key string
		cols       []string
		json       []bool
		counter    *int64
		// session, if set, is the column naming the archive session whose
		// state shows the row.
		session string
		// extra, if set, selects more rows to look at.
		extra string
	}
	columns := []column{
		{table: "sessions", key: "id", cols: []string{"name", "metadata"}, json: []bool{false, true}, counter: &r.counts.Sessions},
		{table: "agents", key: "rowid", cols: []string{"name", "role", "model"}, json: []bool{false, false, false}, counter: &r.counts.Agents},
		{table: "refs", key: "id", cols: []string{"summary", "topics", "entities", "query_hints"}, json: []bool{false, true, true, true}, counter: &r.counts.References},
		{table: "arch_agents", key: "id", cols: []string{"name", "model", "role"}, json: []bool{false, false, false}, counter: &r.counts.Agents, session: "session_id"},
		{table: "arch_events", key: "seq", cols: []string{"scope", "detail"}, json: []bool{false, false}, counter: &r.counts.Events,
			extra: "substr(detail, -1) = '" + backend.CutMark + "'"},
		{table: "settings", key: "key", cols: []string{"value"}, json: []bool{false}, counter: &r.counts.Settings},
		{table: "files", key: "path", cols: []string{"reason", "language"}, json: []bool{false, false}, counter: new(int64)},
	}
	for _, c := range columns {
		var conds []string
		for i, col := range c.cols {
			if c.json[i] {
				conds = append(conds, r.jsonMatch(col))
			} else {
				conds = append(conds, "instr("+col+", ?1) > 0")
			}
		}
		if c.extra != "" {
			conds = append(conds, c.extra)
		}
		sel := c.key + ", " + strings.Join(c.cols, ", ")
		if c.session != "" {
			sel += ", " + c.session
		}
		rows, err := r.query(`SELECT `+sel+` FROM `+c.table+` WHERE `+strings.Join(conds, " OR "), r.args()...)
		if err != nil {
			return fmt.Errorf("%s: %w", c.table, err)
		}
		type row struct {
			key     any
			vals    []sql.NullString
			session string
		}
		var found []row
		for rows.Next() {
			rw := row{vals: make([]sql.NullString, len(c.cols))}
			dest := []any{&rw.key}
			for i := range rw.vals {
				dest = append(dest, &rw.vals[i])
			}
			if c.session != "" {
				dest = append(dest, &rw.session)
			}
			if err := rows.Scan(dest...); err != nil {
				return errors.Join(err, rows.Close())
			}
			found = append(found, rw)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, rw := range found {
			changed := false
			for i := range rw.vals {
				var ok bool
				if c.json[i] {
					if rw.vals[i], ok, err = r.replaceJSON(rw.vals[i]); err != nil {
						return fmt.Errorf("%s: %w", c.table, err)
					}
				} else if rw.vals[i].Valid && c.table == "arch_events" {
					rw.vals[i].String, ok = r.ReplaceCut(rw.vals[i].String)
				} else if rw.vals[i].Valid {
					rw.vals[i].String, ok = r.ReplaceString(rw.vals[i].String)
				}
				changed = changed || ok
			}
			if !changed {
				continue
			}
			var sets []string
			args := make([]any, 0, len(c.cols)+1)
			for i, col := range c.cols {
				sets = append(sets, col+" = ?")
				args = append(args, rw.vals[i])
			}
			if _, err := r.exec(`UPDATE `+c.table+` SET `+strings.Join(sets, ", ")+` WHERE `+c.key+` = ?`, append(args, rw.key)...); err != nil {
				return fmt.Errorf("%s: %w", c.table, err)
			}
			*c.counter++
			if c.session != "" {
				r.sessions[rw.session] = true
			}
		}
	}
	// Blobs are binary (trained models): one that holds the string is
	// deleted, and made again by whatever made it.
	n, err := r.exec(`DELETE FROM blobs WHERE instr(data, ?) > 0`, r.needle)
	if err != nil {
		return err
	}
	r.counts.Blobs += n
	r.counts.Places += n
	// A turn's snapshot is the exact context sent, kept by its hash: one
	// that held the string cannot be rewritten, so it goes.
	n, err = dropSnapshots(r.ctx, r.tx, `instr(report, ?1) > 0 OR `+r.jsonMatch("report")+`
		OR hash IN (SELECT hash FROM snapshot_bodies WHERE instr(body, ?1) > 0 OR `+r.jsonMatch("body")+`)`, r.args()...)
	if err != nil {
		return err
	}
	r.counts.Snapshots += n
	r.counts.Places += n
	return nil
}

// windows redacts windows' ledgers: the string in an item's form (a tool's
// name, the entities named) is replaced, and the rolling summaries that
// hold it, or that summarise an item of a redacted entry, are deleted, to
// be made again from what is left. The windows changed advance their
// versions.
func (r *redaction) windows() error {
	rewritten := map[string]bool{}
	for pk := range r.rewritten {
		var id string
		if err := r.row(`SELECT id FROM entries WHERE pk = ?`, pk).Scan(&id); err != nil {
			return err
		}
		rewritten[id] = true
	}
	type item struct {
		key  store.WindowKey
		pos  int64
		form []byte
		ids  string
	}
	// Every item is looked at only when an entry was rewritten: its ids
	// are a JSON list.
	cond := `instr(CAST(form AS TEXT), ?1) > 0 OR ` + r.jsonMatch("CAST(form AS TEXT)")
	if len(rewritten) > 0 {
		cond = "1"
	}
	rows, err := r.query(`SELECT session_id, agent_id, pos, form, entry_ids FROM window_items WHERE `+cond, r.args()...)
	if err != nil {
		return err
	}
	var items []item
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.key.SessionID, &it.key.AgentID, &it.pos, &it.form, &it.ids); err != nil {
			return errors.Join(err, rows.Close())
		}
		items = append(items, it)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	changed := map[store.WindowKey]bool{}
	for _, it := range items {
		form, ok, err := r.ReplaceJSON(string(it.form))
		if err != nil {
			return fmt.Errorf("window %s/%s item %d: %w", it.key.SessionID, it.key.AgentID, it.pos, err)
		}
		if ok {
			if _, err := r.exec(`UPDATE window_items SET form = ? WHERE session_id = ? AND agent_id = ? AND pos = ?`,
				[]byte(form), it.key.SessionID, it.key.AgentID, it.pos); err != nil {
				return err
			}
			changed[it.key] = true
		}
		var ids []string
		if err := json.Unmarshal([]byte(it.ids), &ids); err != nil {
			return fmt.Errorf("window %s/%s item %d: %w", it.key.SessionID, it.key.AgentID, it.pos, err)
		}
		if ok || slices.ContainsFunc(ids, func(id string) bool { return rewritten[id] }) {
			n, err := r.exec(`DELETE FROM window_summaries WHERE session_id = ? AND agent_id = ? AND from_pos <= ? AND ? < to_pos`,
				it.key.SessionID, it.key.AgentID, it.pos, it.pos)
			if err != nil {
				return err
			}
			r.counts.Summaries += n
			// Its message changed: a window laid out from its ledger
			// before (and kept, by version) shows it as it was.
			changed[it.key] = true
		}
	}
	// A summary may hold the string though none of its items does now
	// (one made by a model from several).
	rows, err = r.query(`SELECT DISTINCT session_id, agent_id FROM window_summaries WHERE instr(text, ?1) > 0`, string(r.needle))
	if err != nil {
		return err
	}
	var keys []store.WindowKey
	for rows.Next() {
		var k store.WindowKey
		if err := rows.Scan(&k.SessionID, &k.AgentID); err != nil {
			return errors.Join(err, rows.Close())
		}
		keys = append(keys, k)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	n, err := r.exec(`DELETE FROM window_summaries WHERE instr(text, ?1) > 0`, string(r.needle))
	if err != nil {
		return err
	}
	r.counts.Summaries += n
	r.counts.Places += n
	for _, k := range keys {
		changed[k] = true
	}
	for k := range changed {
		if _, err := r.exec(`UPDATE windows SET version = version + 1 WHERE session_id = ? AND agent_id = ?`, k.SessionID, k.AgentID); err != nil {
			return err
		}
	}
	return nil
}
