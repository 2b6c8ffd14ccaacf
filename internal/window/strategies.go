package window

import (
	"cmp"
	"slices"
	"strings"
)

// Select returns the runs a window over msgs evicts, by its policy's
// strategy (see SelectRecency for the rules every strategy keeps: whole
// units, what must stay, runs capped at MaxRefTokens, down to the
// target). If the window would still be over its budget, a unit larger
// than half the budget goes first (a huge tool result, even the newest),
// then the latest turns the policy keeps, oldest first, the newest unit
// last: a window never holds more than
// its budget unless what may never go (the system prompt, pinned and
// preserved messages, a call waiting for its result) is more than that.
func Select(msgs []Message, units []Unit, p Policy, budget, used int) []Run {
	runs := byStrategy(msgs, units, p, budget, used)
	after := used
	evict := make([]bool, len(units))
	for _, r := range runs {
		after += MarkerTokens - r.Tokens
		for i, u := range units {
			if u.From >= r.From && u.To <= r.To {
				evict[i] = true
			}
		}
	}
	if after <= budget || len(units) == 0 {
		return runs
	}
	tokens := func(u Unit) int {
		n := 0
		for _, m := range msgs[u.From:u.To] {
			n += m.Tokens
		}
		return n
	}
	take := func(i int) {
		evict[i] = true
		after -= tokens(units[i])
		before := len(runs)
		runs = runsOf(msgs, units, evict, p.MaxRefTokens)
		after += MarkerTokens * (len(runs) - before)
	}
	// First a unit larger than half the budget on its own (a huge tool
	// result, the newest one too): it is what overflows, and evicting
	// everything older would not make room.
	for i, u := range units {
		if after > budget && !evict[i] && !u.Open && tokens(u) > budget/2 && evictable(msgs[u.From:u.To], p) {
			take(i)
		}
	}
	// Then the oldest first, the newest unit last.
	for i, u := range units {
		if after <= budget {
			break
		}
		if evict[i] || u.Open || !evictable(msgs[u.From:u.To], p) {
			continue
		}
		take(i)
	}
	return runs
}

// byStrategy returns the runs the policy's strategy evicts.
func byStrategy(msgs []Message, units []Unit, p Policy, budget, used int) []Run {
	switch p.Strategy {
	case TopicCluster:
		return selectSegments(msgs, units, p, budget, used, topicSegments(msgs, units))
	case TaskCompletion:
		return selectSegments(msgs, units, p, budget, used, taskSegments(msgs, units))
	}
	return SelectRecency(msgs, units, p, budget, used)
}

// segment is a run of consecutive units about one thing (a topic, a
// task): units[from:to].
type segment struct {
	from, to int
	// done: the topic was concluded, the task completed.
	done bool
}

