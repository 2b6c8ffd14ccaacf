package secrets

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRedactJSON: secrets in a JSON value's strings are redacted in
// place, the value stays JSON, and every other byte is kept; a private
// key's header without its end, which text redaction runs to the end of
// the content, takes the rest of its string only.
func TestRedactJSON(t *testing.T) {
	token := "ghp_" + strings.Repeat("a1B2c3", 6)
	// A picture's base64 whose letters spell Google's key pattern by
	// chance after a '/': data, left whole; the same letters in text are
	// a key.
	spelt := "AIza" + strings.Repeat("Qx7", 11) + "Zk"
	picture := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 12) + "/" + spelt + "/" + strings.Repeat("AAAA", 60) + "=="
	for _, c := range []struct {
		name, in, want string
	}{
		{"key header in a command", `{"command": "grep -rl -- '-----BEGIN RSA PRIVATE KEY-----' .", "n": 1e400}`,
			`{"command": "grep -rl -- '[REDACTED:private_key]", "n": 1e400}`},
		{"token in a list, keys kept in order", `{"z":1,"args":["-H","Authorization: token ` + token + `"],"a":-0}`,
			`{"z":1,"args":["-H","Authorization: token [REDACTED:github_token]"],"a":-0}`},
		{"a key's lines escaped", `["-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n", "after"]`,
			`["[REDACTED:private_key]\n", "after"]`},
		{"nothing to redact", `{ "a" : "b" }`, `{ "a" : "b" }`},
		{"a picture's base64", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + picture + `"}}`,
			`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + picture + `"}}`},
		{"a picture's data: URL", `{"type":"input_image","image_url":"data:image/png;base64,` + picture + `"}`,
			`{"type":"input_image","image_url":"data:image/png;base64,` + picture + `"}`},
		{"the same letters in text", `{"type":"text","text":"the key is ` + spelt + `"}`,
			`{"type":"text","text":"the key is [REDACTED:google_api_key]"}`},
		{"a short run of base64 letters", `{"k":"/` + spelt + `"}`, `{"k":"/[REDACTED:google_api_key]"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, found, ok := RedactJSON([]byte(c.in))
			if !ok || string(out) != c.want || !json.Valid(out) || (c.in != c.want) != (len(found) > 0) {
				t.Errorf("RedactJSON(%s) = %s, %d found, %v; want %s", c.in, out, len(found), ok, c.want)
			}
			if got, _ := RedactContent(c.in); got != c.want {
				t.Errorf("RedactContent = %s", got)
			}
		})
	}
	if _, _, ok := RedactJSON([]byte(`{"cut": "-----BEGIN RSA PRIVATE KEY-----`)); ok {
		t.Error("a value that is not JSON was taken as JSON")
	}
	// Not JSON: redacted as text.
	if got, _ := RedactContent(`{"cut": "-----BEGIN RSA PRIVATE KEY-----`); got != `{"cut": "[REDACTED:private_key]` {
		t.Errorf("RedactContent of a cut value = %s", got)
	}
}
