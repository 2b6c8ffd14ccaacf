package api

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/tokens"
)

// textBudget writes items of stored content as text within a budget of
// tokens that counts everything written, headers and notes included, and
// keeps room for the line that says how many items did not fit.
type textBudget struct {
	enc  *tokens.Encoding
	room int // tokens left for items
	b    strings.Builder
	// used counts the tokens of the items' content written.
	used int
}

// moreLine is the room kept for the "(N more over max_tokens)" line.
const moreLine = 12

func newTextBudget(enc *tokens.Encoding, maxTokens int) *textBudget {
	return &textBudget{enc: enc, room: maxTokens - moreLine}
}

// budgetItem is one item for a textBudget.
type budgetItem struct {
	// header renders the item's first line, given what is written of its
	// content, its tokens and whether it was cut.
	header  func(kept string, tokens int, cut bool) string
	content string
	// tokens is content's token count.
	tokens int
	// mayCut lets the item be cut to the room left: at a line boundary,
	// or, when not even its first line fits, within that line, after a
	// character.
	mayCut bool
	// whole and cut are the tokens to keep after the item, for a note
	// that follows it, when it is written whole or cut.
	whole, cut int
}

// fit writes an item under its header, whole or cut. It returns what of
// the content it wrote and its tokens, and whether it cut it; ok is false
// when nothing of the item fits, and nothing is written then.
func (tb *textBudget) fit(it budgetItem) (kept string, n int, cut, ok bool) {
	head := tb.enc.Count(it.header(it.content, it.tokens, false))
	kept, n = it.content, it.tokens
	if head+n+1+it.whole > tb.room {
		if !it.mayCut {
			return "", 0, false, false
		}
		head = tb.enc.Count(it.header(it.content, it.tokens, true))
		var b strings.Builder
		n = 0
		for _, l := range strings.SplitAfter(it.content, "\n") {
			c := tb.enc.Count(l)
			if head+n+c+1+it.cut > tb.room {
				break
			}
			b.WriteString(l)
			n += c
		}
		if n == 0 {
			// Not one line fits (a long line of minified JSON, say): as
			// much of the first as fits.
			first, _, _ := strings.Cut(it.content, "\n")
			k := tb.prefix(first, tb.room-head-1-it.cut)
			if k == 0 {
				return "", 0, false, false
			}
			b.WriteString(first[:k])
			n = tb.enc.Count(first[:k])
		}
		// Lines counted one by one can take fewer tokens than the whole.
		kept, cut = b.String(), b.Len() < len(it.content)
	}
	h := it.header(kept, n, cut)
	tb.b.WriteString(h)
	tb.b.WriteString(kept)
	tb.b.WriteString("\n")
	tb.room -= tb.enc.Count(h) + n + 1
	tb.used += n
	return kept, n, cut, true
}

// prefix is the length of the longest prefix of line, cut after a
// character, that takes at most room tokens; 0 if none.
func (tb *textBudget) prefix(line string, room int) int {
	if room <= 0 {
		return 0
	}
	// Look no further than 64 bytes a token (a token is seldom more than
	// a few), then halve the gap between what fits and what does not.
	lo, hi := 0, min(len(line), room*64)
	if tb.enc.Count(line[:runeStart(line, hi)]) <= room {
		return runeStart(line, hi)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if tb.enc.Count(line[:runeStart(line, mid)]) <= room {
			lo = mid
		} else {
			hi = mid
		}
	}
	return runeStart(line, lo)
}

// runeStart is i, or the start of the character i falls within.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// note writes a line after an item, from the room kept for it.
func (tb *textBudget) note(line string) {
	tb.b.WriteString(line)
	tb.b.WriteString("\n")
	tb.room -= tb.enc.Count(line + "\n")
}

// text returns what was written, with the line that says how many items
// did not fit if more is positive.
func (tb *textBudget) text(more int) string {
	if more > 0 {
		fmt.Fprintf(&tb.b, "(%d more over max_tokens)\n", more)
	}
	return strings.TrimRight(tb.b.String(), "\n")
}

// cutNote is said in the header of an item cut to the budget.
func cutNote(cut bool) string {
	if cut {
		return ", cut to the budget"
	}
	return ""
}
