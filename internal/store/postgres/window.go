package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// Windows across servers. Every change to a window (an append, a relay, a
// re-admission, a write of its summaries, a snapshot's numbering) begins
// by locking the window's head row (lockWindow: SELECT ... FOR UPDATE),
// whichever engram server makes it, and ends by writing the head's new
// version, in one transaction. So the changes to one window run one at a
// time across every process that shares the database: each reads the last
// position, version, re-admission or snapshot number under the lock and
// writes the next, so that they are contiguous, and the messages of one
// append (a turn) are never interleaved with another's. Changes to
// different windows do not wait for each other.
//
// Locks are taken in one order, so that two writers cannot wait for each
// other in a cycle: an append that stores entries first locks their
// sessions' rows (the entries batch's lockSessions, as PutEntries does),
// then the window's row, then whatever the change writes, and the
// counters (the batch's finish) last. A writer that changes a session's
// windows and its entries together (a forget) should take the session's
// row before the window's too.
//
// An evictor runs inside the transaction, so a transaction run again
// (s.write retries a serialization failure or a deadlock) calls it again,
// with the state as it is then: the contract allows it, and nothing here
// keeps what an attempt that failed returned.

// schemaWindowAppends (migration 3): the keys of windows' idempotent
// appends, what each append was (the caller's digest of its items) and
// where its items went.
const schemaWindowAppends = `
CREATE TABLE window_appends (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	key        text COLLATE "C" NOT NULL,
	digest     text NOT NULL,
	from_pos   bigint NOT NULL,
	items      bigint NOT NULL,
	created_at bigint NOT NULL,
	PRIMARY KEY (session_id, agent_id, key)
);
`

// schemaWindowNext (migration 4): one past the greatest place a window
// ever gave, which stays when its last items are forgotten: the window
// knows that messages were there (a tool call's result, say).
const schemaWindowNext = `
ALTER TABLE windows ADD COLUMN next_pos bigint NOT NULL DEFAULT 0;
UPDATE windows SET next_pos = (SELECT coalesce(max(pos) + 1, 0) FROM window_items i
	WHERE i.session_id = windows.session_id AND i.agent_id = windows.agent_id);
`

const schemaWindows = `
-- windows: a context window's head, its settings (opaque to the store) and
-- a version bumped by every change; window_items its messages in append
-- order, each the form of the message and, once evicted, the reference it
-- went under.
CREATE TABLE windows (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	settings   bytea NOT NULL,
	version    bigint NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL,
	PRIMARY KEY (session_id, agent_id)
);

CREATE TABLE window_items (
	session_id     text COLLATE "C" NOT NULL,
	agent_id       text COLLATE "C" NOT NULL,
	pos            bigint NOT NULL,
	append_version bigint NOT NULL,
	form           bytea NOT NULL,
	entry_ids      text NOT NULL,
	tokens         bigint NOT NULL,
	pinned         boolean NOT NULL,
	ref_id         text COLLATE "C" NOT NULL DEFAULT '',
	appended_at    bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (session_id, agent_id, pos)
);
CREATE INDEX window_items_ref ON window_items (ref_id) WHERE ref_id != '';

CREATE TABLE window_readmits (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	seq        bigint NOT NULL,
	at_pos     bigint NOT NULL,
	from_pos   bigint NOT NULL,
	to_pos     bigint NOT NULL,
	PRIMARY KEY (session_id, agent_id, seq)
);

CREATE TABLE window_summaries (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	level      integer NOT NULL,
	from_pos   bigint NOT NULL,
	to_pos     bigint NOT NULL,
	digest     text NOT NULL,
	text       text NOT NULL,
	tokens     bigint NOT NULL,
	made_by    text NOT NULL,
	epoch      bigint NOT NULL,
	created_at bigint NOT NULL,
	PRIMARY KEY (session_id, agent_id, level, from_pos)
);

CREATE TABLE snapshot_bodies (
	hash text COLLATE "C" PRIMARY KEY,
	body bytea NOT NULL
);

CREATE TABLE window_snapshots (
	session_id text COLLATE "C" NOT NULL,
	agent_id   text COLLATE "C" NOT NULL,
	seq        bigint NOT NULL,
	hash       text COLLATE "C" NOT NULL,
	version    bigint NOT NULL,
	created_at bigint NOT NULL,
	report     text NOT NULL,
	PRIMARY KEY (session_id, agent_id, seq)
);
CREATE INDEX window_snapshots_hash ON window_snapshots (hash);
CREATE INDEX window_snapshots_window_hash ON window_snapshots (session_id, agent_id, hash);
`

