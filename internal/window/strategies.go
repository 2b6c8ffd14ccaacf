package window

import (
	"cmp"
	"slices"
	"strings"
)

// keep reports, by segment, the candidates (indices of segments that may
// go) that a window keeps through an eviction to its target: the newest
// KeepUnits of them and the prompt that opens the newest turn, or, for a
// policy that counts turns rather than steps (KeepUnits 0), those of the
// last KeepTurns turns and at least the newest. They go too, but the
// newest, when the window is over its budget.
func (l *Layout) keep(cand []int) []bool {
	keep := make([]bool, len(l.segs))
	p := l.o.Policy
	for k, i := range cand {
		if k >= len(cand)-max(1, p.KeepUnits) {
			keep[i] = true
		}
	}
	if p.KeepUnits == 0 {
		from := keptTurnsStart(l.msgs, p.KeepTurns)
		for _, i := range cand {
			keep[i] = keep[i] || l.segs[i].To > from
		}
		return keep
	}
	// A policy that counts steps keeps the prompt that opens the newest
	// turn too: the agent's task, which the trajectories it was measured
	// on pin. Without it a harness's agent (through engram proxy, whose
	// turns are not pinned) would be left with its newest steps and no
	// task once its window first evicts.
	if at := l.taskAt(); at < len(l.msgs) {
		for _, i := range cand {
			if l.segs[i].From <= at && at < l.segs[i].To {
				keep[i] = true
			}
		}
	}
	return keep
}

// taskAt is the place of the prompt that opens the newest turn, the
// agent's task; len(msgs) when there is none.
func (l *Layout) taskAt() int {
	for i := len(l.msgs) - 1; i >= 0; i-- {
		// An operator's forget leaves a call's result as a user's
		// message that says so, a prompt to the layout; not the task.
		if m := &l.msgs[i]; m.opensTurn() && !isForgottenPair(m) {
			return i
		}
	}
	return len(l.msgs)
}

// byStrategy returns, by segment, the candidates that a policy evicting by
// topic cluster or task completion evicts to bring the window's excess
// over its target to nothing; nil for recency, which evicts the oldest.
// Whole topics (tasks) go, the concluded (completed) ones first, then the
// oldest, but for the candidates kept (see keep); the topic in hand goes
// last, oldest first, as recency would take it. The markers' sizes are
// estimated (MarkerTokens each, a run joining a reference next to it
// making none).
func (l *Layout) byStrategy(cand []int, keep []bool, excess int) []bool {
	var groups []segment
	switch l.o.Policy.Strategy {
	case TopicCluster:
		groups = topicSegments(l.msgs, l.units, func(i int) []string { return l.ix.ents[i] })
	case TaskCompletion:
		groups = taskSegments(l.msgs, l.units)
	default:
		return nil
	}
	chosen := make([]bool, len(l.segs))
	if excess <= 0 || len(groups) == 0 {
		return chosen
	}
	// The group of each candidate: segments that may go are whole units.
	unitAt := make(map[int]int, len(l.units))
	for k, u := range l.units {
		unitAt[u.From] = k
	}
	members := make([][]int, len(groups))
	g := 0
	for _, i := range cand {
		u := unitAt[l.segs[i].From]
		for g < len(groups)-1 && u >= groups[g].to {
			g++
		}
		members[g] = append(members[g], i)
	}
	order := make([]int, len(groups)-1)
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if groups[a].done != groups[b].done {
			if groups[a].done {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	take := func(i int) {
		chosen[i] = true
		excess -= l.segs[i].shown()
		joins := i > 0 && (l.segs[i-1].Kind == Evicted || chosen[i-1]) || i+1 < len(chosen) && chosen[i+1]
		if !joins {
			excess += MarkerTokens
		}
	}
	for _, gi := range order {
		if excess <= 0 {
			return chosen
		}
		for _, i := range members[gi] {
			if !keep[i] {
				take(i)
			}
		}
	}
	for _, i := range members[len(groups)-1] {
		if excess <= 0 {
			break
		}
		if !keep[i] {
			take(i)
		}
	}
	return chosen
}

// segment is a run of consecutive units about one thing (a topic, a
// task): units[from:to].
type segment struct {
	from, to int
	// done: the topic was concluded, the task completed.
	done bool
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
// that shares none of the names (paths, identifiers: names(i) are message
// i's) of the units since the segment began starts a new one. This stands in for seed 000's
// clustering by embeddings, which needs a model and would gather units
// that are not contiguous into one reference, which could then not be
// re-admitted in place. A segment whose last assistant message concludes
// is done.
func topicSegments(msgs []Message, units []Unit, names func(i int) []string) []segment {
	var segs []segment
	seen := map[string]bool{}
	for i, u := range units {
		own := map[string]bool{}
		for k := u.From; k < u.To; k++ {
			for _, e := range names(k) {
				own[e] = true
			}
		}
		shared := false
		for e := range own {
			shared = shared || seen[e]
		}
		if i == 0 || (len(own) > 0 && len(seen) > 0 && !shared) {
			segs = append(segs, segment{from: i, to: i})
			seen = map[string]bool{}
		}
		for e := range own {
			seen[e] = true
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

// isForgottenPair reports whether m is what unpaired leaves of a message
// whose calls or results lost their other half.
func isForgottenPair(m *Message) bool {
	return len(m.Blocks) == 1 && m.Blocks[0].Text == forgottenPair
}
