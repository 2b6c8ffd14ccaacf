package postgres

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// Vectors. The store keeps them and lists them; the engine searches them
// exactly, in memory, on both backends. They are stored as on SQLite, as
// little-endian float32 bytes, so that `engram store copy` moves them
// unchanged and the backends load the same index.
//
// Where the pgvector extension exists, an approximate index could live
// beside them, without changing what the contract returns: a column
// `emb vector` on vectors (its dimension varies by model, so one partial
// index per model: CREATE INDEX ... USING hnsw ((emb::vector(768)))
// WHERE model = 3), filled by PutVectors from the same floats. It would
// be made by a migration that runs only when `CREATE EXTENSION IF NOT
// EXISTS vector` succeeds, and read by a search method the engine does
// not have yet. Nothing here requires it.
const schemaVectors = `
-- vector_models names the embedding models vectors were made with.
CREATE TABLE vector_models (
	id   serial PRIMARY KEY,
	name text COLLATE "C" NOT NULL UNIQUE,
	dim  integer NOT NULL
);

-- vectors hold one vector per chunk and model, as little-endian float32
-- (searched exactly, in engram, as on SQLite; where pgvector exists an
-- index column can be added beside vec: see vectors.go). seq numbers a
-- model's vectors in the order they were written, in commit order (see
-- PutVectors): Vectors lists them by it.
CREATE TABLE vectors (
	model integer NOT NULL REFERENCES vector_models (id),
	chunk bigint NOT NULL REFERENCES chunks (id),
	vec   bytea NOT NULL,
	seq   bigint NOT NULL,
	PRIMARY KEY (model, chunk)
);
CREATE UNIQUE INDEX vectors_seq ON vectors (model, seq);
`

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

// modelID returns the ID and dimension of a vector model, or 0 if it has
// no vectors. lock is "" or a locking clause (FOR SHARE, FOR UPDATE).
func modelID(ctx context.Context, q querier, model, lock string) (id int32, dim int, err error) {
	err = q.QueryRow(ctx, `SELECT id, dim FROM vector_models WHERE name = $1 `+lock, model).Scan(&id, &dim)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, nil
	}
	return id, dim, err
}

// inlineChunkBytes is the size of the entries whose chunks PendingChunks
// cuts in the query. A larger content is stored compressed out of line
// (TOAST), and substring then decompresses all of it for each chunk; the
// chunks of such entries are cut from their content read once a page.
const inlineChunkBytes = 64 << 10

