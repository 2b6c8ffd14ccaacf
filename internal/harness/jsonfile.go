package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"unicode/utf8"
)

// The harnesses' settings are JSON files that people edit by hand, and
// Claude Code rewrites ~/.claude.json itself. Go maps would lose their key
// order, so a JSON value here is one of nil, bool, json.Number, string,
// []any or *object, an object that keeps its members in file order.

// object is a JSON object in the order of its members.
type object struct {
	members []member
}

type member struct {
	key string
	val any
}

// get returns the value of key; of its last occurrence if the file has it
// twice, as JavaScript's JSON.parse would.
func (o *object) get(key string) (any, bool) {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.members[i].key == key {
			return o.members[i].val, true
		}
	}
	return nil, false
}

// set replaces the value of key in place, or appends the member.
func (o *object) set(key string, val any) {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.members[i].key == key {
			o.members[i].val = val
			return
		}
	}
	o.members = append(o.members, member{key, val})
}

// del removes every occurrence of key.
func (o *object) del(key string) {
	kept := o.members[:0]
	for _, m := range o.members {
		if m.key != key {
			kept = append(kept, m)
		}
	}
	o.members = kept
}

// obj builds an object from key, value pairs.
func obj(kv ...any) *object {
	o := &object{}
	for i := 0; i+1 < len(kv); i += 2 {
		o.members = append(o.members, member{kv[i].(string), kv[i+1]})
	}
	return o
}

// SyntaxError is a settings file that engram will not edit: it does not
// parse, or it has comments, which an edit could not keep.
type SyntaxError struct {
	Path      string
	Line, Col int // 1-based; Col counts characters
	Msg       string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s; not changing it (fix the file, or edit it by hand)", e.Path, e.Line, e.Col, e.Msg)
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		before = before[i+1:]
	}
	return line, 1 + utf8.RuneCount(before)
}

// findComment returns the offset of the first // or /* comment outside a
// string, or -1.
func findComment(data []byte) int {
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '/' && i+1 < len(data) && (data[i+1] == '/' || data[i+1] == '*'):
			return i
		}
	}
	return -1
}

// parseJSON parses a settings file that must hold one JSON object. An
// empty file is an empty object.
func parseJSON(path string, data []byte) (*object, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return &object{}, nil
	}
	if off := findComment(data); off >= 0 {
		line, col := position(data, off)
		return nil, &SyntaxError{path, line, col, "has a comment, and JSON with comments cannot be edited without losing them"}
	}
	// Check with the standard decoder first: its errors have exact
	// offsets, which the token reader's lack.
	check := json.NewDecoder(bytes.NewReader(data))
	var probe any
	if err := check.Decode(&probe); err != nil {
		off := len(data)
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			off = int(se.Offset) - 1 // Offset counts the offending byte
		case errors.Is(err, io.ErrUnexpectedEOF):
			err = errors.New("unexpected end of input")
		}
		line, col := position(data, off)
		return nil, &SyntaxError{path, line, col, "invalid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	off := int(check.InputOffset())
	if rest := bytes.TrimLeft(data[off:], " \t\r\n"); len(rest) > 0 {
		line, col := position(data, len(data)-len(rest))
		return nil, &SyntaxError{path, line, col, "invalid JSON: more after the top-level value"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, &SyntaxError{path, 1, 1, "invalid JSON: " + err.Error()}
	}
	o, ok := v.(*object)
	if !ok {
		return nil, &SyntaxError{path, 1, 1, "is not a JSON object"}
	}
	return o, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // nil, bool, json.Number or string
	}
	switch d {
	case '{':
		o := &object{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			o.members = append(o.members, member{kt.(string), v})
		}
		_, err := dec.Token()
		return o, err
	case '[':
		a := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

// jsonStyle is how a file is laid out, so that a rewrite looks like it.
type jsonStyle struct {
	indent    string // one level; "" with compact
	compact   bool   // the whole value on one line, no spaces
	finalNewl bool
}

// styleOf reads the layout of a file: the indentation of its first
// indented line, or compact when the value has no line breaks. A new file
// gets two spaces, as Claude Code and Codex write theirs.
func styleOf(data []byte) jsonStyle {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return jsonStyle{indent: "  ", finalNewl: true}
	}
	s := jsonStyle{finalNewl: bytes.HasSuffix(data, []byte("\n"))}
	if !bytes.Contains(trimmed, []byte("\n")) {
		s.compact = true
		return s
	}
	for _, line := range bytes.Split(trimmed, []byte("\n"))[1:] {
		ws := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		if len(ws) > 0 && len(ws) < len(line) {
			s.indent = string(ws)
			return s
		}
	}
	s.indent = "  "
	return s
}

// encodeJSON writes v in style s.
func encodeJSON(v any, s jsonStyle) []byte {
	var b bytes.Buffer
	writeValue(&b, v, s, 0)
	if s.finalNewl {
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func writeValue(b *bytes.Buffer, v any, s jsonStyle, depth int) {
	newline := func(d int) {
		if !s.compact {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(s.indent, d))
		}
	}
	switch v := v.(type) {
	case *object:
		if len(v.members) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteByte('{')
		for i, m := range v.members {
			if i > 0 {
				b.WriteByte(',')
			}
			newline(depth + 1)
			writeString(b, m.key)
			b.WriteByte(':')
			if !s.compact {
				b.WriteByte(' ')
			}
			writeValue(b, m.val, s, depth+1)
		}
		newline(depth)
		b.WriteByte('}')
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			newline(depth + 1)
			writeValue(b, e, s, depth+1)
		}
		newline(depth)
		b.WriteByte(']')
	case string:
		writeString(b, v)
	case json.Number:
		b.WriteString(string(v))
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	default:
		panic(fmt.Sprintf("harness: JSON value of type %T", v))
	}
}

// writeString writes s as a JSON string without escaping HTML characters,
// as JavaScript's JSON.stringify does.
func writeString(b *bytes.Buffer, s string) {
	var sb bytes.Buffer
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Write(bytes.TrimSuffix(sb.Bytes(), []byte("\n")))
}

// equalJSON reports whether a and b are the same JSON value: objects as
// sets of members (their last occurrence), numbers by value.
func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case *object:
		bo, ok := b.(*object)
		if !ok || len(keys(a)) != len(keys(bo)) {
			return false
		}
		for _, k := range keys(a) {
			av, _ := a.get(k)
			bv, ok := bo.get(k)
			if !ok || !equalJSON(av, bv) {
				return false
			}
		}
		return true
	case []any:
		ba, ok := b.([]any)
		if !ok || len(a) != len(ba) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], ba[i]) {
				return false
			}
		}
		return true
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		x, ok1 := new(big.Float).SetString(string(a))
		y, ok2 := new(big.Float).SetString(string(bn))
		return ok1 && ok2 && x.Cmp(y) == 0
	default:
		return a == b
	}
}

// keys returns o's distinct keys.
func keys(o *object) []string {
	seen := map[string]bool{}
	var ks []string
	for _, m := range o.members {
		if !seen[m.key] {
			seen[m.key] = true
			ks = append(ks, m.key)
		}
	}
	return ks
}
