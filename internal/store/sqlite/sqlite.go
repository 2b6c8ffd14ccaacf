// Package sqlite is engram's embedded store: one SQLite file per project,
// through the pure-Go driver modernc.org/sqlite.
//
// The file is opened in WAL mode with synchronous=FULL, so a write that
// returned is on disk and readers never wait for the writer (but for
// derived data, store.Derived, which commits at NORMAL and reaches the
// disk with the next synced commit). All writes go
// through one connection in short BEGIN IMMEDIATE transactions; reads use a
// separate pool of query-only connections. Several processes may open the
// same file at once: SQLite's lock serialises their writers, busy_timeout
// makes a writer wait for the lock, and a write that still finds the lock
// busy is retried whole, so "database is locked" never reaches a caller.
//
// Full-text search is an FTS5 table over chunk terms made by package terms;
// see search.go for how queries stay fast on very common words. The schema
// is created and upgraded by forward-only migrations (migrate.go).
// Forgetting, redaction and retention (forget.go, redact.go, retain.go)
// remove what the rest only ever appends, each in one transaction, and
// compact the file so that the removed bytes leave it.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/engramhq/engram/internal/store"
)

// Defaults for Options.
const (
	DefaultBusyTimeout  = 5 * time.Second
	DefaultRetryTimeout = 2 * time.Minute
	DefaultReaders      = 4
)

// Options configure a Store. The zero value is ready to use.
type Options struct {
	// BusyTimeout is how long one attempt at a write waits for another
	// connection's write lock. Zero means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// RetryTimeout is how long a write keeps retrying while the store is
	// busy before it gives up with an error. Zero means DefaultRetryTimeout.
	RetryTimeout time.Duration
	// Readers is the size of the read connection pool. Zero means
	// DefaultReaders.
	Readers int
	// Search tunes lexical search; the zero value uses its defaults.
	Search SearchOptions
	// Logger receives store events. Nil discards them.
	Logger *slog.Logger
}

// Store is a store.Store in one SQLite file.
type Store struct {
	path string
	opts Options
	log  *slog.Logger
	w    *sql.DB // the one writer connection
	r    *sql.DB // query-only readers
	df   dfCache // document frequencies for query planning
	arch archCommitter
	runs store.RunRefs // windows' keys, to read run references back
	// afterPrepare, if set, runs between the preparation of a write and
	// its transaction: tests use it to change the store in between.
	afterPrepare func()
}

var _ store.Store = (*Store)(nil)

// Open opens the store at path, creating the file and its directory if
// needed, and migrates its schema to the current version. It fails with
// store.ErrSchemaTooNew if a newer engram wrote the file, and with a clear
// error if the file is not an engram store.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	if opts.RetryTimeout <= 0 {
		opts.RetryTimeout = DefaultRetryTimeout
	}
	if opts.Readers <= 0 {
		opts.Readers = DefaultReaders
	}
	opts.Search = opts.Search.withDefaults()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{path: abs, opts: opts, log: logger.With("component", "store", "path", abs)}
	// A new store's file is its owner's alone (mode 0600; SQLite gives
	// its -wal and -shm files the mode of the database).
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := s.open(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open store %s: %w", path, err), s.Close())
	}
	// Once the file is known to be a store (not another file named by
	// mistake), what others may do with it is taken away.
	if err := private(abs); err != nil {
		return nil, errors.Join(fmt.Errorf("open store %s: %w", path, err), s.Close())
	}
	return s, nil
}

// private takes away what others may do with a store and its companion
// files: the store holds everything agents saw.
func private(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			if err := os.Chmod(p, perm&0o700); err != nil {
				return fmt.Errorf("make %s private: %w", p, err)
			}
		}
	}
	return nil
}

func (s *Store) dsn(readOnly bool) string {
	// The file: URI form keeps '?' and '#' in paths from being read as URI
	// syntax; SQLite ignores the underscore parameters, which the driver
	// consumes.
	u := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(s.path)
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", s.opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(FULL)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
		q.Add("_pragma", fmt.Sprintf("mmap_size(%d)", max(s.opts.Search.MmapSize, 0)))
	} else {
		q.Set("_txlock", "immediate")
	}
	return u + "?" + q.Encode()
}