// windowCols are the columns scanWindow reads, of windows.
const windowCols = `session_id, agent_id, settings, version, created_at, updated_at, next_pos`

func scanWindow(sc scanner) (store.Window, error) {
	var (
		w    store.Window
		c, u int64
	)
	if err := sc.Scan(&w.SessionID, &w.AgentID, &w.Settings, &w.Version, &c, &u, &w.Next); err != nil {
		return w, err
	}
	w.CreatedAt, w.UpdatedAt = fromUnixNano(c), fromUnixNano(u)
	return w, nil
}

// windowHead reads a window's head; ErrNotFound if there is none.
func windowHead(ctx context.Context, q querier, key store.WindowKey) (store.Window, error) {
	return headWhere(ctx, q, key, "")
}

// lockWindow reads a window's head and locks its row until the end of
// tx: the start of every change to a window (see the top of this file).
func lockWindow(ctx context.Context, tx pgx.Tx, key store.WindowKey) (store.Window, error) {
	return headWhere(ctx, tx, key, " FOR UPDATE")
}

func headWhere(ctx context.Context, q querier, key store.WindowKey, lock string) (store.Window, error) {
	w, err := scanWindow(q.QueryRow(ctx, `SELECT `+windowCols+` FROM windows WHERE session_id = $1 AND agent_id = $2`+lock,
		key.SessionID, key.AgentID))
	if errors.Is(err, pgx.ErrNoRows) {
		return w, store.ErrNotFound
	}
	return w, err
}

// PutWindow implements store.Store. Two servers opening the same window
// at once both succeed: the second's insert turns into an update of the
// first's row, which waits for the first to commit.
func (s *Store) PutWindow(ctx context.Context, key store.WindowKey, settings []byte) (store.Window, error) {
	if err := key.Validate(); err != nil {
		return store.Window{}, fmt.Errorf("put window: %w", err)
	}
	if len(settings) == 0 {
		return store.Window{}, fmt.Errorf("put window %s: %w", key, &store.ValidationError{Field: "settings", Msg: "none given"})
	}
	var w store.Window
	err := s.write(ctx, func(tx pgx.Tx) error {
		now := unixNano(time.Now())
		var err error
		w, err = scanWindow(tx.QueryRow(ctx, `INSERT INTO windows (session_id, agent_id, settings, version, created_at, updated_at)
			VALUES ($1, $2, $3, 1, $4, $4)
			ON CONFLICT (session_id, agent_id) DO UPDATE
				SET settings = excluded.settings, version = windows.version + 1, updated_at = excluded.updated_at
			RETURNING `+windowCols, key.SessionID, key.AgentID, settings, now))
		return err
	})
	if err != nil {
		return store.Window{}, fmt.Errorf("put window %s: %w", key, err)
	}
	return w, nil
}

// Window implements store.Store.
func (s *Store) Window(ctx context.Context, key store.WindowKey) (store.Window, error) {
	var w store.Window
	err := s.retry(ctx, func() (err error) {
		w, err = windowHead(ctx, s.pool, key)
		return err
	})
	if err != nil {
		return store.Window{}, fmt.Errorf("window %s: %w", key, err)
	}
	return w, nil
}

// Windows implements store.Store.
func (s *Store) Windows(ctx context.Context, sessionID string) ([]store.Window, error) {
	out, err := collect(ctx, s, `SELECT `+windowCols+` FROM windows WHERE $1 = '' OR session_id = $1
		ORDER BY updated_at DESC, session_id, agent_id`, []any{sessionID},
		func(row pgx.CollectableRow) (store.Window, error) { return scanWindow(row) })
	if err != nil {
		return nil, fmt.Errorf("windows: %w", err)
	}
	if out == nil {
		out = []store.Window{}
	}
	return out, nil
}

// itemCols are the columns scanItem reads, of window_items.
const itemCols = `pos, append_version, form, entry_ids, tokens, pinned, ref_id, appended_at`

func scanItem(sc scanner) (store.WindowItem, error) {
	var (
		it  store.WindowItem
		ids string
		at  int64
	)
	if err := sc.Scan(&it.Pos, &it.Append, &it.Form, &ids, &it.Tokens, &it.Pinned, &it.RefID, &at); err != nil {
		return it, err
	}
	it.Time = fromUnixNano(at)
	if err := json.Unmarshal([]byte(ids), &it.EntryIDs); err != nil {
		return it, fmt.Errorf("item %d: entry ids: %w", it.Pos, err)
	}
	return it, nil
}

