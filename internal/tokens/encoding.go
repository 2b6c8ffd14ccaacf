package tokens

import (
	"fmt"
	"iter"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// Names of the encodings engram counts with.
const (
	O200kBase  = "o200k_base"  // GPT-4o, GPT-4.1, GPT-5, o-series
	Cl100kBase = "cl100k_base" // GPT-4, GPT-3.5, text-embedding-3
)

// DefaultEncoding is the encoding used when none is configured.
const DefaultEncoding = O200kBase

// Encoding is a byte-pair encoding: a pre-tokenizer that cuts text into
// pieces and a vocabulary of ranked byte strings that each piece is merged
// into. It is safe for concurrent use.
type Encoding struct {
	name  string
	next  func(s string, i int) int
	ranks map[string]uint32
	pool  sync.Pool // *merger
	trie  trieOnce  // for long pieces; see long.go
}

// spec describes an encoding: its pre-tokenizer and the size of its
// mergeable vocabulary (token IDs 0 to size-1, special tokens excluded).
type spec struct {
	next func(s string, i int) int
	size int
	lib  tokenizer.Encoding
}

var specs = map[string]spec{
	O200kBase:  {next: nextO200k, size: 199998, lib: tokenizer.O200kBase},
	Cl100kBase: {next: nextCl100k, size: 100256, lib: tokenizer.Cl100kBase},
}

// loaded caches encodings: a vocabulary is large (tens of MB for o200k_base)
// and immutable, so each is built once per process, on first use.
var loaded sync.Map // name -> func() (*Encoding, error)

// Names returns the names of the supported encodings, sorted.
func Names() []string {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Known returns an error naming the supported encodings if name is not
// one of them. Unlike Get it loads nothing.
func Known(name string) error {
	if _, ok := specs[name]; !ok {
		return fmt.Errorf("unknown encoding %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return nil
}

// Get returns the named encoding, loading its vocabulary on first use.
func Get(name string) (*Encoding, error) {
	sp, ok := specs[name]
	if !ok {
		return nil, fmt.Errorf("unknown encoding %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	load, _ := loaded.LoadOrStore(name, sync.OnceValues(func() (*Encoding, error) { return build(name, sp) }))
	return load.(func() (*Encoding, error))()
}

// MustGet is Get for names known at compile time; it panics on an unknown name.
func MustGet(name string) *Encoding {
	e, err := Get(name)
	if err != nil {
		panic(err)
	}
	return e
}

// build takes the vocabulary from github.com/tiktoken-go/tokenizer, which
// embeds OpenAI's published ranks, by decoding every token ID. Only the
// vocabulary is used: its splitting is not exact (see split.go).
func build(name string, sp spec) (*Encoding, error) {
	codec, err := tokenizer.Get(sp.lib)
	if err != nil {
		return nil, fmt.Errorf("load encoding %s: %w", name, err)
	}
	ranks := make(map[string]uint32, sp.size)
	ids := make([]uint, 1)
	for id := range sp.size {
		ids[0] = uint(id)
		tok, err := codec.Decode(ids)
		if err != nil {
			return nil, fmt.Errorf("load encoding %s: token %d: %w", name, id, err)
		}
		if _, dup := ranks[tok]; dup {
			return nil, fmt.Errorf("load encoding %s: token %d duplicates another", name, id)
		}
		ranks[tok] = uint32(id)
	}
	e := &Encoding{name: name, next: sp.next, ranks: ranks}
	e.pool.New = func() any { return &merger{ranks: ranks, trie: &e.trie} }
	return e, nil
}

// Name returns the encoding's name, such as "o200k_base".
func (e *Encoding) Name() string { return e.name }

// Count returns the number of tokens in text, as OpenAI's tiktoken counts
// it with encode_ordinary: special tokens such as <|endoftext|> in text are
// counted as ordinary text. Invalid UTF-8 is counted as if each maximal
// invalid sequence were U+FFFD, as when tiktoken's callers decode bytes with
// errors="replace".
func (e *Encoding) Count(text string) int {
	text = validUTF8(text)
	m := e.pool.Get().(*merger)
	defer e.pool.Put(m)
	n := 0
	for i := 0; i < len(text); {
		j := e.next(text, i)
		piece := text[i:j]
		if _, ok := e.ranks[piece]; ok {
			n++
		} else {
			n += m.count(piece)
		}
		i = j
	}
	return n
}

// CountLines tokenizes text once and returns how many tokens start on each
// of its lines (a final newline ends its line rather than starting one).
// The counts add up to Count(text). A fragment counted on its own may
// differ by a token or two at its edges, where a piece would cross them.
func (e *Encoding) CountLines(text string) []int {
	text = validUTF8(text)
	lines := make([]int, 0, strings.Count(text, "\n")+1)
	lines = append(lines, 0)
	m := e.pool.Get().(*merger)
	defer e.pool.Put(m)
	pos := 0 // lines has an element for the line holding byte pos
	advance := func(to int) {
		for ; pos < to; pos++ {
			if text[pos] == '\n' && pos+1 < len(text) {
				lines = append(lines, 0)
			}
		}
	}
	for i := 0; i < len(text); {
		j := e.next(text, i)
		piece := text[i:j]
		advance(i)
		switch nl := strings.IndexByte(piece, '\n'); {
		case e.has(piece):
			lines[len(lines)-1]++
		case nl < 0 || nl == len(piece)-1:
			// Every token of the piece starts on its first line.
			lines[len(lines)-1] += m.count(piece)
		default:
			m.eachStart(piece, func(st int) bool {
				advance(i + st)
				lines[len(lines)-1]++
				return true
			})
		}
		i = j
	}
	advance(len(text)) // lines after the last token's start, such as a final blank line
	return lines
}

func (e *Encoding) has(piece string) bool {
	_, ok := e.ranks[piece]
	return ok
}

// Encode returns the token IDs of text, as tiktoken's encode_ordinary does.
func (e *Encoding) Encode(text string) []int {
	text = validUTF8(text)
	m := e.pool.Get().(*merger)
	defer e.pool.Put(m)
	var ids []int
	for i := 0; i < len(text); {
		j := e.next(text, i)
		piece := text[i:j]
		if r, ok := e.ranks[piece]; ok {
			ids = append(ids, int(r))
		} else {
			starts := m.merge(piece)
			for k := 0; k+1 < len(starts); k++ {
				ids = append(ids, int(e.ranks[piece[starts[k]:starts[k+1]]]))
			}
		}
		i = j
	}
	return ids
}

// Starts returns the byte offsets in text at which its tokens start, in
// order: Encode's tokens, without their IDs, from one tokenization
// whatever the consumer does with them. Where text is not valid UTF-8,
// tokens are those of Count's replacement text, and a token that starts
// inside a replacement character is placed among the bytes it replaced, so
// offsets can repeat there.
func (e *Encoding) Starts(text string) iter.Seq[int] {
	return func(yield func(int) bool) {
		valid, fixes := validUTF8Fixes(text)
		at := offsetIn(fixes)
		m := e.pool.Get().(*merger)
		defer e.pool.Put(m)
		for i := 0; i < len(valid); {
			j := e.next(valid, i)
			piece := valid[i:j]
			if e.has(piece) {
				if !yield(at(i)) {
					return
				}
			} else if !m.eachStart(piece, func(st int) bool { return yield(at(i + st)) }) {
				return
			}
			i = j
		}
	}
}

// Pieces returns the pre-tokenizer's pieces of text, for tests and
// diagnostics.
func (e *Encoding) Pieces(text string) []string {
	text = validUTF8(text)
	var out []string
	for i := 0; i < len(text); {
		j := e.next(text, i)
		out = append(out, text[i:j])
		i = j
	}
	return out
}

// validUTF8 replaces each maximal invalid subsequence of s with U+FFFD, the
// way Python's bytes.decode(errors="replace") and the WHATWG encoding
// standard do.
func validUTF8(s string) string {
	v, _ := validUTF8Fixes(s)
	return v
}

// fix records a replacement made by validUTF8Fixes: the replacement
// character at byte at of the result stands for the n bytes at orig of the
// input.
type fix struct{ at, orig, n int }

// validUTF8Fixes is validUTF8, also returning where it replaced bytes.
func validUTF8Fixes(s string) (string, []fix) {
	if utf8.ValidString(s) {
		return s, nil
	}
	var fixes []fix
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			n = maximalSubpart(s[i:])
			fixes = append(fixes, fix{at: b.Len(), orig: i, n: n})
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String(), fixes
}

// offsetIn returns a function that maps increasing offsets of
// validUTF8Fixes's result to offsets of its input.
func offsetIn(fixes []fix) func(int) int {
	k, shift := 0, 0 // fixes[:k] end at or before the last offset mapped
	return func(v int) int {
		for k < len(fixes) && fixes[k].at+utf8.RuneLen(utf8.RuneError) <= v {
			shift += fixes[k].n - utf8.RuneLen(utf8.RuneError)
			k++
		}
		if k < len(fixes) && fixes[k].at < v {
			f := fixes[k]
			return f.orig + min(v-f.at, f.n-1)
		}
		return v + shift
	}
}

// maximalSubpart returns the length of the maximal prefix of s that starts
// like a valid UTF-8 sequence but is cut short, or 1 if s[0] cannot start one.
func maximalSubpart(s string) int {
	need, lo, hi := 0, byte(0x80), byte(0xBF)
	switch c := s[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	i := 1
	for ; i <= need && i < len(s); i++ {
		c := s[i]
		if i == 1 && (c < lo || c > hi) || i > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
	}
	return i
}
