package postgres

import (
	"context"
	"time"

	"github.com/engramhq/engram/internal/store"
)

var _ = time.Time{}

const schemaFiles = `
-- files is the manifest of the repository index: one row per path ever
-- seen, with its state and current version.
CREATE TABLE files (
	path       text COLLATE "C" PRIMARY KEY,
	state      text NOT NULL,
	reason     text NOT NULL DEFAULT '',
	entry      bigint REFERENCES entries (pk),
	size       bigint NOT NULL,
	mtime      bigint NOT NULL,
	hash       text NOT NULL DEFAULT '',
	language   text NOT NULL DEFAULT '',
	version    bigint NOT NULL DEFAULT 0,
	indexed_at bigint NOT NULL
);
CREATE INDEX files_entry ON files (entry);

CREATE TABLE file_versions (
	path       text COLLATE "C" NOT NULL,
	version    bigint NOT NULL,
	entry      bigint NOT NULL REFERENCES entries (pk),
	size       bigint NOT NULL,
	mtime      bigint NOT NULL,
	indexed_at bigint NOT NULL,
	PRIMARY KEY (path, version)
);
`

const schemaVectors = `
-- vector_models names the embedding models vectors were made with.
CREATE TABLE vector_models (
	id   serial PRIMARY KEY,
	name text COLLATE "C" NOT NULL UNIQUE,
	dim  integer NOT NULL
);

-- vectors hold one vector per chunk and model, as little-endian float32
-- (searched exactly, in engram, as on SQLite; where pgvector exists an
-- index column can be added beside vec).
CREATE TABLE vectors (
	model integer NOT NULL REFERENCES vector_models (id),
	chunk bigint NOT NULL REFERENCES chunks (id),
	vec   bytea NOT NULL,
	PRIMARY KEY (model, chunk)
);
`

// PutFiles implements store.Store.
func (s *Store) PutFiles(ctx context.Context, changes []store.FileChange) (err error) {
	err = errNotYet("PutFiles")
	return
}

// Files implements store.Store.
func (s *Store) Files(ctx context.Context, f store.FileFilter) (_ []store.File, err error) {
	err = errNotYet("Files")
	return
}

// File implements store.Store.
func (s *Store) File(ctx context.Context, path string) (_ store.File, err error) {
	err = errNotYet("File")
	return
}

// FileVersions implements store.Store.
func (s *Store) FileVersions(ctx context.Context, path string) (_ []store.FileVersion, err error) {
	err = errNotYet("FileVersions")
	return
}

// PendingChunks implements store.Store.
func (s *Store) PendingChunks(ctx context.Context, model string, after int64, limit int) (_ []store.ChunkText, err error) {
	err = errNotYet("PendingChunks")
	return
}

// PutVectors implements store.Store.
func (s *Store) PutVectors(ctx context.Context, model string, dim int, vecs []store.ChunkVector) (err error) {
	err = errNotYet("PutVectors")
	return
}

// Vectors implements store.Store.
func (s *Store) Vectors(ctx context.Context, model string, after int64, limit int) (_ []store.ChunkVector, err error) {
	err = errNotYet("Vectors")
	return
}

// DropVectors implements store.Store.
func (s *Store) DropVectors(ctx context.Context, model string) (err error) {
	err = errNotYet("DropVectors")
	return
}

// VectorStats implements store.Store.
func (s *Store) VectorStats(ctx context.Context, model string) (_ store.VectorStats, err error) {
	err = errNotYet("VectorStats")
	return
}

// ChunkHits implements store.Store.
func (s *Store) ChunkHits(ctx context.Context, ids []int64, filter store.Filter) (_ []store.Hit, err error) {
	err = errNotYet("ChunkHits")
	return
}

// FilterChunks implements store.Store.
func (s *Store) FilterChunks(ctx context.Context, filter store.Filter, limit int) (_ []int64, err error) {
	err = errNotYet("FilterChunks")
	return
}
