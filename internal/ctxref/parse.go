package ctxref

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// SyntaxError says why a text is neither a marker nor a ref id.
type SyntaxError struct {
	// Offset is the byte of the text given to Parse where the problem
	// is.
	Offset int
	// Msg says what is wrong.
	Msg string
	// ID is the ref id the text names in a retrieve_context call
	// (ref_id="…"), when it names one: what to pass instead.
	ID string
}

func (e *SyntaxError) Error() string {
	s := e.Msg
	if e.Offset > 0 {
		s += " (at byte " + strconv.Itoa(e.Offset) + ")"
	}
	if e.ID != "" {
		s += `; its ref id is "` + e.ID + `"`
	}
	return s
}

// Parse reads a marker as Render writes it, the short form
// [CTX-REF:id], or a bare ref id, around which white space is ignored.
// From the short form and an id it returns a Marker with only the ID.
// Anything else is a *SyntaxError that says what is wrong and where.
func Parse(s string) (Marker, error) {
	t := strings.TrimSpace(s)
	lead := strings.Index(s, t)
	fail := func(off int, format string, args ...any) (Marker, error) {
		return Marker{}, &SyntaxError{Offset: lead + off, Msg: fmt.Sprintf(format, args...), ID: callID(t)}
	}
	switch {
	case t == "":
		return fail(0, "empty: give a [CTX-REF] marker or its ref id")
	case len(t) > MaxBytes:
		return fail(0, "%d bytes: a marker has at most %d", len(t), MaxBytes)
	case strings.HasPrefix(t, Prefix):
		m, _, err := parse(t)
		if err != nil {
			err.Offset += lead
			return Marker{}, err
		}
		return m, nil
	case store.ValidRefID(t):
		return Marker{ID: t}, nil
	}
	if i := strings.Index(t, Prefix); i > 0 {
		return fail(i, "text before the marker")
	}
	return fail(0, "%s is neither a [CTX-REF] marker nor a ref id (1 to %d letters, digits, '-', '_' or '.')",
		quote(t), store.MaxRefIDBytes)
}

// Located is a marker found in a text: text[Start:End] is the marker.
type Located struct {
	Start, End int
	Marker     Marker
}

// Find returns the markers in text, full or short, in order. Text that
// only looks like one (a "[CTX-REF:" that Parse would refuse) is not a
// marker. It takes time linear in len(text).
func Find(text string) []Located {
	var out []Located
	for i := 0; i < len(text); {
		j := strings.Index(text[i:], Prefix)
		if j < 0 {
			break
		}
		start := i + j
		// No marker holds ']' before its end, nor is longer than MaxBytes.
		w := text[start:min(len(text), start+MaxBytes)]
		if k := strings.IndexByte(w, ']'); k >= 0 {
			if m, _, err := parse(w[:k+1]); err == nil {
				out = append(out, Located{Start: start, End: start + k + 1, Marker: m})
				i = start + k + 1
				continue
			}
		}
		i = start + 1
	}
	return out
}

// The known fields, in their order.
var labels = [...]string{"Summary", "Topics", "Entities", "Ask"}

