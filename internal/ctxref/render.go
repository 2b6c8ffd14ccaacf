package ctxref

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/store"
)

// The marker's caps: how many items a list shows and how long an item or
// the summary is, in bytes. Render drops the items past a count and cuts
// a longer text at a word (or a character) with "…"; Parse refuses what
// is over them. Together they keep a marker under MaxBytes, and a typical
// one near 60 tokens.
const (
	MaxTopics       = 3
	MaxTopicBytes   = 32
	MaxEntities     = 3
	MaxEntityBytes  = 48
	MaxHints        = 2
	MaxHintBytes    = 64
	MaxSummaryBytes = 160
	// MaxTypeBytes bounds the reference type's word.
	MaxTypeBytes = 32
	// MaxBytes bounds a whole marker, unknown fields included: Render
	// writes at most some 850 bytes, and Parse and Find take nothing
	// longer.
	MaxBytes = 1024
)

// DefaultType is the type Render writes when a marker's type is not a
// word of the grammar (or empty, as in a marker parsed from the short
// form).
const DefaultType store.RefType = "context"

// Prefix opens every marker, in the case written (Find and Parse take no other).
const Prefix = "[CTX-REF:"

// timeLayout writes a marker's time: UTC, to the minute.
const timeLayout = "2006-01-02 15:04"

// Marker is what a [CTX-REF] marker shows of a reference.
type Marker struct {
	// ID names the reference: what retrieve_context's ref_id takes.
	ID   string
	Type store.RefType
	// TurnFrom and TurnTo are the first and last turn of the content the
	// marker stands for, inclusive; zero when not known (turns start at
	// 1). Turns counts the turns of that range it stands for: all of them
	// for a run, fewer when eviction took turns apart (a topic).
	TurnFrom, TurnTo, Turns int
	// Tokens is what the content took in the window.
	Tokens int
	// Time is when the content was seen; zero when not known. A marker
	// shows it in UTC to the minute.
	Time time.Time
	// Summary is an optional one-line summary (a configured model's).
	Summary string
	// Topics, Entities and Hints (queries that find the content) help
	// the agent decide whether to expand the marker; Render shows the
	// first few of each.
	Topics, Entities, Hints []string
}

// FromReference is the marker of a stored reference. Its time is the
// reference's CreatedAt, and it stands for every turn of its range.
func FromReference(r store.Reference) Marker {
	m := Marker{ID: r.ID, Type: r.Type, TurnFrom: r.TurnFrom, TurnTo: r.TurnTo, Tokens: r.TokensSaved,
		Time: r.CreatedAt, Summary: r.Summary, Topics: r.Topics, Entities: r.Entities, Hints: r.QueryHints}
	if r.TurnFrom >= 1 && r.TurnTo >= r.TurnFrom {
		m.Turns = r.TurnTo - r.TurnFrom + 1
	}
	return m
}

// Render writes m as a marker, on one line, deterministically. It
// normalises m first, so that what it writes always parses back to the
// normalised Marker:
//   - an ID that is not a valid reference ID (store.ValidRefID) has its
//     other bytes replaced by '_' and is cut to 64 bytes ("_" if empty),
//     which then names another reference: give a valid one;
//   - a type that is not a word of the grammar is written DefaultType;
//   - turns are left out unless 1 <= TurnFrom <= TurnTo, and a Turns
//     that does not fit the range is the range's length;
//   - negative tokens are 0; the time is UTC to the minute, left out
//     when zero or its year is not 1 to 9999;
//   - in the summary and the items, control characters, line breaks and
//     other white space become one space, and the text is trimmed; |
//     becomes /, [ and ] become ( and ), a double quote becomes a single
//     one, and in an item a comma becomes a space;
//     bytes that are not UTF-8 become U+FFFD. Items left empty are
//     dropped, the lists cut to their caps, a text over its cap cut at a
//     word with "…".
func Render(m Marker) string {
	m = normal(m)
	b := make([]byte, 0, 256)
	b = append(b, Prefix...)
	b = append(b, m.Type...)
	b = append(b, " | "...)
	b = appendSpan(b, m)
	if m.Summary != "" {
		b = append(b, " | Summary: "...)
		b = append(b, m.Summary...)
	}
	b = appendList(b, " | Topics: ", m.Topics)
	b = appendList(b, " | Entities: ", m.Entities)
	b = appendList(b, " | Ask: ", m.Hints)
	b = append(b, ` | retrieve_context(ref_id="`...)
	b = append(b, m.ID...)
	b = append(b, `")]`...)
	return string(b)
}

// appendSpan writes the span field of a normalised marker: turns, tokens
// and time.
func appendSpan(b []byte, m Marker) []byte {
	if m.TurnFrom > 0 {
		if m.Turns == 1 {
			b = append(b, "1 turn "...)
			b = strconv.AppendInt(b, int64(m.TurnFrom), 10)
		} else {
			b = strconv.AppendInt(b, int64(m.Turns), 10)
			b = append(b, " turns "...)
			b = strconv.AppendInt(b, int64(m.TurnFrom), 10)
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(m.TurnTo), 10)
		}
		b = append(b, ' ')
	}
	b = append(b, '(')
	b = appendGrouped(b, m.Tokens)
	if m.Tokens == 1 {
		b = append(b, " token)"...)
	} else {
		b = append(b, " tokens)"...)
	}
	if !m.Time.IsZero() {
		b = append(b, " @ "...)
		b = m.Time.AppendFormat(b, timeLayout)
	}
	return b
}

