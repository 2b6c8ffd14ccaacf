// Package chunk splits content into retrieval units: byte ranges of at most
// about MaxTokens tokens that start and end on line boundaries, so that a
// search hit can be shown as path:start-end and a 5,000-line file or a
// 40,000-token tool result is found piece by piece.
//
// Text is the plain splitter for messages and files without structure;
// it prefers to cut at blank lines (paragraphs, blocks of code) and never
// cuts inside a line unless the line alone is over the limit. Language-aware
// chunkers (Go declarations, Markdown headings) build on the same Chunk.
package chunk

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxTokens is the chunk size used when Options.MaxTokens is zero.
const DefaultMaxTokens = 400

// Options configure splitting. The zero value uses the defaults.
type Options struct {
	// MaxTokens bounds a chunk's tokens. A chunk may exceed it by the
	// few tokens that merge across the lines it joins. Zero means
	// DefaultMaxTokens.
	MaxTokens int
}

// Chunk is a byte range [Start, End) of the content, on lines StartLine to
// EndLine (1-based, inclusive), holding Tokens tokens.
type Chunk struct {
	Start, End         int
	StartLine, EndLine int
	Tokens             int
}

// Counter counts tokens.
type Counter func(string) int

// unit is a line, or a piece of a line too long for one chunk.
type unit struct {
	start, end int
	line       int
	tokens     int
	blank      bool // a whitespace-only line: a good place to cut after
}

// Text splits content into chunks covering it entirely, in order. Empty
// content has no chunks.
func Text(content string, count Counter, opts Options) []Chunk {
	if content == "" {
		return nil
	}
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	if total := count(content); total <= maxTokens {
		return []Chunk{{Start: 0, End: len(content), StartLine: 1, EndLine: lastLine(content, 1), Tokens: total}}
	}
	units := splitUnits(content, count, maxTokens)
	var out []Chunk
	first := 0 // index of the first unit of the chunk being built
	sum := 0
	lastBlank := -1              // the last blank unit in the chunk, if any
	blankSum := 0                // tokens up to and including it
	emit := func(from, to int) { // units [from, to)
		start, end := units[from].start, units[to-1].end
		text := content[start:end]
		out = append(out, Chunk{Start: start, End: end, StartLine: units[from].line,
			EndLine: lastLine(text, units[from].line), Tokens: count(text)})
	}
	for i, u := range units {
		for i > first && sum+u.tokens > maxTokens {
			// Cut after the last blank line if that keeps at least half a
			// chunk; otherwise cut here.
			cut := i
			if lastBlank >= first && blankSum >= maxTokens/2 {
				cut = lastBlank + 1
			}
			emit(first, cut)
			sum -= sumTokens(units[first:cut])
			first = cut
			lastBlank = -1
			for j := first; j < i; j++ {
				if units[j].blank {
					lastBlank, blankSum = j, sumTokens(units[first:j+1])
				}
			}
		}
		sum += u.tokens
		if u.blank {
			lastBlank, blankSum = i, sum
		}
	}
	emit(first, len(units))
	return out
}

func sumTokens(us []unit) int {
	n := 0
	for _, u := range us {
		n += u.tokens
	}
	return n
}

// lastLine returns the line on which text, starting on line first, ends.
// A final newline ends its line rather than starting another.
func lastLine(text string, first int) int {
	n := strings.Count(text, "\n")
	if strings.HasSuffix(text, "\n") {
		n--
	}
	return first + max(n, 0)
}

// splitUnits cuts content into lines, and lines over maxTokens into pieces.
func splitUnits(content string, count Counter, maxTokens int) []unit {
	var units []unit
	line := 1
	for start := 0; start < len(content); {
		end := strings.IndexByte(content[start:], '\n')
		if end < 0 {
			end = len(content)
		} else {
			end += start + 1
		}
		text := content[start:end]
		n := count(text)
		if n <= maxTokens {
			units = append(units, unit{start: start, end: end, line: line, tokens: n, blank: strings.TrimSpace(text) == ""})
		} else {
			units = append(units, splitLine(content, start, end, line, count, maxTokens)...)
		}
		start = end
		line++
	}
	return units
}

// splitLine cuts one long line into pieces of at most maxTokens tokens, at
// rune boundaries, preferring to cut after whitespace.
func splitLine(content string, start, end, line int, count Counter, maxTokens int) []unit {
	var units []unit
	// Guess a piece's size from the line's bytes per token, then shrink
	// until it fits.
	lineTokens := count(content[start:end])
	bytesPerToken := max(1, (end-start)/max(1, lineTokens))
	for start < end {
		size := min(end-start, maxTokens*bytesPerToken)
		for {
			cut := cutPoint(content, start, start+size, end)
			n := count(content[start:cut])
			// A single rune can hold several tokens (an emoji); it cannot
			// be cut further.
			if n <= maxTokens || utf8.RuneCountInString(content[start:cut]) <= 1 {
				units = append(units, unit{start: start, end: cut, line: line, tokens: n})
				start = cut
				break
			}
			size = max(1, (cut-start)*maxTokens/n*9/10)
		}
	}
	return units
}

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
