// Package chunk splits content into retrieval units: byte ranges of at most
// about MaxTokens tokens that start and end on line boundaries, so that a
// search hit can be shown as path:start-end and a 5,000-line file or a
// 40,000-token tool result is found piece by piece.
//
// Text is the plain splitter for messages and files without structure: it
// prefers to cut at blank lines (paragraphs, blocks of code) and cuts inside
// a line only when the line alone is over the limit. Code follows the
// declarations of a language: Go through go/parser, other common languages
// through line patterns (lang.go), Markdown by heading; each
// chunk names the symbols it declares. Language guesses a file's language.
//
// Token counts come from one tokenization of the whole content (Doc.Lines),
// so chunk counts add up to the content's count. A line too long for one
// chunk is tokenized once more, alone, and cut at its tokens' boundaries.
package chunk

import (
	"iter"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxTokens is the chunk size used when Options.MaxTokens is zero.
const DefaultMaxTokens = 400

// Options configure splitting. The zero value uses the defaults.
type Options struct {
	// MaxTokens bounds a chunk's tokens. Zero means DefaultMaxTokens.
	MaxTokens int
}

func (o Options) max() int {
	if o.MaxTokens <= 0 {
		return DefaultMaxTokens
	}
	return o.MaxTokens
}

// Chunk is a byte range [Start, End) of the content, on lines StartLine to
// EndLine (1-based, inclusive), holding Tokens tokens and declaring Symbols.
type Chunk struct {
	Start, End         int
	StartLine, EndLine int
	Tokens             int
	Symbols            []string
}

// Doc is content ready to split.
type Doc struct {
	Text string
	// Lines holds the tokens that start on each line of Text, as
	// tokens.Encoding.CountLines gives them.
	Lines []int
	// Starts gives the byte offsets where the tokens of a line too long
	// for one chunk start, as tokens.Encoding.Starts does.
	Starts func(string) iter.Seq[int]

	starts []int // byte offset of each line's start
}

// NewDoc makes a Doc, counting its lines with lines.
func NewDoc(text string, lines func(string) []int, starts func(string) iter.Seq[int]) *Doc {
	d := &Doc{Text: text, Lines: lines(text), Starts: starts}
	d.index()
	return d
}

func (d *Doc) index() {
	if d.starts != nil {
		return
	}
	d.starts = make([]int, 0, len(d.Lines))
	d.starts = append(d.starts, 0)
	for i := 0; i < len(d.Text); i++ {
		if d.Text[i] == '\n' && i+1 < len(d.Text) {
			d.starts = append(d.starts, i+1)
		}
	}
}

func (d *Doc) lineCount() int { return len(d.starts) }

// lineStart and lineEnd bound line i (0-based) in bytes, its newline
// included.
func (d *Doc) lineStart(i int) int { return d.starts[i] }

func (d *Doc) lineEnd(i int) int {
	if i+1 < len(d.starts) {
		return d.starts[i+1]
	}
	return len(d.Text)
}

func (d *Doc) line(i int) string { return d.Text[d.lineStart(i):d.lineEnd(i)] }

func (d *Doc) tokens(first, last int) int {
	n := 0
	for i := first; i <= last && i < len(d.Lines); i++ {
		n += d.Lines[i]
	}
	return n
}

// chunk makes the chunk of lines first to last (0-based, inclusive).
func (d *Doc) chunk(first, last int, symbols []string) Chunk {
	return Chunk{Start: d.lineStart(first), End: d.lineEnd(last), StartLine: first + 1, EndLine: last + 1,
		Tokens: d.tokens(first, last), Symbols: symbols}
}

// Text splits d into chunks covering it entirely, in order, preferring to
// cut at blank lines. Empty content has no chunks.
func Text(d *Doc, opts Options) []Chunk {
	if d.Text == "" {
		return nil
	}
	d.index()
	return d.split(0, d.lineCount()-1, opts.max(), nil)
}

// unit is a line, or a piece of a line too long for one chunk.
type unit struct {
	start, end int // bytes
	line       int // 0-based
	tokens     int
	blank      bool // a whitespace-only line: a good place to cut after
}

// split cuts lines first to last into chunks of at most max tokens: whole
// lines, preferring to cut after a blank line when that keeps at least half
// a chunk, and cutting a line only when it alone is over max.
func (d *Doc) split(first, last, max int, symbols []string) []Chunk {
	if d.tokens(first, last) <= max {
		return []Chunk{d.chunk(first, last, symbols)}
	}
	var units []unit
	for i := first; i <= last; i++ {
		text := d.line(i)
		if n := d.Lines[i]; n <= max {
			units = append(units, unit{start: d.lineStart(i), end: d.lineEnd(i), line: i, tokens: n, blank: strings.TrimSpace(text) == ""})
		} else {
			units = append(units, d.splitLine(i, max)...)
		}
	}
	var out []Chunk
	emit := func(from, to int) { // units [from, to)
		a, z := units[from], units[to-1]
		c := Chunk{Start: a.start, End: z.end, StartLine: a.line + 1, EndLine: z.line + 1, Symbols: symbols}
		for _, u := range units[from:to] {
			c.Tokens += u.tokens
		}
		out = append(out, c)
	}
	start, sum := 0, 0 // the chunk being built: units[start:i], sum tokens
	lastBlank, blankSum := -1, 0
	for i, u := range units {
		for i > start && sum+u.tokens > max {
			cut := i
			if lastBlank >= start && blankSum >= max/2 {
				cut = lastBlank + 1
			}
			emit(start, cut)
			for _, v := range units[start:cut] {
				sum -= v.tokens
			}
			start, lastBlank = cut, -1
			run := 0
			for j := start; j < i; j++ {
				run += units[j].tokens
				if units[j].blank {
					lastBlank, blankSum = j, run
				}
			}
		}
		sum += u.tokens
		if u.blank {
			lastBlank, blankSum = i, sum
		}
	}
	emit(start, len(units))
	return out
}

// splitLine cuts line i, which holds more than max tokens, into pieces of
// at most max tokens. It tokenizes the line alone, once, and cuts at its
// tokens' boundaries, so a piece holds whole tokens and the pieces' counts
// add up to the line's. A cut falls on a rune boundary, at the last word
// boundary of the piece's second half if there is one. Where no token
// starts on a rune boundary (a rune of several tokens, or tokens that
// straddle runes), the piece runs on to the next place that does, over max
// tokens if need be. It costs one pass over the line, keeping at most
// about max offsets.
func (d *Doc) splitLine(i, max int) []unit {
	lineStart := d.lineStart(i)
	line := d.Text[lineStart:d.lineEnd(i)]
	var units []unit
	// toks holds the offsets in line of the tokens of the piece being
	// built; the piece starts at toks[0].
	var toks []int
	emit := func(k, end int) { // the piece of toks[:k], ending at end
		units = append(units, unit{start: lineStart + toks[0], end: lineStart + end, line: i, tokens: k})
		toks = append(toks[:0], toks[k:]...)
	}
	for st := range d.Starts(line) {
		if len(toks) >= max {
			if k := cutAt(line, toks, st); k == len(toks) {
				emit(k, st)
			} else if k > 0 {
				emit(k, toks[k])
			}
		}
		toks = append(toks, st)
	}
	if len(toks) > 0 {
		emit(len(toks), len(line))
	}
	return units
}

// cutAt returns how many of the tokens starting at toks to put in a piece
// that must end at or before next, the start of the token after them: the
// most that end at a rune boundary, preferring a word boundary among the
// second half. It returns 0 if none ends at a rune boundary.
func cutAt(line string, toks []int, next int) int {
	at := func(k int) int { // where the piece of toks[:k] ends
		if k == len(toks) {
			return next
		}
		return toks[k]
	}
	best := 0
	for k := len(toks); k > 0; k-- {
		b := at(k)
		if b == toks[0] || !runeBoundary(line, b) {
			continue
		}
		if best == 0 {
			best = k
		}
		if k < len(toks)/2 {
			break
		}
		if wordBoundary(line, b) {
			return k
		}
	}
	return best
}

// runeBoundary reports whether decoding s rune by rune, as range does,
// stops at byte b: where a rune starts, or at a byte of invalid UTF-8 that
// no valid sequence before it takes in.
func runeBoundary(s string, b int) bool {
	if utf8.RuneStart(s[b]) {
		return true
	}
	for j := b - 1; j >= max(0, b-utf8.UTFMax+1); j-- {
		if utf8.RuneStart(s[j]) {
			_, n := utf8.DecodeRuneInString(s[j:])
			return j+n <= b
		}
	}
	return true
}

// wordBoundary reports whether the rune before byte b of s or the rune at
// b is whitespace.
func wordBoundary(s string, b int) bool {
	r, _ := utf8.DecodeLastRuneInString(s[:b])
	r2, _ := utf8.DecodeRuneInString(s[b:])
	return unicode.IsSpace(r) || unicode.IsSpace(r2)
}

// span is a run of lines (0-based, inclusive) that belongs together, such
// as a declaration with its comments, and the symbols it declares.
type span struct {
	first, last int
	symbols     []string
}

// pack turns spans that cover the document in order into chunks: small
// neighbours share a chunk up to max tokens, a span over max is split by
// lines, each piece keeping the span's symbols.
func (d *Doc) pack(spans []span, max int) []Chunk {
	var out []Chunk
	var cur *Chunk
	for _, s := range spans {
		n := d.tokens(s.first, s.last)
		if n > max {
			cur = nil
			out = append(out, d.split(s.first, s.last, max, s.symbols)...)
			continue
		}
		if cur != nil && cur.Tokens+n <= max {
			cur.End, cur.EndLine, cur.Tokens = d.lineEnd(s.last), s.last+1, cur.Tokens+n
			cur.Symbols = append(cur.Symbols, s.symbols...)
			continue
		}
		out = append(out, d.chunk(s.first, s.last, slices.Clone(s.symbols)))
		cur = &out[len(out)-1]
	}
	return out
}
