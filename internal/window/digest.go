package window

import (
	"cmp"
	"slices"
	"strings"
)

// chooseDigest returns the window's digest, at most budget tokens: lines
// of evicted tool results kept verbatim, beside the markers, so that what
// the agent learned from its environment and went on to use stays in
// front of it after the messages that taught it are evicted. For each
// entity a tool result taught the agent and the agent then named itself
// (most recently named first, then most named), that no tool result shown
// whole holds, it keeps the shortest line of a tool result that holds it.
// The lines are in the order of the conversation.
func (l *Layout) chooseDigest(budget int) Excerpt {
	if budget <= 0 || len(l.ix.used) == 0 {
		return Excerpt{}
	}
	shown := map[string]bool{}
	for i := range l.segs {
		s := &l.segs[i]
		if s.Kind != Kept {
			continue
		}
		for j := s.From; j < s.To; j++ {
			if isResult(&l.msgs[j]) {
				for _, e := range l.ix.ents[j] {
					shown[e] = true
				}
			}
		}
	}
	x := l.ix
	cands := slices.Clone(x.used)
	slices.SortStableFunc(cands, func(a, b string) int {
		if c := cmp.Compare(x.lastUse[b], x.lastUse[a]); c != 0 {
			return c
		}
		return cmp.Compare(x.uses[b], x.uses[a])
	})
	chosen := map[lineRef]bool{}
	var lines []lineRef
	used := 0
	for _, e := range cands {
		r, ok := x.best[e]
		if !ok || shown[e] || chosen[r] {
			continue
		}
		n := l.o.Count(r.text(l.msgs)) + 1
		if used+n > budget {
			continue
		}
		used += n
		chosen[r] = true
		lines = append(lines, r)
	}
	slices.SortFunc(lines, func(a, b lineRef) int {
		return cmp.Or(cmp.Compare(a.Msg, b.Msg), cmp.Compare(a.Block, b.Block), cmp.Compare(a.Off, b.Off))
	})
	for len(lines) > 0 {
		ex := l.excerptOf(lines)
		if ex.Tokens <= budget {
			return ex
		}
		lines = lines[:len(lines)-1] // lines counted apart can differ at their edges
	}
	return Excerpt{}
}

// excerptOf joins lines into an excerpt.
func (l *Layout) excerptOf(lines []lineRef) Excerpt {
	var b strings.Builder
	var src []int
	for i, r := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(r.text(l.msgs))
		if len(src) == 0 || src[len(src)-1] != r.Msg {
			src = append(src, r.Msg)
		}
	}
	return Excerpt{Text: b.String(), Tokens: l.o.Count(b.String()), Sources: src}
}
