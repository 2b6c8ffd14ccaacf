package sqlite

import (
	"database/sql"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
)

// Conversation context. A turn of a conversation often says little on its
// own: "Yes, since I'm lactose intolerant" answers a question asked in the
// turn before, and a search for the question's words should find the
// answer. So content first seen in a session is indexed with a context:
// the end of the session's previous entries (at the same turn or before),
// in a third full-text column and in the text an embedder sees. A short
// entry gets up to ContextBytes of context, minus its own length, taken
// from the entry before it and, while that leaves room, from up to
// contextEntries entries back: "They were awestruck" answers "How did the
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
const (
	ContextBytes = 600
	// minContextBytes is the least context worth indexing.
	minContextBytes = 40
	// contextEntries is how many previous entries a context reaches back.
	contextEntries = 3
)

// contextOf returns the context of a new entry of size bytes seen in
// session at turn (see contextFrom). The session's previous entries come
// from the batch when it holds them all (see recentBefore), else from the
// store.
func (b *batch) contextOf(pk int64, size int, session string, turn int) (string, error) {
	if ContextBytes-size < minContextBytes {
		return "", nil
	}
	if prevs, ok := b.recentBefore(session, turn); ok {
		return contextFrom(pk, int64(size), prevs, func(from, pk int64) ([]byte, error) {
			return b.recentContent[pk][from-1:], nil
		})
	}
	st, err := b.stmt("prevEntries")
	if err != nil {
		return "", err
	}
	rows, err := st.QueryContext(b.ctx, session, turn, contextEntries)
	if err != nil {
		return "", err
	}
	prevs, err := scanPrevEntries(rows)
	if err != nil {
		return "", err
	}
	return contextFrom(pk, int64(size), prevs, func(from, pk int64) (tail []byte, err error) {
		return tail, b.row("tail", from, pk).Scan(&tail)
	})
}

// recentOcc is an occurrence written in the batch, for contexts.
type recentOcc struct {
	pk   int64
	turn int
}

// seen records an occurrence of entry pk with content in session at turn,
// written in the batch.
func (b *batch) seen(session string, turn int, pk int64, content []byte) {
	b.recent[session] = append(b.recent[session], recentOcc{pk, turn})
	b.recentContent[pk] = content
}

// recentBefore returns what the prevEntries query would, the session's
// latest contextEntries occurrences at or before turn (by turn, then
// order of writing), if the batch's own occurrences are enough to know
// it. They are, when the store held none of the session's occurrences
// before the batch, or when the batch holds contextEntries of them at
// turns no stored one can follow: a stored occurrence comes before one
// of the batch only at a later turn, and the store's latest turn for the
// session is known (storedTurn). Reading them here rather than from the
// store took 9 % off the time of `engram bench ingest` (BENCHMARKS.md).
func (b *batch) recentBefore(session string, turn int) ([]prevEntry, bool) {
	stored, ok := b.storedTurn[session]
	if !ok {
		return nil, false
	}
	// The best contextEntries by (turn, order of writing), both
	// descending: occurrences are in order of writing, so walking them
	// backwards, one at an equal turn ranks below those already held.
	var best []recentOcc
	occs := b.recent[session]
	for i := len(occs) - 1; i >= 0; i-- {
		o := occs[i]
		if o.turn > turn {
			continue
		}
		at := len(best)
		for at > 0 && best[at-1].turn < o.turn {
			at--
		}
		if at == contextEntries {
			continue
		}
		best = slices.Insert(best, at, o)
		if len(best) > contextEntries {
			best = best[:contextEntries]
		}
		if len(best) == contextEntries && best[contextEntries-1].turn == turn {
			break // nothing can rank above these
		}
	}
	if stored > 0 && (len(best) < contextEntries || best[len(best)-1].turn < min(stored, turn)) {
		return nil, false
	}
	prevs := make([]prevEntry, len(best))
	for i, o := range best {
		prevs[i] = prevEntry{o.pk, int64(len(b.recentContent[o.pk]))}
	}
	return prevs, true
}

// prevEntry is an entry seen before another in its session.
type prevEntry struct{ pk, size int64 }

func scanPrevEntries(rows *sql.Rows) ([]prevEntry, error) {
	var prevs []prevEntry
	for rows.Next() {
		var p prevEntry
		if err := rows.Scan(&p.pk, &p.size); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		prevs = append(prevs, p)
	}
	return prevs, errors.Join(rows.Err(), rows.Close())
}

// contextFrom returns the context of entry pk of size bytes, given the
// entries before it in its session, nearest first: their tails, oldest
// first, each cut at a word boundary, within ContextBytes minus the
// entry's size; "" if the entry needs none or has no predecessor. An
// entry seen again stops the walk: it is no context of itself. tail reads
// an entry's content from byte from (counted from 1, as substr counts).
func contextFrom(pk, size int64, prevs []prevEntry, tail func(from, pk int64) ([]byte, error)) (string, error) {
	want := ContextBytes - size
	var parts []string
	for _, p := range prevs {
		if p.pk == pk || want < minContextBytes {
			break
		}
		from := max(1, p.size-want+1)
		t, err := tail(from, p.pk)
		if err != nil {
			return "", err
		}
		if text := contextTail(t, from > 1); text != "" {
			parts = append(parts, text)
		}
		want -= p.size
	}
	slices.Reverse(parts)
	return strings.Join(parts, "\n"), nil
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
