package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// PutLinks implements store.Store.
func (s *Store) PutLinks(ctx context.Context, links []store.Link) error {
	var errs []error
	for i, l := range links {
		if err := l.Validate(); err != nil {
			errs = append(errs, &store.ItemError{Index: i, Err: err})
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("put links: %w", errors.Join(errs...))
	}
	now := time.Now()
	err := s.write(ctx, func(tx *sql.Tx) error {
		for i, l := range links {
			for _, id := range []string{l.FromID, l.ToID} {
				if err := mustExist(ctx, tx, id); err != nil {
					return &store.ItemError{Index: i, Err: err}
				}
			}
			t := l.CreatedAt
			if t.IsZero() {
				t = now
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO links(from_id, to_id, kind, created_at) VALUES (?, ?, ?, ?)
				ON CONFLICT DO NOTHING`, l.FromID, l.ToID, string(l.Kind), unixNano(t)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put links: %w", err)
	}
	return nil
}

func mustExist(ctx context.Context, tx *sql.Tx, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM entries WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
	}
	return err
}

// mustAllExist is mustExist for each of ids, in one query while they all
// exist (a reference over a long run names hundreds of entries, and a
// query each was most of the cost of storing it).
func mustAllExist(ctx context.Context, tx *sql.Tx, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	distinct := map[string]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM entries WHERE id IN (SELECT value FROM json_each(?))`,
		jsonList(ids)).Scan(&n); err != nil {
		return err
	}
	if n == len(distinct) {
		return nil
	}
	for _, id := range ids { // name the one missing
		if err := mustExist(ctx, tx, id); err != nil {
			return err
		}
	}
	return fmt.Errorf("entries of %d ids: %d found, %d distinct", len(ids), n, len(distinct))
}

// PutReference implements store.Store.
func (s *Store) PutReference(ctx context.Context, r store.Reference) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("put reference: %w", err)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now()
	}
	err := s.write(ctx, func(tx *sql.Tx) error { return insertRef(ctx, tx, r) })
	if err != nil {
		return fmt.Errorf("put reference %s: %w", r.ID, err)
	}
	return nil
}

// insertRef writes a valid reference whose content must be stored.
func insertRef(ctx context.Context, tx *sql.Tx, r store.Reference) error {
	// Inserted first: a reference stored already was checked then, and
	// one whose entries are missing fails the transaction.
	res, err := tx.ExecContext(ctx, `INSERT INTO refs(id, type, session_id, agent_id, content_ids, summary,
		tokens_saved, turn_from, turn_to, created_at, topics, entities, query_hints)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
		r.ID, string(r.Type), r.SessionID, r.AgentID, jsonList(r.ContentIDs).String, r.Summary,
		r.TokensSaved, r.TurnFrom, r.TurnTo, unixNano(r.CreatedAt),
		jsonList(r.Topics), jsonList(r.Entities), jsonList(r.QueryHints))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return &store.ConflictError{What: "reference " + r.ID, Msg: "already exists"}
	}
	return mustAllExist(ctx, tx, r.ContentIDs)
}

// PutSession implements store.Store.
func (s *Store) PutSession(ctx context.Context, ss store.Session) error {
	if err := ss.Validate(); err != nil {
		return err
	}
	meta, err := jsonObject(ss.Metadata)
	if err != nil {
		return err
	}
	now := time.Now()
	created, seen := ss.CreatedAt, ss.LastSeenAt
	if created.IsZero() {
		created = now
	}
	if seen.IsZero() {
		seen = created
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO sessions(id, name, created_at, last_seen_at, metadata) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET name = excluded.name, metadata = excluded.metadata,
				last_seen_at = max(last_seen_at, excluded.last_seen_at)`,
			ss.ID, ss.Name, unixNano(created), unixNano(seen), meta)
		return err
	})
	if err != nil {
		return fmt.Errorf("put session %s: %w", ss.ID, err)
	}
	return nil
}

// PutAgent implements store.Store.
func (s *Store) PutAgent(ctx context.Context, a store.Agent) error {
	if err := a.Validate(); err != nil {
		return err
	}
	now := time.Now()
	reg, seen := a.RegisteredAt, a.LastSeenAt
	if reg.IsZero() {
		reg = now
	}
	if seen.IsZero() {
		seen = reg
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if a.ParentID != "" {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM agents WHERE session_id = ? AND id = ?`, a.SessionID, a.ParentID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return &store.ValidationError{Field: "parent", Msg: fmt.Sprintf("agent %s is not registered in session %s", a.ParentID, a.SessionID)}
			} else if err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions(id, created_at, last_seen_at) VALUES (?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET last_seen_at = max(last_seen_at, excluded.last_seen_at)`,
			a.SessionID, unixNano(reg), unixNano(seen)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO agents(session_id, id, name, role, parent_id, model, context_window, registered_at, last_seen_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(session_id, id) DO UPDATE SET name = excluded.name, role = excluded.role,
				parent_id = excluded.parent_id, model = excluded.model, context_window = excluded.context_window,
				last_seen_at = max(last_seen_at, excluded.last_seen_at)`,
			a.SessionID, a.ID, a.Name, a.Role, a.ParentID, a.Model, a.ContextWindow, unixNano(reg), unixNano(seen))
		return err
	})
	if err != nil {
		return fmt.Errorf("put agent %s/%s: %w", a.SessionID, a.ID, err)
	}
	return nil
}