// parse reads s, which starts with the prefix, as a whole marker. It
// returns how many unknown fields it skipped.
func parse(s string) (Marker, int, *SyntaxError) {
	id := callID(s)
	fail := func(off int, format string, args ...any) (Marker, int, *SyntaxError) {
		return Marker{}, 0, &SyntaxError{Offset: off, Msg: fmt.Sprintf(format, args...), ID: id}
	}
	end := strings.IndexByte(s, ']')
	switch {
	case end < 0:
		return fail(len(s), "the marker has no closing ]")
	case end < len(s)-1:
		return fail(end+1, "text after the marker's closing ]")
	}
	body := s[len(Prefix):end]
	if !strings.Contains(body, " | ") {
		if !store.ValidRefID(body) {
			return fail(len(Prefix), "%s is not a ref id (1 to %d letters, digits, '-', '_' or '.')",
				quote(body), store.MaxRefIDBytes)
		}
		return Marker{ID: body}, 0, nil
	}
	var fields []string
	var offs []int
	for off := len(Prefix); ; {
		i := strings.Index(s[off:end], " | ")
		if i < 0 {
			fields, offs = append(fields, s[off:end]), append(offs, off)
			break
		}
		fields, offs = append(fields, s[off:off+i]), append(offs, off)
		off += i + 3
	}
	if len(fields) < 3 {
		return fail(len(Prefix), `a marker is its type, span, fields and retrieve_context call, separated by " | "`)
	}
	var m Marker
	// The call first, so that every other error can say the id.
	last := len(fields) - 1
	call, open := fields[last], `retrieve_context(ref_id="`
	// The call's two ends must not overlap: retrieve_context(ref_id=")
	if len(call) < len(open)+2 || !strings.HasPrefix(call, open) || !strings.HasSuffix(call, `")`) {
		return fail(offs[last], `the last field %s is not retrieve_context(ref_id="…")`, quote(call))
	}
	m.ID = call[len(open) : len(call)-2]
	if !store.ValidRefID(m.ID) {
		return fail(offs[last], "%s is not a ref id (1 to %d letters, digits, '-', '_' or '.')",
			quote(m.ID), store.MaxRefIDBytes)
	}
	if !validType(fields[0]) {
		return fail(offs[0], "type %s is not a word of lower-case letters, digits and '_' (at most %d bytes)",
			quote(fields[0]), MaxTypeBytes)
	}
	m.Type = store.RefType(fields[0])
	if msg := parseSpan(fields[1], &m); msg != "" {
		return fail(offs[1], "%s", msg)
	}
	seen, skipped := -1, 0 // the last known field read
	for f := 2; f < last; f++ {
		field := fields[f]
		colon := strings.Index(field, ": ")
		if colon < 0 || !validLabel(field[:colon]) {
			return fail(offs[f], `field %s is not "Label: text"`, quote(field))
		}
		label, value := field[:colon], field[colon+2:]
		known := -1
		for k, l := range labels {
			if l == label {
				known = k
			}
		}
		switch {
		case known < 0:
			if p := textProblem(value, false); p != "" {
				return fail(offs[f], "field %s %s", label, p)
			}
			skipped++
			continue
		case known == seen:
			return fail(offs[f], "a second %s field", label)
		case known < seen:
			return fail(offs[f], "%s after %s: the fields go %s", label, labels[seen], strings.Join(labels[:], ", "))
		}
		seen = known
		var msg string
		switch label {
		case "Summary":
			if p := textProblem(value, false); p != "" {
				msg = "Summary " + p
			} else if len(value) > MaxSummaryBytes {
				msg = fmt.Sprintf("Summary is %d bytes, over %d", len(value), MaxSummaryBytes)
			}
			m.Summary = value
		case "Topics":
			m.Topics, msg = parseList(label, value, MaxTopics, MaxTopicBytes)
		case "Entities":
			m.Entities, msg = parseList(label, value, MaxEntities, MaxEntityBytes)
		case "Ask":
			m.Hints, msg = parseList(label, value, MaxHints, MaxHintBytes)
		}
		if msg != "" {
			return fail(offs[f]+colon+2, "%s", msg)
		}
	}
	return m, skipped, nil
}

