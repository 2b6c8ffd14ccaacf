package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// occColumns are the columns scanOccurrence reads, from occurrences o
// joined with entries e.
const occColumns = `o.seq, e.id, o.session_id, o.agent_id, o.agent_type, o.type, o.turn, o.time,
	o.msg_id, o.parent_id, o.files, o.keywords, o.entities, o.metadata`

type scanner interface{ Scan(dest ...any) error }

func scanOccurrence(sc scanner, extra ...any) (store.Occurrence, error) {
	var (
		o                                  store.Occurrence
		typ                                string
		t                                  int64
		msgID, parentID                    sql.NullString
		files, keywords, entities, rawMeta sql.NullString
	)
	dest := append([]any{&o.Seq, &o.EntryID, &o.SessionID, &o.AgentID, &o.AgentType, &typ, &o.Turn, &t,
		&msgID, &parentID, &files, &keywords, &entities, &rawMeta}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return o, err
	}
	o.Type = store.ContentType(typ)
	o.Time = fromUnixNano(t)
	o.MsgID, o.ParentID = msgID.String, parentID.String
	var err error
	if o.Files, err = decodeList(files); err != nil {
		return o, err
	}
	if o.Keywords, err = decodeList(keywords); err != nil {
		return o, err
	}
	if o.Entities, err = decodeList(entities); err != nil {
		return o, err
	}
	if rawMeta.Valid {
		if err := json.Unmarshal([]byte(rawMeta.String), &o.Metadata); err != nil {
			return o, fmt.Errorf("decode metadata of occurrence %d: %w", o.Seq, err)
		}
	}
	return o, nil
}

func decodeList(v sql.NullString) ([]string, error) {
	if !v.Valid {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(v.String), &out); err != nil {
		return nil, fmt.Errorf("decode list: %w", err)
	}
	return out, nil
}

// query runs a read query and calls fn for each row.
func (s *Store) query(ctx context.Context, q string, args []any, fn func(*sql.Rows) error) error {
	return s.read(ctx, func(db *sql.DB) error {
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := fn(rows); err != nil {
				return errors.Join(err, rows.Close())
			}
		}
		return errors.Join(rows.Err(), rows.Close())
	})
}

