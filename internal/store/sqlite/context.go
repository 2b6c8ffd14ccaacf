package sqlite

import (
	"database/sql"
	"errors"
	"strings"
	"unicode/utf8"
)

// Conversation context. A turn of a conversation often says little on its
// own: "Yes, since I'm lactose intolerant" answers a question asked in the
// turn before, and a search for the question's words should find the
// answer. So content first seen in a session is indexed with a context:
// the end of the session's previous entry (at the same turn or before),
// in a third full-text column and in the text an embedder sees. A short
// entry gets up to ContextBytes of context, minus its own length; an entry
// of ContextBytes or more stands on its own and gets none, so long
// messages are not diluted by their neighbours. The entry's own chunks and
// content are unchanged: context only helps find them.
//
// The context column weighs half the body (SearchOptions.ContextWeight).
// On LoCoMo (engram eval) this raises lexical recall@10 from 0.607 to
// 0.687 and MRR from 0.45 to 0.52; on LongMemEval, whose turns are long,
// it costs 0.009 of recall@10 (BENCHMARKS.md).
const (
	ContextBytes = 600
	// minContextBytes is the least context worth indexing.
	minContextBytes = 40
)

// contextOf returns the context of a new entry of size bytes seen in
// session at turn: the tail of the session's previous entry, cut at a word
// boundary, or "" if the entry needs none or has no predecessor.
func (b *batch) contextOf(pk int64, size int, session string, turn int) (string, error) {
	want := ContextBytes - size
	if want < minContextBytes {
		return "", nil
	}
	var prev, prevSize int64
	err := b.row("prevEntry", session, turn).Scan(&prev, &prevSize)
	if errors.Is(err, sql.ErrNoRows) || err == nil && prev == pk {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	from := max(1, prevSize-int64(want)+1) // substr counts from 1
	var tail []byte
	if err := b.row("tail", from, prev).Scan(&tail); err != nil {
		return "", err
	}
	return contextTail(tail, from > 1), nil
}

// contextTail makes a tail of content fit to read: from a rune start, and
// if the content was cut, from the next word.
func contextTail(tail []byte, cut bool) string {
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	s := string(tail)
	if cut {
		if i := strings.IndexAny(s, " \n\t"); i >= 0 && i < len(s)/2 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}
