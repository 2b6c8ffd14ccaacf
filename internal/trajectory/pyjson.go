package trajectory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
)

// pyDumps prints the JSON value raw as Python's json.dumps(json.loads(raw))
// does with its defaults, which is how baselines.py reads content that is
// not a string: ", " and ": " between items, keys in the order first seen
// (a repeated key keeps its first place and its last value), every
// character outside printable ASCII escaped, whole numbers as written
// (but -0 as 0), other numbers as Python's repr of the float.
func pyDumps(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := pyDecode(dec)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := pyWrite(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

// pyObject is a JSON object with its keys in the order first seen.
type pyObject struct {
	keys []string
	vals map[string]any
}

// pyDecode decodes the next JSON value of dec into a string, json.Number,
// bool, nil, []any or *pyObject.
func pyDecode(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := pyDecode(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	case json.Delim('{'):
		obj := &pyObject{vals: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string) // the decoder allows only strings here
			v, err := pyDecode(dec)
			if err != nil {
				return nil, err
			}
			if _, ok := obj.vals[k]; !ok {
				obj.keys = append(obj.keys, k)
			}
			obj.vals[k] = v
		}
		_, err := dec.Token()
		return obj, err
	}
	return tok, nil
}

// pyMaxDigits is Python's limit on the digits of an integer read from
// text (sys.get_int_max_str_digits): json.loads refuses longer ones.
const pyMaxDigits = 4300

func pyWrite(b *strings.Builder, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case string:
		pyQuote(b, v)
	case json.Number:
		s := string(v)
		if strings.ContainsAny(s, ".eE") {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return err
			}
			b.WriteString(pyFloat(f))
			return nil
		}
		if len(strings.TrimPrefix(s, "-")) > pyMaxDigits {
			return fmt.Errorf("an integer of more than %d digits", pyMaxDigits)
		}
		if s == "-0" {
			s = "0"
		}
		b.WriteString(s)
	case []any:
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := pyWrite(b, x); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case *pyObject:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyQuote(b, k)
			b.WriteString(": ")
			if err := pyWrite(b, v.vals[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON token %v", v)
	}
	return nil
}

// pyQuote writes s as a JSON string with Python's ensure_ascii escapes.
func pyQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r >= ' ' && r <= '~':
				b.WriteRune(r)
			case r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat formats f as Python's repr does: the shortest digits that read
// back as f, in positional notation with at least one decimal when the
// decimal point falls within 16 digits of them, else in scientific
// notation with an exponent of at least two digits.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // e.g. -1.2345e+16
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mant, exp, _ := strings.Cut(s, "e")
	digits := strings.Replace(mant, ".", "", 1)
	e, _ := strconv.Atoi(exp)
	decpt := e + 1 // the value is 0.digits x 10^decpt
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			return sign + "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			return sign + digits[:decpt] + "." + digits[decpt:]
		}
	}
	out := sign + digits[:1]
	if len(digits) > 1 {
		out += "." + digits[1:]
	}
	esign := "+"
	if e < 0 {
		esign, e = "-", -e
	}
	return fmt.Sprintf("%se%s%02d", out, esign, e)
}
