package trajectory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
)

// A Score is what a strategy's contexts earned over one run or many. The
// package documentation defines each figure.
type Score struct {
	// Turns counts the contexts scored.
	Turns int `json:"turns"`
	// Needles counts the needles of all turns: the recalls' denominator.
	Needles int `json:"needles"`
	// LineHits, StringHits and ExpansionHits count the needles found by
	// line, as a string, and by line within one expansion.
	LineHits      int `json:"line_hits"`
	StringHits    int `json:"string_hits"`
	ExpansionHits int `json:"expansion_hits"`
	// TokensSent sums the tokens of every context.
	TokensSent int64 `json:"tokens_sent"`
	// CachedTokens sums the tokens of each context's leading blocks that
	// the previous turn's context also began with.
	CachedTokens int64 `json:"cached_tokens"`
	// OverBudget counts contexts over the budget.
	OverBudget int `json:"over_budget"`
	// Unpaired counts contexts that keep an action without its observation
	// or an observation without its action.
	Unpaired int `json:"unpaired"`
	// Refused counts turns the strategy could build no context for within
	// the budget (ErrNoContext), each scored as nothing sent.
	Refused int `json:"refused"`
}

// Add adds o's figures to s.
func (s *Score) Add(o Score) {
	s.Turns += o.Turns
	s.Needles += o.Needles
	s.LineHits += o.LineHits
	s.StringHits += o.StringHits
	s.ExpansionHits += o.ExpansionHits
	s.TokensSent += o.TokensSent
	s.CachedTokens += o.CachedTokens
	s.OverBudget += o.OverBudget
	s.Unpaired += o.Unpaired
	s.Refused += o.Refused
}

// LineRecall is the share of needles found by line, 1 when there are none.
func (s Score) LineRecall() float64 { return share(s.LineHits, s.Needles) }

// StringRecall is the share of needles found as a string.
func (s Score) StringRecall() float64 { return share(s.StringHits, s.Needles) }

// ExpansionRecall is the share of needles found by line within one
// expansion.
func (s Score) ExpansionRecall() float64 { return share(s.ExpansionHits, s.Needles) }

// EffectiveTokens is the tokens sent as a provider with a prompt cache
// bills them: a tenth of the cached tokens, all of the rest.
func (s Score) EffectiveTokens() float64 {
	return float64(s.effectiveTenths()) / 10
}

// effectiveTenths is EffectiveTokens in tenths of a token, exactly.
func (s Score) effectiveTenths() int64 {
	return s.CachedTokens + 10*(s.TokensSent-s.CachedTokens)
}

func share(n, of int) float64 {
	if of == 0 {
		return 1
	}
	return float64(n) / float64(of)
}

// A Row is the score of one Spec over the runs replayed.
type Row struct {
	Name   string `json:"strategy"`
	Budget int    `json:"budget"`
	Score
}

// A Report is a replay of runs through specs, beside the full history.
type Report struct {
	Runs int   `json:"runs"`
	Full Score `json:"full_history"`
	Rows []Row `json:"rows"`
}

// TokensVsFull is row's tokens sent over the full history's; 0 when
// nothing was sent.
func (r Report) TokensVsFull(row Row) float64 {
	return ratio(row.TokensSent, r.Full.TokensSent)
}

// EffectiveVsFull is row's effective tokens over the full history's; 0
// when nothing was sent.
func (r Report) EffectiveVsFull(row Row) float64 {
	return ratio(row.effectiveTenths(), r.Full.effectiveTenths())
}

func ratio(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// ReplayAll replays every run through every spec and the full history, on
// as many goroutines as there are CPUs, and sums the scores. done, when not
// nil, is called after each run with the number of runs replayed so far,
// from one goroutine at a time.
func ReplayAll(ctx context.Context, runs []Run, specs []Spec, done func(n int)) (Report, error) {
	full := make([]Score, len(runs))
	rows := make([][]Score, len(runs))
	var mu sync.Mutex // serialises done
	replayed := 0
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0)) // scoring is CPU-bound
	for i, run := range runs {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			var err error
			full[i], rows[i], err = Replay(run, specs)
			if err != nil {
				return err
			}
			if done != nil {
				mu.Lock()
				replayed++
				done(replayed)
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Report{}, err
	}
	rep := Report{Runs: len(runs), Rows: make([]Row, len(specs))}
	for j, s := range specs {
		rep.Rows[j] = Row{Name: s.Name, Budget: s.Budget}
	}
	for i := range runs {
		rep.Full.Add(full[i])
		for j := range specs {
			rep.Rows[j].Add(rows[i][j])
		}
	}
	return rep, nil
}

