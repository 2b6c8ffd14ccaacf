package postgres

// TEMPORARY (purge branch only): copies of what the entries, files and
// archive areas define, so that the purge code builds before they land on
// main. Deleted as each lands.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
)

// --- archive area

const archiveLock int64 = 0x454e4752414d4152

func lockArchive(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", archiveLock); err != nil {
		return fmt.Errorf("lock the archive: %w", err)
	}
	return nil
}

const archColumns = `r.seq, coalesce(r.id, ''), r.kind, r.gv, r.sv, r.session_id, r.agent_id, r.model, r.category,
	r.key, r.ref, r.hash, r.text, r.body, r.created_at, coalesce(x.by, ''), coalesce(u.count, 0)`

const archFrom = ` FROM arch_records r LEFT JOIN arch_superseded x ON x.id = r.id LEFT JOIN arch_usage u ON u.id = r.id`

func scanArchRecord(sc scanner, extra ...any) (store.ArchiveRecord, error) {
	var (
		r        store.ArchiveRecord
		kind     string
		body     string
		gv, sv   int64
		at, uses int64
	)
	dest := append([]any{&r.Seq, &r.ID, &kind, &gv, &sv, &r.SessionID, &r.AgentID, &r.Model, &r.Category,
		&r.Key, &r.Ref, &r.Hash, &r.Text, &body, &at, &r.SupersededBy, &uses}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return r, err
	}
	r.Kind = store.RecordKind(kind)
	r.GV, r.SV = uint64(gv), uint64(sv)
	r.Body = []byte(body)
	r.CreatedAt = fromUnixNano(at)
	r.Uses = uses
	return r, nil
}
