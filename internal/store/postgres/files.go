package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// The file index: the manifest of a repository's paths (files), each
// path's versions (file_versions), and their content as entries, stored
// by PutFiles as PutEntries stores it. What files_batch.go does to the
// full-text index as versions come and go is explained there.

const schemaFiles = `
-- files is the manifest of the repository index: one row per path ever
-- seen, with its state and current version. PutFiles locks the rows of
-- the paths it changes, making a row for a new path first (state '',
-- never committed: the change that follows sets its state).
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
CREATE INDEX file_versions_entry ON file_versions (entry);
`

// PutFiles implements store.Store.
//
// Several servers may index the same repository at once. Each PutFiles
// first locks the manifest rows of all the paths it changes, in path
// order (making the rows of new paths), and only then reads them: of two
// servers recording a new version of one path, the second waits for the
// first to commit and then reads its version, so that the versions
// follow one another and one of them is current.
func (s *Store) PutFiles(ctx context.Context, changes []store.FileChange) error {
	if len(changes) == 0 {
		return nil
	}
	var errs []error
	var entries []store.Entry
	entryOf := make([]int, len(changes)) // index into entries of a version's content
	for i := range changes {
		c := &changes[i]
		if err := c.Validate(); err != nil {
			errs = append(errs, &store.ItemError{Index: i, Err: err})
			continue
		}
		entryOf[i] = -1
		if c.Kind == store.ChangeVersion {
			entryOf[i] = len(entries)
			entries = append(entries, *c.Entry)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("put files: %w", errors.Join(errs...))
	}
	ps, err := s.prepare(ctx, entries)
	if err != nil {
		return fmt.Errorf("put files: %w", err)
	}
	paths := make([]string, 0, len(changes))
	for _, c := range changes {
		paths = append(paths, c.Path)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	err = s.write(ctx, func(tx pgx.Tx) error {
		if err := lockFiles(ctx, tx, paths); err != nil {
			return err
		}
		fb := newFileBatch(ctx, tx)
		defer fb.close()
		for i := range changes {
			var p *pending
			if entryOf[i] >= 0 {
				p = &ps[entryOf[i]]
			}
			if err := fb.putFile(&changes[i], p); err != nil {
				return &store.ItemError{Index: i, Err: err}
			}
		}
		return fb.finish(paths)
	})
	if err != nil {
		return fmt.Errorf("put files: %w", err)
	}
	return nil
}

// lockFiles locks the manifest rows of paths, which are sorted, in their
// order, making a row with an empty state for each path that has none. An
// upsert whose update never applies (WHERE false) still locks the row
// it conflicts with, waiting for a writer that holds it; inserting the
// rows of new paths makes a second writer of the same new path wait too.
func lockFiles(ctx context.Context, tx pgx.Tx, paths []string) error {
	_, err := tx.Exec(ctx, `INSERT INTO files (path, state, size, mtime, indexed_at)
		SELECT p, '', 0, 0, 0 FROM unnest($1::text[]) p ORDER BY p
		ON CONFLICT (path) DO UPDATE SET state = files.state WHERE false`, paths)
	if err != nil {
		return fmt.Errorf("lock files: %w", err)
	}
	return nil
}

const fileColumns = `f.path, f.state, f.reason, coalesce(e.id, ''), f.size, f.mtime, f.hash, f.language, f.version, f.indexed_at,
	coalesce(e.token_count, 0), (SELECT count(*) FROM chunks c WHERE c.entry = f.entry)`

// briefColumns are fileColumns without the entry's details.
const briefColumns = `f.path, f.state, f.reason, '', f.size, f.mtime, f.hash, f.language, f.version, f.indexed_at, 0::bigint, 0::bigint`

func scanFile(sc scanner) (store.File, error) {
	var (
		f                             store.File
		state                         string
		mtime, index, version, tokens int64
		chunks                        int64
	)
	err := sc.Scan(&f.Path, &state, &f.Reason, &f.EntryID, &f.Size, &mtime, &f.Hash, &f.Language, &version, &index, &tokens, &chunks)
	f.State, f.ModTime, f.IndexedAt = store.FileState(state), fromUnixNano(mtime), fromUnixNano(index)
	f.Version, f.TokenCount, f.Chunks = int(version), int(tokens), int(chunks)
	return f, err
}

// Files implements store.Store.
func (s *Store) Files(ctx context.Context, filter store.FileFilter) ([]store.File, error) {
	var a args
	q := `SELECT ` + fileColumns + ` FROM files f LEFT JOIN entries e ON e.pk = f.entry WHERE `
	if filter.Brief {
		q = `SELECT ` + briefColumns + ` FROM files f WHERE `
	}
	q += `f.state <> ''`
	if filter.Prefix != "" {
		// A range the primary key serves: a path that starts with the
		// prefix is at least the prefix and less than the prefix followed
		// by the greatest character, unless that character follows the
		// prefix in it.
		lo, hi := a.add(filter.Prefix), a.add(filter.Prefix+string(utf8.MaxRune))
		q += ` AND f.path >= ` + lo + ` AND (f.path < ` + hi + ` OR starts_with(f.path, ` + hi + `))`
	}
	if len(filter.States) > 0 {
		states := make([]string, len(filter.States))
		for i, st := range filter.States {
			states[i] = string(st)
		}
		q += ` AND f.state = ANY(` + a.add(states) + `)`
	}
	q += ` ORDER BY f.path`
	var out []store.File
	err := s.read(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, q, a...)
		if err != nil {
			return err
		}
		for rows.Next() {
			f, err := scanFile(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, f)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	return out, nil
}

// File implements store.Store.
func (s *Store) File(ctx context.Context, path string) (store.File, error) {
	var f store.File
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		f, err = scanFile(tx.QueryRow(ctx, `SELECT `+fileColumns+` FROM files f LEFT JOIN entries e ON e.pk = f.entry
			WHERE f.path = $1 AND f.state <> ''`, path))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.File{}, fmt.Errorf("file %s: %w", path, store.ErrNotFound)
	}
	if err != nil {
		return store.File{}, fmt.Errorf("get file %s: %w", path, err)
	}
	return f, nil
}

// FileVersions implements store.Store.
func (s *Store) FileVersions(ctx context.Context, path string) ([]store.FileVersion, error) {
	var out []store.FileVersion
	err := s.read(ctx, func(tx pgx.Tx) error {
		out = out[:0]
		rows, err := tx.Query(ctx, `SELECT v.path, v.version, e.id, v.size, v.mtime, v.indexed_at FROM file_versions v
			JOIN entries e ON e.pk = v.entry WHERE v.path = $1 ORDER BY v.version`, path)
		if err != nil {
			return err
		}
		var v store.FileVersion
		var version, mtime, indexed int64
		_, err = pgx.ForEachRow(rows, []any{&v.Path, &version, &v.EntryID, &v.Size, &mtime, &indexed}, func() error {
			v.Version, v.ModTime, v.IndexedAt = int(version), fromUnixNano(mtime), fromUnixNano(indexed)
			out = append(out, v)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("versions of %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("file %s: %w", path, store.ErrNotFound)
	}
	return out, nil
}
