package window

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
)

// useWeight is what an entity is worth to the digest: roughly how likely
// the agent is to name it again, from how often it has named
// it since a tool result taught it (uses) and how many messages ago it
// last did (age).
func useWeight(uses, age int) int {
	recent := age <= RecentUse
	switch {
	case uses == 0:
		return wUnused
	case uses == 1 && recent:
		return w1Recent
	case uses == 1:
		return w1Old
	case recent:
		return w2Recent
	}
	return w2Old
}

// The weights of useWeight, measured on the shared trajectories: of the
// entities a tool result taught the agent more than six messages before,
// the agent named again within 30 messages about 2 % of those it had
// never named, 13 % of those named once and 22 % of those named more,
// and about 30 and 50 % when that last naming was at most RecentUse
// messages ago.
const (
	RecentUse = 10
	wUnused   = 1
	w1Old     = 6
	w1Recent  = 15
	w2Old     = 10
	w2Recent  = 25
)

// chooseDigest returns the window's digest, at most budget tokens: lines
// of tool results the window no longer shows whole, kept verbatim beside
// the markers, so that what the agent learned from its environment stays
// in front of it, in the words it was told, after the messages that
// taught it are evicted.
//
// The lines are chosen as a weighted set cover, greedily by value per
// token: the value of a line is the weight of the entities it holds that
// no tool result shown whole, no part of the digest shown and no line
// chosen before holds, each entity first seen in a tool result weighing
// what useWeight says of it (entities first seen elsewhere, in the task
// or the agent's own words, weigh nothing: the agent has them without
// their line). The candidates are, for each such entity, the
// shortest line that holds it. The lines are shown in the order of the
// conversation.
func (l *Layout) chooseDigest(budget int) Excerpt {
	x := l.ix
	if budget <= 0 || len(x.lines) == 0 {
		return Excerpt{}
	}
	covered := map[string]bool{}
	for i := range l.segs {
		s := &l.segs[i]
		for _, e := range s.Digest {
			entities(e.Text, func(ent string) { covered[ent] = true })
		}
		if s.Kind != Kept {
			continue
		}
		for j := s.From; j < s.To; j++ {
			if isResult(&l.msgs[j]) {
				for _, e := range x.ents[j] {
					covered[e] = true
				}
			}
		}
	}
	now := len(l.msgs)
	weight := func(e string) int {
		if covered[e] || !x.learned[e] {
			return 0
		}
		return useWeight(x.uses[e], now-x.lastUse[e])
	}
	value := func(k int) int {
		v := 0
		for _, e := range x.lines[k].ents {
			v += weight(e)
		}
		return v
	}
	var h lineHeap
	seen := map[int]bool{}
	for e, k := range x.best {
		if seen[k] || weight(e) == 0 {
			continue
		}
		seen[k] = true
		ln := &x.lines[k]
		if ln.tokens == 0 {
			ln.tokens = l.o.Count(ln.ref.Text) + 1 // and its line break
		}
		if ln.tokens <= budget {
			h = append(h, candidate{line: k, value: value(k), tokens: ln.tokens})
		}
	}
	heap.Init(&h)
	var lines []lineRef
	used := 0
	for h.Len() > 0 {
		c := heap.Pop(&h).(candidate)
		if v := value(c.line); v != c.value { // stale: lines chosen since cover some of it
			if v > 0 {
				c.value = v
				heap.Push(&h, c)
			}
			continue
		}
		if used+c.tokens > budget {
			continue
		}
		used += c.tokens
		lines = append(lines, x.lines[c.line].ref)
		for _, e := range x.lines[c.line].ents {
			covered[e] = true
		}
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

// A candidate is a line the digest may keep, with its value when last
// computed.
type candidate struct {
	line, value, tokens int
}

// lineHeap orders candidates by value per token, highest first; among
// equals the later line (the more recent), so that the order is total.
type lineHeap []candidate

func (h lineHeap) Len() int { return len(h) }
func (h lineHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if x, y := a.value*b.tokens, b.value*a.tokens; x != y {
		return x > y
	}
	return a.line > b.line
}
func (h lineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *lineHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *lineHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// excerptOf joins lines into an excerpt.
func (l *Layout) excerptOf(lines []lineRef) Excerpt {
	var b strings.Builder
	var src []int
	for i, r := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(r.Text)
		if len(src) == 0 || src[len(src)-1] != r.Msg {
			src = append(src, r.Msg)
		}
	}
	return Excerpt{Text: b.String(), Tokens: l.o.Count(b.String()), Sources: src, lines: lines}
}
