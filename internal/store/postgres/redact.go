package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/backend"
	"github.com/engramhq/engram/internal/terms"
)

// Redaction (see store.PurgeStore.Redact), as on the SQLite backend
// (internal/store/sqlite/redact.go). A redacted entry keeps its ID:
// references to it ([CTX-REF] markers, parents, links, file versions)
// must still resolve, and since the ID is the hash of the content as it
// was, content with the string stored again later is recognised as
// stored and does not bring the string back. The entry is marked
// redacted, so that nothing takes its content for what its ID hashes. Its
// size, token count, chunks, index documents and term set are made again
// from the new content, and its vectors are deleted, so that the
// embedder's queue makes them again.
//
// The string is matched byte for byte: in bytea columns (content, blobs,
// snapshot bodies) with position(), in text columns with strpos(). A
// string that is not valid UTF-8, or holds a NUL, can be in no text
// column (PostgreSQL's text holds neither), so only the bytea columns are
// searched for it.

// redaction is the state of one Redact transaction.
type redaction struct {
	*purge
	req    *store.RedactRequest
	needle []byte
	*backend.Replacer
	// text says the needle can be in a text column.
	text bool
	// rewritten are entries whose content changed; reindex, entries whose
	// index documents must be made again (meta or context changed).
	rewritten map[int64]bool
	reindex   map[int64]bool
}