// Entries implements store.Store.
func (s *Store) Entries(ctx context.Context, ids []string) ([]store.Entry, error) {
	out := make([]store.Entry, 0, len(ids))
	q := `SELECT ` + occColumns + `, e.content, e.token_count, e.redacted
		FROM entries e JOIN occurrences o ON o.seq = (SELECT min(seq) FROM occurrences WHERE entry = e.pk)
		WHERE e.id = ?`
	for _, id := range ids {
		var found bool
		err := s.query(ctx, q, []any{id}, func(rows *sql.Rows) error {
			var ent store.Entry
			o, err := scanOccurrence(rows, &ent.Content, &ent.TokenCount, &ent.Redacted)
			if err != nil {
				return err
			}
			ent.ID, ent.Occurrence, found = o.EntryID, o, true
			out = append(out, ent)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("get entry %s: %w", id, err)
		}
		if !found {
			return nil, fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
		}
	}
	return out, nil
}

// ResolveID implements store.Store.
func (s *Store) ResolveID(ctx context.Context, prefix string) (string, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < store.MinPrefix || len(prefix) > 64 || strings.Trim(prefix, "0123456789abcdef") != "" {
		return "", &store.ValidationError{Field: "id", Msg: fmt.Sprintf("%q is not an entry ID or a prefix of %d or more hex digits", prefix, store.MinPrefix)}
	}
	var matches []string
	err := s.query(ctx, `SELECT id FROM entries WHERE id >= ? AND id < ? ORDER BY id LIMIT 3`,
		[]any{prefix, prefix + "g"}, func(rows *sql.Rows) error {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			matches = append(matches, id)
			return nil
		})
	switch {
	case err != nil:
		return "", fmt.Errorf("resolve %s: %w", prefix, err)
	case len(matches) == 0:
		return "", fmt.Errorf("entry %s: %w", prefix, store.ErrNotFound)
	case len(matches) > 1:
		return "", &store.AmbiguousError{Prefix: prefix, Matches: matches}
	}
	return matches[0], nil
}

// MsgEntry implements store.Store.
func (s *Store) MsgEntry(ctx context.Context, sessionID, msgID string) (string, error) {
	var id string
	err := s.read(ctx, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, `SELECT e.id FROM occurrences o JOIN entries e ON e.pk = o.entry
			WHERE o.session_id = ? AND o.msg_id = ?`, sessionID, msgID).Scan(&id)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("msg_id %q in session %q: %w", msgID, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("look up msg_id %q: %w", msgID, err)
	}
	return id, nil
}

// Occurrences implements store.Store.
func (s *Store) Occurrences(ctx context.Context, id string) ([]store.Occurrence, error) {
	var out []store.Occurrence
	err := s.query(ctx, `SELECT `+occColumns+` FROM entries e JOIN occurrences o ON o.entry = e.pk
		WHERE e.id = ? ORDER BY o.seq`, []any{id}, func(rows *sql.Rows) error {
		o, err := scanOccurrence(rows)
		out = append(out, o)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("occurrences of %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
	}
	return out, nil
}

// TurnRange implements store.Store.
func (s *Store) TurnRange(ctx context.Context, sessionID string, from, to int) ([]store.Entry, error) {
	q := `SELECT ` + occColumns + `, e.content, e.token_count, e.redacted FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = ? AND o.turn >= ?`
	args := []any{sessionID, from}
	if to > 0 {
		q += ` AND o.turn <= ?`
		args = append(args, to)
	}
	q += ` ORDER BY o.turn, o.seq`
	var out []store.Entry
	err := s.query(ctx, q, args, func(rows *sql.Rows) error {
		var ent store.Entry
		o, err := scanOccurrence(rows, &ent.Content, &ent.TokenCount, &ent.Redacted)
		ent.ID, ent.Occurrence = o.EntryID, o
		out = append(out, ent)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("turns %d-%d of session %s: %w", from, to, sessionID, err)
	}
	return out, nil
}

// TurnIDs implements store.Store.
func (s *Store) TurnIDs(ctx context.Context, sessionID string, from int) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	err := s.query(ctx, `SELECT e.id FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = ? AND o.turn >= ? ORDER BY o.turn, o.seq`, []any{sessionID, from}, func(rows *sql.Rows) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("entries of session %s from turn %d: %w", sessionID, from, err)
	}
	return ids, nil
}

// LastTurn implements store.Store.
func (s *Store) LastTurn(ctx context.Context, sessionID string) (int, error) {
	var last int
	err := s.read(ctx, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, `SELECT coalesce(max(turn), 0) FROM occurrences WHERE session_id = ?`, sessionID).Scan(&last)
	})
	if err != nil {
		return 0, fmt.Errorf("last turn of session %s: %w", sessionID, err)
	}
	return last, nil
}

const chunkColumns = `c.id, e.id, c.ordinal, c.start_byte, c.end_byte, c.start_line, c.end_line, c.token_count, c.symbols,
	substr(e.content, c.start_byte + 1, c.end_byte - c.start_byte)`

func scanChunk(sc scanner, extra ...any) (store.Chunk, int64, error) {
	var (
		c       store.Chunk
		rowid   int64
		symbols sql.NullString
		text    []byte
	)
	dest := append([]any{&rowid, &c.EntryID, &c.Ordinal, &c.Start, &c.End, &c.StartLine, &c.EndLine, &c.TokenCount, &symbols, &text}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return c, 0, err
	}
	c.ID, c.Text = rowid, string(text)
	var err error
	c.Symbols, err = decodeList(symbols)
	return c, rowid, err
}

// Chunks implements store.Store.
func (s *Store) Chunks(ctx context.Context, id string) ([]store.Chunk, error) {
	var out []store.Chunk
	err := s.query(ctx, `SELECT `+chunkColumns+` FROM entries e JOIN chunks c ON c.entry = e.pk
		WHERE e.id = ? ORDER BY c.ordinal`, []any{id}, func(rows *sql.Rows) error {
		c, _, err := scanChunk(rows)
		out = append(out, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("chunks of %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
	}
	return out, nil
}

// Links implements store.Store.
func (s *Store) Links(ctx context.Context, id string) ([]store.Link, error) {
	var out []store.Link
	err := s.query(ctx, `SELECT from_id, to_id, kind, created_at FROM links WHERE from_id = ?
		UNION SELECT from_id, to_id, kind, created_at FROM links WHERE to_id = ? ORDER BY 4, 1, 2, 3`,
		[]any{id, id}, func(rows *sql.Rows) error {
			var l store.Link
			var kind string
			var t int64
			if err := rows.Scan(&l.FromID, &l.ToID, &kind, &t); err != nil {
				return err
			}
			l.Kind, l.CreatedAt = store.LinkKind(kind), fromUnixNano(t)
			out = append(out, l)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("links of %s: %w", id, err)
	}
	return out, nil
}

// Reference implements store.Store.
func (s *Store) Reference(ctx context.Context, id string) (store.Reference, error) {
	var r store.Reference
	err := s.read(ctx, func(db *sql.DB) error {
		var err error
		r, err = reference(ctx, db, id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) && store.IsRunRef(id) {
		return s.runs.Resolve(ctx, s, id) // a run of a window's ledger, named by it
	}
	return r, err
}

// reference reads a reference with q, a transaction or the read pool.
func reference(ctx context.Context, q querier, id string) (store.Reference, error) {
	var (
		r                       store.Reference
		typ, contentIDs         string
		t                       int64
		topics, entities, hints sql.NullString
	)
	err := q.QueryRowContext(ctx, `SELECT id, type, session_id, agent_id, content_ids, summary, tokens_saved,
		turn_from, turn_to, created_at, topics, entities, query_hints FROM refs WHERE id = ?`, id).Scan(
		&r.ID, &typ, &r.SessionID, &r.AgentID, &contentIDs, &r.Summary, &r.TokensSaved,
		&r.TurnFrom, &r.TurnTo, &t, &topics, &entities, &hints)
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("reference %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("get reference %s: %w", id, err)
	}
	r.Type, r.CreatedAt = store.RefType(typ), fromUnixNano(t)
	if err := json.Unmarshal([]byte(contentIDs), &r.ContentIDs); err != nil {
		return r, fmt.Errorf("reference %s: decode content ids: %w", id, err)
	}
	for _, f := range []struct {
		v   sql.NullString
		dst *[]string
	}{{topics, &r.Topics}, {entities, &r.Entities}, {hints, &r.QueryHints}} {
		if *f.dst, err = decodeList(f.v); err != nil {
			return r, fmt.Errorf("reference %s: %w", id, err)
		}
	}
	return r, nil
}

func scanSession(sc scanner) (store.Session, error) {
	var (
		ss      store.Session
		c, l    int64
		rawMeta sql.NullString
	)
	if err := sc.Scan(&ss.ID, &ss.Name, &c, &l, &rawMeta); err != nil {
		return ss, err
	}
	ss.CreatedAt, ss.LastSeenAt = fromUnixNano(c), fromUnixNano(l)
	if rawMeta.Valid {
		if err := json.Unmarshal([]byte(rawMeta.String), &ss.Metadata); err != nil {
			return ss, fmt.Errorf("session %s: decode metadata: %w", ss.ID, err)
		}
	}
	return ss, nil
}

const sessionColumns = `id, name, created_at, last_seen_at, metadata`

// Session implements store.Store.
func (s *Store) Session(ctx context.Context, id string) (store.Session, error) {
	var out []store.Session
	err := s.query(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, []any{id}, func(rows *sql.Rows) error {
		ss, err := scanSession(rows)
		out = append(out, ss)
		return err
	})
	if err != nil {
		return store.Session{}, fmt.Errorf("get session %s: %w", id, err)
	}
	if len(out) == 0 {
		return store.Session{}, fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	return out[0], nil
}

// Sessions implements store.Store.
func (s *Store) Sessions(ctx context.Context) ([]store.Session, error) {
	var out []store.Session
	err := s.query(ctx, `SELECT `+sessionColumns+` FROM sessions ORDER BY last_seen_at DESC, id`, nil, func(rows *sql.Rows) error {
		ss, err := scanSession(rows)
		out = append(out, ss)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// Agents implements store.Store.
func (s *Store) Agents(ctx context.Context, sessionID string) ([]store.Agent, error) {
	q := `SELECT session_id, id, name, role, parent_id, model, context_window, registered_at, last_seen_at FROM agents`
	var args []any
	if sessionID != "" {
		q += ` WHERE session_id = ?`
		args = append(args, sessionID)
	}
	q += ` ORDER BY registered_at, session_id, id`
	var out []store.Agent
	err := s.query(ctx, q, args, func(rows *sql.Rows) error {
		var a store.Agent
		var r, l int64
		if err := rows.Scan(&a.SessionID, &a.ID, &a.Name, &a.Role, &a.ParentID, &a.Model, &a.ContextWindow, &r, &l); err != nil {
			return err
		}
		a.RegisteredAt, a.LastSeenAt = fromUnixNano(r), fromUnixNano(l)
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return out, nil
}

// Ping implements store.Store: one row of a table read from the file.
func (s *Store) Ping(ctx context.Context) error {
	err := s.read(ctx, func(db *sql.DB) error {
		var n int64
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM counters LIMIT 1)`).Scan(&n)
		return err
	})
	if err != nil && ctx.Err() == nil {
		return store.Unavailable(err)
	}
	return err
}

// Stats implements store.Store.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	st := store.Stats{Location: s.path, SchemaVersion: SchemaVersion(), ByType: map[store.ContentType]store.TypeStats{},
		Files: map[store.FileState]int64{}}
	err := s.read(ctx, func(db *sql.DB) error {
		counters := map[string]*int64{
			"entries": &st.Entries, "content_bytes": &st.ContentBytes, "tokens": &st.Tokens,
			"chunks": &st.Chunks, "occurrences": &st.Occurrences,
		}
		rows, err := db.QueryContext(ctx, `SELECT name, value FROM counters`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				return errors.Join(err, rows.Close())
			}
			if p, ok := counters[name]; ok {
				*p = v
			} else if rest, ok := strings.CutPrefix(name, typePrefix); ok {
				typ, field, _ := strings.Cut(rest, ":")
				ts := st.ByType[store.ContentType(typ)]
				switch field {
				case "occurrences":
					ts.Occurrences = v
				case "tokens":
					ts.Tokens = v
				}
				st.ByType[store.ContentType(typ)] = ts
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for q, dst := range map[string]*int64{
			`SELECT count(*) FROM sessions`: &st.Sessions,
			`SELECT count(*) FROM agents`:   &st.Agents,
			`SELECT count(*) FROM links`:    &st.Links,
			`SELECT count(*) FROM refs`:     &st.References,
		} {
			if err := db.QueryRowContext(ctx, q).Scan(dst); err != nil {
				return err
			}
		}
		var first, last sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT min(time), max(time) FROM occurrences`).Scan(&first, &last); err != nil {
			return err
		}
		st.First, st.Last = fromUnixNano(first.Int64), fromUnixNano(last.Int64)
		var free, page int64
		if err := db.QueryRowContext(ctx, `SELECT * FROM pragma_freelist_count, pragma_page_size`).Scan(&free, &page); err != nil {
			return err
		}
		st.FreeBytes = free * page
		rows, err = db.QueryContext(ctx, `SELECT state, count(*) FROM files GROUP BY state`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var state string
			var n int64
			if err := rows.Scan(&state, &n); err != nil {
				return errors.Join(err, rows.Close())
			}
			st.Files[store.FileState(state)] = n
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(s.path + suffix); err == nil {
			st.SizeBytes += fi.Size()
		}
	}
	return st, nil
}