// Replay replays one run through the full history and each spec, and
// returns their scores. A strategy's error, and a context that names a
// message it has not been given (or one twice), are errors.
func Replay(run Run, specs []Spec) (full Score, scores []Score, err error) {
	if len(run.Tokens) != len(run.Messages) {
		return full, nil, fmt.Errorf("run %s: %d messages, %d counts", run.ID, len(run.Messages), len(run.Tokens))
	}
	a := analyse(run)
	full, err = a.replay(run, &fullHistory{}, 0)
	if err != nil {
		return full, nil, fmt.Errorf("run %s: full history: %w", run.ID, err)
	}
	scores = make([]Score, len(specs))
	for j, s := range specs {
		st := s.New(s.Budget)
		scores[j], err = a.replay(run, st, s.Budget)
		if c, ok := st.(io.Closer); ok {
			err = errors.Join(err, c.Close())
		}
		if err != nil {
			return full, nil, fmt.Errorf("run %s: %s at %d: %w", run.ID, s.Name, s.Budget, err)
		}
	}
	return full, scores, nil
}

// analysis is what scoring a run needs, computed once for every strategy.
type analysis struct {
	text  []string
	roles []string
	// want holds each turn's needles (ids into needles); nil for messages
	// that are not scored turns.
	want [][]int
	// needles are the needles some turn wants.
	needles []string
	// lines holds, for each needle, the distinct stripped lines of the
	// run's observations that contain it.
	lines [][]string
	// found caches whether message i holds needle n as a string
	// (found[n][i]&hasString) and by line (hasLine), once known.
	found [][]uint8
}

const (
	knowString uint8 = 1 << iota
	hasString
	knowLine
	hasLine
)

// isObservation reports whether message i is an observation: a user
// message after the task.
func (a *analysis) isObservation(i int) bool { return i >= 2 && a.roles[i] == User }

// isTurn reports whether message t is a scored turn: an assistant message
// at index 3 or more.
func (a *analysis) isTurn(t int) bool { return t >= 3 && a.roles[t] == Assistant }

func analyse(run Run) *analysis {
	n := len(run.Messages)
	a := &analysis{text: make([]string, n), roles: make([]string, n), want: make([][]int, n)}
	for i, m := range run.Messages {
		a.text[i], a.roles[i] = m.Content, m.Role
	}
	first := map[string]int{}
	ids := map[string]int{}
	for t, text := range a.text {
		seen := map[string]bool{}
		Needles(text, func(s string) {
			if seen[s] {
				return
			}
			seen[s] = true
			f, ok := first[s]
			if !ok {
				first[s] = t
				return
			}
			if a.isTurn(t) && a.isObservation(f) {
				id, ok := ids[s]
				if !ok {
					id = len(a.needles)
					ids[s] = id
					a.needles = append(a.needles, s)
				}
				a.want[t] = append(a.want[t], id)
			}
		})
	}
	a.lines = make([][]string, len(a.needles))
	a.found = make([][]uint8, len(a.needles))
	for i := range a.found {
		a.found[i] = make([]uint8, n)
	}
	seen := make([]map[string]bool, len(a.needles))
	for i, text := range a.text {
		if !a.isObservation(i) {
			continue
		}
		for line := range strings.SplitSeq(text, "\n") {
			line = pyStrip(line)
			Needles(line, func(s string) {
				id, ok := ids[s]
				if !ok {
					return
				}
				if seen[id] == nil {
					seen[id] = map[string]bool{}
				}
				if !seen[id][line] {
					seen[id][line] = true
					a.lines[id] = append(a.lines[id], line)
				}
			})
		}
	}
	return a
}

// hasString reports whether message i holds needle n.
func (a *analysis) hasString(n, i int) bool {
	f := a.found[n][i]
	if f&knowString == 0 {
		f |= knowString
		if strings.Contains(a.text[i], a.needles[n]) {
			f |= hasString
		}
		a.found[n][i] = f
	}
	return f&hasString != 0
}

// hasLine reports whether message i holds a line of an observation that
// contains needle n.
func (a *analysis) hasLine(n, i int) bool {
	if !a.hasString(n, i) { // every such line holds the needle
		return false
	}
	f := a.found[n][i]
	if f&knowLine == 0 {
		f |= knowLine
		for _, l := range a.lines[n] {
			if strings.Contains(a.text[i], l) {
				f |= hasLine
				break
			}
		}
		a.found[n][i] = f
	}
	return f&hasLine != 0
}

// textHasLine reports whether text holds a line of an observation that
// contains needle n: the test hasLine makes of a message, for an excerpt.
func (a *analysis) textHasLine(n int, text string) bool {
	for _, l := range a.lines[n] {
		if strings.Contains(text, l) {
			return true
		}
	}
	return false
}

// checkExcerpt checks that an excerpt sent before message t quotes only
// messages given: each of its lines is part of a message it names.
func (a *analysis) checkExcerpt(b Block, t int) error {
	if len(b.Covers) == 0 && b.Text != "" {
		return fmt.Errorf("an excerpt names no message it quotes")
	}
	for _, i := range b.Covers {
		if i < 0 || i >= t {
			return fmt.Errorf("excerpt quotes message %d, not among the %d messages given", i, t)
		}
	}
	for line := range strings.SplitSeq(b.Text, "\n") {
		if line == "" || slices.ContainsFunc(b.Covers, func(i int) bool { return strings.Contains(a.text[i], line) }) {
			continue
		}
		return fmt.Errorf("excerpt line %q is in none of messages %v", line, b.Covers)
	}
	return nil
}

