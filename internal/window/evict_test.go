package window

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

func TestSelectRecency(t *testing.T) {
	p := PolicyFor("engineer")
	p.KeepTurns = 1
	msgs := []Message{
		text(RoleSystem, "sys"), // 3 tokens each, by text length
		text(RoleUser, "task"),
		call("a"), result(RoleUser, "a"),
		text(RoleAssistant, "ans"),
		text(RoleUser, "next"),
		text(RoleAssistant, "ok"),
	}
	for i := range msgs {
		msgs[i].Tokens = 100
	}
	units, err := Units(msgs)
	if err != nil {
		t.Fatal(err)
	}
	// 700 of 1000: under 75 %, nothing goes.
	if runs := SelectRecency(msgs, units, p, 1000, 700); runs != nil {
		t.Fatalf("under the threshold: %v", runs)
	}
	// 800 of 1000: down to 500 at most, a marker counting 80. The system
	// prompt stays; the task, the call with its result and the answer go
	// as one run (400 tokens, under the cap); the last turn stays.
	runs := SelectRecency(msgs, units, p, 1000, 800)
	if fmt.Sprint(runs) != fmt.Sprint([]Run{{From: 1, To: 5, Tokens: 400}}) {
		t.Errorf("runs %v", runs)
	}
	// A cap of 250 tokens: the task alone, the call with its result, the
	// answer; three markers, so the window stays over its target, all that
	// may go gone.
	p.MaxRefTokens = 250
	runs = SelectRecency(msgs, units, p, 1000, 800)
	if fmt.Sprint(runs) != fmt.Sprint([]Run{{1, 2, 100}, {2, 4, 200}, {4, 5, 100}}) {
		t.Errorf("capped runs %v", runs)
	}
	// Preserved user prompts and a pinned answer break runs.
	p = PolicyFor("librarian")
	p.KeepTurns = 1
	msgs[2].Pinned = true
	runs = SelectRecency(msgs, units, p, 1000, 800)
	if fmt.Sprint(runs) != fmt.Sprint([]Run{{4, 5, 100}}) {
		t.Errorf("with preserved prompts and a pinned call: %v", runs)
	}
}

// TestSelectProperties: on random conversations, eviction by every
// strategy takes
// whole units only, never the system prompt, pinned or preserved messages,
// the last turns or an open call; runs hold at most MaxRefTokens unless
// one unit is larger; the window ends at or under its target when enough
// may go; and the same input gives the same runs.
func TestSelectProperties(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 2))
		msgs := append([]Message{text(RoleSystem, "system")}, randomConversation(r, 1+r.IntN(60))...)
		used := 0
		for i := range msgs {
			msgs[i].Tokens = 1 + r.IntN(3000)
			msgs[i].Pinned = r.IntN(20) == 0
			used += msgs[i].Tokens
		}
		p := PolicyFor([]string{"librarian", "academic", "architect", "claude"}[r.IntN(4)])
		p.KeepTurns = r.IntN(4)
		budget := max(1, used*(80+r.IntN(60))/100)
		units, err := Units(msgs)
		if err != nil {
			t.Fatal(err)
		}
		p.Strategy = []Strategy{Recency, TopicCluster, TaskCompletion}[r.IntN(3)]
		runs := Select(msgs, units, p, budget, used)
		if again := Select(msgs, units, p, budget, used); !slices.Equal(runs, again) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
		starts, ends := map[int]bool{}, map[int]bool{}
		for _, u := range units {
			starts[u.From], ends[u.To] = true, true
		}
		keepFrom := keptTurnsStart(msgs, p.KeepTurns)
		// The latest turns may go only when the strategy alone would leave
		// the window over its budget; then the window must end within it,
		// or have nothing more it may evict.
		base := byStrategy(msgs, units, p, budget, used)
		afterBase := used
		for _, r := range base {
			afterBase += MarkerTokens - r.Tokens
		}
		overBudget := afterBase > budget
		if !overBudget && !slices.Equal(base, runs) {
			t.Fatalf("seed %d: within the budget, Select differs from its strategy: %v, %v", seed, runs, base)
		}
		evicted := map[int]bool{}
		after := used
		last := -1
		for _, run := range runs {
			if !starts[run.From] || !ends[run.To] || run.From < last || run.To <= run.From {
				t.Fatalf("seed %d: run %v is not whole units in order", seed, run)
			}
			last = run.To
			n := 0
			for i := run.From; i < run.To; i++ {
				m := msgs[i]
				if m.Role == RoleSystem || m.Pinned || slices.Contains(p.Preserve, m.Type()) || i >= keepFrom && !overBudget {
					t.Fatalf("seed %d: run %v evicts message %d (%s, pinned %v) that must stay", seed, run, i, m.Type(), m.Pinned)
				}
				evicted[i] = true
				n += m.Tokens
			}
			if n != run.Tokens {
				t.Fatalf("seed %d: run %v counts %d tokens", seed, run, n)
			}
			if n > p.MaxRefTokens && unitAt(units, run.From).To != run.To {
				t.Fatalf("seed %d: run %v holds %d tokens over the cap and more than one unit", seed, run, n)
			}
			after += MarkerTokens - n
		}
		for _, u := range units {
			if u.Open && evicted[u.From] {
				t.Fatalf("seed %d: an open call was evicted", seed)
			}
		}
		if overBudget && after > budget {
			for k, u := range units {
				if !evicted[u.From] && !u.Open && evictable(msgs[u.From:u.To], p) {
					t.Fatalf("seed %d: %d tokens over a budget of %d, and unit %d %v could still go", seed, after, budget, k, u)
				}
			}
		}
		if !overBudget && len(runs) > 0 && after > int(p.Target*float64(budget)) {
			// Only allowed when nothing more could go.
			for _, u := range units {
				if !evicted[u.From] && !u.Open && u.To <= keepFrom && evictable(msgs[u.From:u.To], p) {
					t.Fatalf("seed %d: %d tokens left over a target of %.0f, and unit %v could still go", seed, after, p.Target*float64(budget), u)
				}
			}
		}
	}
}