// windowItems reads a window's items with Pos >= from, in order; only
// those in the window if live.
func windowItems(ctx context.Context, q querier, key store.WindowKey, from, to int, live bool) ([]store.WindowItem, error) {
	cond, args := "", []any{key.SessionID, key.AgentID, from}
	if live {
		cond = ` AND ref_id = ''`
	}
	if to >= 0 {
		cond, args = cond+` AND pos < $4`, append(args, to)
	}
	rows, err := q.Query(ctx, `SELECT `+itemCols+` FROM window_items
		WHERE session_id = $1 AND agent_id = $2 AND pos >= $3`+cond+` ORDER BY pos`, args...)
	if err != nil {
		return nil, err
	}
	out, err := collectRows(rows, func(row pgx.CollectableRow) (store.WindowItem, error) { return scanItem(row) })
	if out == nil {
		out = []store.WindowItem{}
	}
	return out, err
}

// jsonIDs encodes entry IDs as a JSON list, [] for none (window_items
// keeps [] rather than NULL, as the SQLite backend does).
func jsonIDs(ids []string) string {
	if len(ids) == 0 {
		return "[]"
	}
	return *jsonList(ids)
}

// WindowItems implements store.Store.
func (s *Store) WindowItems(ctx context.Context, key store.WindowKey, from, to int) ([]store.WindowItem, error) {
	var out []store.WindowItem
	// One read transaction, so that the head and the items agree.
	err := s.read(ctx, func(tx pgx.Tx) error {
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		var err error
		out, err = windowItems(ctx, tx, key, from, to, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("window %s: items: %w", key, err)
	}
	return out, nil
}

// WindowLedger implements store.Store.
func (s *Store) WindowLedger(ctx context.Context, key store.WindowKey) (store.Window, []store.WindowItem, []store.WindowReadmit, error) {
	var (
		w     store.Window
		items []store.WindowItem
		rs    []store.WindowReadmit
	)
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		if w, err = windowHead(ctx, tx, key); err != nil {
			return err
		}
		if items, err = windowItems(ctx, tx, key, 0, -1, false); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT at_pos, from_pos, to_pos FROM window_readmits
			WHERE session_id = $1 AND agent_id = $2 ORDER BY seq`, key.SessionID, key.AgentID)
		if err != nil {
			return err
		}
		rs, err = collectRows(rows, func(row pgx.CollectableRow) (store.WindowReadmit, error) {
			var r store.WindowReadmit
			err := row.Scan(&r.At, &r.From, &r.To)
			return r, err
		})
		return err
	})
	if err != nil {
		return store.Window{}, nil, nil, fmt.Errorf("window %s: ledger: %w", key, err)
	}
	return w, items, rs, nil
}

// AppendWindow implements store.Store. The entries are prepared (hashed,
// chunked) before the transaction; in it, the window's row is locked
// first, so that the items go after the last of every append committed
// before, under the next version.
func (s *Store) AppendWindow(ctx context.Context, key store.WindowKey, a store.WindowAppend, evict store.Evictor) (store.Window, []store.WindowItem, []store.Eviction, error) {
	fail := func(err error) (store.Window, []store.WindowItem, []store.Eviction, error) {
		return store.Window{}, nil, nil, fmt.Errorf("append to window %s: %w", key, err)
	}
	if err := key.Validate(); err != nil {
		return fail(err)
	}
	for i, it := range a.Items {
		if len(it.Form) == 0 || it.Tokens < 0 {
			return fail(&store.ItemError{Index: i, Err: &store.ValidationError{Field: "item", Msg: "needs its form and a token count that is not negative"}})
		}
		for _, id := range it.EntryIDs {
			if !store.ValidID(id) {
				return fail(&store.ItemError{Index: i, Err: &store.ValidationError{Field: "entry_ids", Msg: fmt.Sprintf("%q is not an entry ID", id)}})
			}
		}
	}
	if err := a.ValidKey(); err != nil {
		return fail(err)
	}
	var ps []pending
	if len(a.Entries) > 0 {
		var err error
		if ps, err = s.prepare(ctx, a.Entries); err != nil {
			return fail(err)
		}
	}
	var (
		w     store.Window
		items []store.WindowItem
		evs   []store.Eviction
	)
	err := s.write(ctx, func(tx pgx.Tx) error {
		items, evs = nil, nil
		var err error
		// The entries go in through PutEntries' batch: their sessions'
		// rows locked before the window's, the batch's finish (the
		// counters) last (see the top of this file).
		var b *batch
		if len(ps) > 0 {
			b = newBatch(ctx, tx)
			defer b.close()
			if err := b.lockSessions(ps); err != nil {
				return err
			}
		}
		if w, err = lockWindow(ctx, tx, key); err != nil {
			return err
		}
		if a.Key != "" {
			if _, err := tx.Exec(ctx, `DELETE FROM window_appends WHERE session_id = $1 AND agent_id = $2 AND created_at < $3`,
				key.SessionID, key.AgentID, unixNano(time.Now().Add(-store.AppendKeyTTL))); err != nil {
				return err
			}
			var digest string
			var from, count int
			err := tx.QueryRow(ctx, `SELECT digest, from_pos, items FROM window_appends WHERE session_id = $1 AND agent_id = $2 AND key = $3`,
				key.SessionID, key.AgentID, a.Key).Scan(&digest, &from, &count)
			switch {
			case err == nil:
				return a.Replayed(digest, from, count)
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		written := map[string]bool{}
		if b != nil {
			for i := range ps {
				res, err := b.put(&ps[i])
				if err != nil {
					return &store.ItemError{Index: i, Err: err}
				}
				written[res.ID] = true
			}
		}
		if err := itemsStored(ctx, tx, a.Items, written); err != nil {
			return err
		}
		var next int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(pos) + 1, 0) FROM window_items WHERE session_id = $1 AND agent_id = $2`,
			key.SessionID, key.AgentID).Scan(&next); err != nil {
			return err
		}
		// The head keeps the greatest place given: a forgotten last
		// item's, given again here, stays known.
		w.Next = max(w.Next, next+len(a.Items))
		if _, err := tx.Exec(ctx, `UPDATE windows SET next_pos = $3 WHERE session_id = $1 AND agent_id = $2`,
			key.SessionID, key.AgentID, w.Next); err != nil {
			return err
		}
		// A re-admission made before the places given again here came
		// before these items (see store.WindowReadmit).
		if _, err := tx.Exec(ctx, `UPDATE window_readmits SET at_pos = $3 WHERE session_id = $1 AND agent_id = $2 AND at_pos > $3`,
			key.SessionID, key.AgentID, next); err != nil {
			return err
		}
		now := time.Now()
		w.Version++
		w.UpdatedAt = fromUnixNano(unixNano(now))
		rows := make([][]any, 0, len(a.Items))
		for i, it := range a.Items {
			it.Pos, it.Append, it.RefID = next+i, w.Version, ""
			if it.Time.IsZero() {
				it.Time = now
			}
			it.Time = fromUnixNano(unixNano(it.Time)) // as it is read back
			rows = append(rows, []any{key.SessionID, key.AgentID, it.Pos, it.Append, it.Form,
				jsonIDs(it.EntryIDs), it.Tokens, it.Pinned, "", unixNano(it.Time)})
			items = append(items, it)
		}
		if len(rows) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"window_items"},
				[]string{"session_id", "agent_id", "pos", "append_version", "form", "entry_ids", "tokens", "pinned", "ref_id", "appended_at"},
				pgx.CopyFromRows(rows)); err != nil {
				return err
			}
		}
		if a.Key != "" {
			if _, err := tx.Exec(ctx, `INSERT INTO window_appends (session_id, agent_id, key, digest, from_pos, items, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, key.SessionID, key.AgentID, a.Key, a.Digest, next, len(a.Items), unixNano(now)); err != nil {
				return err
			}
		}
		if evs, err = finishWindow(ctx, tx, w, evict); err != nil {
			return err
		}
		if b != nil {
			return b.finish()
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return w, items, evs, nil
}

// itemsStored checks that the entries the items name are stored, or
// written by this append: an *ItemError of ErrNotFound for the first item
// that names one that is not.
func itemsStored(ctx context.Context, tx pgx.Tx, items []store.WindowItem, written map[string]bool) error {
	var ids []string
	for _, it := range items {
		for _, id := range it.EntryIDs {
			if !written[id] {
				ids = append(ids, id)
			}
		}
	}
	found, err := storedIDs(ctx, tx, ids)
	if err != nil {
		return err
	}
	for i, it := range items {
		for _, id := range it.EntryIDs {
			if !written[id] && !found[id] {
				return &store.ItemError{Index: i, Err: fmt.Errorf("entry %s: %w", id, store.ErrNotFound)}
			}
		}
	}
	return nil
}

// storedIDs returns which of ids are stored entries.
func storedIDs(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error) {
	found := map[string]bool{}
	if len(ids) == 0 {
		return found, nil
	}
	rows, err := tx.Query(ctx, `SELECT id FROM entries WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	got, err := collectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, id := range got {
		found[id] = true
	}
	return found, nil
}

// ReadmitWindow implements store.Store.
func (s *Store) ReadmitWindow(ctx context.Context, key store.WindowKey, refID string, evict store.Evictor) (store.Window, []store.Eviction, error) {
	return s.changeWindow(ctx, key, "readmit "+refID+" to window", evict, func(tx pgx.Tx) error {
		var (
			r store.WindowReadmit
			n int
		)
		err := tx.QueryRow(ctx, `SELECT coalesce(min(pos), 0), coalesce(max(pos) + 1, 0), count(*),
				(SELECT coalesce(max(pos) + 1, 0) FROM window_items WHERE session_id = $1 AND agent_id = $2)
			FROM window_items WHERE session_id = $1 AND agent_id = $2 AND ref_id = $3`,
			key.SessionID, key.AgentID, refID).Scan(&r.From, &r.To, &n, &r.At)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no message of the window is under reference %q: %w", refID, store.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `UPDATE window_items SET ref_id = '' WHERE session_id = $1 AND agent_id = $2 AND ref_id = $3`,
			key.SessionID, key.AgentID, refID); err != nil {
			return err
		}
		// The window's row is locked, so the next seq is this one's alone.
		_, err = tx.Exec(ctx, `INSERT INTO window_readmits (session_id, agent_id, seq, at_pos, from_pos, to_pos)
			SELECT $1, $2, coalesce(max(seq) + 1, 0), $3, $4, $5 FROM window_readmits WHERE session_id = $1 AND agent_id = $2`,
			key.SessionID, key.AgentID, r.At, r.From, r.To)
		return err
	})
}

