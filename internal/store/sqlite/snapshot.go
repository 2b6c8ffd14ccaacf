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

// PutSnapshot implements store.Store.
func (s *Store) PutSnapshot(ctx context.Context, snap store.WindowSnapshot, keep int) (store.WindowSnapshot, error) {
	key := snap.WindowKey
	fail := func(err error) (store.WindowSnapshot, error) {
		return store.WindowSnapshot{}, fmt.Errorf("put snapshot of window %s: %w", key, err)
	}
	if err := key.Validate(); err != nil {
		return fail(err)
	}
	if !json.Valid(snap.Body) {
		return fail(&store.ValidationError{Field: "body", Msg: "not JSON"})
	}
	if !json.Valid(snap.Report) {
		return fail(&store.ValidationError{Field: "report", Msg: "not JSON"})
	}
	hash := store.ID(snap.Body)
	if snap.Hash != "" && snap.Hash != hash {
		return fail(&store.ValidationError{Field: "hash", Msg: fmt.Sprintf("%s is not the body's SHA-256, %s", snap.Hash, hash)})
	}
	out := snap
	out.Hash, out.Size, out.Body = hash, len(snap.Body), nil
	if out.CreatedAt.IsZero() {
		out.CreatedAt = time.Now()
	}
	out.CreatedAt = fromUnixNano(unixNano(out.CreatedAt)) // as it is read back
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO snapshot_bodies(hash, body) VALUES (?, ?) ON CONFLICT(hash) DO NOTHING`,
			hash, snap.Body); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM window_snapshots WHERE session_id = ? AND agent_id = ?`,
			key.SessionID, key.AgentID).Scan(&out.Seq); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO window_snapshots(session_id, agent_id, seq, hash, version, created_at, report)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, key.SessionID, key.AgentID, out.Seq, hash, out.Version, unixNano(out.CreatedAt), string(snap.Report)); err != nil {
			return err
		}
		if keep <= 0 || out.Seq <= int64(keep) {
			return nil
		}
		_, err := dropSnapshots(ctx, tx, `session_id = ? AND agent_id = ? AND seq <= ?`, key.SessionID, key.AgentID, out.Seq-int64(keep))
		return err
	})
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// dropSnapshots deletes the snapshots that cond (on window_snapshots)
// selects, and the bodies no snapshot left refers to. It returns how
// many snapshots went.
func dropSnapshots(ctx context.Context, tx *sql.Tx, cond string, args ...any) (int64, error) {
	rows, err := tx.QueryContext(ctx, `DELETE FROM window_snapshots WHERE `+cond+` RETURNING hash`, args...)
	if err != nil {
		return 0, err
	}
	var (
		n      int64
		hashes = map[string]bool{}
	)
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return 0, errors.Join(err, rows.Close())
		}
		n, hashes[h] = n+1, true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, err
	}
	for h := range hashes {
		if _, err := tx.ExecContext(ctx, `DELETE FROM snapshot_bodies WHERE hash = ?1
			AND NOT EXISTS (SELECT 1 FROM window_snapshots WHERE hash = ?1)`, h); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// snapshotCols are the columns scanSnapshot reads, of window_snapshots
// as s.
const snapshotCols = `s.session_id, s.agent_id, s.seq, s.hash, s.version, s.created_at, s.report`

func scanSnapshot(sc scanner, extra ...any) (store.WindowSnapshot, error) {
	var (
		snap   store.WindowSnapshot
		at     int64
		report string
	)
	dest := append([]any{&snap.SessionID, &snap.AgentID, &snap.Seq, &snap.Hash, &snap.Version, &at, &report}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return snap, err
	}
	snap.CreatedAt, snap.Report = fromUnixNano(at), []byte(report)
	return snap, nil
}

// Snapshots implements store.Store.
func (s *Store) Snapshots(ctx context.Context, key store.WindowKey, limit int) ([]store.WindowSnapshot, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	out := []store.WindowSnapshot{}
	err := s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+snapshotCols+`, length(b.body) FROM window_snapshots s
			JOIN snapshot_bodies b ON b.hash = s.hash
			WHERE s.session_id = ? AND s.agent_id = ? ORDER BY s.seq DESC LIMIT ?`, key.SessionID, key.AgentID, limit)
		if err != nil {
			return err
		}
		out = out[:0]
		for rows.Next() {
			var size int
			snap, err := scanSnapshot(rows, &size)
			if err != nil {
				return errors.Join(err, rows.Close())
			}
			snap.Size = size
			out = append(out, snap)
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return nil, fmt.Errorf("snapshots of window %s: %w", key, err)
	}
	return out, nil
}

// Snapshot implements store.Store.
func (s *Store) Snapshot(ctx context.Context, key store.WindowKey, hash string) (store.WindowSnapshot, error) {
	prefix, err := store.ParseSnapshotHash(hash)
	if err != nil {
		return store.WindowSnapshot{}, fmt.Errorf("snapshot of window %s: %w", key, err)
	}
	var snap store.WindowSnapshot
	err = s.readTx(ctx, func(tx *sql.Tx) error {
		var err error
		// Hashes are lower-case hex, so those that start with prefix sort
		// from it to below prefix+"g".
		rows, err := tx.QueryContext(ctx, `SELECT DISTINCT hash FROM window_snapshots
			WHERE session_id = ? AND agent_id = ? AND hash >= ?3 AND hash < ?3 || 'g' LIMIT 5`, key.SessionID, key.AgentID, prefix)
		if err != nil {
			return err
		}
		var found []string
		for rows.Next() {
			var h string
			if err := rows.Scan(&h); err != nil {
				return errors.Join(err, rows.Close())
			}
			found = append(found, h)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		switch len(found) {
		case 0:
			return fmt.Errorf("no snapshot %s: %w", prefix, store.ErrNotFound)
		case 1:
		default:
			return &store.AmbiguousError{Prefix: prefix, Matches: found}
		}
		snap, err = snapshotWhere(ctx, tx, `s.session_id = ? AND s.agent_id = ? AND s.hash = ? ORDER BY s.seq DESC LIMIT 1`,
			key.SessionID, key.AgentID, found[0])
		return err
	})
	if err != nil {
		return store.WindowSnapshot{}, fmt.Errorf("snapshot of window %s: %w", key, err)
	}
	return snap, nil
}

// SnapshotAt implements store.Store.
func (s *Store) SnapshotAt(ctx context.Context, key store.WindowKey, seq int64) (store.WindowSnapshot, error) {
	var snap store.WindowSnapshot
	err := s.read(ctx, func(db *sql.DB) error {
		var err error
		snap, err = snapshotWhere(ctx, db, `s.session_id = ? AND s.agent_id = ? AND s.seq = ?`, key.SessionID, key.AgentID, seq)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no snapshot %d: %w", seq, err)
		}
		return err
	})
	if err != nil {
		return store.WindowSnapshot{}, fmt.Errorf("snapshot of window %s: %w", key, err)
	}
	return snap, nil
}

// snapshotWhere reads the one snapshot that cond selects, with its body.
func snapshotWhere(ctx context.Context, q querier, cond string, args ...any) (store.WindowSnapshot, error) {
	var body []byte
	snap, err := scanSnapshot(q.QueryRowContext(ctx, `SELECT `+snapshotCols+`, b.body FROM window_snapshots s
		JOIN snapshot_bodies b ON b.hash = s.hash WHERE `+cond, args...), &body)
	if errors.Is(err, sql.ErrNoRows) {
		return snap, store.ErrNotFound
	}
	if err != nil {
		return snap, err
	}
	snap.Body, snap.Size = body, len(body)
	return snap, nil
}
