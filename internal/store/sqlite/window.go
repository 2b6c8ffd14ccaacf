package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// PutWindow implements store.Store.
func (s *Store) PutWindow(ctx context.Context, key store.WindowKey, settings []byte) (store.Window, error) {
	if err := key.Validate(); err != nil {
		return store.Window{}, fmt.Errorf("put window: %w", err)
	}
	if len(settings) == 0 {
		return store.Window{}, fmt.Errorf("put window %s: %w", key, &store.ValidationError{Field: "settings", Msg: "none given"})
	}
	var w store.Window
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := unixNano(time.Now())
		if _, err := tx.ExecContext(ctx, `INSERT INTO windows(session_id, agent_id, settings, version, created_at, updated_at)
			VALUES (?, ?, ?, 1, ?, ?)
			ON CONFLICT(session_id, agent_id) DO UPDATE SET settings = excluded.settings, version = version + 1, updated_at = excluded.updated_at`,
			key.SessionID, key.AgentID, settings, now, now); err != nil {
			return err
		}
		var err error
		w, err = windowHead(ctx, tx, key)
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
	err := s.read(ctx, func(db *sql.DB) error {
		var err error
		w, err = windowHead(ctx, db, key)
		return err
	})
	if err != nil {
		return store.Window{}, fmt.Errorf("window %s: %w", key, err)
	}
	return w, nil
}

// querier is what a transaction and the read pool share.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

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

func windowHead(ctx context.Context, q querier, key store.WindowKey) (store.Window, error) {
	w, err := scanWindow(q.QueryRowContext(ctx, `SELECT `+windowCols+` FROM windows WHERE session_id = ? AND agent_id = ?`,
		key.SessionID, key.AgentID))
	if errors.Is(err, sql.ErrNoRows) {
		return w, store.ErrNotFound
	}
	return w, err
}

