package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
)

// This file holds what `engram bench` measures the store against: the
// floor of a bare FTS5 table, and search without query planning.

// FTSBaseline is a bare FTS5 table in a file of its own, opened with the
// same driver and durability settings as a Store: plain INSERTs into it are
// the floor that a Store's bookkeeping (content addressing, occurrences,
// chunks, term splitting, counters) costs on top of.
type FTSBaseline struct {
	db *sql.DB
}

// OpenFTSBaseline creates the baseline table at path, replacing any file
// there.
func OpenFTSBaseline(ctx context.Context, path string) (*FTSBaseline, error) {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	s := &Store{path: path, opts: Options{BusyTimeout: DefaultBusyTimeout}}
	db, err := sql.Open("sqlite", s.dsn(false))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	for _, q := range []string{"PRAGMA journal_mode=WAL", "CREATE VIRTUAL TABLE docs USING fts5(body)"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, errors.Join(fmt.Errorf("baseline: %w", err), db.Close())
		}
	}
	return &FTSBaseline{db: db}, nil
}

// Insert adds texts in one transaction.
func (b *FTSBaseline) Insert(ctx context.Context, texts []string) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	st, err := tx.PrepareContext(ctx, "INSERT INTO docs(body) VALUES (?)")
	if err != nil {
		return errors.Join(err, rollback(tx))
	}
	for _, t := range texts {
		if _, err := st.ExecContext(ctx, t); err != nil {
			return errors.Join(err, st.Close(), rollback(tx))
		}
	}
	return errors.Join(st.Close(), tx.Commit())
}

// Close closes the baseline's database.
func (b *FTSBaseline) Close() error { return b.db.Close() }

// SearchUnplanned runs a query the plain FTS5 way: every word of text
// (whole and by parts, as Search matches them), OR-ed, ranked by BM25 over
// all matches, with no pruning of common words; hits are then read as
// Search reads them. It is the baseline Search's planning is measured
// against.
func (s *Store) SearchUnplanned(ctx context.Context, text string, limit int) ([]store.Hit, error) {
	var parts []string
	for _, g := range terms.Query(text) {
		parts = append(parts, matchGroup(g))
	}
	if len(parts) == 0 {
		return nil, nil
	}
	return s.searchRanked(ctx, ftsTable(ftsMain), plan{match: strings.Join(parts, " OR ")}, store.Filter{}, false, limit)
}

// TermsByFrequency returns up to n indexed words held by between minDocs
// and maxDocs chunks, for benchmarks that need rare, medium and common
// query words.
func (s *Store) TermsByFrequency(ctx context.Context, minDocs, maxDocs int64, n int) ([]string, error) {
	var out []string
	err := s.query(ctx, `SELECT term FROM chunks_vocab WHERE doc BETWEEN ? AND ? AND length(term) > 2 LIMIT ?`,
		[]any{minDocs, maxDocs, n}, func(rows *sql.Rows) error {
			var t string
			if err := rows.Scan(&t); err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	return out, err
}
