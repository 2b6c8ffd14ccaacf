package postgres

import (
	"context"
	"time"

	"github.com/engramhq/engram/internal/store"
)

var _ = time.Time{}

const schemaPurge = `
-- audit records every forget, redaction and retention run: who, when, what
-- and how much; never the bytes removed.
CREATE TABLE audit (
	seq     bigserial PRIMARY KEY,
	at      bigint NOT NULL,
	actor   text NOT NULL,
	action  text NOT NULL,
	targets text NOT NULL,
	counts  text NOT NULL
);
`

// Purges implements store.Store.
func (s *Store) Purges(ctx context.Context) (_ uint64, err error) {
	err = errNotYet("Purges")
	return
}

// Forget implements store.Store.
func (s *Store) Forget(ctx context.Context, req store.ForgetRequest) (_ store.PurgeReport, err error) {
	err = errNotYet("Forget")
	return
}

// Redact implements store.Store.
func (s *Store) Redact(ctx context.Context, req store.RedactRequest) (_ store.PurgeReport, err error) {
	err = errNotYet("Redact")
	return
}

// Retain implements store.Store.
func (s *Store) Retain(ctx context.Context, req store.RetainRequest) (_ store.RetainReport, err error) {
	err = errNotYet("Retain")
	return
}

// Audit implements store.Store.
func (s *Store) Audit(ctx context.Context, after int64, limit int) (_ []store.AuditRecord, err error) {
	err = errNotYet("Audit")
	return
}
