// Package chunk splits content into retrieval units: byte ranges of at most
// about MaxTokens tokens that start and end on line boundaries, so that a
// search hit can be shown as path:start-end and a 5,000-line file or a
// 40,000-token tool result is found piece by piece.
//
// Text is the plain splitter for messages and files without structure: it
// prefers to cut at blank lines (paragraphs, blocks of code) and cuts inside
// a line only when the line alone is over the limit. Code follows the
// declarations of a language: Go through go/parser, other common languages
// through line patterns (lang.go, heuristic.go), Markdown by heading; each
// chunk names the symbols it declares. Language guesses a file's language.
//
// Token counts come from one tokenization of the whole content (Doc.Lines),
// so chunk counts add up to the content's count.
package chunk

import (
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

// Counter counts tokens.
type Counter func(string) int

// Doc is content ready to split.
type Doc struct {
	Text string
	// Lines holds the tokens that start on each line of Text, as
	// tokens.Encoding.CountLines gives them.
	Lines []int
	// Count counts a fragment of a line too long for one chunk.
	Count Counter

	starts []int // byte offset of each line's start
}

// NewDoc makes a Doc, counting its lines with lines.
func NewDoc(text string, lines func(string) []int, count Counter) *Doc {
	d := &Doc{Text: text, Lines: lines(text), Count: count}
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

// splitLine cuts one line over max tokens into pieces of at most max
// tokens, at rune boundaries, preferring to cut after whitespace.
func (d *Doc) splitLine(i, max int) []unit {
	start, end := d.lineStart(i), d.lineEnd(i)
	var units []unit
	bytesPerToken := max1((end - start) / max1(d.Lines[i]))
	for start < end {
		size := min(end-start, max*bytesPerToken)
		for {
			cut := cutPoint(d.Text, start, start+size, end)
			piece := d.Text[start:cut]
			n := d.Count(piece)
			// A single rune can hold several tokens (an emoji); it cannot
			// be cut further.
			if n <= max || utf8.RuneCountInString(piece) <= 1 {
				units = append(units, unit{start: start, end: cut, line: i, tokens: n})
				start = cut
				break
			}
			size = max1((cut - start) * max / n * 9 / 10)
		}
	}
	return units
}

func max1(n int) int { return max(n, 1) }

// cutPoint returns where to end a piece that should end near want: after the
// last whitespace in the piece's second half if there is one, else at the
// rune boundary at or before want. It always makes progress.
func cutPoint(s string, start, want, end int) int {
	if want >= end {
		return end
	}
	for want > start && !utf8.RuneStart(s[want]) {
		want--
	}
	if want == start { // a single rune longer than the budget
		_, n := utf8.DecodeRuneInString(s[start:])
		return start + n
	}
	for i := want; i > start+(want-start)/2; {
		r, n := utf8.DecodeLastRuneInString(s[start:i])
		if unicode.IsSpace(r) {
			return i
		}
		i -= n
	}
	return want
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
