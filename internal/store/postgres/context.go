package postgres

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Conversation context, as on the SQLite backend (internal/store/sqlite/
// context.go, which gives the reasons and the measurements): content
// first seen in a session is indexed with a context, the end of the
// session's previous entries (at the same turn or before), in the ctx
// field of its first chunk's document and in the text an embedder sees.
// A short entry gets up to contextBytes of context, minus its own length,
// from up to contextEntries entries back; an entry of contextBytes or
// more gets none. The context is written once, by the transaction that
// stores the content, which holds the session's lock: the entries before
// it cannot change under it.
const (
	contextBytes = 600
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
	if contextBytes-size < minContextBytes {
		return "", nil
	}
	if prevs, ok := b.recentBefore(session, turn); ok {
		return contextFrom(pk, int64(size), prevs, func(from, pk int64) ([]byte, error) {
			return b.recentContent[pk][from-1:], nil
		})
	}
	rows, err := b.tx.Query(b.ctx, `SELECT o.entry, octet_length(e.content) FROM occurrences o JOIN entries e ON e.pk = o.entry
		WHERE o.session_id = $1 AND o.turn <= $2 ORDER BY o.turn DESC, o.seq DESC LIMIT $3`, session, turn, contextEntries)
	if err != nil {
		return "", fmt.Errorf("context: %w", err)
	}
	prevs, err := collectRows(rows, func(r pgx.CollectableRow) (p prevEntry, err error) {
		return p, r.Scan(&p.pk, &p.size)
	})
	if err != nil {
		return "", fmt.Errorf("context: %w", err)
	}
	return contextFrom(pk, int64(size), prevs, func(from, pk int64) (tail []byte, err error) {
		return tail, b.tx.QueryRow(b.ctx, `SELECT substring(content FROM $1::integer) FROM entries WHERE pk = $2`, from, pk).Scan(&tail)
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

// recentBefore returns what contextOf's query would, the session's
// latest contextEntries occurrences at or before turn (by turn, then
// order of writing), if the batch's own occurrences are enough to know
// it. They are, when the store held none of the session's occurrences
// before the batch, or when the batch holds contextEntries of them at
// turns no stored one can follow: a stored occurrence comes before one
// of the batch only at a later turn, and the store's latest turn for the
// session is known (storedTurn, read under the session's lock).
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

// contextFrom returns the context of entry pk of size bytes, given the
// entries before it in its session, nearest first: their tails, oldest
// first, each cut at a word boundary, within contextBytes minus the
// entry's size; "" if the entry needs none or has no predecessor. An
// entry seen again stops the walk: it is no context of itself. tail reads
// an entry's content from byte from (counted from 1, as substring counts).
func contextFrom(pk, size int64, prevs []prevEntry, tail func(from, pk int64) ([]byte, error)) (string, error) {
	want := contextBytes - size
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
		if text := validText(contextTail(t, from > 1)); text != "" {
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

// validText is s as PostgreSQL text holds it: valid UTF-8 without NUL.
// A context is cut from content, which may be any bytes.
func validText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