func unitAt(units []Unit, from int) Unit {
	for _, u := range units {
		if u.From == from {
			return u
		}
	}
	return Unit{}
}

func TestPolicies(t *testing.T) {
	for role := range Policies {
		if err := PolicyFor(role).Validate(); err != nil {
			t.Errorf("%s: %v", role, err)
		}
	}
	if p := PolicyFor("Claude"); p.Strategy != Recency || p.Evict != 0.75 {
		t.Errorf("an unknown role should get the default policy: %+v", p)
	}
	if p := PolicyFor("librarian"); !slices.Equal(p.Checkpoints, []float64{0.25, 0.5}) || !slices.Contains(p.Preserve, store.UserPrompt) {
		t.Errorf("librarian: %+v", p)
	}
	bad := PolicyFor("academic")
	bad.Target = 0.9
	if err := bad.Validate(); err == nil {
		t.Error("a target over the threshold should be refused")
	}
}

// TestLimits: a window's budget from the model catalog: the context less
// the output reservation and the safety buffer, less a 10 % margin for a
// model engram counts only approximately; and limits that leave no room
// are refused.
func TestLimits(t *testing.T) {
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model  string
		margin float64
		budget int
	}{
		// 200,000 - 8,192 - 4,000, less 10 %: Claude is counted with o200k_base.
		{"claude-sonnet-4-5-20250929", 0.10, 169_027},
		// 128,000 - 8,192 - 2,560, exact.
		{"gpt-4o", 0, 128_000 - 8_192 - 2_560},
	} {
		m, ok := cat.Lookup(tc.model)
		if !ok {
			t.Fatalf("%s is not in the catalog", tc.model)
		}
		l := LimitsFor(m)
		if l.Margin != tc.margin || l.Budget() != tc.budget {
			t.Errorf("%s: %+v, budget %d, want margin %.2f and budget %d", tc.model, l, l.Budget(), tc.margin, tc.budget)
		}
		if err := l.Validate(); err != nil {
			t.Errorf("%s: %v", tc.model, err)
		}
	}
	for _, l := range []Limits{{Context: 0}, {Context: 8000, Output: 8000}, {Context: 8000, Margin: 1}, {Context: 8000, Safety: -1}} {
		if err := l.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", l, err)
		}
	}
}

// topic makes a turn about one file: a prompt, a call reading it, its
// result, and an answer that may conclude.
func topic(id, file string, concluded bool) []Message {
	answer := "Still looking at " + file + "."
	if concluded {
		answer = "In conclusion, " + file + " is fine."
	}
	c := call(id)
	c.Blocks[0].Input = []byte(`{"path": "` + file + `"}`)
	res := result(RoleUser, id)
	res.Blocks[0].Text = "contents of " + file
	return []Message{text(RoleUser, "Look at "+file), c, res, text(RoleAssistant, answer)}
}

// TestSelectByTopicAndTask: by topic, a concluded topic goes before an
// older one still open; by task, a completed task goes before an older
// one; the topic or task in hand stays.
func TestSelectByTopicAndTask(t *testing.T) {
	var msgs []Message
	msgs = append(msgs, text(RoleSystem, "system"))
	msgs = append(msgs, topic("a", "internal/alpha/alpha.go", false)...) // 1-4
	msgs = append(msgs, topic("b", "internal/beta/beta.go", true)...)    // 5-8
	msgs = append(msgs, topic("c", "internal/gamma/gamma.go", false)...) // 9-12
	used := 0
	for i := range msgs {
		msgs[i].Tokens = 100
		used += 100
	}
	units, err := Units(msgs)
	if err != nil {
		t.Fatal(err)
	}
	p := PolicyFor("academic")
	p.KeepTurns = 0
	// 1300 tokens of a 1600 budget: over 80 %, down to 50 % (800): 500
	// must go, and one topic (400, less a marker) is not enough.
	if got := Select(msgs, units, p, 1600, used); fmt.Sprint(got) != fmt.Sprint([]Run{{1, 9, 800}}) {
		t.Errorf("by topic: %v", got)
	}
	// 1300 of 1500: down to 750; the concluded topic first, then the
	// oldest, the one in hand never.
	p.Target = 0.7
	if got := Select(msgs, units, p, 1500, used); fmt.Sprint(got) != fmt.Sprint([]Run{{5, 9, 400}}) {
		t.Errorf("by topic, the concluded one alone: %v", got)
	}
	// By task: "done." completes task b.
	msgs[8] = text(RoleAssistant, "Done. beta.go is fixed.")
	msgs[8].Tokens = 100
	p = PolicyFor("architect")
	p.KeepTurns, p.Target = 0, 0.7
	if got := Select(msgs, units, p, 1500, used); fmt.Sprint(got) != fmt.Sprint([]Run{{5, 9, 400}}) {
		t.Errorf("by task: %v", got)
	}
}