// RelayWindow implements store.Store.
func (s *Store) RelayWindow(ctx context.Context, key store.WindowKey, evict store.Evictor) (store.Window, []store.Eviction, error) {
	return s.changeWindow(ctx, key, "lay out window", evict, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE window_items SET ref_id = '' WHERE session_id = $1 AND agent_id = $2 AND ref_id != ''`,
			key.SessionID, key.AgentID)
		return err
	})
}

// changeWindow makes a change to a window's items in one transaction,
// under the window's lock, then its evictor's evictions and its new
// version (finishWindow); what names the change in errors.
func (s *Store) changeWindow(ctx context.Context, key store.WindowKey, what string, evict store.Evictor, change func(tx pgx.Tx) error) (store.Window, []store.Eviction, error) {
	if err := key.Validate(); err != nil {
		return store.Window{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	var (
		w   store.Window
		evs []store.Eviction
	)
	err := s.write(ctx, func(tx pgx.Tx) error {
		evs = nil
		var err error
		if w, err = lockWindow(ctx, tx, key); err != nil {
			return err
		}
		if err := change(tx); err != nil {
			return err
		}
		w.Version++
		w.UpdatedAt = fromUnixNano(unixNano(time.Now()))
		evs, err = finishWindow(ctx, tx, w, evict)
		return err
	})
	if err != nil {
		return store.Window{}, nil, fmt.Errorf("%s %s: %w", what, key, err)
	}
	return w, evs, nil
}

// finishWindow ends a change to a window in its transaction: the
// evictor's evictions, if there is an evictor, and the window's new
// version (w's).
func finishWindow(ctx context.Context, tx pgx.Tx, w store.Window, evict store.Evictor) ([]store.Eviction, error) {
	var evs []store.Eviction
	if evict != nil {
		state, err := windowState(ctx, tx, w)
		if err != nil {
			return nil, err
		}
		if evs, err = evict(state); err != nil {
			return nil, err
		}
		if err := applyEvictions(ctx, tx, w.WindowKey, state, evs); err != nil {
			return nil, err
		}
	}
	_, err := tx.Exec(ctx, `UPDATE windows SET version = $1, updated_at = $2 WHERE session_id = $3 AND agent_id = $4`,
		w.Version, unixNano(w.UpdatedAt), w.SessionID, w.AgentID)
	return evs, err
}

// windowState reads what an evictor sees of a window.
func windowState(ctx context.Context, tx pgx.Tx, w store.Window) (store.WindowState, error) {
	st := store.WindowState{Window: w, Refs: []store.WindowRef{}}
	var err error
	if st.Live, err = windowItems(ctx, tx, w.WindowKey, 0, -1, true); err != nil {
		return st, err
	}
	st.Ref = func(id string) (store.Reference, error) { return windowReference(ctx, tx, id) }
	rows, err := tx.Query(ctx, `SELECT ref_id, min(pos), max(pos) + 1, count(*), sum(tokens) FROM window_items
		WHERE session_id = $1 AND agent_id = $2 AND ref_id != ''
		GROUP BY ref_id ORDER BY min(pos)`, w.SessionID, w.AgentID)
	if err != nil {
		return st, err
	}
	refs, err := collectRows(rows, func(row pgx.CollectableRow) (store.WindowRef, error) {
		var r store.WindowRef
		err := row.Scan(&r.ID, &r.From, &r.To, &r.Items, &r.Tokens)
		return r, err
	})
	if err != nil {
		return st, err
	}
	for _, r := range refs {
		st.Refs, st.Evicted = append(st.Refs, r), st.Evicted+r.Items
	}
	return st, nil
}

// applyEvictions writes each eviction's reference and marks its items
// evicted: every item of its run must be in the window or under a
// reference it absorbs, of this window's session and agent.
func applyEvictions(ctx context.Context, tx pgx.Tx, key store.WindowKey, st store.WindowState, evs []store.Eviction) error {
	in := make(map[int]bool, len(st.Live))
	for _, it := range st.Live {
		in[it.Pos] = true
	}
	refs := map[string]store.WindowRef{}
	for _, r := range st.Refs {
		refs[r.ID] = r
	}
	for i, ev := range evs {
		r := ev.Ref
		if r.CreatedAt.IsZero() {
			r.CreatedAt = time.Now()
		}
		if r.SessionID != key.SessionID || r.AgentID != key.AgentID {
			return fmt.Errorf("eviction %d: reference %s is of %s/%s, not of this window", i, r.ID, r.SessionID, r.AgentID)
		}
		if err := r.Validate(); err != nil {
			return fmt.Errorf("eviction %d: %w", i, err)
		}
		covered := 0
		for _, a := range ev.Absorb {
			old, ok := refs[a]
			if !ok || old.From < ev.From || old.To > ev.To {
				return fmt.Errorf("eviction %d: reference %s to absorb is not of this window's run %d-%d", i, a, ev.From, ev.To)
			}
			covered += old.Items
			delete(refs, a)
		}
		n := 0
		for pos := ev.From; pos < ev.To; pos++ {
			if in[pos] {
				n++
				delete(in, pos) // one eviction per item
			}
		}
		var total int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM window_items WHERE session_id = $1 AND agent_id = $2 AND pos >= $3 AND pos < $4`,
			key.SessionID, key.AgentID, ev.From, ev.To).Scan(&total); err != nil {
			return err
		}
		if n+covered == 0 || total != n+covered {
			return fmt.Errorf("eviction %d: items %d-%d are not all in the window or under the references it absorbs", i, ev.From, ev.To)
		}
		// Its content is stored: this transaction's entries are in (the
		// batch inserts them as it puts them), and insertRef checks.
		inserted, err := insertRef(ctx, tx, r)
		if err != nil {
			return fmt.Errorf("eviction %d: %w", i, err)
		}
		if !inserted {
			same, err := sameRef(ctx, tx, r)
			if err != nil {
				return fmt.Errorf("eviction %d: %w", i, err)
			}
			if !same {
				return fmt.Errorf("eviction %d: %w", i, &store.ConflictError{What: "reference " + r.ID, Msg: "already exists"})
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE window_items SET ref_id = $1
			WHERE session_id = $2 AND agent_id = $3 AND pos >= $4 AND pos < $5 AND ref_id = ''`,
			r.ID, key.SessionID, key.AgentID, ev.From, ev.To)
		if err != nil {
			return err
		}
		if m := tag.RowsAffected(); int(m) != n {
			return fmt.Errorf("eviction %d: items %d-%d: %d of them were in the window, %d marked", i, ev.From, ev.To, n, m)
		}
		// (A run may be only references joined, none of its items in the
		// window: a layout that merges markers.)
		if len(ev.Absorb) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE window_items SET ref_id = $1 WHERE session_id = $2 AND agent_id = $3 AND ref_id = ANY($4)`,
				r.ID, key.SessionID, key.AgentID, ev.Absorb); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameRef reports whether the stored reference r.ID stands for the same
// content of the same window as r: a run re-admitted and evicted again
// goes back under its reference, whose markers are still about.
func sameRef(ctx context.Context, tx pgx.Tx, r store.Reference) (bool, error) {
	old, err := windowReference(ctx, tx, r.ID)
	if err != nil {
		return false, err
	}
	return old.SessionID == r.SessionID && old.AgentID == r.AgentID && slices.Equal(old.ContentIDs, r.ContentIDs), nil
}

// windowReference reads a reference in tx, for an evictor
// (WindowState.Ref) and for a reference evicted again.
func windowReference(ctx context.Context, tx pgx.Tx, id string) (store.Reference, error) {
	rows, err := tx.Query(ctx, `SELECT `+refColumns+` FROM refs WHERE id = $1`, id)
	if err != nil {
		return store.Reference{}, fmt.Errorf("get reference %s: %w", id, err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRef)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("reference %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("get reference %s: %w", id, err)
	}
	return r, nil
}

// WindowSummaries implements store.Store.
func (s *Store) WindowSummaries(ctx context.Context, key store.WindowKey) (int64, []store.WindowSummary, error) {
	var (
		epoch int64
		out   []store.WindowSummary
	)
	err := s.read(ctx, func(tx pgx.Tx) error {
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT level, from_pos, to_pos, digest, text, tokens, made_by, epoch, created_at
			FROM window_summaries WHERE session_id = $1 AND agent_id = $2 ORDER BY level, from_pos`, key.SessionID, key.AgentID)
		if err != nil {
			return err
		}
		out, err = collectRows(rows, func(row pgx.CollectableRow) (store.WindowSummary, error) {
			var (
				w  store.WindowSummary
				at int64
			)
			err := row.Scan(&w.Level, &w.From, &w.To, &w.Digest, &w.Text, &w.Tokens, &w.By, &w.Epoch, &at)
			w.CreatedAt = fromUnixNano(at)
			return w, err
		})
		epoch = 0
		for _, w := range out {
			epoch = max(epoch, w.Epoch)
		}
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("window %s: summaries: %w", key, err)
	}
	return epoch, out, nil
}

// PutWindowSummaries implements store.Store: a compare-and-swap on the
// epoch, read under the window's lock, so that of two servers' writers
// that read the same epoch, the second waits for the first and then
// finds its epoch stale.
func (s *Store) PutWindowSummaries(ctx context.Context, key store.WindowKey, epoch int64, sums []store.WindowSummary) (int64, error) {
	if err := key.Validate(); err != nil {
		return 0, err
	}
	for _, w := range sums {
		if err := w.Validate(); err != nil {
			return 0, fmt.Errorf("window %s: summary of %d to %d: %w", key, w.From, w.To, err)
		}
	}
	var next int64
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := lockWindow(ctx, tx, key); err != nil {
			return err
		}
		var now int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(epoch), 0) FROM window_summaries WHERE session_id = $1 AND agent_id = $2`,
			key.SessionID, key.AgentID).Scan(&now); err != nil {
			return err
		}
		if now != epoch {
			return fmt.Errorf("%w (expected epoch %d, the window's is %d)", store.ErrStaleEpoch, epoch, now)
		}
		next = now + 1
		at := unixNano(time.Now())
		if len(sums) == 0 {
			return nil
		}
		var b pgx.Batch
		for _, w := range sums {
			b.Queue(`INSERT INTO window_summaries (session_id, agent_id, level, from_pos, to_pos, digest, text, tokens, made_by, epoch, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
				ON CONFLICT (session_id, agent_id, level, from_pos) DO UPDATE
					SET to_pos = excluded.to_pos, digest = excluded.digest, text = excluded.text, tokens = excluded.tokens,
						made_by = excluded.made_by, epoch = excluded.epoch, created_at = excluded.created_at`,
				key.SessionID, key.AgentID, w.Level, w.From, w.To, w.Digest, w.Text, w.Tokens, w.By, next, at)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("window %s: write summaries: %w", key, err)
	}
	return next, nil
}