// Windows implements store.Store.
func (s *Store) Windows(ctx context.Context, sessionID string) ([]store.Window, error) {
	q := `SELECT ` + windowCols + ` FROM windows WHERE ?1 = '' OR session_id = ?1 ORDER BY updated_at DESC, session_id, agent_id`
	out := []store.Window{}
	err := s.query(ctx, q, []any{sessionID}, func(rows *sql.Rows) error {
		w, err := scanWindow(rows)
		out = append(out, w)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("windows: %w", err)
	}
	return out, nil
}

const itemCols = `pos, append_version, form, entry_ids, tokens, pinned, ref_id, appended_at`

func scanItem(sc scanner) (store.WindowItem, error) {
	var (
		it  store.WindowItem
		ids string
	)
	var at int64
	if err := sc.Scan(&it.Pos, &it.Append, &it.Form, &ids, &it.Tokens, &it.Pinned, &it.RefID, &at); err != nil {
		return it, err
	}
	it.Time = fromUnixNano(at)
	if err := json.Unmarshal([]byte(ids), &it.EntryIDs); err != nil {
		return it, fmt.Errorf("item %d: entry ids: %w", it.Pos, err)
	}
	return it, nil
}

// WindowLedger implements store.Store.
func (s *Store) WindowLedger(ctx context.Context, key store.WindowKey) (store.Window, []store.WindowItem, []store.WindowReadmit, error) {
	var (
		w     store.Window
		items []store.WindowItem
		rs    []store.WindowReadmit
	)
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if w, err = windowHead(ctx, tx, key); err != nil {
			return err
		}
		if items, err = windowItems(ctx, tx, key, 0, ""); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT at_pos, from_pos, to_pos FROM window_readmits WHERE session_id = ? AND agent_id = ? ORDER BY seq`,
			key.SessionID, key.AgentID)
		if err != nil {
			return err
		}
		rs = nil
		for rows.Next() {
			var r store.WindowReadmit
			if err := rows.Scan(&r.At, &r.From, &r.To); err != nil {
				return errors.Join(err, rows.Close())
			}
			rs = append(rs, r)
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return store.Window{}, nil, nil, fmt.Errorf("window %s: ledger: %w", key, err)
	}
	return w, items, rs, nil
}

// WindowItems implements store.Store.
func (s *Store) WindowItems(ctx context.Context, key store.WindowKey, from, to int) ([]store.WindowItem, error) {
	var out []store.WindowItem
	// One read transaction, so that the head and the items agree.
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		cond, args := "", []any(nil)
		if to >= 0 {
			cond, args = "AND pos < ?", []any{to}
		}
		out, err = windowItems(ctx, tx, key, from, cond, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("window %s: items: %w", key, err)
	}
	return out, nil
}

// windowState reads what an evictor sees of a window.
func windowState(ctx context.Context, tx *sql.Tx, w store.Window) (store.WindowState, error) {
	st := store.WindowState{Window: w, Refs: []store.WindowRef{}}
	var err error
	if st.Live, err = windowItems(ctx, tx, w.WindowKey, 0, "AND ref_id = ''"); err != nil {
		return st, err
	}
	st.Ref = func(id string) (store.Reference, error) { return reference(ctx, tx, id) }
	rows, err := tx.QueryContext(ctx, `SELECT ref_id, min(pos), max(pos) + 1, count(*), sum(tokens) FROM window_items
		WHERE session_id = ? AND agent_id = ? AND ref_id != ''
		GROUP BY ref_id ORDER BY min(pos)`, w.SessionID, w.AgentID)
	if err != nil {
		return st, err
	}
	for rows.Next() {
		var r store.WindowRef
		if err := rows.Scan(&r.ID, &r.From, &r.To, &r.Items, &r.Tokens); err != nil {
			return st, errors.Join(err, rows.Close())
		}
		st.Refs, st.Evicted = append(st.Refs, r), st.Evicted+r.Items
	}
	return st, errors.Join(rows.Err(), rows.Close())
}

func windowItems(ctx context.Context, tx *sql.Tx, key store.WindowKey, from int, cond string, args ...any) ([]store.WindowItem, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+itemCols+` FROM window_items WHERE session_id = ? AND agent_id = ? AND pos >= ? `+cond+` ORDER BY pos`,
		append([]any{key.SessionID, key.AgentID, from}, args...)...)
	if err != nil {
		return nil, err
	}
	out := []store.WindowItem{}
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		out = append(out, it)
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

// AppendWindow implements store.Store.
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
	ps, err := s.prepare(ctx, a.Entries)
	if err != nil {
		return fail(err)
	}
	var (
		w     store.Window
		items []store.WindowItem
		evs   []store.Eviction
	)
	err = s.write(ctx, func(tx *sql.Tx) error {
		items, evs = nil, nil
		var err error
		if w, err = windowHead(ctx, tx, key); err != nil {
			return err
		}
		if a.Key != "" {
			if _, err := tx.ExecContext(ctx, `DELETE FROM window_appends WHERE session_id = ? AND agent_id = ? AND created_at < ?`,
				key.SessionID, key.AgentID, unixNano(time.Now().Add(-store.AppendKeyTTL))); err != nil {
				return err
			}
			var digest string
			var from, count int
			err := tx.QueryRowContext(ctx, `SELECT digest, from_pos, items FROM window_appends WHERE session_id = ? AND agent_id = ? AND key = ?`,
				key.SessionID, key.AgentID, a.Key).Scan(&digest, &from, &count)
			switch {
			case err == nil:
				return a.Replayed(digest, from, count)
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		written := map[string]bool{}
		if len(ps) > 0 {
			b := newBatch(ctx, tx)
			defer b.close()
			for i := range ps {
				res, err := b.put(&ps[i])
				if err != nil {
					return &store.ItemError{Index: i, Err: err}
				}
				written[res.ID] = true
			}
			if err := b.finish(); err != nil {
				return err
			}
		}
		now := time.Now()
		var next int
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(pos) + 1, 0) FROM window_items WHERE session_id = ? AND agent_id = ?`,
			key.SessionID, key.AgentID).Scan(&next); err != nil {
			return err
		}
		// The head keeps the greatest place given: a forgotten last
		// item's, given again here, stays known.
		w.Next = max(w.Next, next+len(a.Items))
		if _, err := tx.ExecContext(ctx, `UPDATE windows SET next_pos = ? WHERE session_id = ? AND agent_id = ?`,
			w.Next, key.SessionID, key.AgentID); err != nil {
			return err
		}
		// A re-admission made before the places given again here came
		// before these items (see store.WindowReadmit).
		if _, err := tx.ExecContext(ctx, `UPDATE window_readmits SET at_pos = ?3 WHERE session_id = ?1 AND agent_id = ?2 AND at_pos > ?3`,
			key.SessionID, key.AgentID, next); err != nil {
			return err
		}
		w.Version++
		w.UpdatedAt = time.Now().UTC()
		insert, err := tx.PrepareContext(ctx, `INSERT INTO window_items(session_id, agent_id, pos, append_version, form, entry_ids, tokens, pinned, appended_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer insert.Close()
		for i, it := range a.Items {
			for _, id := range it.EntryIDs {
				if written[id] {
					continue
				}
				if err := mustExist(ctx, tx, id); err != nil {
					return &store.ItemError{Index: i, Err: err}
				}
			}
			it.Pos, it.Append, it.RefID = next+i, w.Version, ""
			if it.Time.IsZero() {
				it.Time = now
			}
			it.Time = fromUnixNano(unixNano(it.Time)) // as it is read back
			if _, err := insert.ExecContext(ctx, key.SessionID, key.AgentID, it.Pos, it.Append, it.Form,
				jsonIDs(it.EntryIDs), it.Tokens, it.Pinned, unixNano(it.Time)); err != nil {
				return err
			}
			items = append(items, it)
		}
		if a.Key != "" {
			if _, err := tx.ExecContext(ctx, `INSERT INTO window_appends(session_id, agent_id, key, digest, from_pos, items, created_at)
				VALUES (?, ?, ?, ?, ?, ?, ?)`, key.SessionID, key.AgentID, a.Key, a.Digest, next, len(a.Items), unixNano(now)); err != nil {
				return err
			}
		}
		evs, err = finishWindow(ctx, tx, w, evict)
		return err
	})
	if err != nil {
		return fail(err)
	}
	return w, items, evs, nil
}

// jsonIDs encodes entry IDs as a JSON list, [] for none.
func jsonIDs(ids []string) string {
	if len(ids) == 0 {
		return "[]"
	}
	return jsonList(ids).String
}

// applyEvictions writes each eviction's reference and marks its items
// evicted: every item of its run must be in the window or under a
// reference it absorbs, of this window's session and agent.
func applyEvictions(ctx context.Context, tx *sql.Tx, key store.WindowKey, st store.WindowState, evs []store.Eviction) error {
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
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM window_items WHERE session_id = ? AND agent_id = ? AND pos >= ? AND pos < ?`,
			key.SessionID, key.AgentID, ev.From, ev.To).Scan(&total); err != nil {
			return err
		}
		if n+covered == 0 || total != n+covered {
			return fmt.Errorf("eviction %d: items %d-%d are not all in the window or under the references it absorbs", i, ev.From, ev.To)
		}
		if err := insertRef(ctx, tx, r); err != nil {
			// A run re-admitted and evicted again goes back under its
			// reference, whose markers are still about.
			var ce *store.ConflictError
			if !errors.As(err, &ce) || !sameRef(ctx, tx, r) {
				return fmt.Errorf("eviction %d: %w", i, err)
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE window_items SET ref_id = ? WHERE session_id = ? AND agent_id = ? AND pos >= ? AND pos < ? AND ref_id = ''`,
			r.ID, key.SessionID, key.AgentID, ev.From, ev.To)
		if err != nil {
			return err
		}
		if m, err := res.RowsAffected(); err != nil {
			return err
		} else if int(m) != n {
			return fmt.Errorf("eviction %d: items %d-%d: %d of them were in the window, %d marked", i, ev.From, ev.To, n, m)
		}
		// (A run may be only references joined, none of its items in the
		// window: a layout that merges markers.)
		for _, a := range ev.Absorb {
			if _, err := tx.ExecContext(ctx, `UPDATE window_items SET ref_id = ? WHERE session_id = ? AND agent_id = ? AND ref_id = ?`,
				r.ID, key.SessionID, key.AgentID, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReadmitWindow implements store.Store.
func (s *Store) ReadmitWindow(ctx context.Context, key store.WindowKey, refID string, evict store.Evictor) (store.Window, []store.Eviction, error) {
	return s.changeWindow(ctx, key, "readmit "+refID+" to window", evict, func(tx *sql.Tx) error {
		var r store.WindowReadmit
		var n int
		err := tx.QueryRowContext(ctx, `SELECT coalesce(min(pos), 0), coalesce(max(pos) + 1, 0), count(*),
			(SELECT coalesce(max(pos) + 1, 0) FROM window_items WHERE session_id = ?1 AND agent_id = ?2)
			FROM window_items WHERE session_id = ?1 AND agent_id = ?2 AND ref_id = ?3`,
			key.SessionID, key.AgentID, refID).Scan(&r.From, &r.To, &n, &r.At)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no message of the window is under reference %q: %w", refID, store.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE window_items SET ref_id = '' WHERE session_id = ? AND agent_id = ? AND ref_id = ?`,
			key.SessionID, key.AgentID, refID); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO window_readmits(session_id, agent_id, seq, at_pos, from_pos, to_pos)
			SELECT ?1, ?2, coalesce(max(seq) + 1, 0), ?3, ?4, ?5 FROM window_readmits WHERE session_id = ?1 AND agent_id = ?2`,
			key.SessionID, key.AgentID, r.At, r.From, r.To)
		return err
	})
}

// RelayWindow implements store.Store.
func (s *Store) RelayWindow(ctx context.Context, key store.WindowKey, evict store.Evictor) (store.Window, []store.Eviction, error) {
	return s.changeWindow(ctx, key, "lay out window", evict, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE window_items SET ref_id = '' WHERE session_id = ? AND agent_id = ? AND ref_id != ''`,
			key.SessionID, key.AgentID)
		return err
	})
}

