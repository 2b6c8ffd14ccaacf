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

// Snapshot bodies across servers. A body is stored once by its hash,
// whichever windows' snapshots share it, and dropped when the last
// snapshot that refers to it goes (keep, a forget). Two transactions
// meet over a body that one drops while the other refers to it anew:
// with nothing more, the dropper's "no snapshot refers to it", read in
// its own snapshot of the database, misses the other's uncommitted
// snapshot row, and the body goes from under it. So both lock the body's
// row:
//
//   - a writer stores the body with an upsert: a body stored already is
//     updated to itself, which locks its row to the writer's commit (a
//     dropper that committed first leaves the insert to happen);
//   - a dropper (dropSnapshots) first takes the rows FOR UPDATE, in hash
//     order, which waits for every writer holding one, and only then, in
//     a statement of its own, deletes those no snapshot refers to: at READ
//     COMMITTED that statement sees what the writers it waited for
//     committed.
//
// A single DELETE ... WHERE NOT EXISTS would not do: a DELETE that waits
// for a row lock re-checks its condition only when the row itself was
// changed, not when another row (the snapshot) appeared. A foreign key
// from window_snapshots to snapshot_bodies would catch the same race, but
// as an error for one of the two transactions to fail with, where this
// makes one wait.

// PutSnapshot implements store.Store. The window's row is locked, so
// the next number is this snapshot's alone.
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := lockWindow(ctx, tx, key); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) + 1 FROM window_snapshots WHERE session_id = $1 AND agent_id = $2`,
			key.SessionID, key.AgentID).Scan(&out.Seq); err != nil {
			return err
		}
		// The bodies of the snapshots keep drops, but for this one's.
		cut := out.Seq - int64(keep)
		var drop []string
		if keep > 0 && cut > 0 {
			rows, err := tx.Query(ctx, `SELECT DISTINCT hash FROM window_snapshots
				WHERE session_id = $1 AND agent_id = $2 AND seq <= $3 AND hash != $4`, key.SessionID, key.AgentID, cut, hash)
			if err != nil {
				return err
			}
			if drop, err = collectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
		}
		if err := lockBodies(ctx, tx, drop, hash, snap.Body); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO window_snapshots (session_id, agent_id, seq, hash, version, created_at, report)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, key.SessionID, key.AgentID, out.Seq, hash, out.Version, unixNano(out.CreatedAt), string(snap.Report)); err != nil {
			return err
		}
		if keep <= 0 || cut <= 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM window_snapshots WHERE session_id = $1 AND agent_id = $2 AND seq <= $3`,
			key.SessionID, key.AgentID, cut); err != nil {
			return err
		}
		return dropBodies(ctx, tx, drop)
	})
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// lockBodies locks, in hash order, the rows of the bodies to drop FOR
// UPDATE and the body to hold (holdBody), so that two PutSnapshots, each
// holding one body and dropping another's, never wait for each other in
// a cycle.
func lockBodies(ctx context.Context, tx pgx.Tx, drop []string, hold string, body []byte) error {
	slices.Sort(drop)
	i, _ := slices.BinarySearch(drop, hold)
	if err := lockDropped(ctx, tx, drop[:i]); err != nil {
		return err
	}
	if err := holdBody(ctx, tx, hold, body); err != nil {
		return err
	}
	return lockDropped(ctx, tx, drop[i:])
}

