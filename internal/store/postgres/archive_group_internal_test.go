package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// The group commit that the SQLite backend does (archCommit/archRun),
// written for PostgreSQL only to measure it against one transaction per
// call (BenchmarkArchiveWrite): concurrent calls of one Store queue, and
// one goroutine runs as many as wait in one transaction under the
// archive lock, run again with a savepoint per call if any of them
// fails. It is not used by the store; see the comment above archiveLock.

type groupReq struct {
	fn   func(tx store.ArchiveTx) error
	err  error
	done chan struct{}
}

// GroupWriter batches the archive writes of one Store.
type GroupWriter struct {
	s *Store
	q chan *groupReq
}

// NewGroupWriter starts a group committer on s; it stops when ctx ends.
func NewGroupWriter(ctx context.Context, s *Store) *GroupWriter {
	g := &GroupWriter{s: s, q: make(chan *groupReq, 1024)}
	go func() {
		for {
			var first *groupReq
			select {
			case first = <-g.q:
			case <-ctx.Done():
				return
			}
			batch := []*groupReq{first}
		drain:
			for len(batch) < 256 {
				select {
				case r := <-g.q:
					batch = append(batch, r)
				default:
					break drain
				}
			}
			g.run(batch)
		}
	}()
	return g
}

// Write runs fn as ArchiveWrite does, batched with concurrent calls.
func (g *GroupWriter) Write(ctx context.Context, fn func(tx store.ArchiveTx) error) error {
	r := &groupReq{fn: fn, done: make(chan struct{})}
	select {
	case g.q <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-r.done
	return r.err
}

func (g *GroupWriter) run(batch []*groupReq) {
	ctx := context.Background()
	s := g.s
	run := func(careful bool) (failed bool, err error) {
		err = s.runTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			if err := lockArchive(ctx, tx); err != nil {
				return err
			}
			atx := &archTx{ctx: ctx, tx: tx}
			for _, r := range batch {
				r.err = nil
				if careful {
					if _, err := tx.Exec(ctx, "SAVEPOINT w"); err != nil {
						return err
					}
				}
				if ferr := r.fn(atx); ferr != nil {
					if !careful {
						failed = true
						return errors.New("a write failed")
					}
					r.err = ferr
					if _, err := tx.Exec(ctx, "ROLLBACK TO w"); err != nil {
						return err
					}
				}
				if careful {
					if _, err := tx.Exec(ctx, "RELEASE w"); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if failed {
			return true, nil
		}
		return false, err
	}
	err := s.retry(ctx, func() error {
		failed, err := run(false)
		if err == nil && failed {
			_, err = run(true)
		}
		return err
	})
	for _, r := range batch {
		if err != nil {
			r.err = fmt.Errorf("archive write: %w", err)
		}
		close(r.done)
	}
}
