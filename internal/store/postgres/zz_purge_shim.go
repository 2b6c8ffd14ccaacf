package postgres

// TEMPORARY (purge branch only): copies of what the entries, files and
// archive areas define, so that the purge code builds before they land on
// main. Deleted as each lands.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/terms"
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

// --- files area

type fileBatch struct {
	ctx   context.Context
	tx    pgx.Tx
	now   time.Time
	fresh map[int64]bool
}

func newFileBatch(ctx context.Context, tx pgx.Tx) *fileBatch {
	return &fileBatch{ctx: ctx, tx: tx, now: time.Now().UTC(), fresh: map[int64]bool{}}
}

type entryState struct {
	space  int16
	target int16
	words  []string
}

func (fb *fileBatch) entryState(pk int64) (entryState, error) {
	var (
		st                        entryState
		paths                     []string
		files, keywords, entities *string
		inSession                 bool
	)
	err := fb.tx.QueryRow(fb.ctx, `SELECT e.fts,
			coalesce((SELECT array_agg(f.path ORDER BY f.path) FROM files f WHERE f.entry = e.pk AND f.state = 'current'), '{}'),
			o.files, o.keywords, o.entities,
			EXISTS (SELECT 1 FROM occurrences s WHERE s.entry = e.pk AND s.session_id <> '')
		FROM entries e JOIN occurrences o ON o.seq = (SELECT min(seq) FROM occurrences WHERE entry = e.pk)
		WHERE e.pk = $1`, pk).Scan(&st.space, &paths, &files, &keywords, &entities, &inSession)
	if err != nil {
		return st, fmt.Errorf("state of entry %d: %w", pk, err)
	}
	st.target = spaceHistory
	if len(paths) > 0 || inSession {
		st.target = spaceMain
	}
	st.words = paths
	if len(st.words) == 0 {
		if st.words, err = decodeList(files); err != nil {
			return st, err
		}
	}
	for _, list := range []*string{keywords, entities} {
		more, err := decodeList(list)
		if err != nil {
			return st, err
		}
		st.words = append(st.words, more...)
	}
	return st, nil
}

func (fb *fileBatch) entryDocs(pk int64, words []string) ([]ftsDoc, error) {
	var content []byte
	var ctxText *string
	err := fb.tx.QueryRow(fb.ctx, `SELECT e.content, (SELECT x.text FROM contexts x WHERE x.entry = e.pk)
		FROM entries e WHERE e.pk = $1`, pk).Scan(&content, &ctxText)
	if err != nil {
		return nil, fmt.Errorf("content of entry %d: %w", pk, err)
	}
	entryMeta := terms.String(strings.Join(words, " "))
	var ctxTerms string
	if ctxText != nil {
		ctxTerms = terms.String(*ctxText)
	}
	rows, err := fb.tx.Query(fb.ctx, `SELECT id, ordinal, start_byte, end_byte, symbols FROM chunks WHERE entry = $1 ORDER BY ordinal`, pk)
	if err != nil {
		return nil, err
	}
	var docs []ftsDoc
	var (
		id                  int64
		ordinal, start, end int32
		symbols             *string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &ordinal, &start, &end, &symbols}, func() error {
		syms, err := decodeList(symbols)
		if err != nil {
			return err
		}
		d := ftsDoc{ID: id, Meta: entryMeta}
		if len(syms) > 0 {
			d.Meta = strings.TrimSpace(entryMeta + " " + terms.String(strings.Join(syms, " ")))
		}
		s, e := min(int(start), len(content)), min(int(end), len(content))
		d.Body = terms.String(string(content[s:max(s, e)]))
		if ordinal == 0 {
			d.Ctx = ctxTerms
		}
		docs = append(docs, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chunks of entry %d: %w", pk, err)
	}
	return docs, nil
}
