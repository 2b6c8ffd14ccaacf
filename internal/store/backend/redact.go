package backend

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
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
	if inJSON {
		r.jsonForms = JSONForms(string(needle))
	}
	return r
}

// JSONForms returns the forms s takes inside a JSON string as Go's
// encoder writes it (with and without HTML escaping).
func JSONForms(s string) []string {
	var forms []string
	for _, html := range []bool{true, false} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(s); err != nil {
			continue
		}
		f := strings.TrimSuffix(buf.String(), "\n")
		f = f[1 : len(f)-1]
		if !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	return forms
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