func appendList(b []byte, label string, items []string) []byte {
	if len(items) == 0 {
		return b
	}
	b = append(b, label...)
	for i, it := range items {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, it...)
	}
	return b
}

// appendGrouped writes n >= 0 with its thousands separated by commas.
func appendGrouped(b []byte, n int) []byte {
	var d [20]byte
	digits := strconv.AppendInt(d[:0], int64(n), 10)
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, c)
	}
	return b
}

// normal is m as Render writes it (see Render).
func normal(m Marker) Marker {
	if !store.ValidRefID(m.ID) {
		m.ID = fixID(m.ID)
	}
	if !validType(string(m.Type)) {
		m.Type = DefaultType
	}
	if m.TurnFrom < 1 || m.TurnTo < m.TurnFrom {
		m.TurnFrom, m.TurnTo, m.Turns = 0, 0, 0
	} else if n := m.TurnTo - m.TurnFrom + 1; n == 1 || m.Turns < 2 || m.Turns > n {
		m.Turns = n
	}
	m.Tokens = max(m.Tokens, 0)
	m.Time = normalTime(m.Time)
	m.Summary = clean(m.Summary, false, MaxSummaryBytes)
	m.Topics = cleanList(m.Topics, MaxTopics, MaxTopicBytes)
	m.Entities = cleanList(m.Entities, MaxEntities, MaxEntityBytes)
	m.Hints = cleanList(m.Hints, MaxHints, MaxHintBytes)
	return m
}

// normalTime is t in UTC to the minute, or zero when a marker cannot
// show it.
func normalTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	t = t.UTC().Truncate(time.Minute)
	if t.IsZero() || t.Year() < 1 || t.Year() > 9999 {
		return time.Time{}
	}
	return t
}

// fixID replaces the bytes of id a reference ID may not hold by '_' and
// cuts it to length.
func fixID(id string) string {
	b := []byte(id[:min(len(id), store.MaxRefIDBytes)])
	for i, c := range b {
		if !store.ValidRefID(string(c)) {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// validType reports whether t is a type word: a lower-case letter, then
// lower-case letters, digits and '_', at most MaxTypeBytes.
func validType(t string) bool {
	if len(t) == 0 || len(t) > MaxTypeBytes || t[0] < 'a' || t[0] > 'z' {
		return false
	}
	for i := 1; i < len(t); i++ {
		if c := t[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// cleanList cleans items, drops those left empty and keeps the first n.
// It returns items itself when nothing changes.
func cleanList(items []string, n, limit int) []string {
	same := len(items) <= n
	for _, it := range items {
		if !same {
			break
		}
		same = it != "" && len(it) <= limit && textProblem(it, true) == ""
	}
	if same {
		return items
	}
	var out []string
	for _, it := range items {
		if len(out) == n {
			break
		}
		if it = clean(it, true, limit); it != "" {
			out = append(out, it)
		}
	}
	return out
}

// ellipsis ends a text Render cut.
const ellipsis = "…"

// clean makes s a text of the grammar (an item when list) of at most
// limit bytes: see Render.
func clean(s string, list bool, limit int) string {
	if len(s) <= limit && textProblem(s, list) == "" {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), limit+utf8.UTFMax))
	space := false // a space is due before the next character
	for _, r := range s {
		switch {
		case r == '|':
			r = '/'
		case r == '[':
			r = '('
		case r == ']':
			r = ')'
		case r == '"':
			r = '\''
		case r == ',' && list:
			r = ' '
		case unicode.IsSpace(r) || unicode.IsControl(r):
			r = ' '
		}
		if r == ' ' {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r) // an invalid byte comes as utf8.RuneError: U+FFFD
		if b.Len() > limit {
			break // it is cut: the rest does not matter
		}
	}
	return cut(b.String(), limit)
}

// cut shortens a clean text to at most limit bytes, ending it with "…",
// at its last space when that keeps more than half, else at a character.
func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := limit - len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	p := s[:n]
	if i := strings.LastIndexByte(p, ' '); i > len(p)/2 {
		p = p[:i]
	}
	return strings.TrimRight(p, " ") + ellipsis
}

// textProblem says why s is not a text of the grammar (an item when
// list), or "" when it is one.
func textProblem(s string, list bool) string {
	if s == "" {
		return "is empty"
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return "starts or ends with a space"
	}
	prev := rune(0)
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return "is not UTF-8"
		case r == '|' || r == '[' || r == ']' || r == '"' || r == ',' && list:
			return "holds " + strconv.QuoteRune(r)
		case r == ' ' && prev == ' ':
			return "holds two spaces in a row"
		case r != ' ' && (unicode.IsSpace(r) || unicode.IsControl(r)):
			return "holds " + strconv.QuoteRune(r)
		}
		prev = r
	}
	return ""
}
