package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// JSONError words an error of encoding/json for the caller who sent the
// JSON: where it went wrong and what was wanted, in JSON's terms, never
// the Go types it was being decoded into.
func JSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "unexpected end of JSON input"):
		return "the JSON ends before it is complete"
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("a JSON %s where %s is wanted", te.Value, jsonKind(te.Type))
		}
		return fmt.Sprintf("%s: a JSON %s where %s is wanted", te.Field, te.Value, jsonKind(te.Type))
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names what a Go type takes in JSON.
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeFor[json.RawMessage]() {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another kind of value"
}

// DuplicateName returns a member name that one object of the JSON text b
// gives twice, and the byte offset of its second place; at is -1 when no
// object does. encoding/json keeps the last value of such a member and
// drops the others without a word ({"content": "a", "content": "b"} is
// stored as "b"), so a body or a message that names one twice is refused
// instead: the caller's text is kept whole or not at all. Names are
// compared as decoded ("a" and "\u0061" are one name). b is JSON text
// that has been decoded already; on any other, the answer means nothing.
func DuplicateName(b []byte) (name string, at int) {
	// The names of each object open at i (of an array: none), as
	// slices of b unless escaped; a map once an object has many.
	type frame struct {
		object bool
		names  [][]byte
		many   map[string]bool
	}
	var open []frame
	key := false // the next string is a member's name
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{':
			open = append(open, frame{object: true})
			key = true
		case '[':
			open = append(open, frame{})
			key = false
		case '}', ']':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
			key = false
		case ',':
			key = len(open) > 0 && open[len(open)-1].object
		case '"':
			end := i + 1
			escaped := false
			for ; end < len(b) && b[end] != '"'; end++ {
				if b[end] == '\\' {
					escaped = true
					end++
				}
			}
			if end >= len(b) {
				return "", -1
			}
			if key && len(open) > 0 {
				k := b[i+1 : end]
				if escaped {
					var s string
					if json.Unmarshal(b[i:end+1], &s) != nil {
						return "", -1
					}
					k = []byte(s)
				}
				if seen(&open[len(open)-1].names, &open[len(open)-1].many, k) {
					return string(k), i
				}
				key = false
			}
			i = end
		}
	}
	return "", -1
}

// seen reports whether an object's names hold k, and adds it if not: a
// list while they are few (most objects have a handful), a map past
// manyNames.
func seen(names *[][]byte, many *map[string]bool, k []byte) bool {
	const manyNames = 16
	if *many != nil {
		if (*many)[string(k)] {
			return true
		}
		(*many)[string(k)] = true
		return false
	}
	for _, n := range *names {
		if bytes.Equal(n, k) {
			return true
		}
	}
	*names = append(*names, k)
	if len(*names) > manyNames {
		*many = make(map[string]bool, 2*len(*names))
		for _, n := range *names {
			(*many)[string(n)] = true
		}
		*names = nil
	}
	return false
}

// ExactNames refuses a member of the JSON text b, at any depth, that the
// Go type t's structs name only in another case: encoding/json matches
// names in any case, so that {"content": "a", "Content": "b"} decoded to
// "b", the "a" dropped without a word, and "Content" alone was taken for
// "content". b is JSON text decoded into t already; the members t does
// not name at all are left to DisallowUnknownFields, and a type that
// decodes itself (json.Unmarshaler), a map or a json.RawMessage takes
// its members as they come.
func ExactNames(b []byte, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 { // json.RawMessage, []byte
			return nil
		}
		var elems []json.RawMessage
		if json.Unmarshal(b, &elems) != nil {
			return nil
		}
		for _, e := range elems {
			if err := ExactNames(e, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Struct:
		var members map[string]json.RawMessage
		if json.Unmarshal(b, &members) != nil {
			return nil
		}
		fields := jsonFields(t)
		for name, v := range members {
			f, ok := fields[name]
			if !ok {
				for n := range fields {
					if strings.EqualFold(n, name) {
						return fmt.Errorf("unknown field %q (the field is %q)", name, n)
					}
				}
				continue
			}
			if err := ExactNames(v, f); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// jsonFields are a struct's members by their JSON names, with their
// types, its embedded structs' included.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				walk(f.Type)
			case f.IsExported():
				if name == "" {
					name = f.Name
				}
				out[name] = f.Type
			}
		}
	}
	walk(t)
	return out
}
