package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/engramhq/engram/internal/store/storecopy"
)

// The SQLite side of engram store copy (package storecopy): the store's
// tables read in one read transaction, and loaded into an empty store in
// one write transaction that ends by building the full-text tables.

// Describe names the store for messages.
func (s *Store) Describe() string { return s.path }

// ReadTables implements storecopy.Source.
func (s *Store) ReadTables(ctx context.Context, fn func(read func(t storecopy.Table, row func(values []any) error) error) error) error {
	return s.readTx(ctx, func(tx *sql.Tx) error {
		return fn(func(t storecopy.Table, row func(values []any) error) error {
			return readTable(ctx, tx, t, 0, row)
		})
	})
}

// readTable calls row for every row of a table, or its first limit
// rows when limit > 0.
func readTable(ctx context.Context, tx *sql.Tx, t storecopy.Table, limit int, row func(values []any) error) error {
	q := `SELECT ` + strings.Join(t.Columns, ", ") + ` FROM ` + t.Name
	if limit > 0 {
		q += ` LIMIT ` + strconv.Itoa(limit)
	}
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	for rows.Next() {
		values := make([]any, len(t.Columns))
		ptrs := make([]any, len(values))
		for i := range values {
			ptrs[i] = &values[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return errors.Join(err, rows.Close())
		}
		if err := row(values); err != nil {
			return errors.Join(err, rows.Close())
		}
	}
	return errors.Join(rows.Err(), rows.Close())
}

// Load implements storecopy.Target. Its transaction is not retried when
// the store is busy, as other writes are: its rows are read once, from
// the source. Its transaction is IMMEDIATE, as every write's: no other
// writer comes between the check that the store is empty and the copy.
func (s *Store) Load(ctx context.Context, fill, check func(storecopy.Loader) error) error {
	tx, err := s.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE, as every write

	if err != nil {
		return err
	}
	l := &loader{ctx: ctx, tx: tx}
	err = fill(l)
	if err == nil {
		// The full-text tables, entries' and the archive's, from the rows.
		if err = rebuildTerms(ctx, tx); err != nil {
			err = fmt.Errorf("build the full-text index: %w", err)
		}
	}
	if err == nil {
		err = check(l)
	}
	if err != nil {
		return errors.Join(err, rollback(tx))
	}
	return tx.Commit()
}

// loader is a load's storecopy.Loader.
type loader struct {
	ctx context.Context
	tx  *sql.Tx
}

func (l *loader) Read(t storecopy.Table, limit int, row func(values []any) error) error {
	return readTable(l.ctx, l.tx, t, limit, row)
}

func (l *loader) Write(t storecopy.Table, next func() ([]any, bool, error)) error {
	ctx, tx := l.ctx, l.tx
	q := `INSERT INTO ` + t.Name + `(` + strings.Join(t.Columns, ", ") + `) VALUES (` + placeholders(len(t.Columns)) + `)`
	switch t.Name { // over the rows the migrations seeded
	case "counters":
		q += ` ON CONFLICT(name) DO UPDATE SET value = excluded.value`
	case "arch_versions":
		q += ` ON CONFLICT(scope) DO UPDATE SET version = excluded.version`
	}
	st, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return err
	}
	defer st.Close()
	for {
		values, ok, err := next()
		if err != nil || !ok {
			return err
		}
		for i, v := range values {
			if b, ok := v.(bool); ok { // PostgreSQL's booleans are SQLite's integers
				values[i] = 0
				if b {
					values[i] = 1
				}
			}
		}
		if _, err := st.ExecContext(ctx, values...); err != nil {
			return err
		}
	}
}