// changeWindow makes a change to a window's items in one transaction, then
// its evictor's evictions and its new version (finishWindow); what names
// the change in errors.
func (s *Store) changeWindow(ctx context.Context, key store.WindowKey, what string, evict store.Evictor, change func(tx *sql.Tx) error) (store.Window, []store.Eviction, error) {
	if err := key.Validate(); err != nil {
		return store.Window{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	var (
		w   store.Window
		evs []store.Eviction
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		evs = nil
		var err error
		if w, err = windowHead(ctx, tx, key); err != nil {
			return err
		}
		if err := change(tx); err != nil {
			return err
		}
		w.Version++
		w.UpdatedAt = time.Now().UTC()
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
func finishWindow(ctx context.Context, tx *sql.Tx, w store.Window, evict store.Evictor) ([]store.Eviction, error) {
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
	_, err := tx.ExecContext(ctx, `UPDATE windows SET version = ?, updated_at = ? WHERE session_id = ? AND agent_id = ?`,
		w.Version, unixNano(w.UpdatedAt), w.SessionID, w.AgentID)
	return evs, err
}

// sameRef reports whether the stored reference r.ID stands for the same
// content of the same window as r.
func sameRef(ctx context.Context, tx *sql.Tx, r store.Reference) bool {
	var session, agent, ids string
	if err := tx.QueryRowContext(ctx, `SELECT session_id, agent_id, content_ids FROM refs WHERE id = ?`, r.ID).Scan(&session, &agent, &ids); err != nil {
		return false
	}
	return session == r.SessionID && agent == r.AgentID && ids == jsonIDs(r.ContentIDs)
}

// WindowSummaries implements store.Store.
func (s *Store) WindowSummaries(ctx context.Context, key store.WindowKey) (int64, []store.WindowSummary, error) {
	var (
		epoch int64
		out   []store.WindowSummary
	)
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT level, from_pos, to_pos, digest, text, tokens, made_by, epoch, created_at
			FROM window_summaries WHERE session_id = ? AND agent_id = ? ORDER BY level, from_pos`, key.SessionID, key.AgentID)
		if err != nil {
			return err
		}
		out, epoch = nil, 0
		for rows.Next() {
			var w store.WindowSummary
			var at int64
			if err := rows.Scan(&w.Level, &w.From, &w.To, &w.Digest, &w.Text, &w.Tokens, &w.By, &w.Epoch, &at); err != nil {
				return errors.Join(err, rows.Close())
			}
			w.CreatedAt = fromUnixNano(at)
			epoch = max(epoch, w.Epoch)
			out = append(out, w)
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return 0, nil, fmt.Errorf("window %s: summaries: %w", key, err)
	}
	return epoch, out, nil
}

// PutWindowSummaries implements store.Store: the epoch is read and the
// summaries written in one write transaction, which SQLite runs one at a
// time, so two writers that read the same epoch cannot both succeed.
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
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		var now int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(epoch), 0) FROM window_summaries WHERE session_id = ? AND agent_id = ?`,
			key.SessionID, key.AgentID).Scan(&now); err != nil {
			return err
		}
		if now != epoch {
			return fmt.Errorf("%w (expected epoch %d, the window's is %d)", store.ErrStaleEpoch, epoch, now)
		}
		next = now + 1
		at := unixNano(time.Now())
		for _, w := range sums {
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO window_summaries(session_id, agent_id, level, from_pos, to_pos, digest, text, tokens, made_by, epoch, created_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, key.SessionID, key.AgentID, w.Level, w.From, w.To, w.Digest, w.Text, w.Tokens, w.By, next, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("window %s: write summaries: %w", key, err)
	}
	return next, nil
}
