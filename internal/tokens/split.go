package tokens

import (
	"unicode"
	"unicode/utf8"
)

// This file holds the pre-tokenizers: hand-written scanners that cut text into
// the same pieces as the split patterns of OpenAI's tiktoken, before byte-pair
// encoding runs on each piece. The patterns are, for cl100k_base:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// and for o200k_base:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Why not a regular expression engine: Go's regexp has no lookahead, and
// github.com/tiktoken-go/tokenizer, which runs these patterns through
// regexp2's generated code, backtracks \s*[\r\n]+ wrongly: on a whitespace
// run holding several line breaks followed by more whitespace (blank lines
// indented with tabs or spaces, "\t\r\n\t\r\n") it ends the piece at the
// first line break instead of the last, so its counts drift from the
// reference on whitespace-only lines. A scanner is exact by construction,
// and several times faster. Each alternative below is matched the way a
// backtracking engine would, in the patterns' order; a comment names the
// alternative.

// class is a bit set of the character classes the patterns use.
type class uint8

const (
	clLetter  class = 1 << iota // \p{L}
	clNumber                    // \p{N}
	clSpace                     // \s (Unicode White_Space)
	clNewline                   // \r or \n
	clUpper                     // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clLower                     // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	clSlash                     // '/'
)

// asciiClass holds the classes of the ASCII characters, which are most of
// the text engram sees.
var asciiClass = func() (t [utf8.RuneSelf]class) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = classify(r)
	}
	return t
}()

func classify(r rune) class {
	var c class
	if unicode.IsLetter(r) {
		c |= clLetter
	}
	if unicode.IsNumber(r) {
		c |= clNumber
	}
	if unicode.IsSpace(r) {
		c |= clSpace
	}
	if r == '\r' || r == '\n' {
		c |= clNewline
	}
	if r == '/' {
		c |= clSlash
	}
	mark := unicode.IsMark(r)
	shared := mark || unicode.In(r, unicode.Lm, unicode.Lo)
	if shared || unicode.In(r, unicode.Lu, unicode.Lt) {
		c |= clUpper
	}
	if shared || unicode.Is(unicode.Ll, r) {
		c |= clLower
	}
	return c
}

// at decodes the rune at byte offset i of s and returns its classes and width.
// Invalid UTF-8 has been replaced before splitting, so every rune is valid.
func at(s string, i int) (class, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classify(r), n
}

// before decodes the rune that ends at byte offset i of s.
func before(s string, i int) (class, int) {
	if b := s[i-1]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, n := utf8.DecodeLastRuneInString(s[:i])
	return classify(r), n
}

// prefixable reports whether a rune can be the optional [^\r\n\p{L}\p{N}]
// that the letter alternatives allow before a word.
func prefixable(c class) bool { return c&(clNewline|clLetter|clNumber) == 0 }

// symbol reports whether a rune is in [^\s\p{L}\p{N}].
func symbol(c class) bool { return c&(clSpace|clLetter|clNumber) == 0 }