// parseSpan reads the span field into m; it returns what is wrong with
// it, or "".
func parseSpan(f string, m *Marker) string {
	const form = `a span is "15 turns 12-26 (4,200 tokens) @ 2026-11-25 14:23", "1 turn 7 (90 tokens)" or "(90 tokens)"`
	rest := f
	if !strings.HasPrefix(rest, "(") {
		// count " turn(s) " first ["-" last] " "
		n, r, ok := number(rest)
		if !ok || !strings.HasPrefix(r, " turn") {
			return form
		}
		r = strings.TrimPrefix(strings.TrimPrefix(r, " turn"), "s")
		if !strings.HasPrefix(r, " ") {
			return form
		}
		from, r, ok := number(r[1:])
		if !ok {
			return form
		}
		to := from
		if strings.HasPrefix(r, "-") {
			if to, r, ok = number(r[1:]); !ok {
				return form
			}
		}
		if !strings.HasPrefix(r, " ") {
			return form
		}
		switch {
		case from < 1:
			return "turns start at 1"
		case to < from:
			return fmt.Sprintf("turns %d-%d run backwards", from, to)
		case from == to && n != 1:
			return fmt.Sprintf("%d turns in the one turn %d", n, from)
		case from < to && (n < 2 || n > to-from+1):
			return fmt.Sprintf("%d turns do not fit turns %d-%d", n, from, to)
		}
		m.Turns, m.TurnFrom, m.TurnTo = n, from, to
		rest = r[1:]
	}
	tokens, r, ok := grouped(strings.TrimPrefix(rest, "("))
	if !ok || !strings.HasPrefix(rest, "(") || !strings.HasPrefix(r, " token") {
		return form
	}
	m.Tokens = tokens
	r = strings.TrimPrefix(r[len(" token"):], "s")
	if !strings.HasPrefix(r, ")") {
		return form
	}
	r = r[1:]
	if r != "" {
		if !strings.HasPrefix(r, " @ ") {
			return form
		}
		t, err := time.Parse(timeLayout, r[3:])
		switch {
		case err != nil:
			return fmt.Sprintf("time %s is not YYYY-MM-DD HH:MM (UTC)", quote(r[3:]))
		case t.Year() < 1:
			return "time " + quote(r[3:]) + " is before the year 1"
		case t.IsZero():
			return "time 0001-01-01 00:00 means none: leave it out"
		}
		m.Time = t
	}
	// What is left is the form's detail (leading zeros, plurals, commas
	// out of place): the span must be as Render writes it.
	if want := string(appendSpan(nil, *m)); want != f {
		return fmt.Sprintf("span %s is written %s", quote(f), quote(want))
	}
	return ""
}

// number reads the decimal digits that start s, as an int.
func number(s string) (int, string, bool) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(s[:i])
	return n, s[i:], err == nil && i > 0
}

// grouped reads the number that starts s, digits with commas between
// them.
func grouped(s string) (int, string, bool) {
	i := 0
	for i < len(s) && ('0' <= s[i] && s[i] <= '9' || s[i] == ',' && i > 0 && i+1 < len(s) && '0' <= s[i+1] && s[i+1] <= '9') {
		i++
	}
	n, err := strconv.Atoi(strings.ReplaceAll(s[:i], ",", ""))
	return n, s[i:], err == nil && i > 0
}

// parseList reads a list of at most n items of at most limit bytes each.
func parseList(label, value string, n, limit int) ([]string, string) {
	items := strings.Split(value, ", ")
	if len(items) > n {
		return nil, fmt.Sprintf("%s has %d items, at most %d", label, len(items), n)
	}
	for _, it := range items {
		if p := textProblem(it, true); p != "" {
			return nil, fmt.Sprintf("%s item %s %s", label, quote(it), p)
		}
		if len(it) > limit {
			return nil, fmt.Sprintf("%s item %s is %d bytes, over %d", label, quote(it), len(it), limit)
		}
	}
	return items, ""
}

// validLabel reports whether l is a field's label: an upper-case ASCII
// letter, then letters and '-'.
func validLabel(l string) bool {
	if l == "" || l[0] < 'A' || l[0] > 'Z' {
		return false
	}
	for i := 1; i < len(l); i++ {
		if c := l[i]; (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && c != '-' {
			return false
		}
	}
	return true
}

// callID is the valid ref id that s names as ref_id="…", or "".
func callID(s string) string {
	const key = `ref_id="`
	i := strings.Index(s, key)
	if i < 0 {
		return ""
	}
	rest := s[i+len(key):]
	j := strings.IndexByte(rest, '"')
	if j < 0 || !store.ValidRefID(rest[:j]) {
		return ""
	}
	return rest[:j]
}

// quote quotes s for an error, cut to 40 bytes.
func quote(s string) string {
	if len(s) > 40 {
		n := 40
		for n > 0 && s[n]&0xC0 == 0x80 {
			n--
		}
		return strconv.Quote(s[:n]) + "…"
	}
	return strconv.Quote(s)
}