// PendingChunks implements store.Store.
func (s *Store) PendingChunks(ctx context.Context, model string, after int64, limit int) ([]store.ChunkText, error) {
	var out []store.ChunkText
	// One snapshot for the chunks' ranges and the contents they are cut
	// from.
	err := s.read(ctx, func(tx pgx.Tx) error {
		id, _, err := modelID(ctx, tx, model, "")
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT c.id, c.entry, c.start_byte, c.end_byte,
				CASE WHEN e.size <= $1 THEN substring(e.content FROM c.start_byte + 1 FOR c.end_byte - c.start_byte) END,
				coalesce((SELECT f.path FROM files f WHERE f.entry = e.pk AND f.state = 'current' ORDER BY f.path LIMIT 1), ''),
				CASE WHEN c.ordinal = 0 THEN coalesce((SELECT x.text FROM contexts x WHERE x.entry = e.pk), '') ELSE '' END
			FROM chunks c JOIN entries e ON e.pk = c.entry
			WHERE c.id > $2 AND e.fts = $3 AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.model = $4 AND v.chunk = c.id)
			ORDER BY c.id LIMIT $5`, inlineChunkBytes, after, spaceMain, id, limit)
		if err != nil {
			return err
		}
		out = out[:0]
		var big []chunkSpan // chunks of long entries, still without text
		for rows.Next() {
			var c store.ChunkText
			var sp chunkSpan
			var start, end int32
			var text []byte
			if err := rows.Scan(&c.ID, &sp.entry, &start, &end, &text, &c.Path, &c.Context); err != nil {
				rows.Close()
				return err
			}
			sp.start, sp.end = int(start), int(end)
			if text == nil {
				sp.chunk = len(out)
				big = append(big, sp)
			}
			c.Text = string(text)
			out = append(out, c)
		}
		if err := rows.Err(); err != nil {
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

// cutChunks sets the text of chunks at spans, which are in chunk order,
// reading each entry's content once.
func cutChunks(ctx context.Context, q querier, chunks []store.ChunkText, spans []chunkSpan) error {
	var pk int64
	var content []byte
	for _, sp := range spans {
		if sp.entry != pk || content == nil {
			pk = sp.entry
			if err := q.QueryRow(ctx, `SELECT content FROM entries WHERE pk = $1`, pk).Scan(&content); err != nil {
				return fmt.Errorf("content of entry %d: %w", pk, err)
			}
		}
		start, end := min(sp.start, len(content)), min(sp.end, len(content))
		chunks[sp.chunk].Text = string(content[start:max(start, end)])
	}
	return nil
}

// PutVectors implements store.Store.
//
// Several servers may embed at once, and each loads the vectors into
// memory by following their seq (Vectors), which must therefore increase
// in commit order: a reader that has seen seq N+1 must never later find
// an N committed after it. A bigserial would not do (two transactions
// take numbers in one order and may commit in the other), so every
// writer of a model first locks the model's row FOR UPDATE and holds it
// until it commits: the writers of one model take turns, and each
// numbers its vectors after the greatest seq of the model, read once it
// holds the lock. PostgreSQL makes a commit visible before it releases
// the transaction's locks, so the next writer's max(seq), and any
// snapshot that sees the next writer's rows, sees the rows before. The
// transaction runs at READ COMMITTED whatever the database's default,
// so that the statements after the lock read what the writer before
// committed (at REPEATABLE READ the snapshot would be taken before the
// wait, and seqs would repeat); the unique index on (model, seq) makes a
// repeat an error rather than a vector readers never load.
//
// The model row is the first lock PutVectors takes, and it takes no
// other before it: in the package's order it sits before the vectors
// and chunks it writes and refers to, and no other write takes it but
// DropVectors, in the same place. Writers of different models do not
// wait for each other; writers of one model write one at a time, which
// costs little next to the embedding that produced their vectors.
//
// A model is made by the first writer that needs it (INSERT ... ON
// CONFLICT DO NOTHING, then locked and read back). DropVectors takes the
// same lock, so it never deletes a model under a write that would then
// refer to it; a writer that waited for it finds the model gone and makes
// it anew. Vectors are written in chunk order, so that two writers of the
// same chunks would lock them in the same order.
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
	// By chunk, the last of a chunk's vectors winning, as when they are
	// written one by one: one INSERT may not update a row twice.
	order := make([]int, len(vecs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(vecs[a].ID, vecs[b].ID) })
	var ids []int64
	var blobs [][]byte
	var index []int // the caller's index of each vector written
	for k, i := range order {
		if k+1 < len(order) && vecs[order[k+1]].ID == vecs[i].ID {
			continue
		}
		ids = append(ids, vecs[i].ID)
		blobs = append(blobs, encodeVector(vecs[i].Vector))
		index = append(index, i)
	}
	put := func(tx pgx.Tx) error {
		id, have, err := modelID(ctx, tx, model, "FOR UPDATE")
		if err != nil {
			return err
		}
		if id == 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO vector_models (name, dim) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
				model, dim); err != nil {
				return err
			}
			// Ours, or another server's that committed first.
			if id, have, err = modelID(ctx, tx, model, "FOR UPDATE"); err != nil {
				return err
			}
		}
		if have != dim {
			return &store.ValidationError{Field: "vector", Msg: fmt.Sprintf("model %s has %d dimensions, not %d", model, have, dim)}
		}
		// A chunk that is not stored (purged since it was listed) fails
		// the write as SQLite's foreign key does; found first, to name it.
		var missing int64
		err = tx.QueryRow(ctx, `SELECT u.id FROM unnest($1::bigint[]) u (id)
			WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = u.id) LIMIT 1`, ids).Scan(&missing)
		if err == nil {
			i := index[slices.Index(ids, missing)]
			return &store.ItemError{Index: i, Err: fmt.Errorf("chunk %d: %w", missing, store.ErrNotFound)}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Numbered after the model's greatest seq, in chunk order; a
		// replaced vector takes its new number.
		_, err = tx.Exec(ctx, `INSERT INTO vectors (model, chunk, vec, seq)
			SELECT $1, u.chunk, u.vec, t.top + u.n
			FROM unnest($2::bigint[], $3::bytea[]) WITH ORDINALITY u (chunk, vec, n),
				(SELECT coalesce(max(seq), 0) AS top FROM vectors WHERE model = $1) t
			ON CONFLICT (model, chunk) DO UPDATE SET vec = excluded.vec, seq = excluded.seq`, id, ids, blobs)
		return err
	}
	// As s.write, at READ COMMITTED.
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if err := s.retry(ctx, func() error { return s.runTx(ctx, opts, put) }); err != nil {
		return fmt.Errorf("put vectors of %s: %w", model, err)
	}
	return nil
}

// Vectors implements store.Store.
func (s *Store) Vectors(ctx context.Context, model string, after int64, limit int) ([]store.ChunkVector, error) {
	var out []store.ChunkVector
	err := s.read(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		id, _, err := modelID(ctx, tx, model, "")
		if err != nil || id == 0 {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT v.chunk, v.vec, v.seq FROM vectors v
			JOIN chunks c ON c.id = v.chunk JOIN entries e ON e.pk = c.entry
			WHERE v.model = $1 AND v.seq > $2 AND e.fts = $3 ORDER BY v.seq LIMIT $4`, id, after, spaceMain, limit)
		if err != nil {
			return err
		}
		var v store.ChunkVector
		var b []byte
		_, err = pgx.ForEachRow(rows, []any{&v.ID, &b, &v.Seq}, func() error {
			out = append(out, store.ChunkVector{ID: v.ID, Vector: decodeVector(b), Seq: v.Seq})
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("vectors of %s: %w", model, err)
	}
	return out, nil
}