// run returns the end of the longest run of runes from i whose classes
// include want.
func run(s string, i int, want class) int {
	for i < len(s) {
		c, n := at(s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or -1.
// Case-insensitive matching folds 's' with 'S' and U+017F LATIN SMALL
// LETTER LONG S, as the reference's Unicode-aware engine does.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	i++
	if i >= len(s) {
		return -1
	}
	lower := func(b byte) byte { return b | 0x20 }
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && lower(s[i+1]) == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && lower(s[i+1]) == 'l' {
			return i + 2
		}
	}
	if len(s)-i >= 2 && s[i] == 0xC5 && s[i+1] == 0xBF { // U+017F ſ
		return i + 2
	}
	return -1
}

// whitespace matches the three whitespace alternatives shared by both
// patterns, \s*[\r\n]+ | \s+(?!\S) | \s+, at i, where s[i] is whitespace.
func whitespace(s string, i int) int {
	end := i
	lastNewline := -1
	runes := 0
	for end < len(s) {
		c, n := at(s, end)
		if c&clSpace == 0 {
			break
		}
		if c&clNewline != 0 {
			lastNewline = end
		}
		end += n
		runes++
	}
	// \s*[\r\n]+: \s* backs off to the last line break, [\r\n]+ takes it.
	if lastNewline >= 0 {
		return lastNewline + 1
	}
	// \s+(?!\S): the whole run at the end of the text, else all of it but
	// the last rune, which leaves that rune to join the word after it.
	if end == len(s) {
		return end
	}
	if runes >= 2 {
		_, n := before(s, end)
		return end - n
	}
	// \s+
	return end
}

// nextCl100k returns the end of the cl100k_base piece that starts at i.
func nextCl100k(s string, i int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if e := contraction(s, i); e >= 0 {
		return e
	}
	c, n := at(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&clLetter != 0 {
		return run(s, i+n, clLetter)
	}
	if prefixable(c) && i+n < len(s) {
		if c2, n2 := at(s, i+n); c2&clLetter != 0 {
			return run(s, i+n+n2, clLetter)
		}
	}
	// \p{N}{1,3}
	if c&clNumber != 0 {
		return digits(s, i)
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n]*
	if e := punctuation(s, i, clNewline); e >= 0 {
		return e
	}
	return whitespace(s, i)
}

// nextO200k returns the end of the o200k_base piece that starts at i.
func nextO200k(s string, i int) int {
	c, n := at(s, i)
	// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:contraction)?
	if prefixable(c) && i+n < len(s) {
		if e := casedWordLowerTail(s, i+n); e >= 0 {
			return e
		}
	}
	if e := casedWordLowerTail(s, i); e >= 0 {
		return e
	}
	// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:contraction)?
	if prefixable(c) && i+n < len(s) {
		if c2, _ := at(s, i+n); c2&clUpper != 0 {
			return casedWordUpperHead(s, i+n)
		}
	}
	if c&clUpper != 0 {
		return casedWordUpperHead(s, i)
	}
	// \p{N}{1,3}
	if c&clNumber != 0 {
		return digits(s, i)
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n/]*
	if e := punctuation(s, i, clNewline|clSlash); e >= 0 {
		return e
	}
	return whitespace(s, i)
}

// casedWordLowerTail matches [Upper]*[Lower]+(?i:contraction)? at i, or
// returns -1. Upper and lower classes overlap (Lm, Lo and marks are in both),
// so when the greedy upper run is followed by no lower rune, the match backs
// off to the last rune of the upper run that is also lower.
func casedWordLowerTail(s string, i int) int {
	upperEnd := run(s, i, clUpper)
	if upperEnd < len(s) {
		if c, _ := at(s, upperEnd); c&clLower != 0 {
			return withContraction(s, run(s, upperEnd, clLower))
		}
	}
	// Back off: [Lower]+ takes the last rune of the upper run that is also
	// lower, and nothing after it, since no later rune is lower.
	for j := upperEnd; j > i; {
		c, n := before(s, j)
		if c&clLower != 0 {
			return withContraction(s, j)
		}
		j -= n
	}
	return -1
}

// casedWordUpperHead matches [Upper]+[Lower]*(?i:contraction)? at i, where
// s[i] is in the upper class.
func casedWordUpperHead(s string, i int) int {
	e := run(s, i, clUpper)
	e = run(s, e, clLower)
	return withContraction(s, e)
}

func withContraction(s string, i int) int {
	if e := contraction(s, i); e >= 0 {
		return e
	}
	return i
}

// digits matches \p{N}{1,3} at i, where s[i] is a number.
func digits(s string, i int) int {
	for k := 0; k < 3 && i < len(s); k++ {
		c, n := at(s, i)
		if c&clNumber == 0 {
			break
		}
		i += n
	}
	return i
}

// punctuation matches ' '?[^\s\p{L}\p{N}]+[tail]* at i, or returns -1.
func punctuation(s string, i int, tail class) int {
	j := i
	if s[j] == ' ' {
		j++
	}
	if j >= len(s) {
		return -1
	}
	if c, _ := at(s, j); !symbol(c) {
		return -1
	}
	for j < len(s) {
		c, n := at(s, j)
		if !symbol(c) {
			break
		}
		j += n
	}
	return run(s, j, tail)
}
