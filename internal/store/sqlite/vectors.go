package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/engramhq/engram/internal/store"
)

func encodeVector(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func decodeVector(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// modelID returns the ID of a vector model, or 0 if it has no vectors.
func modelID(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, model string) (id int64, dim int, err error) {
	err = q.QueryRowContext(ctx, `SELECT id, dim FROM vector_models WHERE name = ?`, model).Scan(&id, &dim)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, nil
	}
	return id, dim, err
}

// inlineChunkBytes is the size of the entries whose chunks PendingChunks
// reads by substr. SQLite's substr reads a whole blob to return a piece of
// it, so reading each chunk of a long entry by substr cost the entry's
// size per chunk, quadratic in the entry (5.9 s for one entry of 5 MiB);
// the chunks of longer entries are cut from their content read once.
const inlineChunkBytes = 64 << 10

// PendingChunks implements store.Store. Chunks of entries over
// inlineChunkBytes are cut from their entry's content, read once per page.
// A worker paging through a long entry's chunks still reads the entry once
// a page (its size times chunks/limit in all, where substr read it once a
// chunk); keeping it from one page to the next would need to know that no
// purge or redaction changed it in between.
func (s *Store) PendingChunks(ctx context.Context, model string, after int64, limit int) ([]store.ChunkText, error) {
	var out []store.ChunkText
	err := s.read(ctx, func(db *sql.DB) (err error) {
		// One snapshot for the chunks' ranges and the contents they are
		// cut from.
		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, rollback(tx)) }()
		id, _, err := modelID(ctx, tx, model)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT c.id, c.entry, c.start_byte, c.end_byte,
				CASE WHEN e.size <= ? THEN substr(e.content, c.start_byte + 1, c.end_byte - c.start_byte) END,
				coalesce((SELECT f.path FROM files f WHERE f.entry = e.pk AND f.state = 'current' ORDER BY f.path LIMIT 1), ''),
				CASE WHEN c.ordinal = 0 THEN coalesce((SELECT x.text FROM contexts x WHERE x.entry = e.pk), '') ELSE '' END
			FROM chunks c JOIN entries e ON e.pk = c.entry
			WHERE c.id > ? AND e.fts = ? AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.model = ? AND v.chunk = c.id)
			ORDER BY c.id LIMIT ?`, inlineChunkBytes, after, ftsMain, id, limit)
		if err != nil {
			return err
		}
		out = out[:0]
		var big []chunkSpan // chunks of long entries, still without text
		for rows.Next() {
			var c store.ChunkText
			var sp chunkSpan
			var text []byte
			if err := rows.Scan(&c.ID, &sp.entry, &sp.start, &sp.end, &text, &c.Path, &c.Context); err != nil {
				return errors.Join(err, rows.Close())
			}
			if text == nil {
				sp.chunk = len(out)
				big = append(big, sp)
			}
			c.Text = string(text)
			out = append(out, c)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		return cutChunks(ctx, tx, out, big)
	})
	if err != nil {
		return nil, fmt.Errorf("pending chunks for %s: %w", model, err)
	}
	return out, nil
}

// chunkSpan is where chunk out[chunk] of PendingChunks lies: its entry's pk
// and its byte range.
type chunkSpan struct {
	chunk      int
	entry      int64
	start, end int
}

// cutChunks sets the text of chunks at spans, which are in order, reading
// each entry's content once.
func cutChunks(ctx context.Context, tx *sql.Tx, chunks []store.ChunkText, spans []chunkSpan) error {
	var pk int64
	var content []byte
	for _, sp := range spans {
		if sp.entry != pk || content == nil {
			pk = sp.entry
			if err := tx.QueryRowContext(ctx, `SELECT content FROM entries WHERE pk = ?`, pk).Scan(&content); err != nil {
				return fmt.Errorf("content of entry %d: %w", pk, err)
			}
		}
		start, end := min(sp.start, len(content)), min(sp.end, len(content))
		chunks[sp.chunk].Text = string(content[start:max(start, end)])
	}
	return nil
}

// PutVectors implements store.Store.
func (s *Store) PutVectors(ctx context.Context, model string, dim int, vecs []store.ChunkVector) error {
	if model == "" || dim <= 0 {
		return &store.ValidationError{Field: "model", Msg: "a vector model needs a name and a positive dimension"}
	}
	for i, v := range vecs {
		if len(v.Vector) != dim {
			return &store.ItemError{Index: i, Err: &store.ValidationError{Field: "vector",
				Msg: fmt.Sprintf("has %d dimensions, the model has %d", len(v.Vector), dim)}}
		}
		for _, x := range v.Vector {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return &store.ItemError{Index: i, Err: &store.ValidationError{Field: "vector", Msg: "holds NaN or Inf"}}
			}
		}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		id, have, err := modelID(ctx, tx, model)
		if err != nil {
			return err
		}
		if id == 0 {
			r, err := tx.ExecContext(ctx, `INSERT INTO vector_models(name, dim) VALUES (?, ?)`, model, dim)
			if err != nil {
				return err
			}
			if id, err = r.LastInsertId(); err != nil {
				return err
			}
		} else if have != dim {
			return &store.ValidationError{Field: "vector", Msg: fmt.Sprintf("model %s has %d dimensions, not %d", model, have, dim)}
		}
		// Each vector written, new or replaced, is numbered after every
		// other of its model. The write transaction holds the database's
		// one write lock from its start (BEGIN IMMEDIATE), across
		// processes, so the numbers are in commit order.
		var top int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM vectors WHERE model = ?`, id).Scan(&top); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO vectors(model, chunk, vec, seq) VALUES (?, ?, ?, ?)
			ON CONFLICT(model, chunk) DO UPDATE SET vec = excluded.vec, seq = excluded.seq`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i, v := range vecs {
			if _, err := st.ExecContext(ctx, id, v.ID, encodeVector(v.Vector), top+int64(i)+1); err != nil {
				return &store.ItemError{Index: i, Err: err}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put vectors of %s: %w", model, err)
	}
	return nil
}

// Vectors implements store.Store.
func (s *Store) Vectors(ctx context.Context, model string, after int64, limit int) ([]store.ChunkVector, error) {
	var out []store.ChunkVector
	err := s.read(ctx, func(db *sql.DB) error {
		id, _, err := modelID(ctx, db, model)
		if err != nil || id == 0 {
			return err
		}
		rows, err := db.QueryContext(ctx, `SELECT v.chunk, v.vec, v.seq FROM vectors v
			JOIN chunks c ON c.id = v.chunk JOIN entries e ON e.pk = c.entry
			WHERE v.model = ? AND v.seq > ? AND e.fts = ? ORDER BY v.seq LIMIT ?`, id, after, ftsMain, limit)
		if err != nil {
			return err
		}
		out = out[:0]
		for rows.Next() {
			var v store.ChunkVector
			var b []byte
			if err := rows.Scan(&v.ID, &b, &v.Seq); err != nil {
				return errors.Join(err, rows.Close())
			}
			v.Vector = decodeVector(b)
			out = append(out, v)
		}
		return errors.Join(rows.Err(), rows.Close())
	})
	if err != nil {
		return nil, fmt.Errorf("vectors of %s: %w", model, err)
	}
	return out, nil
}

// DropVectors implements store.Store.
func (s *Store) DropVectors(ctx context.Context, model string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		id, _, err := modelID(ctx, tx, model)
		if err != nil || id == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM vectors WHERE model = ?`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM vector_models WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("drop vectors of %s: %w", model, err)
	}
	return nil
}

