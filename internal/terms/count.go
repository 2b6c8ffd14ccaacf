package terms

import "unicode/utf8"

// Counter counts given index terms in texts, as Append would produce them,
// without producing the rest: a word is lower-cased and stemmed only if it
// begins with the first letter of a wanted term (stemming never changes a
// word's first letter). Search uses it to score candidate chunks against
// a query's few terms. A Counter is not safe for concurrent use.
type Counter struct {
	want  map[string]bool
	first [utf8.RuneSelf]bool // ASCII first bytes of wanted terms
	buf   []byte
}

// NewCounter returns a Counter of the given terms.
func NewCounter(terms []string) *Counter {
	c := &Counter{want: make(map[string]bool, len(terms))}
	for _, t := range terms {
		if t == "" {
			continue
		}
		c.want[t] = true
		if t[0] < utf8.RuneSelf {
			c.first[t[0]] = true
		}
	}
	return c
}

// may reports whether a word could yield a wanted term: always for a word
// that does not begin with an ASCII byte, since lower-casing other scripts
// may change it.
func (c *Counter) may(word string) bool {
	b := word[0]
	if b >= utf8.RuneSelf {
		return true
	}
	if 'A' <= b && b <= 'Z' {
		b += 'a' - 'A'
	}
	return c.first[b]
}

// Count returns how often each wanted term occurs among text's terms;
// terms that do not occur are absent.
func (c *Counter) Count(text string) map[string]int {
	counts := map[string]int{}
	if len(c.want) == 0 {
		return counts
	}
	add := func(b []byte) {
		if c.want[string(b)] {
			counts[string(b)]++
		}
	}
	eachSplit(text, func(parts []string) bool {
		if len(parts) > 1 && c.may(parts[0]) { // the whole identifier
			c.buf = appendTerm(c.buf[:0], parts...)
			add(c.buf)
		}
		for _, p := range parts {
			if c.may(p) {
				c.buf = appendStem(c.buf[:0], p)
				add(c.buf)
			}
		}
		return true
	})
	return counts
}
