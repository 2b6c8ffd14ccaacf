package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// collect runs a read of one statement and scans each row with scan. A
// statement reads one state of the store on its own, so it needs no
// transaction; it is run again, like a transaction, when its connection
// failed before it was sent.
func collect[T any](ctx context.Context, s *Store, q string, args []any, scan pgx.RowToFunc[T]) ([]T, error) {
	var out []T
	err := s.retry(ctx, func() error {
		rows, err := s.pool.Query(ctx, q, args...)
		if err != nil {
			return readLost(err)
		}
		out, err = collectRows(rows, scan)
		return readLost(err)
	})
	return out, err
}

// entryColumns are an entry's, from entries e and its first occurrence o.
const entryColumns = occColumns + `, e.content, e.token_count, e.redacted`

func scanEntry(r pgx.CollectableRow) (store.Entry, error) {
	var ent store.Entry
	var tc int64
	o, err := scanOccurrence(r, &ent.Content, &tc, &ent.Redacted)
	ent.ID, ent.Occurrence, ent.TokenCount = o.EntryID, o, int(tc)
	return ent, err
}

// Entries implements store.Store.
func (s *Store) Entries(ctx context.Context, ids []string) ([]store.Entry, error) {
	found, err := collect(ctx, s, `SELECT `+entryColumns+` FROM entries e
		JOIN LATERAL (SELECT * FROM occurrences WHERE entry = e.pk ORDER BY seq LIMIT 1) o ON true
		WHERE e.id = ANY($1)`, []any{ids}, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("get entries: %w", err)
	}
	byID := make(map[string]store.Entry, len(found))
	for _, e := range found {
		byID[e.ID] = e
	}
	out := make([]store.Entry, 0, len(ids))
	for _, id := range ids {
		e, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
		}
		out = append(out, e)
	}
	return out, nil
}

// ResolveID implements store.Store.
func (s *Store) ResolveID(ctx context.Context, prefix string) (string, error) {
	prefix = strings.ToLower(prefix)
	if len(prefix) < store.MinPrefix || len(prefix) > 64 || strings.Trim(prefix, "0123456789abcdef") != "" {
		return "", &store.ValidationError{Field: "id", Msg: fmt.Sprintf("%q is not an entry ID or a prefix of %d or more hex digits", prefix, store.MinPrefix)}
	}
	// IDs are COLLATE "C": a prefix's IDs are a range of the index.
	matches, err := collect(ctx, s, `SELECT id FROM entries WHERE id >= $1 AND id < $2 ORDER BY id LIMIT 3`,
		[]any{prefix, prefix + "g"}, pgx.RowTo[string])
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
	ids, err := collect(ctx, s, `SELECT e.id FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = $1 AND o.msg_id = $2`, []any{sessionID, msgID}, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("look up msg_id %q: %w", msgID, err)
	}
	if len(ids) == 0 {
		return "", fmt.Errorf("msg_id %q in session %q: %w", msgID, sessionID, store.ErrNotFound)
	}
	return ids[0], nil
}

func scanOcc(r pgx.CollectableRow) (store.Occurrence, error) { return scanOccurrence(r) }

// Occurrences implements store.Store.
func (s *Store) Occurrences(ctx context.Context, id string) ([]store.Occurrence, error) {
	out, err := collect(ctx, s, `SELECT `+occColumns+` FROM entries e JOIN occurrences o ON o.entry = e.pk
		WHERE e.id = $1 ORDER BY o.seq`, []any{id}, scanOcc)
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
	var a args
	q := `SELECT ` + entryColumns + ` FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = ` + a.add(sessionID) + ` AND o.turn >= ` + a.add(from)
	if to > 0 {
		q += ` AND o.turn <= ` + a.add(to)
	}
	q += ` ORDER BY o.turn, o.seq`
	out, err := collect(ctx, s, q, a, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("turns %d-%d of session %s: %w", from, to, sessionID, err)
	}
	return out, nil
}

