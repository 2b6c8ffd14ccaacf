// Package terms turns text into the words engram's full-text index holds,
// with code-aware splitting: an identifier is indexed whole and by its
// parts, so parseHTTPRequest, parse_http_request and ParseHTTPRequest all
// match the words parse, http and request, and each other as the whole
// identifier parsehttprequest. Paths split at their separators, so every
// directory and file name in them is a word.
//
// Both sides of a search use this package: backends index Append's output
// and build their queries from Query's groups, so documents and queries
// always agree on what a word is.
package terms

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxWordBytes bounds the words that are indexed: longer runs of letters and
// digits (base64 blobs, minified code) are noise, not words. A SHA-256 in
// hex (64 bytes) still fits.
const MaxWordBytes = 100

// MaxQueryGroups bounds the distinct words taken from one query, so that a
// pasted 100 KB query costs what a long paragraph does.
const MaxQueryGroups = 256

// wordRune reports whether r belongs to a word: letters with their marks,
// decimal digits and the underscore of identifiers.
func wordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r)
}

// wordByte is wordRune for ASCII.
var wordByte = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = wordRune(rune(c))
	}
	return t
}()

// eachWord calls fn with each maximal run of word runes in text.
func eachWord(text string, fn func(word string) bool) {
	start := -1
	for i := 0; i < len(text); {
		var in bool
		n := 1
		if c := text[i]; c < utf8.RuneSelf {
			in = wordByte[c]
		} else {
			var r rune
			r, n = utf8.DecodeRuneInString(text[i:])
			in = wordRune(r)
		}
		if in {
			if start < 0 {
				start = i
			}
		} else if start >= 0 {
			if !fn(text[start:i]) {
				return
			}
			start = -1
		}
		i += n
	}
	if start >= 0 {
		fn(text[start:])
	}
}

type caseKind uint8

const (
	kindOther caseKind = iota
	kindLower
	kindUpper
	kindDigit
)

func kindOf(r rune) caseKind {
	switch {
	case 'a' <= r && r <= 'z':
		return kindLower
	case 'A' <= r && r <= 'Z':
		return kindUpper
	case '0' <= r && r <= '9':
		return kindDigit
	case r < utf8.RuneSelf:
		return kindOther
	case unicode.IsUpper(r) || unicode.IsTitle(r):
		return kindUpper
	case unicode.IsLower(r):
		return kindLower
	case unicode.IsDigit(r):
		return kindDigit
	}
	return kindOther
}

// split returns the parts of an identifier: it cuts at underscores, between
// a lower-case letter or digit and an upper-case letter (parseHTTP: parse,
// HTTP), and before the last capital of a capital run followed by lower
// case (HTTPRequest: HTTP, Request). Parts are not lower-cased.
func split(word string, parts []string) []string {
	parts = parts[:0]
	if simpleWord(word) {
		return append(parts, word)
	}
	start := 0
	var prev, prev2 caseKind
	flush := func(end int) {
		if end > start {
			parts = append(parts, word[start:end])
		}
	}
	for i := 0; i < len(word); {
		r, n := utf8.DecodeRuneInString(word[i:])
		if r == '_' {
			flush(i)
			start = i + n
			prev, prev2 = kindOther, kindOther
			i += n
			continue
		}
		k := kindOf(r)
		switch {
		case k == kindUpper && (prev == kindLower || prev == kindDigit):
			flush(i)
			start = i
		case k == kindLower && prev == kindUpper && prev2 == kindUpper:
			// The capital before this rune starts a new part.
			_, pn := utf8.DecodeLastRuneInString(word[:i])
			flush(i - pn)
			start = i - pn
		}
		prev2, prev = prev, k
		i += n
	}
	flush(len(word))
	return parts
}

// simpleWord reports whether split would return word whole: an ASCII
// letter or digit, then only lower-case letters and digits, as most words
// of prose are. It saves decoding and classifying each rune.
func simpleWord(word string) bool {
	if len(word) == 0 {
		return false
	}
	if c := word[0]; c >= utf8.RuneSelf || c == '_' {
		return false
	}
	for i := 1; i < len(word); i++ {
		if c := word[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// eachSplit calls fn with the parts of each word of text that is not too
// long to index and not underscores only, until fn returns false. parts is
// reused between calls.
func eachSplit(text string, fn func(parts []string) bool) {
	var parts []string
	eachWord(text, func(word string) bool {
		if len(word) > MaxWordBytes {
			return true
		}
		if parts = split(word, parts); len(parts) == 0 {
			return true
		}
		return fn(parts)
	})
}

// Append appends the index terms of text to dst, separated by single spaces:
// every word lower-cased and stemmed, and for a compound identifier the
// whole identifier (lower-cased, not stemmed) followed by the stems of its
// parts, so that the parts are adjacent and match as a phrase.
func Append(dst []byte, text string) []byte {
	eachSplit(text, func(parts []string) bool {
		if len(parts) == 1 {
			dst = appendStem(dst, parts[0])
			return true
		}
		dst = appendTerm(dst, parts...)
		for _, p := range parts {
			dst = appendStem(dst, p)
		}
		return true
	})
	return dst
}

// appendStem appends a word lower-cased and stemmed.
func appendStem(dst []byte, word string) []byte {
	start := len(dst)
	dst = appendTerm(dst, word)
	from := start
	if from > 0 {
		from++ // after the separating space
	}
	if st, ok := stem(dst[from:]); ok {
		dst = append(dst[:from], st...)
	}
	return dst
}

// String returns Append's terms of text as a string.
func String(text string) string { return string(Append(nil, text)) }

func appendTerm(dst []byte, parts ...string) []byte {
	if len(dst) > 0 {
		dst = append(dst, ' ')
	}
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			if c := p[i]; c >= utf8.RuneSelf {
				dst = append(dst, strings.ToLower(p[i:])...)
				break
			} else {
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				dst = append(dst, c)
			}
		}
	}
	return dst
}

// Group is one word of a query as the index holds it: the word (stemmed),
// or for a compound identifier the whole identifier and the stems of its
// parts in order.
type Group struct {
	Whole string
	Parts []string
	// Stop marks an English stop word.
	Stop bool
}

// Query returns the distinct words of a query, in order of first
// appearance, at most MaxQueryGroups of them.
func Query(text string) []Group {
	var groups []Group
	seen := map[string]bool{}
	eachSplit(text, func(parts []string) bool {
		var whole string
		stop := false
		if len(parts) == 1 {
			lower := appendTerm(nil, parts[0])
			stop = stopWords[string(lower)]
			whole = string(appendStem(nil, parts[0]))
		} else {
			whole = string(appendTerm(nil, parts...))
		}
		if seen[whole] {
			return true
		}
		seen[whole] = true
		g := Group{Whole: whole, Stop: stop}
		if len(parts) > 1 {
			for _, p := range parts {
				g.Parts = append(g.Parts, string(appendStem(nil, p)))
			}
		}
		groups = append(groups, g)
		return len(groups) < MaxQueryGroups
	})
	return groups
}

// TF is how often a text holds the query word, given the text's term
// counts: whole, or for a compound identifier as its parts, the least
// frequent of them (as the store's search counts it).
func (g Group) TF(counts map[string]int) int {
	tf := counts[g.Whole]
	if len(g.Parts) > 0 {
		parts := counts[g.Parts[0]]
		for _, part := range g.Parts[1:] {
			parts = min(parts, counts[part])
		}
		tf = max(tf, parts)
	}
	return tf
}