// Redact implements store.Store.
func (s *Store) Redact(ctx context.Context, req store.RedactRequest) (store.PurgeReport, error) {
	if err := req.Validate(); err != nil {
		return store.PurgeReport{}, fmt.Errorf("redact: %w", err)
	}
	var rep store.PurgeReport
	p, err := s.runPurge(ctx, req.DryRun, func(p *purge) error {
		rep.Audit = 0
		text := utf8.Valid(req.Text) && bytes.IndexByte(req.Text, 0) < 0
		r := &redaction{purge: p, req: &req, needle: req.Text, text: text,
			Replacer:  backend.NewReplacer(req.Text, []byte(req.Marker), text, &p.counts.Places),
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

// match builds the conditions of one query that look for the string, its
// parameters in a.
type match struct {
	r *redaction
	a args
}

func (r *redaction) match() *match { return &match{r: r} }

// text is the condition that text column col holds the string.
func (m *match) text(col string) string {
	if !m.r.text {
		return "false"
	}
	return "strpos(" + col + ", " + m.a.add(string(m.r.needle)) + ") > 0"
}

// json is the condition that JSON text column col may hold the string in
// one of its strings.
func (m *match) json(col string) string {
	if len(m.r.JSONNeedles()) == 0 {
		return "false"
	}
	var parts []string
	for _, f := range m.r.JSONNeedles() {
		parts = append(parts, "strpos("+col+", "+m.a.add(f)+") > 0")
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

// bytes is the condition that bytea column col holds the string, or with
// json one of its JSON forms.
func (m *match) bytes(col string, json bool) string {
	parts := []string{"position(" + m.a.add(m.r.needle) + "::bytea IN " + col + ") > 0"}
	if json {
		for _, f := range m.r.JSONNeedles() {
			parts = append(parts, "position("+m.a.add([]byte(f))+"::bytea IN "+col+") > 0")
		}
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

func (r *redaction) run() error {
	if err := r.checkIdentifiers(); err != nil {
		return err
	}
	pks, err := r.lockSessions()
	if err != nil {
		return err
	}
	if err := r.occurrences(); err != nil {
		return err
	}
	if err := r.entries(pks); err != nil {
		return err
	}
	if err := r.contexts(); err != nil {
		return err
	}
	if err := r.flushIndex(); err != nil {
		return err
	}
	// Index documents last: they are made from content, meta and context.
	// A dry run, rolled back, skips it: the counts do not depend on it,
	// and the postings it would write and roll back can still grow the
	// table's files (Stats.SizeBytes), which a dry run must not change.
	for _, pk := range slices.Sorted(maps.Keys(r.reindex)) {
		if r.req.DryRun {
			break
		}
		if err := reindexEntry(r.ctx, r.tx, pk, r.rewritten[pk]); err != nil {
			return err
		}
		r.touch("fts_docs", "fts_postings")
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
// are keys, which other rows and other servers hold, and cannot be
// rewritten. The identifiers are not named in the error: they hold the
// string.
func (r *redaction) checkIdentifiers() error {
	if !r.text {
		return nil // identifiers are text
	}
	places := []struct{ what, cond string }{
		{"a session id", `EXISTS (SELECT 1 FROM sessions WHERE strpos(id, $1) > 0)`},
		{"a session id", `EXISTS (SELECT 1 FROM occurrences WHERE strpos(session_id, $1) > 0)`},
		{"an agent id", `EXISTS (SELECT 1 FROM occurrences WHERE strpos(agent_id, $1) > 0)`},
		{"a message id", `EXISTS (SELECT 1 FROM occurrences WHERE strpos(msg_id, $1) > 0)`},
		{"an agent id", `EXISTS (SELECT 1 FROM agents WHERE strpos(id, $1) > 0)`},
		{"a file path", `EXISTS (SELECT 1 FROM files WHERE strpos(path, $1) > 0)`},
		{"a file path", `EXISTS (SELECT 1 FROM file_versions WHERE strpos(path, $1) > 0)`},
		{"a reference id", `EXISTS (SELECT 1 FROM refs WHERE strpos(id, $1) > 0)`},
		{"an archive id", `EXISTS (SELECT 1 FROM arch_records WHERE strpos(coalesce(id, ''), $1) > 0 OR strpos(session_id, $1) > 0
			OR strpos(agent_id, $1) > 0 OR strpos(ref, $1) > 0)`},
		{"an archive agent id", `EXISTS (SELECT 1 FROM arch_agents WHERE strpos(id, $1) > 0 OR strpos(session_id, $1) > 0 OR strpos(parent_id, $1) > 0)`},
		{"an archive id", `EXISTS (SELECT 1 FROM arch_events WHERE strpos(session_id, $1) > 0 OR strpos(agent_id, $1) > 0 OR strpos(record_id, $1) > 0)`},
		{"an archive session", `EXISTS (SELECT 1 FROM arch_versions WHERE strpos(scope, $1) > 0)`},
		{"a setting name", `EXISTS (SELECT 1 FROM settings WHERE strpos(key, $1) > 0)`},
		{"a blob name", `EXISTS (SELECT 1 FROM blobs WHERE strpos(name, $1) > 0)`},
		{"a vector model name", `EXISTS (SELECT 1 FROM vector_models WHERE strpos(name, $1) > 0)`},
	}
	conds := make([]string, len(places))
	for i, pl := range places {
		conds[i] = pl.cond
	}
	var hit []bool
	if err := r.tx.QueryRow(r.ctx, `SELECT ARRAY[`+strings.Join(conds, ",\n")+`]`, string(r.needle)).Scan(&hit); err != nil {
		return err
	}
	var found []string
	for i, pl := range places {
		if hit[i] && !slices.Contains(found, pl.what) {
			found = append(found, pl.what)
		}
	}
	if len(found) > 0 {
		return store.KeysError(found)
	}
	return nil
}

// replaceNullable is replaceString for a column that may be NULL.
func (r *redaction) replaceNullable(s *string) (*string, bool) {
	if s == nil {
		return nil, false
	}
	v, ok := r.ReplaceString(*s)
	return &v, ok
}

// replaceJSON is ReplaceJSON for a column that may be NULL.
func (r *redaction) replaceJSON(raw *string) (*string, bool, error) {
	if raw == nil {
		return raw, false, nil
	}
	s, ok, err := r.ReplaceJSON(*raw)
	if !ok || err != nil {
		return raw, false, err
	}
	return &s, true, nil
}

// occurrences redacts the agent type and the JSON columns of occurrences.
func (r *redaction) occurrences() error {
	m := r.match()
	rows, err := r.tx.Query(r.ctx, `SELECT seq, entry, agent_type, files, keywords, entities, metadata FROM occurrences
		WHERE `+m.text("agent_type")+` OR `+m.json("files")+` OR `+m.json("keywords")+` OR `+m.json("entities")+` OR `+m.json("metadata")+`
		ORDER BY seq FOR UPDATE`, m.a...)
	if err != nil {
		return err
	}
	type occ struct {
		seq, entry int64
		agentType  string
		cols       [4]*string
	}
	var (
		occs []occ
		o    occ
	)
	if _, err := pgx.ForEachRow(rows, []any{&o.seq, &o.entry, &o.agentType, &o.cols[0], &o.cols[1], &o.cols[2], &o.cols[3]}, func() error {
		occs = append(occs, o)
		return nil
	}); err != nil {
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
		if _, err := r.exec(`UPDATE occurrences SET agent_type = $1, files = $2, keywords = $3, entities = $4, metadata = $5 WHERE seq = $6`,
			o.agentType, o.cols[0], o.cols[1], o.cols[2], o.cols[3], o.seq); err != nil {
			return err
		}
		r.touch("occurrences")
		r.counts.Occurrences++
		r.reindex[o.entry] = true // meta holds files, keywords and entities
	}
	return nil
}

// lockSessions finds the entries whose content holds the string, and
// locks the sessions they were seen in and those whose name holds it, in
// ID order, before any entry: PutEntries locks a session before the
// entries it writes, and taking them in its order keeps the redaction
// from deadlocking with it. It returns the entries found.
func (r *redaction) lockSessions() ([]int64, error) {
	m := r.match()
	pks, err := r.ints(`SELECT pk FROM entries WHERE `+m.bytes("content", true)+` ORDER BY pk`, m.a...)
	if err != nil {
		return nil, err
	}
	m = r.match()
	sessions, err := r.strs(`SELECT session_id FROM occurrences WHERE entry = ANY(`+m.a.add(pks)+`) AND session_id != ''
		UNION SELECT id FROM sessions WHERE `+m.text("name")+` OR `+m.json("metadata"), m.a...)
	if err != nil {
		return nil, err
	}
	return pks, r.purge.lockSessions(sessions)
}

// entries redacts the content of entries pks that still hold the string,
// making their chunks, term sets and counters again and deleting their
// vectors.
func (r *redaction) entries(pks []int64) error {
	if len(pks) == 0 {
		return nil
	}
	m := r.match()
	pks, err := r.ints(`SELECT pk FROM entries WHERE pk = ANY(`+m.a.add(pks)+`) AND `+m.bytes("content", true)+` ORDER BY pk FOR UPDATE`, m.a...)
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
		size, tokens int64
	)
	if err := r.tx.QueryRow(r.ctx, `SELECT id, content, size, token_count FROM entries WHERE pk = $1`, pk).
		Scan(&id, &content, &size, &tokens); err != nil {
		return err
	}
	redacted, _ := r.ReplaceContent(content)
	// The entry as the chunker sees it: as a file if it is one, else as
	// first seen.
	first, err := scanOccurrence(r.tx.QueryRow(r.ctx, `SELECT `+occColumns+` FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.entry = $1 ORDER BY o.type = $2 DESC, o.seq LIMIT 1`, pk, string(store.CodeFile)))
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("entry %s has no occurrence", id)
	}
	if err != nil {
		return err
	}
	if first.Type == store.CodeFile {
		var path string
		err := r.tx.QueryRow(r.ctx, `SELECT path FROM files WHERE entry = $1 ORDER BY state = 'current' DESC, path LIMIT 1`, pk).Scan(&path)
		if err == nil {
			first.Files = []string{path}
		} else if !errors.Is(err, pgx.ErrNoRows) {
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
	if _, err := r.dropChunks([]int64{pk}); err != nil {
		return err
	}
	r.counts.Chunks = made
	if _, err := r.exec(`DELETE FROM entry_terms WHERE entry = $1`, pk); err != nil {
		return err
	}
	if _, err := r.exec(`UPDATE entries SET content = $1, size = $2, token_count = $3, redacted = true WHERE pk = $4`,
		redacted, len(redacted), e.TokenCount, pk); err != nil {
		return err
	}
	bodies := make([]string, len(e.Chunks))
	b := &pgx.Batch{}
	for k, c := range e.Chunks {
		b.Queue(`INSERT INTO chunks (entry, ordinal, start_byte, end_byte, start_line, end_line, token_count, symbols)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, pk, c.Ordinal, c.Start, c.End, c.StartLine, c.EndLine, c.TokenCount, jsonList(c.Symbols))
		bodies[k] = terms.String(string(redacted[c.Start:c.End]))
	}
	if err := r.tx.SendBatch(r.ctx, b).Close(); err != nil {
		return err
	}
	var isFile bool
	if err := r.tx.QueryRow(r.ctx, `SELECT EXISTS (SELECT 1 FROM occurrences WHERE entry = $1 AND type = $2)`,
		pk, string(store.CodeFile)).Scan(&isFile); err != nil {
		return err
	}
	if set := terms.Set(bodies); isFile && set != nil {
		if _, err := r.exec(`INSERT INTO entry_terms (entry, terms) VALUES ($1, $2)`, pk, set); err != nil {
			return err
		}
	}
	r.touch("entries", "chunks", "entry_terms")
	// Counters: the entry's size, tokens and chunks, and the tokens of
	// each of its occurrences by type.
	r.deltas["content_bytes"] += int64(len(redacted)) - size
	r.deltas["tokens"] += int64(e.TokenCount) - tokens
	r.deltas["chunks"] += int64(len(e.Chunks))
	r.counts.Chunks += int64(len(e.Chunks)) // made again
	rows, err := r.tx.Query(r.ctx, `SELECT type, count(*) FROM occurrences WHERE entry = $1 GROUP BY type`, pk)
	if err != nil {
		return err
	}
	var (
		typ string
		n   int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&typ, &n}, func() error {
		r.deltas[typePrefix+typ+":tokens"] += n * (int64(e.TokenCount) - tokens)
		return nil
	}); err != nil {
		return err
	}
	// Where it was seen: the entries after it may hold its end as context.
	rows, err = r.tx.Query(r.ctx, `SELECT session_id, turn, seq FROM occurrences WHERE entry = $1 AND session_id != ''`, pk)
	if err != nil {
		return err
	}
	var (
		session string
		pt      occPoint
	)
	if _, err := pgx.ForEachRow(rows, []any{&session, &pt.turn, &pt.seq}, func() error {
		r.points[session] = append(r.points[session], pt)
		return nil
	}); err != nil {
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
	for _, session := range slices.Sorted(maps.Keys(r.points)) {
		if err := r.following(session, todo); err != nil {
			return err
		}
	}
	changed := map[int64]bool{}
	for _, pk := range slices.Sorted(maps.Keys(todo)) {
		ok, err := r.recontext(pk)
		if err != nil {
			return err
		}
		if ok {
			changed[pk] = true
		}
	}
	m := r.match()
	rows, err := r.tx.Query(r.ctx, `SELECT entry, text FROM contexts WHERE `+m.text("text")+` ORDER BY entry FOR UPDATE`, m.a...)
	if err != nil {
		return err
	}
	type ctxRow struct {
		pk   int64
		text string
	}
	var (
		left []ctxRow
		c    ctxRow
	)
	if _, err := pgx.ForEachRow(rows, []any{&c.pk, &c.text}, func() error {
		left = append(left, c)
		return nil
	}); err != nil {
		return err
	}
	for _, c := range left {
		text, _ := r.ReplaceString(c.text)
		if _, err := r.exec(`UPDATE contexts SET text = $1 WHERE entry = $2`, text, c.pk); err != nil {
			return err
		}
		changed[c.pk] = true
	}
	for _, pk := range slices.Sorted(maps.Keys(changed)) {
		r.counts.Contexts++
		r.reindex[pk] = true
		r.touch("contexts")
		if r.rewritten[pk] {
			continue // its vectors are gone already
		}
		n, err := r.exec(`DELETE FROM vectors WHERE chunk = (SELECT id FROM chunks WHERE entry = $1 AND ordinal = 0)`, pk)
		if err != nil {
			return err
		}
		r.counts.Vectors += n
		r.touch("vectors")
	}
	return nil
}

// records redacts the archivalist's records: text, body and the fields
// made from them, and their index documents.
func (r *redaction) records() error {
	if err := r.lockArchive(); err != nil {
		return err
	}
	m := r.match()
	rows, err := r.tx.Query(r.ctx, `SELECT `+archColumns+archFrom+`
		WHERE `+m.text("r.text")+` OR `+m.text("r.category")+` OR `+m.text("r.key")+` OR `+m.text("r.model")+`
			OR `+m.text("r.hash")+` OR `+m.json("r.body")+` ORDER BY r.seq`, m.a...)
	if err != nil {
		return err
	}
	recs, err := collectRows(rows, func(row pgx.CollectableRow) (store.ArchiveRecord, error) { return scanArchRecord(row) })
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
		if _, err := r.exec(`UPDATE arch_records SET text = $1, category = $2, key = $3, model = $4, hash = $5, body = $6 WHERE seq = $7`,
			rec.Text, rec.Category, rec.Key, rec.Model, rec.Hash, string(rec.Body), rec.Seq); err != nil {
			return err
		}
		r.touch("arch_records")
		if rec.Kind.Global() {
			if err := unindexDocs(r.ctx, r.tx, spaceArchive, []int64{rec.Seq}); err != nil {
				return fmt.Errorf("unindex record %d: %w", rec.Seq, err)
			}
			if rec.Text != "" {
				if err := indexDocs(r.ctx, r.tx, spaceArchive, []ftsDoc{{ID: rec.Seq, Body: terms.String(rec.Text)}}); err != nil {
					return fmt.Errorf("index record %d: %w", rec.Seq, err)
				}
			}
			r.touch("fts_docs", "fts_postings")
		}
		r.counts.Records++
		r.sessions[rec.SessionID] = true
	}
	return nil
}

// rest redacts the text of sessions, agents, references, archive agents
// and events, settings and the manifest's reasons, and deletes the blobs
// (trained models) and window snapshots that hold the string: they
// cannot be rewritten.
func (r *redaction) rest() error {
	type column struct {
		table string
		keys  []string
		cols  []string
		json  []bool
		n     *int64
		// session, if set, is the column naming the archive session whose
		// state shows the row.
		session string
		// extra, if set, selects more rows to look at.
		extra string
	}
	columns := []column{
		{table: "sessions", keys: []string{"id"}, cols: []string{"name", "metadata"}, json: []bool{false, true}, n: &r.counts.Sessions},
		{table: "agents", keys: []string{"session_id", "id"}, cols: []string{"name", "role", "model"}, json: []bool{false, false, false}, n: &r.counts.Agents},
		{table: "refs", keys: []string{"id"}, cols: []string{"summary", "topics", "entities", "query_hints"}, json: []bool{false, true, true, true}, n: &r.counts.References},
		{table: "arch_agents", keys: []string{"id"}, cols: []string{"name", "model", "role"}, json: []bool{false, false, false}, n: &r.counts.Agents, session: "session_id"},
		{table: "arch_events", keys: []string{"seq"}, cols: []string{"scope", "detail"}, json: []bool{false, false}, n: &r.counts.Events,
			extra: "right(detail, 1) = '" + backend.CutMark + "'"},
		{table: "settings", keys: []string{"key"}, cols: []string{"value"}, json: []bool{false}, n: &r.counts.Settings},
		{table: "files", keys: []string{"path"}, cols: []string{"reason", "language"}, json: []bool{false, false}, n: new(int64)},
	}
	for _, c := range columns {
		m := r.match()
		var conds []string
		for i, col := range c.cols {
			if c.json[i] {
				conds = append(conds, m.json(col))
			} else {
				conds = append(conds, m.text(col))
			}
		}
		if c.extra != "" {
			conds = append(conds, c.extra)
		}
		sel := append(slices.Clone(c.keys), c.cols...)
		if c.session != "" {
			sel = append(sel, c.session)
		}
		rows, err := r.tx.Query(r.ctx, `SELECT `+strings.Join(sel, ", ")+` FROM `+c.table+` WHERE `+strings.Join(conds, " OR ")+
			` ORDER BY `+strings.Join(c.keys, ", ")+` FOR UPDATE`, m.a...)
		if err != nil {
			return fmt.Errorf("%s: %w", c.table, err)
		}
		type row struct {
			keys    []any
			vals    []*string
			session string
		}
		var found []row
		for rows.Next() {
			rw := row{keys: make([]any, len(c.keys)), vals: make([]*string, len(c.cols))}
			var dest []any
			for i := range rw.keys {
				dest = append(dest, &rw.keys[i])
			}
			for i := range rw.vals {
				dest = append(dest, &rw.vals[i])
			}
			if c.session != "" {
				dest = append(dest, &rw.session)
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return fmt.Errorf("%s: %w", c.table, err)
			}
			found = append(found, rw)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s: %w", c.table, err)
		}
		for _, rw := range found {
			changed := false
			for i := range rw.vals {
				var ok bool
				switch {
				case c.json[i]:
					if rw.vals[i], ok, err = r.replaceJSON(rw.vals[i]); err != nil {
						return fmt.Errorf("%s: %w", c.table, err)
					}
				case rw.vals[i] != nil && c.table == "arch_events":
					v, cut := r.ReplaceCut(*rw.vals[i])
					rw.vals[i], ok = &v, cut
				default:
					rw.vals[i], ok = r.replaceNullable(rw.vals[i])
				}
				changed = changed || ok
			}
			if !changed {
				continue
			}
			var (
				sets, where []string
				a           args
			)
			for i, col := range c.cols {
				sets = append(sets, col+" = "+a.add(rw.vals[i]))
			}
			for i, k := range c.keys {
				where = append(where, k+" = "+a.add(rw.keys[i]))
			}
			if _, err := r.exec(`UPDATE `+c.table+` SET `+strings.Join(sets, ", ")+` WHERE `+strings.Join(where, " AND "), a...); err != nil {
				return fmt.Errorf("%s: %w", c.table, err)
			}
			r.touch(c.table)
			*c.n++
			if c.session != "" {
				r.sessions[rw.session] = true
			}
		}
	}
	// Blobs are binary (trained models): one that holds the string is
	// deleted, and made again by whatever made it.
	m := r.match()
	n, err := r.exec(`DELETE FROM blobs WHERE `+m.bytes("data", false), m.a...)
	if err != nil {
		return err
	}
	if n > 0 {
		r.touch("blobs")
	}
	r.counts.Blobs += n
	r.counts.Places += n
	// A turn's snapshot is the exact context sent, kept by its hash: one
	// that held the string cannot be rewritten, so it goes.
	m = r.match()
	n, err = r.dropSnapshots(m.text("report")+` OR `+m.json("report")+`
		OR hash IN (SELECT hash FROM snapshot_bodies WHERE `+m.bytes("body", true)+`)`, m.a...)
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
// be made again from what is left. The windows changed are locked first,
// in order, and advance their versions.
func (r *redaction) windows() error {
	var rewritten []string
	for _, pk := range slices.Sorted(maps.Keys(r.rewritten)) {
		var id string
		if err := r.tx.QueryRow(r.ctx, `SELECT id FROM entries WHERE pk = $1`, pk).Scan(&id); err != nil {
			return err
		}
		rewritten = append(rewritten, id)
	}
	// itemCond selects the items of a redacted entry, or whose form may
	// hold the string.
	itemCond := func(m *match) string {
		return `(w.entry_ids::jsonb ?| ` + m.a.add(rewritten) + `::text[] OR ` + m.bytes("w.form", true) + `)`
	}
	m := r.match()
	rows, err := r.tx.Query(r.ctx, `SELECT session_id, agent_id FROM window_items w WHERE `+itemCond(m)+`
		UNION SELECT session_id, agent_id FROM window_summaries s WHERE `+m.text("s.text")+` ORDER BY 1, 2`, m.a...)
	if err != nil {
		return err
	}
	var keys []store.WindowKey
	var k store.WindowKey
	if _, err := pgx.ForEachRow(rows, []any{&k.SessionID, &k.AgentID}, func() error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := r.exec(`SELECT 1 FROM windows WHERE session_id = $1 AND agent_id = $2 FOR UPDATE`, k.SessionID, k.AgentID); err != nil {
			return err
		}
		type item struct {
			pos  int64
			form []byte
			ids  string
		}
		var items []item
		im := r.match()
		rows, err := r.tx.Query(r.ctx, `SELECT pos, form, entry_ids FROM window_items w
			WHERE session_id = `+im.a.add(k.SessionID)+` AND agent_id = `+im.a.add(k.AgentID)+` AND `+itemCond(im)+` ORDER BY pos`, im.a...)
		if err != nil {
			return err
		}
		var it item
		if _, err := pgx.ForEachRow(rows, []any{&it.pos, &it.form, &it.ids}, func() error {
			items = append(items, it)
			return nil
		}); err != nil {
			return err
		}
		var positions []int64
		for _, it := range items {
			form, ok, err := r.ReplaceJSON(string(it.form))
			if err != nil {
				return fmt.Errorf("window %s/%s item %d: %w", k.SessionID, k.AgentID, it.pos, err)
			}
			if ok {
				if _, err := r.exec(`UPDATE window_items SET form = $1 WHERE session_id = $2 AND agent_id = $3 AND pos = $4`,
					[]byte(form), k.SessionID, k.AgentID, it.pos); err != nil {
					return err
				}
				r.touch("window_items")
			}
			positions = append(positions, it.pos)
		}
		// The summaries over those items, and those that hold the string
		// though none of their items does now (one made by a model).
		sm := r.match()
		held, err := r.ints(`SELECT 1 FROM window_summaries s WHERE s.session_id = `+sm.a.add(k.SessionID)+
			` AND s.agent_id = `+sm.a.add(k.AgentID)+` AND `+sm.text("s.text"), sm.a...)
		if err != nil {
			return err
		}
		dm := r.match()
		dropped, err := r.exec(`DELETE FROM window_summaries s WHERE s.session_id = `+dm.a.add(k.SessionID)+` AND s.agent_id = `+dm.a.add(k.AgentID)+`
			AND (EXISTS (SELECT 1 FROM unnest(`+dm.a.add(positions)+`::bigint[]) AS d(pos) WHERE s.from_pos <= d.pos AND d.pos < s.to_pos)
				OR `+dm.text("s.text")+`)`, dm.a...)
		if err != nil {
			return err
		}
		r.counts.Summaries += dropped
		r.counts.Places += int64(len(held))
		if dropped > 0 {
			r.touch("window_summaries")
		}
		if _, err := r.exec(`UPDATE windows SET version = version + 1 WHERE session_id = $1 AND agent_id = $2`, k.SessionID, k.AgentID); err != nil {
			return err
		}
	}
	return nil
}
