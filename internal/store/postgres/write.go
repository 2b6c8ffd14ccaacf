package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

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
	err := s.write(ctx, func(tx pgx.Tx) error {
		for i, l := range links {
			if err := mustExist(ctx, tx, []string{l.FromID, l.ToID}); err != nil {
				return &store.ItemError{Index: i, Err: err}
			}
			t := l.CreatedAt
			if t.IsZero() {
				t = now
			}
			if _, err := tx.Exec(ctx, `INSERT INTO links (from_id, to_id, kind, created_at) VALUES ($1, $2, $3, $4)
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

// mustExist returns an error wrapping store.ErrNotFound for the first of
// ids that is no stored entry's.
func mustExist(ctx context.Context, q querier, ids []string) error {
	rows, err := q.Query(ctx, `SELECT id FROM entries WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	found, err := collectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !slices.Contains(found, id) {
			return fmt.Errorf("entry %s: %w", id, store.ErrNotFound)
		}
	}
	return nil
}

// PutReference implements store.Store.
func (s *Store) PutReference(ctx context.Context, r store.Reference) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("put reference: %w", err)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now()
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		inserted, err := insertRef(ctx, tx, r)
		if err == nil && !inserted {
			err = &store.ConflictError{What: "reference " + r.ID, Msg: "already exists"}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("put reference %s: %w", r.ID, err)
	}
	return nil
}

// insertRef writes a valid reference whose content must be stored, unless
// one of its ID is; it reports whether it wrote it.
func insertRef(ctx context.Context, tx pgx.Tx, r store.Reference) (bool, error) {
	if err := mustExist(ctx, tx, r.ContentIDs); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO refs (id, type, session_id, agent_id, content_ids, summary,
		tokens_saved, turn_from, turn_to, created_at, topics, entities, query_hints)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (id) DO NOTHING`,
		r.ID, string(r.Type), r.SessionID, r.AgentID, *jsonList(r.ContentIDs), r.Summary,
		r.TokensSaved, r.TurnFrom, r.TurnTo, unixNano(r.CreatedAt),
		jsonList(r.Topics), jsonList(r.Entities), jsonList(r.QueryHints))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
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
	err = s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO sessions (id, name, created_at, last_seen_at, metadata) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name, metadata = excluded.metadata,
				last_seen_at = greatest(sessions.last_seen_at, excluded.last_seen_at)`,
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		// The session's row first, as every writer of a session takes it.
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (id, created_at, last_seen_at) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET last_seen_at = greatest(sessions.last_seen_at, excluded.last_seen_at)`,
			a.SessionID, unixNano(reg), unixNano(seen)); err != nil {
			return err
		}
		if a.ParentID != "" {
			var one int
			err := tx.QueryRow(ctx, `SELECT 1 FROM agents WHERE session_id = $1 AND id = $2`, a.SessionID, a.ParentID).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return &store.ValidationError{Field: "parent", Msg: fmt.Sprintf("agent %s is not registered in session %s", a.ParentID, a.SessionID)}
			} else if err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO agents (session_id, id, name, role, parent_id, model, context_window, registered_at, last_seen_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (session_id, id) DO UPDATE SET name = excluded.name, role = excluded.role,
				parent_id = excluded.parent_id, model = excluded.model, context_window = excluded.context_window,
				last_seen_at = greatest(agents.last_seen_at, excluded.last_seen_at)`,
			a.SessionID, a.ID, a.Name, a.Role, a.ParentID, a.Model, a.ContextWindow, unixNano(reg), unixNano(seen))
		return err
	})
	if err != nil {
		return fmt.Errorf("put agent %s/%s: %w", a.SessionID, a.ID, err)
	}
	return nil
}

// PutBlob implements store.Store.
func (s *Store) PutBlob(ctx context.Context, name string, data []byte) error {
	if name == "" {
		return &store.ValidationError{Field: "name", Msg: "a blob needs a name"}
	}
	if data == nil {
		data = []byte{} // data is NOT NULL; an empty blob is one
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO blobs (name, data, created_at) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET data = excluded.data, created_at = excluded.created_at`,
			name, data, unixNano(time.Now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("put blob %s: %w", name, err)
	}
	return nil
}

// DeleteBlob implements store.Store.
func (s *Store) DeleteBlob(ctx context.Context, name string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM blobs WHERE name = $1`, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete blob %s: %w", name, err)
	}
	return nil
}

// PutSetting implements store.Store.
func (s *Store) PutSetting(ctx context.Context, key, value string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
		return err
	})
	if err != nil {
		return fmt.Errorf("put setting %s: %w", key, err)
	}
	return nil
}

// RecordAccess implements store.Store. Each ID counts once per time it is
// given; unknown chunks are ignored. The rows are taken in chunk order,
// so that two servers recording the same chunks at once never deadlock.
func (s *Store) RecordAccess(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO access (chunk, count, last_at)
			SELECT c.id, u.n, $2 FROM (SELECT id, count(*) AS n FROM unnest($1::bigint[]) AS id GROUP BY id) u
				JOIN chunks c ON c.id = u.id ORDER BY c.id
			ON CONFLICT (chunk) DO UPDATE SET count = access.count + excluded.count,
				last_at = greatest(access.last_at, excluded.last_at)`, ids, unixNano(at))
		if errCode(err) == "23503" {
			return raced("a chunk was deleted") // found no more when run again
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record access: %w", err)
	}
	return nil
}