// replay feeds run to s and scores its context at every turn.
func (a *analysis) replay(run Run, s Strategy, budget int) (Score, error) {
	var sc Score
	var prev []Block
	// state says where each message is in the context: 0 absent, 1 in
	// place (kept or placeholder), 2+k under the context's marker k.
	state := make([]int, len(a.text))
	// checked holds the excerpts checked already: a window sends the same
	// ones turn after turn.
	checked := map[string]bool{}
	for t, m := range run.Messages {
		if a.isTurn(t) {
			blocks, err := s.Context()
			if errors.Is(err, ErrNoContext) {
				sc.Refused++
				blocks, err = nil, nil
			}
			if err != nil {
				return sc, fmt.Errorf("context at message %d: %w", t, err)
			}
			if err := a.score(&sc, t, blocks, prev, state[:t], run.Tokens, budget, checked); err != nil {
				return sc, fmt.Errorf("context at message %d: %w", t, err)
			}
			prev = blocks
		}
		if err := s.Add(m, run.Tokens[t]); err != nil {
			return sc, fmt.Errorf("add message %d: %w", t, err)
		}
	}
	return sc, nil
}

// score adds to sc the figures of the context blocks sent before message
// t, after prev. state is scratch space, one element per message before t;
// checked holds the excerpts found good before (by text and messages).
func (a *analysis) score(sc *Score, t int, blocks, prev []Block, state, tokens []int, budget int, checked map[string]bool) error {
	clear(state)
	var total, cached int64
	common := true // blocks so far equal prev's
	for k, b := range blocks {
		var cost int
		switch b.Kind {
		case Kept, Placeholder:
			if b.Index < 0 || b.Index >= t {
				return fmt.Errorf("block %d: message %d is not among the %d messages given", k, b.Index, t)
			}
			if state[b.Index] == 1 {
				return fmt.Errorf("block %d: message %d is in the context twice", k, b.Index)
			}
			state[b.Index] = 1
			cost = b.Tokens
			if b.Kind == Kept {
				cost = tokens[b.Index]
			}
		case Marker:
			for _, i := range b.Covers {
				if i < 0 || i >= t {
					return fmt.Errorf("block %d: marker covers message %d, not among the %d messages given", k, i, t)
				}
				if state[i] == 0 {
					state[i] = 2 + k
				}
			}
			cost = b.Tokens
		case Excerpt:
			key := fmt.Sprint(b.Covers, b.Text)
			if !checked[key] {
				if err := a.checkExcerpt(b, t); err != nil {
					return fmt.Errorf("block %d: %w", k, err)
				}
				checked[key] = true
			}
			cost = b.Tokens
		case Text:
			cost = b.Tokens
		default:
			return fmt.Errorf("block %d: unknown kind %d", k, b.Kind)
		}
		if cost < 0 {
			return fmt.Errorf("block %d: %d tokens", k, cost)
		}
		total += int64(cost)
		common = common && k < len(prev) && sameBlock(prev[k], b)
		if common {
			cached += int64(cost)
		}
	}
	sc.Turns++
	sc.TokensSent += total
	sc.CachedTokens += cached
	if budget > 0 && total > int64(budget) {
		sc.OverBudget++
	}
	for i := 2; i+1 < t; i++ {
		if a.roles[i] == Assistant && a.roles[i+1] == User && state[i] != state[i+1] {
			sc.Unpaired++
			break
		}
	}
	for _, n := range a.want[t] {
		sc.Needles++
		line, str, exp := false, false, false
		for _, b := range blocks {
			switch b.Kind {
			case Kept:
				line = line || a.hasLine(n, b.Index)
				str = str || a.hasString(n, b.Index)
			case Marker:
				str = str || strings.Contains(b.Text, a.needles[n])
				for _, i := range b.Covers {
					exp = exp || a.hasLine(n, i)
				}
			case Excerpt, Text:
				if strings.Contains(b.Text, a.needles[n]) {
					str = true
					line = line || a.textHasLine(n, b.Text)
				}
			}
			if line && str {
				break
			}
		}
		if line {
			sc.LineHits++
		}
		if str {
			sc.StringHits++
		}
		if line || exp {
			sc.ExpansionHits++
		}
	}
	return nil
}

// sameBlock reports whether a provider's cache sees a and b as the same
// bytes: the same message in the same form, or the same marker, excerpt
// or text.
func sameBlock(a, b Block) bool {
	if a.Kind != b.Kind {
		return false
	}
	if a.Kind == Marker || a.Kind == Excerpt || a.Kind == Text {
		return a.Text == b.Text
	}
	return a.Index == b.Index
}
