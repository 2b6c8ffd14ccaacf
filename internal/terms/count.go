package terms

import (
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
)

// Counter counts given index terms in texts, as Append would produce them,
// without producing the rest: a word is lower-cased and stemmed only if
// its first two letters could begin a wanted term. Stemming keeps a word's
// first two letters (true of all but five of the 167,000 distinct words of
// the Go tree and the chat benchmarks), except where the stem has one
// letter ("aed" -> "a"), for Snowball's "dying", "lying" and "tying", and
// for the irregular forms ("went" -> "go"); NewCounter allows for each.
// Search uses it to score candidate chunks against a query's few terms. A
// Counter is not safe for concurrent use.
type Counter struct {
	want map[string]int // term -> its index in seen
	// seen stamps each wanted term with the call of Distinct that last
	// found it.
	seen  []uint32
	stamp uint32
	// first marks ASCII first bytes of which any word may do: those of
	// one-letter terms. pairs marks the (lower-cased) ASCII first two
	// bytes that may, one bit a pair.
	first [utf8.RuneSelf]bool
	pairs [utf8.RuneSelf * utf8.RuneSelf / 64]uint64
	buf   []byte
}

// NewCounter returns a Counter of the given terms.
func NewCounter(terms []string) *Counter {
	c := &Counter{want: make(map[string]int, len(terms))}
	for _, t := range terms {
		if _, dup := c.want[t]; t == "" || dup {
			continue
		}
		c.want[t] = len(c.want)
		c.allow(t)
		for _, form := range formsOf[t] {
			c.allow(form)
		}
	}
	return c
}

// allow lets words that begin as prefix does through may.
func (c *Counter) allow(prefix string) {
	switch {
	case prefix[0] >= utf8.RuneSelf:
		// may passes every word that begins with a non-ASCII byte.
	case len(prefix) == 1:
		c.first[prefix[0]] = true
	case prefix[1] < utf8.RuneSelf:
		p := int(prefix[0])*utf8.RuneSelf + int(prefix[1])
		c.pairs[p/64] |= 1 << (p % 64)
	default:
		c.first[prefix[0]] = true
	}
}

// may reports whether a word, or an identifier whose parts begin with it,
// could yield a wanted term: always for a word that begins with a
// non-ASCII byte, since lower-casing other scripts may change it.
func (c *Counter) may(word string, next string) bool {
	b := lowerASCII(word[0])
	if b >= utf8.RuneSelf || c.first[b] {
		return true
	}
	var b1 byte
	switch {
	case len(word) > 1:
		b1 = word[1]
	case next != "":
		b1 = next[0] // an identifier's whole: "xRay" is "xray"
	default:
		return false
	}
	b1 = lowerASCII(b1)
	if b1 >= utf8.RuneSelf {
		return true
	}
	p := int(b)*utf8.RuneSelf + int(b1)
	return c.pairs[p/64]&(1<<(p%64)) != 0
}

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// Count returns how often each wanted term occurs among text's terms;
// terms that do not occur are absent.
func (c *Counter) Count(text string) map[string]int {
	counts := map[string]int{}
	if len(c.want) == 0 {
		return counts
	}
	c.each(text, func(b []byte) {
		if _, ok := c.want[string(b)]; ok {
			counts[string(b)]++
		}
	})
	return counts
}

// Distinct returns how many of the wanted terms occur among text's terms,
// as len(Count(text)) would, without allocating.
func (c *Counter) Distinct(text string) int {
	if len(c.want) == 0 {
		return 0
	}
	if c.seen == nil {
		c.seen = make([]uint32, len(c.want))
	}
	c.stamp++
	if c.stamp == 0 { // wrapped: stamps from 2^32 calls ago would match
		clear(c.seen)
		c.stamp = 1
	}
	n := 0
	c.each(text, func(b []byte) {
		if i, ok := c.want[string(b)]; ok && c.seen[i] != c.stamp {
			c.seen[i] = c.stamp
			n++
		}
	})
	return n
}

// each calls add with each of text's terms that may be wanted.
func (c *Counter) each(text string, add func(term []byte)) {
	eachSplit(text, func(parts []string) bool {
		if len(parts) > 1 && c.may(parts[0], parts[1]) { // the whole identifier
			c.buf = appendTerm(c.buf[:0], parts...)
			add(c.buf)
		}
		for _, p := range parts {
			if c.may(p, "") {
				c.buf = appendStem(c.buf[:0], p)
				add(c.buf)
			}
		}
		return true
	})
}

// formsOf maps a stem to the words that stem to it but do not begin with
// its first two letters: irregular forms, and Snowball's exceptions.
var formsOf = func() map[string][]string {
	m := map[string][]string{}
	note := func(word, st string) {
		if len(st) > 1 && word[:2] != st[:2] {
			m[st] = append(m[st], word)
		}
	}
	for form, base := range irregular {
		note(form, english.Stem(base, true))
	}
	for _, w := range []string{"dying", "lying", "tying"} {
		note(w, english.Stem(w, true))
	}
	return m
}()
