package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// Retain implements store.Store. A session's last activity is the latest
// of its last sighting, its occurrences, its archive records and its
// agents' registrations. Each session is decided again in its own
// transaction, from its activity and the store's content as they are
// then: other servers may have written meanwhile.
func (s *Store) Retain(ctx context.Context, req store.RetainRequest) (store.RetainReport, error) {
	if err := req.Validate(); err != nil {
		return store.RetainReport{}, fmt.Errorf("retention: %w", err)
	}
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	var rep store.RetainReport
	if req.MaxAge > 0 || req.MaxBytes > 0 {
		order, err := s.sessionsByActivity(ctx)
		if err != nil {
			return rep, fmt.Errorf("retention: %w", err)
		}
		tables := map[string]bool{}
		// decide forgets session id in p if the policy says so, and
		// reports whether it did; stop says that no later session will
		// be forgotten either (they are in order of activity).
		decide := func(p *purge, id string) (forgot, stop bool, err error) {
			last, err := lastActivity(ctx, p.tx, id)
			if err != nil || last.IsZero() {
				return false, false, err // gone meanwhile
			}
			aged := req.MaxAge > 0 && last.Before(now.Add(-req.MaxAge))
			if !aged {
				content, err := p.contentBytes()
				if err != nil {
					return false, false, err
				}
				if req.MaxBytes == 0 || content <= req.MaxBytes {
					return false, true, nil
				}
				if last.After(now.Add(-store.RetainGrace)) {
					return false, false, nil // in use
				}
			}
			return true, false, p.forgetSession(id, false)
		}
		if req.DryRun {
			p, err := s.runPurge(ctx, true, func(p *purge) error {
				rep.Sessions = nil
				for _, id := range order {
					forgot, stop, err := decide(p, id)
					if err != nil {
						return err
					}
					if stop {
						break
					}
					if forgot {
						rep.Sessions = append(rep.Sessions, id)
					}
				}
				if err := p.finish(); err != nil {
					return err
				}
				var err error
				rep.ContentBytes, err = p.contentBytes()
				return err
			})
			if err != nil {
				return rep, fmt.Errorf("retention: %w", err)
			}
			rep.Counts = p.counts
			return rep, nil
		}
		for _, id := range order {
			var forgot, stop bool
			p, err := s.runPurge(ctx, false, func(p *purge) error {
				var err error
				if forgot, stop, err = decide(p, id); err != nil || !forgot {
					return err
				}
				if err := p.finish(); err != nil {
					return err
				}
				_, err = p.audit("retention", req.Actor, []string{"session:" + id})
				return err
			})
			if err != nil {
				return rep, fmt.Errorf("retention: session %s: %w", id, err)
			}
			if stop {
				break
			}
			if forgot {
				rep.Sessions = append(rep.Sessions, id)
				rep.Counts.Add(p.counts)
				for t := range p.tables {
					tables[t] = true
				}
			}
		}
		if req.Compact && len(rep.Sessions) > 0 {
			if rep.Compacted, err = s.compact(ctx, tables); err != nil {
				return rep, fmt.Errorf("retention: %w", err)
			}
		}
	}
	err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT value FROM counters WHERE name = 'content_bytes'), 0)`).Scan(&rep.ContentBytes)
	if err != nil {
		return rep, fmt.Errorf("retention: %w", err)
	}
	return rep, nil
}

// contentBytes returns the store's content as the purge leaves it so far:
// the counter, less what the purge removed and has yet to count (its
// deltas are written at the end, and a dry run forgets several sessions
// in one transaction).
func (p *purge) contentBytes() (int64, error) {
	var n int64
	err := p.tx.QueryRow(p.ctx, `SELECT coalesce((SELECT value FROM counters WHERE name = 'content_bytes'), 0)`).Scan(&n)
	if p.deltas[counterPurges] == 0 { // not written yet
		n += p.deltas["content_bytes"]
	}
	return n, err
}

// sessionsByActivity returns every session, least recently active first.
func (s *Store) sessionsByActivity(ctx context.Context) ([]string, error) {
	var out []string
	err := s.read(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id FROM (
				SELECT id, last_seen_at AS t FROM sessions
				UNION ALL SELECT session_id, max(created_at) FROM arch_records WHERE session_id != '' GROUP BY session_id
				UNION ALL SELECT session_id, max(registered_at) FROM arch_agents GROUP BY session_id
			) a GROUP BY id ORDER BY max(t), id`)
		if err != nil {
			return err
		}
		out, err = collectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sessions by activity: %w", err)
	}
	return out, nil
}

// lastActivity returns when session id was last active, exactly: its
// latest occurrence, session record, archive record or agent; zero if it
// has none.
func lastActivity(ctx context.Context, tx pgx.Tx, id string) (time.Time, error) {
	var last *int64
	err := tx.QueryRow(ctx, `SELECT greatest(
			(SELECT max(time) FROM occurrences WHERE session_id = $1),
			(SELECT last_seen_at FROM sessions WHERE id = $1),
			(SELECT max(created_at) FROM arch_records WHERE session_id = $1),
			(SELECT max(registered_at) FROM arch_agents WHERE session_id = $1))`, id).Scan(&last)
	if err != nil || last == nil {
		return time.Time{}, err
	}
	return fromUnixNano(*last), nil
}
