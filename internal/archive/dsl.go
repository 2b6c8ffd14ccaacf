package archive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
)

// The @arch: query language, the seed's grammar:
//
//	Query  <- '@arch:' Intent ':' Domain Params? Data?
//	Intent <- 'recall' / 'store' / 'check'
//	Domain <- 'patterns' / 'failures' / 'decisions' / 'files' / 'learnings'
//	Params <- '?' Param ('&' Param)*
//	Param  <- Key '=' Value          Key <- [a-z_]+    Value <- [^&{]+
//	Data   <- '{' JSON '}'
//
// Several queries are joined by ';'. engram also takes the singular of a
// domain (store:failure), insights for learnings, percent-escapes in values,
// and object keys without quotes in Data ({approach:"x"}), as the seed's
// own examples write them.

// QueryIntent is what a query wants done (the seed's "intent"; Intent is
// the cross-cutting work of DeclareIntent).
type QueryIntent string

// The three query intents.
const (
	Recall QueryIntent = "recall"
	Store  QueryIntent = "store"
	Check  QueryIntent = "check"
)

// Domain is what part of the history a query is about.
type Domain string

// The five domains.
const (
	Patterns  Domain = "patterns"
	Failures  Domain = "failures"
	Decisions Domain = "decisions"
	Files     Domain = "files"
	Learnings Domain = "learnings"
)

var domainNames = map[string]Domain{
	"patterns": Patterns, "pattern": Patterns,
	"failures": Failures, "failure": Failures,
	"decisions": Decisions, "decision": Decisions,
	"files": Files, "file": Files,
	"learnings": Learnings, "learning": Learnings, "insights": Learnings, "insight": Learnings,
}

// Query is one parsed @arch: query.
type Query struct {
	Intent QueryIntent       `json:"intent"`
	Domain Domain            `json:"domain"`
	Params map[string]string `json:"params,omitempty"`
	// Data is the JSON object of a store, with keys quoted.
	Data json.RawMessage `json:"data,omitempty"`
}

// String renders the query in the DSL; Parse(q.String()) gives q back.
func (q Query) String() string {
	var b strings.Builder
	b.WriteString("@arch:" + string(q.Intent) + ":" + string(q.Domain))
	keys := make([]string, 0, len(q.Params))
	for k := range q.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + escapeValue(q.Params[k]))
	}
	if len(q.Data) > 0 {
		b.Write(q.Data)
	}
	return b.String()
}

// escapeValue percent-escapes what would end or confuse a value.
func escapeValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '&' || c == '{' || c == ';' || c == '%' || c == '=' || c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ParseError says where and why a query does not parse.
type ParseError struct {
	Query string
	Pos   int
	Msg   string
}

func (e *ParseError) Error() string {
	q := e.Query
	if len(q) > 80 {
		q = q[:80] + "…"
	}
	return fmt.Sprintf("@arch: query %q: at %d: %s", q, e.Pos, e.Msg)
}

// MaxQueryBytes bounds a DSL input.
const MaxQueryBytes = 64 << 10

// IsDSL reports whether input is written in the DSL (rather than words).
func IsDSL(input string) bool { return strings.HasPrefix(strings.TrimSpace(input), "@arch:") }

// ParseAll parses one or more queries joined by ';'.
func ParseAll(input string) ([]Query, error) {
	if len(input) > MaxQueryBytes {
		return nil, &ParseError{Query: input[:80], Msg: fmt.Sprintf("%d bytes; at most %d", len(input), MaxQueryBytes)}
	}
	parts, err := splitQueries(input)
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, p := range parts {
		q, err := Parse(p)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	if len(out) == 0 {
		return nil, &ParseError{Query: input, Msg: "no query"}
	}
	return out, nil
}

// splitQueries cuts input at the ';' that are outside Data.
func splitQueries(input string) ([]string, error) {
	var parts []string
	depth, start := 0, 0
	inStr, esc := false, false
	for i := 0; i < len(input); i++ {
		c := input[i]
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"' && depth > 0:
			inStr = true
		case c == '{':
			depth++
		case c == '}':
			if depth == 0 {
				return nil, &ParseError{Query: input, Pos: i, Msg: "'}' without '{'"}
			}
			depth--
		case c == ';' && depth == 0:
			if s := strings.TrimSpace(input[start:i]); s != "" {
				parts = append(parts, s)
			}
			start = i + 1
		}
	}
	if depth > 0 || inStr {
		return nil, &ParseError{Query: input, Pos: len(input), Msg: "unterminated data: '{' without '}'"}
	}
	if s := strings.TrimSpace(input[start:]); s != "" {
		parts = append(parts, s)
	}
	return parts, nil
}

