package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// CutMark ends a text cut short, as the archivalist cuts an event's detail.
const CutMark = "…"

// Replacer replaces a string (the needle) with a marker in the bytes,
// texts and JSON values a redaction rewrites, adding the places it
// replaced to a counter (see store.PurgeStore.Redact).
type Replacer struct {
	needle, marker []byte
	// jsonForms are the forms the needle takes inside JSON text.
	jsonForms []string
	places    *int64
}

// NewReplacer returns a Replacer of needle by marker that adds the places
// it replaces to *places. With inJSON false it replaces nothing in JSON
// values, for a needle that can be in no JSON text.
func NewReplacer(needle, marker []byte, inJSON bool, places *int64) *Replacer {
	r := &Replacer{needle: needle, marker: marker, places: places}
	if inJSON && utf8.Valid(needle) {
		r.jsonForms = JSONForms(string(needle))
	}
	return r
}

// JSONForms returns the forms s takes inside a JSON string as encoders
// write it: Go's (with and without HTML escaping, which is JavaScript's
// JSON.stringify too), and those that escape every non-ASCII character
// as \uXXXX (Python's json.dumps, in lower-case hex; Java's, upper-case),
// or escape "/" as "\/" (PHP's json_encode).
func JSONForms(s string) []string {
	var forms []string
	add := func(f string) {
		if !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	for _, html := range []bool{true, false} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(s); err != nil {
			continue
		}
		f := strings.TrimSuffix(buf.String(), "\n")
		add(f[1 : len(f)-1])
	}
	for _, ascii := range []string{"", "%04x", "%04X"} {
		for _, slash := range []bool{false, true} {
			for _, html := range []string{"", "<>&", "<>&='"} {
				add(jsonString(s, ascii, slash, html))
			}
		}
	}
	return forms
}

// jsonString is the body of s as a JSON string with short escapes for
// the quote, the backslash and the usual control characters; with ascii
// a format ("%04x"), every rune from DEL on as \uXXXX (a surrogate pair
// past the basic plane), as Python writes them; with slash, "/" as "\/";
// the characters of html as \u00XX (Go escapes <>&, Gson <>&=').
func jsonString(s, ascii string, slash bool, html string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '/' && slash:
			b.WriteString(`\/`)
		case r < utf8.RuneSelf && strings.ContainsRune(html, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r >= 0x7f && ascii != "":
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(&b, `\u`+ascii+`\u`+ascii, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u`+ascii, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// JSONNeedles are the forms the needle takes inside JSON text (none if it
// is not looked for there), for the queries that find the JSON values
// that may hold it.
func (r *Replacer) JSONNeedles() []string { return r.jsonForms }

// Replace replaces the needle in b, counting the places.
func (r *Replacer) Replace(b []byte) ([]byte, bool) {
	n := bytes.Count(b, r.needle)
	if n == 0 {
		return b, false
	}
	*r.places += int64(n)
	return bytes.ReplaceAll(b, r.needle, r.marker), true
}

// ReplaceContent is Replace for stored content, which may be JSON text
// (a tool call's input, a hook's payload) holding the needle escaped: each
// of its JSON forms is replaced too, by the marker's JSON form.
func (r *Replacer) ReplaceContent(b []byte) ([]byte, bool) {
	b, changed := r.Replace(b)
	if len(r.jsonForms) == 0 {
		return b, changed
	}
	marker := []byte(JSONForms(string(r.marker))[0])
	for _, f := range r.jsonForms {
		if f == string(r.needle) {
			continue
		}
		if out, n := replaceEscaped(b, []byte(f), marker); n > 0 {
			*r.places += int64(n)
			b, changed = out, true
		}
	}
	return b, changed
}

// replaceEscaped replaces each form in b that starts where an escape
// could (after an even number of backslashes): in `C:\\u0026`, the
// second backslash is escaped, and "\u0026" there is no escape of "&".
func replaceEscaped(b, form, marker []byte) ([]byte, int) {
	var out []byte
	n, last := 0, 0
	for i := 0; ; {
		j := bytes.Index(b[i:], form)
		if j < 0 {
			break
		}
		at := i + j
		k := at
		for k > 0 && b[k-1] == '\\' {
			k--
		}
		if (at-k)%2 == 1 {
			i = at + 1 // escaped: not this one
			continue
		}
		out = append(append(out, b[last:at]...), marker...)
		last, i, n = at+len(form), at+len(form), n+1
	}
	if n == 0 {
		return b, 0
	}
	return append(out, b[last:]...), n
}

// ReplaceString is Replace for a string.
func (r *Replacer) ReplaceString(s string) (string, bool) {
	b, ok := r.Replace([]byte(s))
	return string(b), ok
}

// ReplaceCut is ReplaceString for a text that may have been cut short (it
// ends with CutMark): a cut can fall inside the string, leaving its start,
// which is replaced too. A text that merely ends with a few bytes the
// string starts with loses them as well, which costs little in a text
// already cut.
func (r *Replacer) ReplaceCut(s string) (string, bool) {
	s, changed := r.ReplaceString(s)
	body, cut := strings.CutSuffix(s, CutMark)
	if !cut {
		return s, changed
	}
	for k := len(r.needle) - 1; k > 0; k-- {
		if strings.HasSuffix(body, string(r.needle[:k])) {
			*r.places++
			return body[:len(body)-k] + string(r.marker) + CutMark, true
		}
	}
	return s, changed
}

// ReplaceJSON replaces the needle in every string (and object key) of the
// JSON value raw, re-encoding it as Go does; the JSON is unchanged when
// the needle is in none of them.
func (r *Replacer) ReplaceJSON(raw string) (string, bool, error) {
	if len(r.jsonForms) == 0 {
		return raw, false, nil
	}
	if !slices.ContainsFunc(r.jsonForms, func(n string) bool { return strings.Contains(raw, n) }) {
		return raw, false, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw, false, err
	}
	changed := false
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			s, ok := r.ReplaceString(x)
			changed = changed || ok
			return s
		case json.Number:
			// A number that is the needle (a PIN, an account number)
			// becomes the marker, a string; one that merely holds its
			// digits (a timestamp) stays.
			if string(x) == string(r.needle) {
				*r.places++
				changed = true
				return string(r.marker)
			}
			return x
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
			return x
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, val := range x {
				k2, ok := r.ReplaceString(k)
				changed = changed || ok
				out[k2] = walk(val)
			}
			return out
		}
		return v
	}
	v = walk(v)
	if !changed {
		return raw, false, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw, false, err
	}
	return string(b), true, nil
}

// SourcesAny reports whether a turn snapshot's report names any of ids
// among its sources: the entries its pre-fetch quoted.
func SourcesAny(report string, ids map[string]bool) bool {
	var r struct {
		Sources []string `json:"sources"`
	}
	if json.Unmarshal([]byte(report), &r) != nil {
		return false
	}
	return slices.ContainsFunc(r.Sources, func(id string) bool { return ids[id] })
}