// VectorStats implements store.Store.
func (s *Store) VectorStats(ctx context.Context, model string) (store.VectorStats, error) {
	var st store.VectorStats
	err := s.read(ctx, func(db *sql.DB) error {
		id, dim, err := modelID(ctx, db, model)
		if err != nil {
			return err
		}
		st.Dim = dim
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM chunks c JOIN entries e ON e.pk = c.entry WHERE e.fts = ?`,
			ftsMain).Scan(&st.Chunks); err != nil {
			return err
		}
		return db.QueryRowContext(ctx, `SELECT count(*) FROM vectors v JOIN chunks c ON c.id = v.chunk
			JOIN entries e ON e.pk = c.entry WHERE v.model = ? AND e.fts = ?`, id, ftsMain).Scan(&st.Embedded)
	})
	if err != nil {
		return st, fmt.Errorf("vector stats of %s: %w", model, err)
	}
	return st, nil
}

// ChunkHits implements store.Store.
func (s *Store) ChunkHits(ctx context.Context, ids []int64, filter store.Filter) ([]store.Hit, error) {
	if err := filter.Validate(); err != nil {
		return nil, err
	}
	cands := make([]candidate, len(ids))
	for i, id := range ids {
		cands[i] = candidate{rowid: id}
	}
	return s.hydrate(ctx, cands, filter)
}

// FilterChunks implements store.Store.
func (s *Store) FilterChunks(ctx context.Context, filter store.Filter, limit int) ([]int64, error) {
	if err := filter.Validate(); err != nil {
		return nil, err
	}
	cond, args := filterSQL(filter)
	history := filter.History // history's chunks as well as the current
	var ids []int64
	// From the occurrences, whose indexes serve the filters (time,
	// session, agent, type), to their entries' chunks.
	err := s.query(ctx, `SELECT DISTINCT c.id FROM occurrences o
		JOIN entries e ON e.pk = o.entry JOIN chunks c ON c.entry = o.entry
		WHERE `+cond+` AND (e.fts != ? OR ?) LIMIT ?`, append(args, ftsHistory, history, limit+1),
		func(rows *sql.Rows) error {
			var id int64
			err := rows.Scan(&id)
			ids = append(ids, id)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("filter chunks: %w", err)
	}
	return ids, nil
}

// PutBlob implements store.Store.
func (s *Store) PutBlob(ctx context.Context, name string, data []byte) error {
	if name == "" {
		return &store.ValidationError{Field: "name", Msg: "a blob needs a name"}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO blobs(name, data, created_at) VALUES (?, ?, ?)
			ON CONFLICT(name) DO UPDATE SET data = excluded.data, created_at = excluded.created_at`,
			name, data, unixNano(time.Now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("put blob %s: %w", name, err)
	}
	return nil
}

// Blob implements store.Store.
func (s *Store) Blob(ctx context.Context, name string) ([]byte, error) {
	var data []byte
	err := s.read(ctx, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, `SELECT data FROM blobs WHERE name = ?`, name).Scan(&data)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("blob %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get blob %s: %w", name, err)
	}
	return data, nil
}

// DeleteBlob implements store.Store.
func (s *Store) DeleteBlob(ctx context.Context, name string) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM blobs WHERE name = ?`, name)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete blob %s: %w", name, err)
	}
	return nil
}

// RecordAccess implements store.Store.
func (s *Store) RecordAccess(ctx context.Context, ids []int64, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `INSERT INTO access(chunk, count, last_at)
			SELECT id, 1, ? FROM chunks WHERE id = ?
			ON CONFLICT(chunk) DO UPDATE SET count = count + 1, last_at = max(last_at, excluded.last_at)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, id := range ids {
			if _, err := st.ExecContext(ctx, unixNano(at), id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record access: %w", err)
	}
	return nil
}

// HotChunks implements store.Store.
func (s *Store) HotChunks(ctx context.Context, since time.Time, limit int) ([]store.Access, error) {
	var out []store.Access
	err := s.query(ctx, `SELECT chunk, count, last_at FROM access WHERE last_at >= ? ORDER BY last_at DESC, chunk DESC LIMIT ?`,
		[]any{unixNano(since), limit}, func(rows *sql.Rows) error {
			var a store.Access
			var last int64
			if err := rows.Scan(&a.ChunkID, &a.Count, &last); err != nil {
				return err
			}
			a.Last = fromUnixNano(last)
			out = append(out, a)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("hot chunks: %w", err)
	}
	return out, nil
}
