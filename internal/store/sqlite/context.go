package sqlite

import (
	"database/sql"
	"errors"

	"github.com/engramhq/engram/internal/store/backend"
)

// Conversation context. A turn of a conversation often says little on its
// own: "Yes, since I'm lactose intolerant" answers a question asked in the
// turn before, and a search for the question's words should find the
// answer. So content first seen in a session is indexed with a context:
// the end of the session's previous entries (at the same turn or before),
// in a third full-text column and in the text an embedder sees. A short
// entry gets up to ContextBytes of context, minus its own length, taken
// from the entry before it and, while that leaves room, from up to
// ContextEntries entries back: "They were awestruck" answers "How did the
// kids take it?", which followed the turn that named the memorial. An
// entry of ContextBytes or more stands on its own and gets none, so long
// messages are not diluted by their neighbours. The entry's own chunks and
// content are unchanged: context only helps find them.
//
// The context column weighs half the body (SearchOptions.ContextWeight).
// On LoCoMo (engram eval) one entry of context raised lexical recall@10
// from 0.607 to 0.687 and MRR from 0.45 to 0.52, and reaching back three
// entries to 0.752 (hybrid 0.726 -> 0.755); on LongMemEval, whose turns
// are long, one entry cost 0.009 of recall@10 and three change nothing
// more (BENCHMARKS.md).
//
// The constants, and the walk that makes a context, are in
// internal/store/backend (ContextBytes, ContextFrom), shared with the
// PostgreSQL backend.

// contextOf returns the context of a new entry of size bytes seen in
// session at turn (see backend.ContextFrom). The session's previous entries come
// from the batch when it holds them all (see recentBefore), else from the
// store.
func (b *batch) contextOf(pk int64, size int, session string, turn int) (string, error) {
	if backend.ContextBytes-size < backend.MinContextBytes {
		return "", nil
	}
	if prevs, ok := b.recentBefore(session, turn); ok {
		return backend.ContextFrom(pk, int64(size), prevs, func(from, pk int64) ([]byte, error) {
			return b.recentContent[pk][from-1:], nil
		}, nil)
	}
	st, err := b.stmt("prevEntries")
	if err != nil {
		return "", err
	}
	rows, err := st.QueryContext(b.ctx, session, turn, backend.ContextEntries)
	if err != nil {
		return "", err
	}
	prevs, err := scanPrevEntries(rows)
	if err != nil {
		return "", err
	}
	return backend.ContextFrom(pk, int64(size), prevs, func(from, pk int64) (tail []byte, err error) {
		return tail, b.row("tail", from, pk).Scan(&tail)
	}, nil)
}

// seen records an occurrence of entry pk with content in session at turn,
// written in the batch.
func (b *batch) seen(session string, turn int, pk int64, content []byte) {
	b.recent[session] = append(b.recent[session], backend.RecentOcc{PK: pk, Turn: turn})
	b.recentContent[pk] = content
}

// recentBefore returns what the prevEntries query would, the session's
// latest backend.ContextEntries occurrences at or before turn (by turn, then
// order of writing), if the batch's own occurrences are enough to know
// it. They are, when the store held none of the session's occurrences
// before the batch, or when the batch holds backend.ContextEntries of them at
// turns no stored one can follow: a stored occurrence comes before one
// of the batch only at a later turn, and the store's latest turn for the
// session is known (storedTurn). Reading them here rather than from the
// store took 9 % off the time of `engram bench ingest` (BENCHMARKS.md).
func (b *batch) recentBefore(session string, turn int) ([]backend.PrevEntry, bool) {
	stored, ok := b.storedTurn[session]
	if !ok {
		return nil, false
	}
	return backend.RecentBefore(b.recent[session], stored, turn, func(pk int64) int64 { return int64(len(b.recentContent[pk])) })
}

func scanPrevEntries(rows *sql.Rows) ([]backend.PrevEntry, error) {
	var prevs []backend.PrevEntry
	for rows.Next() {
		var p backend.PrevEntry
		if err := rows.Scan(&p.PK, &p.Size); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		prevs = append(prevs, p)
	}
	return prevs, errors.Join(rows.Err(), rows.Close())
}
