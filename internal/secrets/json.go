package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// RedactContent is Redact for content that may be JSON (a tool call's
// input, a vendor's block kept as it came): JSON is redacted in its
// strings (RedactJSON), so that it stays JSON; anything else as text.
func RedactContent(content string) (string, []Finding) {
	if t := strings.TrimLeft(content, " \t\r\n"); t != "" && (t[0] == '{' || t[0] == '[') {
		if out, found, ok := RedactJSON([]byte(content)); ok {
			return string(out), found
		}
	}
	return Redact(content)
}

// RedactJSON redacts the secrets in the strings (values and keys) of the
// JSON value b, each string decoded first (a key block's lines are "\n"
// escapes in JSON) and written back encoded; every other byte stays as it
// was. Redacting the encoded text instead could cut a string, or the value,
// short: a private key's header with no end line runs to the end of the
// content. ok is false when b is not one JSON value: the caller redacts it
// as text. Findings' offsets are within the strings they were found in.
func RedactJSON(b []byte) (out []byte, found []Finding, ok bool) {
	if !json.Valid(b) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var buf bytes.Buffer
	last := 0 // b[:last] is written, or left for the end
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, false // json.Valid said otherwise: never
		}
		s, isString := tok.(string)
		if !isString || encodedMedia(s) || len(Scan(s)) == 0 {
			continue
		}
		end := int(dec.InputOffset())
		// The token's bytes may begin with white space and the ',' or ':'
		// before it; the string begins at the first quote.
		q := bytes.IndexByte(b[start:end], '"')
		if q < 0 {
			return nil, nil, false
		}
		red, fs := Redact(s)
		enc, err := marshalString(red)
		if err != nil {
			return nil, nil, false
		}
		buf.Write(b[last : int(start)+q])
		buf.Write(enc)
		last = end
		found = append(found, fs...)
	}
	if len(found) == 0 {
		return b, nil, true
	}
	buf.Write(b[last:])
	return buf.Bytes(), found, true
}

// minEncoded is the shortest string encodedMedia takes for encoded
// data: shorter ones are a word or a key as often as data.
const minEncoded = 256

// encodedMedia reports whether s is binary data in base64, alone or as a
// data: URL: a picture or a PDF in a vendor's block. Such a string holds
// no text to redact, but its letters can spell a key's pattern by
// chance (Google's AIza and 35 letters, about once in a thousand
// megabytes-long pictures), and redacting it would break the picture
// for every request that sends it again.
func encodedMedia(s string) bool {
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		if !ok || !strings.HasSuffix(meta, ";base64") {
			return false
		}
		s = data
	}
	if len(s) < minEncoded {
		return false
	}
	s = strings.TrimRight(s, "=")
	for i := range len(s) {
		if !Base64Letter(s[i]) {
			return false
		}
	}
	return true
}

// Base64Letter reports whether c is in base64's alphabet (padding aside).
func Base64Letter(c byte) bool { return inBase64[c] }

// inBase64 is base64's alphabet, by byte.
var inBase64 = func() (in [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") {
		in[c] = true
	}
	return in
}()

// marshalString encodes s as a JSON string, without escaping < > & as
// HTML.
func marshalString(s string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