// Parse parses one query.
func Parse(input string) (Query, error) {
	s := strings.TrimSpace(input)
	fail := func(pos int, format string, args ...any) (Query, error) {
		return Query{}, &ParseError{Query: s, Pos: pos, Msg: fmt.Sprintf(format, args...)}
	}
	if !strings.HasPrefix(s, "@arch:") {
		return fail(0, "a query starts with @arch:")
	}
	pos := len("@arch:")
	rest := s[pos:]
	colon := strings.IndexByte(rest, ':')
	if colon < 0 {
		return fail(pos, "want @arch:INTENT:DOMAIN (intent recall, store or check)")
	}
	var q Query
	switch in := QueryIntent(rest[:colon]); in {
	case Recall, Store, Check:
		q.Intent = in
	default:
		return fail(pos, "unknown intent %q: want recall, store or check", rest[:colon])
	}
	pos += colon + 1
	rest = rest[colon+1:]
	end := strings.IndexAny(rest, "?{")
	if end < 0 {
		end = len(rest)
	}
	d, ok := domainNames[rest[:end]]
	if !ok {
		return fail(pos, "unknown domain %q: want patterns, failures, decisions, files or learnings", rest[:end])
	}
	q.Domain = d
	pos += end
	rest = rest[end:]
	if strings.HasPrefix(rest, "?") {
		brace := strings.IndexByte(rest, '{')
		params := rest[1:]
		if brace >= 0 {
			params = rest[1:brace]
		}
		q.Params = map[string]string{}
		off := pos + 1
		for p := range strings.SplitSeq(params, "&") {
			eq := strings.IndexByte(p, '=')
			if eq <= 0 {
				return fail(off, "parameter %q: want key=value", p)
			}
			key := p[:eq]
			for _, c := range key {
				if (c < 'a' || c > 'z') && c != '_' {
					return fail(off, "parameter name %q: lower-case letters and _ only", key)
				}
			}
			raw := p[eq+1:]
			val, err := url.PathUnescape(raw)
			if err != nil {
				return fail(off+eq+1, "value of %s: %v", key, err)
			}
			val = strings.TrimSpace(val)
			if val == "" {
				return fail(off+eq+1, "parameter %s has no value", key)
			}
			if _, dup := q.Params[key]; dup {
				return fail(off, "parameter %s given twice", key)
			}
			q.Params[key] = val
			off += len(p) + 1
		}
		if brace >= 0 {
			pos += brace
			rest = rest[brace:]
		} else {
			pos += len(rest)
			rest = ""
		}
	}
	if strings.HasPrefix(rest, "{") {
		data, err := relaxedJSON(rest)
		if err != nil {
			return fail(pos, "data: %v", err)
		}
		q.Data = data
		rest = ""
	}
	if rest != "" {
		return fail(pos, "unexpected %q", rest)
	}
	if q.Intent == Store && len(q.Data) == 0 {
		return fail(pos, "store needs data: @arch:store:%s{...}", q.Domain)
	}
	if q.Intent != Store && len(q.Data) > 0 {
		return fail(pos, "only store takes data")
	}
	return q, nil
}

// relaxedJSON turns an object with bare keys into JSON and checks it is
// one object and nothing after it.
func relaxedJSON(s string) (json.RawMessage, error) {
	var b bytes.Buffer
	inStr, esc := false, false
	expectKey := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inStr {
			b.WriteByte(c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch {
		case c == '"':
			inStr = true
			expectKey = false
			b.WriteByte(c)
		case c == '{' || c == ',':
			expectKey = true
			b.WriteByte(c)
		case expectKey && (c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'):
			j := i
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			b.WriteString(`"` + s[i:j] + `"`)
			i = j - 1
			expectKey = false
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			b.WriteByte(c)
		default:
			expectKey = false
			b.WriteByte(c)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b.Bytes()))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("text after the object")
	}
	out, err := json.Marshal(obj) // canonical: sorted keys, no spaces
	if err != nil {
		return nil, err
	}
	return out, nil
}