// TurnIDs implements store.Store.
func (s *Store) TurnIDs(ctx context.Context, sessionID string, from int) ([]string, error) {
	all, err := collect(ctx, s, `SELECT e.id FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = $1 AND o.turn >= $2 ORDER BY o.turn, o.seq`, []any{sessionID, from}, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("entries of session %s from turn %d: %w", sessionID, from, err)
	}
	var ids []string
	seen := map[string]bool{}
	for _, id := range all {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// LastTurn implements store.Store.
func (s *Store) LastTurn(ctx context.Context, sessionID string) (int, error) {
	last, err := collect(ctx, s, `SELECT coalesce(max(turn), 0) FROM occurrences WHERE session_id = $1`,
		[]any{sessionID}, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("last turn of session %s: %w", sessionID, err)
	}
	return int(last[0]), nil
}

func scanChunkRow(r pgx.CollectableRow) (store.Chunk, error) { return scanChunk(r) }

// Chunks implements store.Store.
func (s *Store) Chunks(ctx context.Context, id string) ([]store.Chunk, error) {
	out, err := collect(ctx, s, `SELECT `+chunkColumns+` FROM entries e JOIN chunks c ON c.entry = e.pk
		WHERE e.id = $1 ORDER BY c.ordinal`, []any{id}, scanChunkRow)
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
	out, err := collect(ctx, s, `SELECT from_id, to_id, kind, created_at FROM links WHERE from_id = $1
		UNION SELECT from_id, to_id, kind, created_at FROM links WHERE to_id = $1 ORDER BY 4, 1, 2, 3`,
		[]any{id}, func(r pgx.CollectableRow) (store.Link, error) {
			var l store.Link
			var kind string
			var t int64
			err := r.Scan(&l.FromID, &l.ToID, &kind, &t)
			l.Kind, l.CreatedAt = store.LinkKind(kind), fromUnixNano(t)
			return l, err
		})
	if err != nil {
		return nil, fmt.Errorf("links of %s: %w", id, err)
	}
	return out, nil
}

// Reference implements store.Store.
func (s *Store) Reference(ctx context.Context, id string) (store.Reference, error) {
	out, err := collect(ctx, s, `SELECT `+refColumns+` FROM refs WHERE id = $1`, []any{id}, scanRef)
	if err != nil {
		return store.Reference{}, fmt.Errorf("get reference %s: %w", id, err)
	}
	if len(out) == 0 {
		if store.IsRunRef(id) {
			return s.runs.Resolve(ctx, s, id) // a run of a window's ledger, named by it
		}
		return store.Reference{}, fmt.Errorf("reference %s: %w", id, store.ErrNotFound)
	}
	return out[0], nil
}

const refColumns = `id, type, session_id, agent_id, content_ids, summary, tokens_saved,
	turn_from, turn_to, created_at, topics, entities, query_hints`

func scanRef(sc pgx.CollectableRow) (store.Reference, error) {
	var (
		r                       store.Reference
		typ, contentIDs         string
		t                       int64
		topics, entities, hints *string
	)
	err := sc.Scan(&r.ID, &typ, &r.SessionID, &r.AgentID, &contentIDs, &r.Summary, &r.TokensSaved,
		&r.TurnFrom, &r.TurnTo, &t, &topics, &entities, &hints)
	if err != nil {
		return r, err
	}
	r.Type, r.CreatedAt = store.RefType(typ), fromUnixNano(t)
	if err := json.Unmarshal([]byte(contentIDs), &r.ContentIDs); err != nil {
		return r, fmt.Errorf("reference %s: decode content ids: %w", r.ID, err)
	}
	for _, f := range []struct {
		v   *string
		dst *[]string
	}{{topics, &r.Topics}, {entities, &r.Entities}, {hints, &r.QueryHints}} {
		if *f.dst, err = decodeList(f.v); err != nil {
			return r, fmt.Errorf("reference %s: %w", r.ID, err)
		}
	}
	return r, nil
}

const sessionColumns = `id, name, created_at, last_seen_at, metadata`

func scanSession(sc pgx.CollectableRow) (store.Session, error) {
	var (
		ss      store.Session
		c, l    int64
		rawMeta *string
	)
	if err := sc.Scan(&ss.ID, &ss.Name, &c, &l, &rawMeta); err != nil {
		return ss, err
	}
	ss.CreatedAt, ss.LastSeenAt = fromUnixNano(c), fromUnixNano(l)
	if rawMeta != nil {
		if err := json.Unmarshal([]byte(*rawMeta), &ss.Metadata); err != nil {
			return ss, fmt.Errorf("session %s: decode metadata: %w", ss.ID, err)
		}
	}
	return ss, nil
}

// Session implements store.Store.
func (s *Store) Session(ctx context.Context, id string) (store.Session, error) {
	out, err := collect(ctx, s, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, []any{id}, scanSession)
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
	out, err := collect(ctx, s, `SELECT `+sessionColumns+` FROM sessions ORDER BY last_seen_at DESC, id`, nil, scanSession)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// Agents implements store.Store.
func (s *Store) Agents(ctx context.Context, sessionID string) ([]store.Agent, error) {
	var a args
	q := `SELECT session_id, id, name, role, parent_id, model, context_window, registered_at, last_seen_at FROM agents`
	if sessionID != "" {
		q += ` WHERE session_id = ` + a.add(sessionID)
	}
	q += ` ORDER BY registered_at, session_id, id`
	out, err := collect(ctx, s, q, a, func(r pgx.CollectableRow) (store.Agent, error) {
		var ag store.Agent
		var reg, last int64
		err := r.Scan(&ag.SessionID, &ag.ID, &ag.Name, &ag.Role, &ag.ParentID, &ag.Model, &ag.ContextWindow, &reg, &last)
		ag.RegisteredAt, ag.LastSeenAt = fromUnixNano(reg), fromUnixNano(last)
		return ag, err
	})
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return out, nil
}

// Ping implements store.Store: a row of a table, read from the database.
func (s *Store) Ping(ctx context.Context) error {
	return s.retry(ctx, func() error {
		var n int64
		return readLost(s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM counters LIMIT 1) AS c`).Scan(&n))
	})
}

// Stats implements store.Store. The totals of entries come from the
// counters; the rest is counted, in one read-only transaction so that
// they describe one state of the store. Its size is that of engram's
// schema (its tables with their indexes and TOAST, its sequences), not
// the database's: the database may hold other applications' schemas
// beside it (?search_path=engram).
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	var st store.Stats
	err := s.read(ctx, func(tx pgx.Tx) error {
		st = store.Stats{SchemaVersion: SchemaVersion(), ByType: map[store.ContentType]store.TypeStats{},
			Files: map[store.FileState]int64{}}
		counters := map[string]*int64{
			"entries": &st.Entries, "content_bytes": &st.ContentBytes, "tokens": &st.Tokens,
			"chunks": &st.Chunks, "occurrences": &st.Occurrences,
		}
		rows, err := tx.Query(ctx, `SELECT name, value FROM counters`)
		if err != nil {
			return err
		}
		var name string
		var v int64
		_, err = pgx.ForEachRow(rows, []any{&name, &v}, func() error {
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
			return nil
		})
		if err != nil {
			return err
		}
		var (
			first, last *int64
			schema      string
		)
		err = tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM agents),
				(SELECT count(*) FROM links), (SELECT count(*) FROM refs),
				(SELECT min(time) FROM occurrences), (SELECT max(time) FROM occurrences),
				current_schema(),
				(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
					WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AND c.relkind IN ('r', 'm', 'S'))`).
			Scan(&st.Sessions, &st.Agents, &st.Links, &st.References, &first, &last, &schema, &st.SizeBytes)
		if err != nil {
			return err
		}
		st.Location = s.location(schema)
		if first != nil && last != nil {
			st.First, st.Last = fromUnixNano(*first), fromUnixNano(*last)
		}
		rows, err = tx.Query(ctx, `SELECT state, count(*) FROM files GROUP BY state`)
		if err != nil {
			return err
		}
		var state string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
			st.Files[store.FileState(state)] = n
			return nil
		})
		return err
	})
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	return st, nil
}

