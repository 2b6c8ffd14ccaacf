package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store/backend"
)

// Conversation context, as on the SQLite backend (internal/store/sqlite/
// context.go, which gives the reasons and the measurements): content
// first seen in a session is indexed with a context, the end of the
// session's previous entries (at the same turn or before), in the ctx
// field of its first chunk's document and in the text an embedder sees.
// A short entry gets up to ContextBytes of context, minus its own length,
// from up to ContextEntries entries back; an entry of ContextBytes or
// more gets none. The context is written once, by the transaction that
// stores the content, which holds the session's lock: the entries before
// it cannot change under it.
//
// The constants, and the walk that makes a context, are in
// internal/store/backend (ContextBytes, ContextFrom), shared with the
// SQLite backend.

// contextOf returns the context of a new entry of size bytes seen in
// session at turn (see contextFrom). The session's previous entries come
// from the batch when it holds them all (see recentBefore), else from the
// store.
func (b *batch) contextOf(pk int64, size int, session string, turn int) (string, error) {
	if backend.ContextBytes-size < backend.MinContextBytes {
		return "", nil
	}
	if prevs, ok := b.recentBefore(session, turn); ok {
		return contextFrom(pk, int64(size), prevs, func(from, pk int64) ([]byte, error) {
			return b.recentContent[pk][from-1:], nil
		})
	}
	rows, err := b.tx.Query(b.ctx, `SELECT o.entry, octet_length(e.content) FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = $1 AND o.turn <= $2 ORDER BY o.turn DESC, o.seq DESC LIMIT $3`, session, turn, backend.ContextEntries)
	if err != nil {
		return "", fmt.Errorf("context: %w", err)
	}
	prevs, err := collectRows(rows, func(r pgx.CollectableRow) (p backend.PrevEntry, err error) {
		return p, r.Scan(&p.PK, &p.Size)
	})
	if err != nil {
		return "", fmt.Errorf("context: %w", err)
	}
	return contextFrom(pk, int64(size), prevs, func(from, pk int64) (tail []byte, err error) {
		return tail, b.tx.QueryRow(b.ctx, `SELECT substring(content FROM $1::integer) FROM entries WHERE pk = $2`, from, pk).Scan(&tail)
	})
}

// seen records an occurrence of entry pk with content in session at turn,
// written in the batch.
func (b *batch) seen(session string, turn int, pk int64, content []byte) {
	b.recent[session] = append(b.recent[session], backend.RecentOcc{PK: pk, Turn: turn})
	b.recentContent[pk] = content
}

// recentBefore returns what contextOf's query would, the session's
// latest backend.ContextEntries occurrences at or before turn (by turn, then
// order of writing), if the batch's own occurrences are enough to know
// it. They are, when the store held none of the session's occurrences
// before the batch, or when the batch holds backend.ContextEntries of them at
// turns no stored one can follow: a stored occurrence comes before one
// of the batch only at a later turn, and the store's latest turn for the
// session is known (storedTurn, read under the session's lock).
func (b *batch) recentBefore(session string, turn int) ([]backend.PrevEntry, bool) {
	stored, ok := b.storedTurn[session]
	if !ok {
		return nil, false
	}
	return backend.RecentBefore(b.recent[session], stored, turn, func(pk int64) int64 { return int64(len(b.recentContent[pk])) })
}

// contextFrom is backend.ContextFrom with each tail made valid text (see
// validText).
func contextFrom(pk, size int64, prevs []backend.PrevEntry, tail func(from, pk int64) ([]byte, error)) (string, error) {
	return backend.ContextFrom(pk, size, prevs, tail, validText)
}

// validText is s as PostgreSQL text holds it: valid UTF-8 without NUL.
// A context is cut from content, which may be any bytes.
func validText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
