package backend

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Conversation context (the reasons and the measurements are in
// internal/store/sqlite/context.go): content first seen in a session is
// indexed with a context, the end of the session's previous entries (at
// the same turn or before). A short entry gets up to ContextBytes of
// context, minus its own length, from up to ContextEntries entries back;
// an entry of ContextBytes or more gets none.
const (
	ContextBytes = 600
	// MinContextBytes is the least context worth indexing.
	MinContextBytes = 40
	// ContextEntries is how many previous entries a context reaches back.
	ContextEntries = 3
)

// PrevEntry is an entry seen before another in its session, and its size
// in bytes.
type PrevEntry struct{ PK, Size int64 }

// RecentOcc is an occurrence of entry PK at Turn, written by the batch
// being stored.
type RecentOcc struct {
	PK   int64
	Turn int
}

// RecentBefore returns what a backend's query of the session's previous
// entries would, the latest ContextEntries of occs (the batch's
// occurrences in the session, in order of writing) at or before turn, by
// turn then order of writing, if they are enough to know it: when the
// store held none of the session's occurrences before the batch (stored,
// the store's latest turn for the session, is 0), or when occs holds
// ContextEntries of them at turns no stored one can follow (a stored
// occurrence comes before one of the batch only at a later turn). size
// is an entry's size.
func RecentBefore(occs []RecentOcc, stored, turn int, size func(pk int64) int64) ([]PrevEntry, bool) {
	// The best ContextEntries by (turn, order of writing), both
	// descending: occurrences are in order of writing, so walking them
	// backwards, one at an equal turn ranks below those already held.
	var best []RecentOcc
	for i := len(occs) - 1; i >= 0; i-- {
		o := occs[i]
		if o.Turn > turn {
			continue
		}
		at := len(best)
		for at > 0 && best[at-1].Turn < o.Turn {
			at--
		}
		if at == ContextEntries {
			continue
		}
		best = slices.Insert(best, at, o)
		if len(best) > ContextEntries {
			best = best[:ContextEntries]
		}
		if len(best) == ContextEntries && best[ContextEntries-1].Turn == turn {
			break // nothing can rank above these
		}
	}
	if stored > 0 && (len(best) < ContextEntries || best[len(best)-1].Turn < min(stored, turn)) {
		return nil, false
	}
	prevs := make([]PrevEntry, len(best))
	for i, o := range best {
		prevs[i] = PrevEntry{o.PK, size(o.PK)}
	}
	return prevs, true
}

// ContextFrom returns the context of entry pk of size bytes, given the
// entries before it in its session, nearest first: their tails, oldest
// first, each cut at a word boundary, within ContextBytes minus the
// entry's size; "" if the entry needs none or has no predecessor. An
// entry seen again stops the walk: it is no context of itself. tail reads
// an entry's content from byte from (counted from 1, as SQL's substr and
// substring count). text, if not nil, makes each tail what the backend
// can store as text.
func ContextFrom(pk, size int64, prevs []PrevEntry, tail func(from, pk int64) ([]byte, error), text func(string) string) (string, error) {
	want := ContextBytes - size
	var parts []string
	for _, p := range prevs {
		if p.PK == pk || want < MinContextBytes {
			break
		}
		from := max(1, p.Size-want+1)
		t, err := tail(from, p.PK)
		if err != nil {
			return "", err
		}
		s := contextTail(t, from > 1)
		if text != nil {
			s = text(s)
		}
		if s != "" {
			parts = append(parts, s)
		}
		want -= p.Size
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
