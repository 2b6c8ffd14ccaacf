package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/engramhq/engram/internal/store"
)

// How transactions survive a busy, shared database, and a lost
// connection. Every write runs in one transaction (write). A transaction
// is run again from the start, when its failure says that nothing of it
// was committed:
//
//   - a serialization failure (40001) or a deadlock (40P01): PostgreSQL
//     chose this transaction to give way to another;
//   - a connection lost before COMMIT was sent: at BEGIN (a pooled
//     connection gone stale, a server restarting), or in the middle of the
//     transaction (the server terminated the backend: 57P01, the network
//     dropped it). A transaction whose connection is gone is aborted on
//     the server; nothing of it is left;
//   - a COMMIT the server answered with an error (it did not commit).
//
// A COMMIT that got no answer is never run again: the server may have
// committed, and running the transaction again could write it twice (an
// entry's occurrences are not idempotent). That error reaches the caller,
// who was not told the write succeeded, and says so ("commit: ... the
// write may or may not have been stored"). pgconn.SafeToRetry is not
// trusted there: pgx 5.12 reports a connection cut after COMMIT was sent
// as "conn closed", which it calls safe to retry (the cutter of
// tx_internal_test.go sends COMMIT on, holds the answer back and cuts).

// maxAttempts bounds the runs of one transaction.
const maxAttempts = 8

// retryable reports whether err says the transaction was not committed
// and may run again.
func retryable(err error) bool {
	var lost connLost
	if errors.As(err, &lost) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "40001", pe.Code == "40P01": // serialization, deadlock
			return true
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // shutdown, crash, starting up
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err)
}

// markUnreachable marks err store.ErrUnavailable when it says that the
// database could not be reached, or would not take a connection: nothing
// was written, and the call may succeed later. A COMMIT that got no
// answer (committing) is not marked: it may have been written.
func markUnreachable(err error) error {
	var (
		lost connLost
		ce   *pgconn.ConnectError
		ne   net.Error
	)
	switch code := errCode(err); {
	case strings.HasPrefix(code, "28"), code == "3D000":
		// A password, a pg_hba rule or a database name wrong: not an
		// outage to wait out, but configuration to fix.
		return err
	case errors.As(err, &lost), errors.As(err, &ce):
	case strings.HasPrefix(code, "08"), // connection exception
		code == "57P01", code == "57P02", code == "57P03", // shutdown, crash, starting up
		code == "53300": // too many connections
	case code == "" && (errors.As(err, &ne) || pgconn.SafeToRetry(err) || cutOff(err)):
		// A network error, a request the connection failed to send, or a
		// connection that ended in the middle of an answer.
	default:
		return err
	}
	return store.Unavailable(err)
}

// cutOff reports whether err is of a connection that ended in the middle
// of a message.
func cutOff(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// readLost marks the error of a read outside a transaction (one
// statement, which changes nothing) whose connection ended: connLost,
// so that it is run again.
func readLost(err error) error {
	if cutOff(err) && errCode(err) == "" {
		return connLost{err}
	}
	return err
}

// connLost marks an error of a transaction whose connection was lost
// before COMMIT: the server aborted it.
type connLost struct{ err error }

func (c connLost) Error() string { return "connection lost: " + c.err.Error() }
func (c connLost) Unwrap() error { return c.err }

// errCode returns the SQLSTATE of a PostgreSQL error, or "".
func errCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// uniqueViolation reports whether err is a unique constraint's.
func uniqueViolation(err error) bool { return errCode(err) == "23505" }

// committing marks an error of COMMIT itself, which is never retried.
type committing struct{ err error }

func (c committing) Error() string {
	return "commit: " + c.err.Error() + " (the connection was lost during COMMIT: the write may or may not have been stored)"
}
func (c committing) Unwrap() error { return c.err }

// write runs fn in a read-write transaction, running it again while it
// fails in a way that says nothing was committed (retryable). fn may run
// more than once, so it must not keep state from an attempt that failed.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.retry(ctx, func() error { return s.runTx(ctx, pgx.TxOptions{}, fn) })
}

// read runs fn in a read-only transaction at REPEATABLE READ, so that
// what it reads is of one state of the store.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.retry(ctx, func() error {
		return s.runTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
	})
}

func (s *Store) runTx(ctx context.Context, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if store.IsDerived(ctx) && opts.AccessMode != pgx.ReadOnly {
		// Derived data (store.Derived): the commit does not wait for the
		// WAL's flush; a server crash may lose it, never half of it.
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit TO OFF"); err != nil {
			return errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
		}
	}
	if err := fn(tx); err != nil {
		if tx.Conn().IsClosed() && ctx.Err() == nil {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // releases the dead connection
			return connLost{err}
		}
		return errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
	}
	if s.beforeCommit != nil && opts.AccessMode != pgx.ReadOnly {
		s.beforeCommit(tx)
	}
	if err := tx.Commit(ctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return err // the server answered: it did not commit
		}
		return committing{err}
	}
	return nil
}

// retry runs fn until it succeeds, fails in a way that is not retryable,
// or runs maxAttempts times. An error that says the database could not be
// reached is marked store.ErrUnavailable.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	backoff := 2 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		var c committing
		if err == nil || errors.As(err, &c) || ctx.Err() != nil {
			return err
		}
		if !retryable(err) {
			return markUnreachable(err)
		}
		if attempt == maxAttempts {
			return markUnreachable(fmt.Errorf("gave up after %d attempts: %w", attempt, err))
		}
		s.log.Debug("transaction not committed, running it again", "attempt", attempt, "err", err)
		// Jitter keeps two transactions that collided from colliding again.
		sleep := backoff/2 + rand.N(backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}

// querier is what reads need: a transaction or the pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// args numbers the parameters of a query built piece by piece.
type args []any

// add appends v and returns its placeholder ($n).
func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// unixNano and fromUnixNano convert times as the store keeps them:
// nanoseconds since the epoch, in UTC, as the SQLite backend does.
func unixNano(t time.Time) int64 { return t.UnixNano() }

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
