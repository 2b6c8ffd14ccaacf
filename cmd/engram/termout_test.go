package main

import (
	"bytes"
	"testing"
)

// TestTermWriter: what engram prints to a terminal shows control
// characters escaped, newline and tab kept, text and UTF-8 whole even
// when a write ends mid-character; C1 controls (as UTF-8, and the 8-bit
// bytes a terminal may read as CSI) escaped too.
func TestTermWriter(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text\n\twith tab", "plain text\n\twith tab"},
		{"\x1b]0;pwned\x07 \x1b[2J", `\x1b]0;pwned\x07 \x1b[2J`},
		{"red \x1b[31malert\r\n", `red \x1b[31malert\x0d` + "\n"},
		{"C1 \u009b31m and DEL \x7f", `C1 \u009b31m and DEL \x7f`},
		{"8-bit \x9b31m, latin-1 \xe9", `8-bit \x9b31m, latin-1 ` + "\xe9"},
		{"naïve 日本語 ✓", "naïve 日本語 ✓"},
	} {
		if got := escapeControls(c.in); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
		// The same, a byte a write.
		var b bytes.Buffer
		w := &termWriter{w: &b}
		for i := range len(c.in) {
			if n, err := w.Write([]byte{c.in[i]}); n != 1 || err != nil {
				t.Fatalf("write: %d, %v", n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("%q a byte at a time: got %q, want %q", c.in, b.String(), c.want)
		}
	}
}
