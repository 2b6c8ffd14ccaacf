package api

import (
	"encoding/json"
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
