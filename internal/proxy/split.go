package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
)

// A request's body is split into its top-level fields, and its list of
// messages into their raw bytes, by the splitter here rather than by
// encoding/json: a harness resends its whole history every turn (262 KiB
// at 200 messages), and decoding it took half of the proxy's time before
// the request could leave. The splitter finds where each value ends and
// validates nothing: the fields read are decoded on their own, a message
// new to the window is decoded when it is mapped, and the whole body is
// validated before anything of it is stored (json.Valid), after the
// request has left when the window has room.

var errSplit = errors.New("malformed JSON")

// splitObject returns the members of the JSON object b, their values raw.
func splitObject(b []byte) (map[string]json.RawMessage, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, fmt.Errorf("%w: not an object", errSplit)
	}
	out := map[string]json.RawMessage{}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, fmt.Errorf("%w: a member without a name at byte %d", errSplit, i)
		}
		end, err := skipString(b, i)
		if err != nil {
			return nil, err
		}
		key, err := memberName(b[i:end])
		if err != nil {
			return nil, err
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, fmt.Errorf("%w: no colon after %q", errSplit, key)
		}
		i = skipSpace(b, i+1)
		vend, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		out[key] = b[i:vend]
		i = skipSpace(b, vend)
		if i >= len(b) {
			return nil, fmt.Errorf("%w: the object does not end", errSplit)
		}
		if b[i] == '}' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, fmt.Errorf("%w: %q after a member", errSplit, b[i])
		}
		i = skipSpace(b, i+1)
	}
}

// splitArray returns the elements of the JSON array b, raw.
func splitArray(b []byte) ([]json.RawMessage, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, fmt.Errorf("%w: not an array", errSplit)
	}
	var out []json.RawMessage
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return out, nil
	}
	for {
		end, err := skipValue(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, fmt.Errorf("%w: the array does not end", errSplit)
		}
		if b[i] == ']' {
			return out, nil
		}
		if b[i] != ',' {
			return nil, fmt.Errorf("%w: %q after an element", errSplit, b[i])
		}
		i = skipSpace(b, i+1)
	}
}

// memberName is a member's name from its quoted bytes.
func memberName(q []byte) (string, error) {
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' {
			var s string
			err := json.Unmarshal(q, &s)
			return s, err
		}
	}
	return string(q[1 : len(q)-1]), nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// skipString returns the index after the string that opens at b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%w: a string does not end", errSplit)
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: a value is missing", errSplit)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("%w: an object or array does not end", errSplit)
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\n', '\r', '\t':
			if j == i {
				return 0, fmt.Errorf("%w: a value is missing at byte %d", errSplit, i)
			}
			return j, nil
		}
		j++
	}
	return j, nil
}
