package main

import (
	"fmt"
	"io"
	"os"
	"unicode"
	"unicode/utf8"
)

// A termWriter shows the control characters of what it writes, but
// newline and tab, escaped (\x1b, \u009b), so that text engram prints to
// a terminal cannot drive it: records any agent may write (an insight, an
// agent's name, a window's role, a stored tool result) would otherwise
// reach the user's terminal raw, and an escape sequence in them could
// retitle it, clear it, or rewrite what the lines above said. It is used
// only when standard output is a terminal; a pipe or a file gets the
// bytes as stored.
type termWriter struct {
	w io.Writer
	// part holds the start of a UTF-8 sequence a write ended in, until
	// the next write completes it.
	part []byte
}

func (t *termWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(t.part) > 0 {
		p = append(t.part, p...)
		t.part = nil
	}
	out := make([]byte, 0, len(p)+16)
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 && !utf8.FullRune(p[i:]) {
			t.part = append(t.part, p[i:]...)
			break
		}
		switch {
		case r == utf8.RuneError && size == 1 && p[i] >= 0x80 && p[i] <= 0x9f:
			// Not UTF-8: a terminal set for 8-bit controls reads 0x9b
			// as CSI.
			out = fmt.Appendf(out, `\x%02x`, p[i])
		case r == '\n' || r == '\t' || !unicode.IsControl(r):
			out = append(out, p[i:i+size]...)
		case r < 0x80:
			out = fmt.Appendf(out, `\x%02x`, r)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// Flush writes a UTF-8 sequence left incomplete at the end, as it is.
func (t *termWriter) Flush() error {
	if len(t.part) == 0 {
		return nil
	}
	_, err := t.w.Write(t.part)
	t.part = nil
	return err
}

// forTerminal returns w behind a termWriter when it is a terminal, and a
// function to call when done with it.
func forTerminal(w io.Writer) (io.Writer, func()) {
	if terminal(w) {
		t := &termWriter{w: w}
		return t, func() { _ = t.Flush() }
	}
	return w, func() {}
}

// terminal reports whether w is a terminal.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// escapeControls is a line for a terminal as termWriter writes it.
func escapeControls(s string) string {
	var b []byte
	w := &termWriter{w: writerFunc(func(p []byte) (int, error) { b = append(b, p...); return len(p), nil })}
	_, _ = io.WriteString(w, s)
	_ = w.Flush()
	return string(b)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