func (s *Store) open(ctx context.Context) error {
	var err error
	if s.w, err = sql.Open("sqlite", s.dsn(false)); err != nil {
		return err
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetConnMaxIdleTime(0)
	// WAL is a property of the file, so set it once here rather than on
	// every connection; it needs the write lock the first time, so retry
	// like any write.
	err = s.retry(ctx, func() error {
		var mode string
		if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
			return err
		}
		if !strings.EqualFold(mode, "wal") {
			return fmt.Errorf("cannot enable WAL mode (journal mode is %s)", mode)
		}
		return nil
	})
	if err != nil {
		return s.classifyOpenError(err)
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if s.r, err = sql.Open("sqlite", s.dsn(true)); err != nil {
		return err
	}
	s.r.SetMaxOpenConns(s.opts.Readers)
	s.r.SetMaxIdleConns(s.opts.Readers)
	return nil
}

// classifyOpenError turns SQLite's "file is not a database" into words.
func (s *Store) classifyOpenError(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_NOTADB {
		return fmt.Errorf("not an engram store (not an SQLite database): %w", err)
	}
	return err
}

// Close closes the store's connections.
func (s *Store) Close() error {
	s.closeArchive()
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}

// Path returns the absolute path of the store's file.
func (s *Store) Path() string { return s.path }

// IntegrityCheck runs SQLite's integrity_check and the FTS index's own
// check, and returns an error describing any damage.
func (s *Store) IntegrityCheck(ctx context.Context) (err error) {
	// On a connection of its own: a pooled reader that read a full-text
	// table before the writer merged its segments keeps the old segment
	// list for FTS5's part of integrity_check (searches reload it; the
	// check does not), and reports blobs the merge removed as corruption.
	db, err := sql.Open("sqlite", s.dsn(true))
	if err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return errors.Join(fmt.Errorf("integrity check: %w", err), rows.Close())
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("integrity check: %w", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("integrity check: %s", strings.Join(problems, "; "))
	}
	// FTS5's check compares the index with itself; it needs the writer
	// because it is spelled as an INSERT, though it changes nothing.
	err = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO chunks_fts(chunks_fts, rank) VALUES('integrity-check', 0)")
		return err
	})
	if err != nil {
		return fmt.Errorf("full-text index check: %w", err)
	}
	return nil
}

// busy reports whether err means another connection holds a lock.
func busy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}

// ErrBusy is returned, marked store.ErrUnavailable, when the store stayed
// locked by another process for longer than Options.RetryTimeout.
var ErrBusy = errors.New("store is busy: another process kept it locked")

// retry runs fn until it succeeds, fails with an error other than a busy
// lock, or RetryTimeout passes.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(s.opts.RetryTimeout)
	backoff := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !busy(err) {
			return err
		}
		if time.Now().After(deadline) {
			return store.Unavailable(fmt.Errorf("%w for %v (%d attempts)", ErrBusy, s.opts.RetryTimeout, attempt))
		}
		s.log.Debug("store busy, retrying", "attempt", attempt)
		// Jitter keeps two processes that collided from colliding again.
		sleep := backoff/2 + rand.N(backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// write runs fn in a write transaction, retrying the whole transaction while
// the store is busy. fn may run more than once, so it must not keep state
// from an attempt that failed.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if store.IsDerived(ctx) {
		return s.retry(ctx, func() error { return s.writeUnsynced(ctx, fn) })
	}
	return s.retry(ctx, func() error {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			return errors.Join(err, rollback(tx))
		}
		return tx.Commit()
	})
}

// writeUnsynced is write for derived data (store.Derived): the writer
// connection, held for the whole of it, commits with synchronous=NORMAL,
// which in WAL mode appends the transaction to the WAL without an fsync.
// A process crash loses nothing (the WAL is the file's); a machine crash
// may lose it until the next commit at FULL, whose fsync of the WAL takes
// it too. The connection goes back to FULL before anyone else writes on
// it, or is dropped from the pool.
func (s *Store) writeUnsynced(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous=FULL"); rerr != nil {
			// A connection left at NORMAL must never write again.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			err = errors.Join(err, fmt.Errorf("restore synchronous=FULL: %w", rerr))
		}
		_ = conn.Close()
	}()
	if _, err := conn.ExecContext(ctx, "PRAGMA synchronous=NORMAL"); err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, rollback(tx))
	}
	return tx.Commit()
}

// read runs fn with the read pool, retrying while the store is busy (a
// reader can meet a lock while another process recovers the WAL).
func (s *Store) read(ctx context.Context, fn func(db *sql.DB) error) error {
	return s.retry(ctx, func() error { return fn(s.r) })
}

// readTx runs fn in a read-only transaction on the read pool, so that what
// it reads is of one state of the store.
func (s *Store) readTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.read(ctx, func(db *sql.DB) error {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		return fn(tx)
	})
}

// Times are stored as Unix nanoseconds, in UTC.
func unixNano(t time.Time) int64 { return t.UnixNano() }

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// rollback rolls tx back, if it is not over already: a context that ends
// rolls its transaction back, and saying so again would only add a
// confusing "transaction has already been committed or rolled back" to
// the error that says why.
func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}