// lockDropped locks the rows of bodies to drop FOR UPDATE, in hash order.
func lockDropped(ctx context.Context, tx pgx.Tx, hashes []string) error {
	if len(hashes) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT hash FROM snapshot_bodies WHERE hash = ANY($1) ORDER BY hash FOR UPDATE`, hashes)
	return err
}

// holdBody stores a snapshot body, or finds it stored, and keeps it from
// being dropped until tx ends (see the top of this file): one upsert,
// whose update of a stored body (to itself) locks its row, where an
// insert, then a lock of the row found, left a gap a dropper could take
// the row in, again and again under load.
func holdBody(ctx context.Context, tx pgx.Tx, hash string, body []byte) error {
	_, err := tx.Exec(ctx, `INSERT INTO snapshot_bodies (hash, body) VALUES ($1, $2)
		ON CONFLICT (hash) DO UPDATE SET hash = excluded.hash`, hash, body)
	return err
}

// dropSnapshots deletes the snapshots that cond (on window_snapshots,
// with its parameters args) selects, and the bodies no snapshot left
// refers to, in tx. It returns how many snapshots went. It relies on tx
// being READ COMMITTED (as s.write's are): see the top of this file.
func dropSnapshots(ctx context.Context, tx pgx.Tx, cond string, args ...any) (int64, error) {
	rows, err := tx.Query(ctx, `DELETE FROM window_snapshots WHERE `+cond+` RETURNING hash`, args...)
	if err != nil {
		return 0, err
	}
	hashes, err := collectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	n := int64(len(hashes))
	slices.Sort(hashes)
	hashes = slices.Compact(hashes)
	if err := lockDropped(ctx, tx, hashes); err != nil {
		return 0, err
	}
	return n, dropBodies(ctx, tx, hashes)
}

// dropBodies deletes the bodies of hashes that no snapshot refers to, in
// a statement after the one that locked their rows (lockDropped), so that
// it sees the snapshots of the writers it waited for.
func dropBodies(ctx context.Context, tx pgx.Tx, hashes []string) error {
	if len(hashes) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `DELETE FROM snapshot_bodies b WHERE b.hash = ANY($1)
		AND NOT EXISTS (SELECT 1 FROM window_snapshots s WHERE s.hash = b.hash)`, hashes)
	return err
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
	var lim *int // NULL: no limit
	if limit > 0 {
		lim = &limit
	}
	var out []store.WindowSnapshot
	err := s.read(ctx, func(tx pgx.Tx) error {
		if _, err := windowHead(ctx, tx, key); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+snapshotCols+`, octet_length(b.body) FROM window_snapshots s
			JOIN snapshot_bodies b ON b.hash = s.hash
			WHERE s.session_id = $1 AND s.agent_id = $2 ORDER BY s.seq DESC LIMIT $3`, key.SessionID, key.AgentID, lim)
		if err != nil {
			return err
		}
		out, err = collectRows(rows, func(row pgx.CollectableRow) (store.WindowSnapshot, error) {
			var size int
			snap, err := scanSnapshot(row, &size)
			snap.Size = size
			return snap, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("snapshots of window %s: %w", key, err)
	}
	if out == nil {
		out = []store.WindowSnapshot{}
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
	err = s.read(ctx, func(tx pgx.Tx) error {
		// Hashes are lower-case hex in byte order (COLLATE "C"), so those
		// that start with prefix sort from it to below prefix+"g".
		rows, err := tx.Query(ctx, `SELECT DISTINCT hash FROM window_snapshots
			WHERE session_id = $1 AND agent_id = $2 AND hash >= $3 AND hash < $4 ORDER BY hash LIMIT 5`,
			key.SessionID, key.AgentID, prefix, prefix+"g")
		if err != nil {
			return err
		}
		found, err := collectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		switch len(found) {
		case 0:
			return fmt.Errorf("no snapshot %s: %w", prefix, store.ErrNotFound)
		case 1:
		default:
			return &store.AmbiguousError{Prefix: prefix, Matches: found}
		}
		snap, err = snapshotWhere(ctx, tx, `s.session_id = $1 AND s.agent_id = $2 AND s.hash = $3 ORDER BY s.seq DESC LIMIT 1`,
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
	err := s.retry(ctx, func() (err error) {
		snap, err = snapshotWhere(ctx, s.pool, `s.session_id = $1 AND s.agent_id = $2 AND s.seq = $3`, key.SessionID, key.AgentID, seq)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		err = fmt.Errorf("no snapshot %d: %w", seq, err)
	}
	if err != nil {
		return store.WindowSnapshot{}, fmt.Errorf("snapshot of window %s: %w", key, err)
	}
	return snap, nil
}

// snapshotWhere reads the one snapshot that cond selects, with its body.
func snapshotWhere(ctx context.Context, q querier, cond string, args ...any) (store.WindowSnapshot, error) {
	var body []byte
	snap, err := scanSnapshot(q.QueryRow(ctx, `SELECT `+snapshotCols+`, b.body FROM window_snapshots s
		JOIN snapshot_bodies b ON b.hash = s.hash WHERE `+cond, args...), &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return snap, store.ErrNotFound
	}
	if err != nil {
		return snap, err
	}
	snap.Body, snap.Size = body, len(body)
	return snap, nil
}