// DropVectors implements store.Store. It locks the model's row first, so
// that it waits for the writes of its vectors under way (see PutVectors),
// and the writes that come after make the model anew.
func (s *Store) DropVectors(ctx context.Context, model string) error {
	err := s.write(ctx, func(tx pgx.Tx) error {
		id, _, err := modelID(ctx, tx, model, "FOR UPDATE")
		if err != nil || id == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM vectors WHERE model = $1`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM vector_models WHERE id = $1`, id)
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
	err := s.read(ctx, func(tx pgx.Tx) error {
		id, dim, err := modelID(ctx, tx, model, "")
		if err != nil {
			return err
		}
		st.Dim = dim
		return tx.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM chunks c JOIN entries e ON e.pk = c.entry WHERE e.fts = $1),
				(SELECT count(*) FROM vectors v JOIN chunks c ON c.id = v.chunk JOIN entries e ON e.pk = c.entry
					WHERE v.model = $2 AND e.fts = $1)`, spaceMain, id).Scan(&st.Chunks, &st.Embedded)
	})
	if err != nil {
		return st, fmt.Errorf("vector stats of %s: %w", model, err)
	}
	return st, nil
}

// ChunkHits implements store.Store: the hits of search (hydrate), in
// the order of ids, scored zero.
func (s *Store) ChunkHits(ctx context.Context, ids []int64, filter store.Filter) ([]store.Hit, error) {
	if err := filter.Validate(); err != nil {
		return nil, err
	}
	cands := make([]docScore, len(ids))
	for i, id := range ids {
		cands[i] = docScore{Doc: id}
	}
	var hits []store.Hit
	// One snapshot for the chunks and their occurrences.
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		hits, err = s.hydrate(ctx, tx, cands, filter)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("chunk hits: %w", err)
	}
	return hits, nil
}

// FilterChunks implements store.Store.
func (s *Store) FilterChunks(ctx context.Context, filter store.Filter, limit int) ([]int64, error) {
	if err := filter.Validate(); err != nil {
		return nil, err
	}
	var ids []int64
	err := s.read(ctx, func(tx pgx.Tx) error {
		ids = ids[:0]
		var a args
		// From the occurrences, whose indexes serve the filters (time,
		// session, agent, type), to their entries' chunks; history's
		// chunks only with History.
		q := `SELECT DISTINCT c.id FROM occurrences o
			JOIN entries e ON e.pk = o.entry JOIN chunks c ON c.entry = o.entry
			WHERE ` + filterSQL(filter, &a) + ` AND (e.fts <> ` + a.add(spaceHistory) + ` OR ` + a.add(filter.History) + `)
			LIMIT ` + a.add(limit+1)
		rows, err := tx.Query(ctx, q, a...)
		if err != nil {
			return err
		}
		var id int64
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
			ids = append(ids, id)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("filter chunks: %w", err)
	}
	return ids, nil
}