// location is the store's database as a URL without credentials, with
// engram's schema when it is not the default one.
func (s *Store) location(schema string) string {
	c := s.pool.Config().ConnConfig
	host := c.Host
	if !strings.HasPrefix(host, "/") {
		host = net.JoinHostPort(host, strconv.Itoa(int(c.Port)))
	}
	u := "postgres://"
	if c.User != "" {
		u += c.User + "@"
	}
	u += host + "/" + c.Database
	if schema != "public" {
		u += "?search_path=" + url.QueryEscape(schema)
	}
	return u
}

// Setting implements store.Store.
func (s *Store) Setting(ctx context.Context, key string) (string, error) {
	out, err := collect(ctx, s, `SELECT value FROM settings WHERE key = $1`, []any{key}, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("get setting %s: %w", key, err)
	}
	if len(out) == 0 {
		return "", fmt.Errorf("setting %s: %w", key, store.ErrNotFound)
	}
	return out[0], nil
}

// Blob implements store.Store.
func (s *Store) Blob(ctx context.Context, name string) ([]byte, error) {
	out, err := collect(ctx, s, `SELECT data FROM blobs WHERE name = $1`, []any{name}, pgx.RowTo[[]byte])
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("blob %s: %w", name, store.ErrNotFound)
	}
	return out[0], nil
}

// HotChunks implements store.Store.
func (s *Store) HotChunks(ctx context.Context, since time.Time, limit int) ([]store.Access, error) {
	var lim *int // a negative limit is none, as SQLite's LIMIT -1
	if limit >= 0 {
		lim = &limit
	}
	out, err := collect(ctx, s, `SELECT chunk, count, last_at FROM access WHERE last_at >= $1
		ORDER BY last_at DESC, chunk DESC LIMIT $2`, []any{unixNano(since), lim}, func(r pgx.CollectableRow) (store.Access, error) {
		var a store.Access
		var count, last int64
		err := r.Scan(&a.ChunkID, &count, &last)
		a.Count, a.Last = int(count), fromUnixNano(last)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("hot chunks: %w", err)
	}
	return out, nil
}
