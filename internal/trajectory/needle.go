package trajectory

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Needles calls yield with each needle of text in order, repeats included:
// each match of the README's expression
//
//	[A-Za-z0-9_./\-]*[/.][A-Za-z0-9_./\-]+|[A-Za-z_][A-Za-z0-9_]{5,}|\b\d{3,}\b
//
// that is at least 4 characters long and does not start with ".". Matches
// are those of Python's re.findall on a str: leftmost, the first
// alternative that matches wins, \d is any decimal digit (Unicode Nd) and
// \b a boundary between a word character (a letter, a number or "_", in
// Unicode) and anything else. No match holds a line break.
//
// It runs in time linear in text (a backtracking matcher takes quadratic
// time on long runs of path characters without a separator).
func Needles(text string, yield func(string)) {
	// The first alternative matches at p when p starts a run of path
	// characters that holds a separator before its last character: the
	// match is the rest of the run. The run's end and its last such
	// separator are found once per run.
	runEnd, sep := -1, -1
	for p := 0; p < len(text); {
		c := text[p]
		if isPathChar(c) {
			if p >= runEnd {
				runEnd, sep = p, -1
				last := -1 // the last separator seen
				for runEnd < len(text) && isPathChar(text[runEnd]) {
					if text[runEnd] == '.' || text[runEnd] == '/' {
						sep, last = last, runEnd
					}
					runEnd++
				}
				if last < runEnd-1 {
					sep = last
				}
			}
			if sep >= p {
				emit(text[p:runEnd], yield)
				p = runEnd
				continue
			}
			if isIdentStart(c) {
				q := p + 1
				for q < len(text) && isIdentChar(text[q]) {
					q++
				}
				if q-p > 5 {
					emit(text[p:q], yield)
					p = q
					continue
				}
			}
		}
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(text[p:])
		}
		if unicode.IsDigit(r) && !wordBefore(text, p) {
			q, n := p, 0
			for q < len(text) {
				d, dsize := utf8.DecodeRuneInString(text[q:])
				if !unicode.IsDigit(d) {
					break
				}
				q += dsize
				n++
			}
			if n >= 3 && !wordAt(text, q) {
				emit(text[p:q], yield)
				p = q
				continue
			}
		}
		p += size
	}
}

// emit yields a match that is a needle: 4 characters or more, not
// starting with ".".
func emit(m string, yield func(string)) {
	if m[0] != '.' && utf8.RuneCountInString(m) >= 4 {
		yield(m)
	}
}

func isPathChar(c byte) bool { return isIdentChar(c) || c == '.' || c == '/' || c == '-' }

func isIdentStart(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' }

func isIdentChar(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

// isWord reports whether r is a word character for Python's Unicode \b
// and \w: a letter, a number or "_".
func isWord(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) }

func wordBefore(text string, p int) bool {
	if p == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(text[:p])
	return isWord(r)
}

func wordAt(text string, p int) bool {
	if p >= len(text) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(text[p:])
	return isWord(r)
}

// pyStrip removes leading and trailing whitespace as Python's str.strip()
// does: Unicode White_Space and the separators U+001C to U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f })
}
