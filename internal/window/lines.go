package window

import (
	"slices"
	"strings"
)

// MaxDigestLineBytes bounds a line the digest may keep: longer lines
// (minified data, long logs) cost more than they tell.
const MaxDigestLineBytes = 240

// lineRef is a stripped line of a tool result: Text, at byte Off of the
// readable text (see readable) of block Block of message Msg. Text is a
// slice of the block's Text when the block has one, and so shares its
// memory; a line of a block kept raw is a copy of the line alone, so that
// the index does not hold the whole text it derived from the block.
type lineRef struct {
	Msg, Block, Off int
	Text            string
}

// index is what the digest needs to know of a conversation, kept up to
// date as messages arrive (add), so that choosing a digest does not read
// the conversation again: which entities the tool results taught the
// agent, which of them the agent then named itself, and the shortest line
// of a tool result that holds each.
type index struct {
	// ents holds the distinct entities of each message.
	ents [][]string
	// learned holds the entities that first appear in a tool result; an
	// entity first seen elsewhere (the task, the agent's own words) is
	// known without its line.
	first   map[string]int
	learned map[string]bool
	// lastUse and uses say when and how often the assistant named a
	// learned entity after learning it; used lists such entities in the
	// order of their first use.
	lastUse map[string]int
	uses    map[string]int
	used    []string
	// lines are the lines of tool results that hold an entity, at most
	// MaxDigestLineBytes long; best is, for each entity, the shortest of
	// them that holds it (the latest among equals), as an index into
	// lines.
	lines []indexedLine
	best  map[string]int
}

// indexedLine is a line of a tool result, its distinct entities and its
// tokens (0 until counted).
type indexedLine struct {
	ref    lineRef
	ents   []string
	tokens int
}

func newIndex() *index {
	return &index{first: map[string]int{}, learned: map[string]bool{}, lastUse: map[string]int{},
		uses: map[string]int{}, best: map[string]int{}}
}

// isResult reports whether m carries tool results: what the agent's
// environment told it.
func isResult(m *Message) bool {
	if m.Role == RoleTool {
		return true
	}
	for _, b := range m.Blocks {
		if b.Type == BlockToolResult {
			return true
		}
	}
	return false
}

// add indexes message i, the conversation's next.
func (x *index) add(i int, m *Message) {
	result := isResult(m)
	seen := map[string]bool{}
	var ents []string
	note := func(e string) {
		if seen[e] {
			return
		}
		seen[e] = true
		ents = append(ents, e)
		f, ok := x.first[e]
		if !ok {
			x.first[e] = i
			x.learned[e] = result
			return
		}
		if m.Role == RoleAssistant && x.learned[e] && f < i {
			if x.uses[e] == 0 {
				x.used = append(x.used, e)
			}
			x.uses[e]++
			x.lastUse[e] = i
		}
	}
	for bi := range m.Blocks {
		b := &m.Blocks[bi]
		switch {
		case result && (b.Type == BlockToolResult || b.Type == BlockText):
			// A picture's placeholder is no words the agent was told:
			// the digest leaves media out.
			x.addLines(i, bi, readable(b, false), len(b.Raw) > 0, note)
		case b.Type == BlockText:
			entities(readable(b, false), note)
		case b.Type == BlockToolUse:
			entities(string(b.Input), note)
		}
	}
	x.ents = append(x.ents, ents)
}

// addLines indexes the lines of a tool result's text, calling note with
// each entity; derived says that the text is not the block's Text but
// was read from its raw form, so that a line kept is copied.
func (x *index) addLines(i, block int, text string, derived bool, note func(string)) {
	for off := 0; off < len(text); {
		end := strings.IndexByte(text[off:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += off
		}
		s, e := stripSpan(text, off, end)
		line := text[s:e]
		var ents []string
		entities(line, func(ent string) {
			note(ent)
			if len(line) <= MaxDigestLineBytes && !slices.Contains(ents, ent) {
				ents = append(ents, ent)
			}
		})
		if len(ents) > 0 {
			if derived {
				line = strings.Clone(line)
			}
			k := len(x.lines)
			x.lines = append(x.lines, indexedLine{ref: lineRef{Msg: i, Block: block, Off: s, Text: line}, ents: ents})
			for _, ent := range ents {
				if b, ok := x.best[ent]; !ok || len(line) <= len(x.lines[b].ref.Text) {
					x.best[ent] = k
				}
			}
		}
		off = end + 1
	}
}

// stripSpan returns text[off:end] less white space at both ends, as byte
// offsets into text.
func stripSpan(text string, off, end int) (int, int) {
	for off < end && isSpace(text[off]) {
		off++
	}
	for end > off && isSpace(text[end-1]) {
		end--
	}
	return off, end
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'
}
