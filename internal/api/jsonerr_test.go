package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestJSONError: a decoding error names the place and what JSON was
// wanted there, never a Go type.
func TestJSONError(t *testing.T) {
	var open WindowOpenIn
	var app WindowAppendIn
	for _, c := range []struct {
		in   string
		into any
		want string
	}{
		{`[]`, &open, "a JSON array where an object is wanted"},
		{`{"limit":"big"}`, &open, `limit: a JSON string where a whole number is wanted`},
		{`{"messages":{}}`, &app, "messages: a JSON object where an array is wanted"},
		{`{"limit":`, &open, "the JSON ends before it is complete"},
		{`{"limit":1,}`, &open, "invalid JSON at byte 12"},
	} {
		err := json.Unmarshal([]byte(c.in), c.into)
		if err == nil {
			t.Fatalf("%s: no error", c.in)
		}
		got := JSONError(err)
		if !strings.Contains(got, c.want) || strings.Contains(got, "Go ") || strings.Contains(got, "api.") {
			t.Errorf("%s: %q, want %q", c.in, got, c.want)
		}
	}
}

// TestDuplicateName: a member name given twice in one object is found,
// its second place said; the same name in other objects, a string value
// equal to a name, and quotes and braces inside strings are not.
func TestDuplicateName(t *testing.T) {
	for _, c := range []struct {
		in   string
		name string
		at   int
	}{
		{`{"a":1,"a":2}`, "a", 7},
		{`{"a":1,"b":{"c":[1,{"d":0,"d":1}]}}`, "d", 26},
		{`{"a\u0062":1,"ab":2}`, "ab", 13},
		{`[{"x":{"y":1},"x":2}]`, "x", 14},
		{`{"a":1,"b":{"a":1},"c":[{"a":1},{"a":1}]}`, "", -1},
		{`{"a":"a","b":"a"}`, "", -1},
		{`{"a":"\"a\":{","b":"}\\"}`, "", -1},
		{`{"":1,"":2}`, "", 6},
		{`{}`, "", -1},
		{`"a"`, "", -1},
		{`[1,"a","a"]`, "", -1},
	} {
		name, at := DuplicateName([]byte(c.in))
		if name != c.name || at != c.at {
			t.Errorf("DuplicateName(%s) = %q, %d; want %q, %d", c.in, name, at, c.name, c.at)
		}
	}
	// An object of many names, past which they are kept in a map.
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	for _, c := range []struct {
		in   string
		name string
		at   int
	}{
		{"{" + b.String() + `"k3":0}`, "k3", b.Len() + 1},
		{"{" + b.String() + `"k40":0}`, "", -1},
	} {
		name, at := DuplicateName([]byte(c.in))
		if name != c.name || at != c.at {
			t.Errorf("DuplicateName(%s) = %q, %d; want %q, %d", c.in, name, at, c.name, c.at)
		}
	}
}

// FuzzDuplicateName: on JSON text, DuplicateName finds a name given twice
// in one object exactly when encoding/json's tokens show one.
func FuzzDuplicateName(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":1},"b":[{"b":2,"c":3}]}`, `{"a\u0062":1,"ab":2}`, `[{"x":"y","y":"x"}]`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"a":0}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		name, at := DuplicateName([]byte(s))
		want, found := tokenDuplicate(t, s)
		if (at >= 0) != found || found && name != want {
			t.Fatalf("DuplicateName(%q) = %q, %d; the tokens say %q, %v", s, name, at, want, found)
		}
	})
}

// tokenDuplicate is DuplicateName read off encoding/json's tokens.
func tokenDuplicate(t *testing.T, s string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	type frame struct {
		object bool
		names  map[string]bool
		key    bool
	}
	var open []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(open) > 0 {
			top = open[len(open)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				open = open[:len(open)-1]
				continue
			}
			k := tok.(string)
			if top.names[k] {
				return k, true
			}
			top.names[k] = true
			top.key = false
			continue
		}
		if top != nil && top.object {
			top.key = true // a value: the next token is a name or the end
		}
		switch tok {
		case json.Delim('{'):
			open = append(open, &frame{object: true, names: map[string]bool{}, key: true})
		case json.Delim('['):
			open = append(open, &frame{})
		case json.Delim('}'), json.Delim(']'):
			open = open[:len(open)-1]
		}
	}
}