// selectSegments evicts whole segments, those done first, then the
// oldest, never the last one (the work in hand); within a segment the
// units that must stay stay, and what may go goes in runs as recency
// makes them. If that is not enough, recency evicts what is left.
func selectSegments(msgs []Message, units []Unit, p Policy, budget, used int, segs []segment) []Run {
	if float64(used) <= p.Evict*float64(budget) {
		return nil
	}
	if len(segs) > 1 {
		segs = segs[:len(segs)-1]
	} else {
		segs = nil
	}
	order := slices.Clone(segs)
	slices.SortStableFunc(order, func(a, b segment) int {
		if a.done != b.done {
			if a.done {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.from, b.from)
	})
	target := int(p.Target * float64(budget))
	keepFrom := keptTurnsStart(msgs, p.KeepTurns)
	evict := make([]bool, len(units))
	for _, s := range order {
		if used <= target {
			break
		}
		// The whole segment goes, but for what must stay.
		for i := s.from; i < s.to; i++ {
			u := units[i]
			if !u.Open && u.To <= keepFrom && evictable(msgs[u.From:u.To], p) {
				for _, m := range msgs[u.From:u.To] {
					used -= m.Tokens
				}
				evict[i] = true
			}
		}
	}
	runs := runsOf(msgs, units, evict, p.MaxRefTokens)
	if used+MarkerTokens*len(runs) <= target {
		return runs
	}
	// Not enough: the oldest of what is left, as recency would take it.
	for i, u := range units {
		if used+MarkerTokens*len(runs) <= target {
			break
		}
		if evict[i] || u.Open || u.To > keepFrom || !evictable(msgs[u.From:u.To], p) {
			continue
		}
		evict[i] = true
		for _, m := range msgs[u.From:u.To] {
			used -= m.Tokens
		}
		runs = runsOf(msgs, units, evict, p.MaxRefTokens)
	}
	return runs
}

// runsOf joins consecutive evicted units into runs of at most maxTokens
// (a unit larger than that is a run of its own).
func runsOf(msgs []Message, units []Unit, evict []bool, maxTokens int) []Run {
	var runs []Run
	var cur *Run
	for i, u := range units {
		if !evict[i] {
			cur = nil
			continue
		}
		n := 0
		for _, m := range msgs[u.From:u.To] {
			n += m.Tokens
		}
		if cur != nil && cur.Tokens+n > maxTokens {
			cur = nil
		}
		if cur == nil {
			runs = append(runs, Run{From: u.From, To: u.From})
			cur = &runs[len(runs)-1]
		}
		cur.To, cur.Tokens = u.To, cur.Tokens+n
	}
	return runs
}

// conclusions are what marks a topic concluded (seed 000's list).
var conclusions = []string{"in conclusion", "to summarize", "in summary", "therefore", "recommendation is", "final answer"}

// completions are what marks a task completed: the seed's, and what a
// coding agent says when it is done.
var completions = []string{"task complete", "workflow complete", "plan approved", "all tests pass", "tests pass", "is fixed", "fixed the", "done.", "committed"}

// text returns the lower-cased text of a message's text blocks.
func lowerText(m *Message) string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		if bl.Type == BlockText {
			b.WriteString(strings.ToLower(bl.Text))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func mentions(m *Message, phrases []string) bool {
	t := lowerText(m)
	for _, p := range phrases {
		if strings.Contains(t, p) {
			return true
		}
	}
	return false
}

// topicSegments cuts the conversation where its subject changes: a unit
// that shares none of the names (paths, identifiers) of the units since
// the segment began starts a new one. This stands in for seed 000's
// clustering by embeddings, which needs a model and would gather units
// that are not contiguous into one reference, which could then not be
// re-admitted in place. A segment whose last assistant message concludes
// is done.
func topicSegments(msgs []Message, units []Unit) []segment {
	var segs []segment
	names := map[string]bool{}
	for i, u := range units {
		own := map[string]bool{}
		for k := u.From; k < u.To; k++ {
			for _, e := range namesOf(&msgs[k]) {
				own[e] = true
			}
		}
		shared := false
		for e := range own {
			shared = shared || names[e]
		}
		if i == 0 || (len(own) > 0 && len(names) > 0 && !shared) {
			segs = append(segs, segment{from: i, to: i})
			names = map[string]bool{}
		}
		for e := range own {
			names[e] = true
		}
		s := &segs[len(segs)-1]
		s.to = i + 1
		for k := u.From; k < u.To; k++ {
			if msgs[k].Role == RoleAssistant {
				s.done = mentions(&msgs[k], conclusions)
			}
		}
	}
	return segs
}

// taskSegments cuts the conversation at each user prompt: a task runs
// from a prompt to the next. A task whose messages say it is complete is
// done.
func taskSegments(msgs []Message, units []Unit) []segment {
	var segs []segment
	for i, u := range units {
		if i == 0 || msgs[u.From].opensTurn() {
			segs = append(segs, segment{from: i, to: i})
		}
		s := &segs[len(segs)-1]
		s.to = i + 1
		for k := u.From; k < u.To; k++ {
			if msgs[k].Role == RoleAssistant && mentions(&msgs[k], completions) {
				s.done = true
			}
		}
	}
	return segs
}

// namesOf returns the names a message mentions: those the window noted
// when it was appended, else read from its content.
func namesOf(m *Message) []string {
	if m.Entities != nil {
		return m.Entities
	}
	return entitiesOf(m)
}
