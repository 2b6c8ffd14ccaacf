package window

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// hundreds sets every message's tokens to n.
func hundreds(msgs []Message, n int) []Message {
	for i := range msgs {
		msgs[i].Tokens = n
	}
	return msgs
}

// layoutOf lays msgs out with policy p and budget.
func layoutOf(t *testing.T, p Policy, budget int, msgs []Message) *Layout {
	t.Helper()
	l, err := NewLayout(Options{Policy: p, Budget: budget, Count: o200k.Count})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if err := l.Append(m); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	return l
}

// spans renders a layout's segments: "k0-1" kept, "e1-4" evicted, "c4-5"
// clipped.
func spans(l *Layout) string {
	var b strings.Builder
	for _, s := range l.Segments() {
		fmt.Fprintf(&b, "%c%d-%d ", " kec"[s.Kind], s.From, s.To)
	}
	return strings.TrimSpace(b.String())
}

// TestLayout_Recency: a role that counts turns keeps its last KeepTurns
// turns through an eviction; the oldest units go, in one reference, down
// to the target over the room the system prompt leaves.
func TestLayout_Recency(t *testing.T) {
	p := PolicyFor(DefaultRole)
	p.KeepTurns, p.Clip = 1, 0
	msgs := hundreds([]Message{
		text(RoleSystem, "sys"),
		text(RoleUser, "task"),
		call("a"), result(RoleUser, "a"),
		text(RoleAssistant, "ans"),
		text(RoleUser, "next"),
		text(RoleAssistant, "ok"),
	}, 200)
	// 1,400 of 2,000: the room is 1,800 over the system prompt, the
	// threshold 200 + 75 % of it (1,550): nothing goes.
	if got := spans(layoutOf(t, p, 2000, msgs)); got != "k0-1 k1-2 k2-4 k4-5 k5-6 k6-7" {
		t.Fatalf("under the threshold: %s", got)
	}
	// 1,600: down to 200 + 50 % (1,100) with a marker: the task and the
	// call with its result go as one reference; the answer, the last turn
	// and the newest message stay.
	msgs = append(msgs, hundreds([]Message{text(RoleAssistant, "more")}, 200)...)
	l := layoutOf(t, p, 2000, msgs)
	if got := spans(l); got != "k0-1 e1-4 k4-5 k5-6 k6-7 k7-8" {
		t.Fatalf("by recency: %s", got)
	}
	// Its marker gives the prompt it stands for as a query hint.
	if mk := l.Segments()[1].Marker; !strings.Contains(mk, " | Ask: task | ") {
		t.Errorf("marker %q gives no hint", mk)
	}
	// Over the budget, the kept turn goes too, oldest first, down to the
	// target, all but the newest unit: in 700 tokens the threshold is 575
	// and the target 450 with the system prompt, and the last turn (600)
	// is more than the budget leaves.
	l = layoutOf(t, p, 700, msgs)
	if got := spans(l); got != "k0-1 e1-7 k7-8" || l.Tokens() > 450 {
		t.Fatalf("over the budget: %s (%d tokens)", got, l.Tokens())
	}
}

// TestLayout_TaskStays: deep in a tool loop, the window squeezes the
// turn it keeps; the prompt that opened it (the agent's task) is the last
// of its units to go, so the agent keeps its task beside its newest
// steps, when that leaves the window under its threshold.
func TestLayout_TaskStays(t *testing.T) {
	p := PolicyFor(DefaultRole)
	p.Clip = 0
	msgs := hundreds([]Message{text(RoleSystem, "sys"), text(RoleUser, "the task")}, 200)
	for i := range 20 {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs, hundreds([]Message{call(id), result(RoleUser, id)}, 150)...)
	}
	l := layoutOf(t, p, 2000, msgs)
	segs := l.Segments()
	if segs[1].Kind != Kept || segs[1].From != 1 || l.Tokens() > 2000 {
		t.Fatalf("the task is not kept, or the window is over its budget: %s (%d tokens)", spans(l), l.Tokens())
	}
	// A window too small to keep it under its threshold with the newest
	// steps lets it go, as any kept unit.
	l = layoutOf(t, p, 600, msgs)
	if got := spans(l); got != "k0-1 e1-38 c38-40 k40-42" {
		t.Errorf("in 600 tokens: %s", got)
	}
}

// TestLayout_TaskClipsResult: in a tool loop's small room (a harness's
// system prompt fills most of its window), the task and the newest
// step's large result do not fit under the threshold together. The
// result is clipped to its head and tail, under a marker, and the task
// stays; in a room too small for the step to keep TaskClipFloor of it,
// the task goes, as before.
func TestLayout_TaskClipsResult(t *testing.T) {
	var out strings.Builder
	for i := range 60 {
		fmt.Fprintf(&out, "ledger %02d: account %d balanced\n", i, 1000+i)
	}
	conv := []Message{
		counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: strings.Repeat("You are a coding agent with many tools. ", 40)}}}),
		prompt("Read the ledgers one by one and report the unbalanced ones. " + strings.Repeat("Be careful with the totals. ", 20)),
	}
	for k := range 3 {
		conv = append(conv, step(fmt.Sprintf("s%d", k), "ls", loopFiller)...)
	}
	conv = append(conv, step("big", "cat ledgers.txt", out.String())...)
	sys, task, last := conv[0].Tokens, conv[1].Tokens, conv[len(conv)-2].Tokens+conv[len(conv)-1].Tokens
	// A budget whose threshold holds the system prompt, the task and
	// most of the newest step, but not all of it.
	budget := sys + int(float64(task+last-60)/0.75)
	l := layoutOf(t, ToolLoopPolicy(), budget, conv)
	segs := l.Segments()
	n := len(segs)
	if segs[1].Kind != Kept || segs[1].From != 1 || segs[n-1].Kind != Clipped || segs[n-1].To != len(conv) {
		t.Fatalf("want the task kept and the newest step clipped: %s", spans(l))
	}
	if l.Tokens() > l.high() {
		t.Errorf("%d tokens, over the threshold %d", l.Tokens(), l.high())
	}
	ex := segs[n-1].Excerpt.Text
	if !strings.Contains(ex, "ledger 00") || !strings.Contains(ex, "ledger 59") || !strings.Contains(segs[n-1].Marker, "[CTX-REF:") {
		t.Errorf("the clipped step shows no head and tail under a marker: %q %q", segs[n-1].Marker, ex)
	}
	// Deep in the loop, with references of two steps each, their markers
	// would crowd the task out: the newest are joined, and the task stays
	// in every layout, the window under its threshold.
	p := ToolLoopPolicy()
	p.MaxRefTokens = 2 * last
	l, err := NewLayout(Options{Policy: p, Budget: budget, Count: o200k.Count})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 40 {
		if k > 0 {
			conv = append(conv, step(fmt.Sprintf("more%d", k), "cat ledgers.txt", out.String())...)
		}
		for len(l.Messages()) < len(conv) {
			if err := l.Append(conv[len(l.Messages())]); err != nil {
				t.Fatal(err)
			}
		}
		if segs := l.Segments(); l.Evictions() > 0 && (segs[1].Kind != Kept || segs[1].From != 1) || l.Tokens() > budget {
			t.Fatalf("after %d more steps: %s (%d tokens of %d)", k, spans(l), l.Tokens(), budget)
		}
	}
	// A task of more than half the room: the step cannot keep a quarter
	// of it beside the task, so the task goes, and the step stays whole.
	conv[1] = prompt("Read the ledgers one by one and report the unbalanced ones. " + strings.Repeat("Be careful with the totals. ", 200))
	task = conv[1].Tokens
	budget = sys + last + 100
	if task <= (budget-sys)/2 {
		t.Fatalf("a task of %d tokens in a room of %d", task, budget-sys)
	}
	l = layoutOf(t, ToolLoopPolicy(), budget, conv)
	segs = l.Segments()
	if n = len(segs); segs[1].Kind != Evicted || segs[n-1].Kind != Kept {
		t.Errorf("in %d tokens, want the task evicted and the step whole: %s", budget, spans(l))
	}
}

// TestLayout_NewPromptStaysWhole: a policy that keeps turns (the default
// role's KeepTurns) keeps the prompts of older turns too, and one of them
// is not the agent's task: when the user's new prompt comes, the window
// does not clip it to keep the prompt before it. (keepTask took the
// prompt of the turn before for the task and the new prompt for the
// newest step, and clipped it to a quarter of the room.)
func TestLayout_NewPromptStaysWhole(t *testing.T) {
	words := func(lead string, n int) string {
		var b strings.Builder
		b.WriteString(lead)
		for i := 0; o200k.Count(b.String()) < n; i++ {
			fmt.Fprintf(&b, " row%d", i)
		}
		return b.String()
	}
	conv := []Message{
		counted(Message{Role: RoleSystem, Blocks: []Block{{Type: BlockText, Text: words("You are helpful.", 50)}}}),
		prompt(words("Old task: summarise the old ledger.", 300)),
		counted(Message{Role: RoleAssistant, Blocks: []Block{{Type: BlockText, Text: words("The old ledger:", 300)}}}),
		prompt(words("New task: audit the new ledger.", 470)),
	}
	tried := 0
	for budget := 900; budget <= 1100; budget += 20 {
		l := layoutOf(t, PolicyFor(DefaultRole), budget, conv)
		segs := l.Segments()
		if l.Evictions() == 0 || segs[1].Kind == Kept && segs[1].From == 1 && segs[2].Kind != Evicted {
			continue // nothing went, or the answer went alone: no choice between the prompts
		}
		tried++
		if last := segs[len(segs)-1]; last.Kind != Kept || last.From != 3 {
			t.Errorf("budget %d: the new prompt is not shown whole: %s", budget, spans(l))
		}
	}
	if tried == 0 {
		t.Fatal("no budget made the window choose between the prompts: the case is not tried")
	}
}

func TestPolicies(t *testing.T) {
	// The tool loop's markers are as measured: no entities, hints or time.
	if p := ToolLoopPolicy(); p.MarkerEntities != 0 || p.MarkerHints != 0 || p.MarkerTime || p.Clip != 0 {
		t.Errorf("ToolLoopPolicy: %+v", p)
	}
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
	// Pipeline roles hand off at 75 % and evict past 90 % as a fallback;
	// no other role hands off.
	for role := range Policies {
		p := PolicyFor(role)
		want := 0.0
		if slices.Contains(PipelineRoles, role) {
			want = 0.75
			if p.Evict != 0.90 || p.Strategy != Recency {
				t.Errorf("%s: %+v", role, p)
			}
		}
		if p.Handoff != want {
			t.Errorf("%s hands off at %.2f, want %.2f", role, p.Handoff, want)
		}
	}
	bad = PolicyFor("engineer")
	bad.Handoff = 0.95
	if err := bad.Validate(); err == nil {
		t.Error("a handoff past the eviction threshold should be refused")
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

// TestLayout_TopicAndTask: by topic, a concluded topic goes before an
// older one still open, whole topics at a time; by task, a completed task
// goes before an older one; the topic or task in hand stays.
func TestLayout_TopicAndTask(t *testing.T) {
	var msgs []Message
	msgs = append(msgs, text(RoleSystem, "system"))
	msgs = append(msgs, topic("a", "internal/alpha/alpha.go", false)...) // 1-4
	msgs = append(msgs, topic("b", "internal/beta/beta.go", true)...)    // 5-8
	msgs = append(msgs, topic("c", "internal/gamma/gamma.go", false)...) // 9-12
	msgs = hundreds(msgs, 100)
	p := PolicyFor("academic")
	p.KeepTurns = 0
	// 1,300 tokens of 1,500: the room is 1,400, the threshold 100 + 80 %
	// (1,220), the target 100 + 50 % (800): 500 must go, and the concluded
	// topic (400, less a marker) is not enough, so the older one goes too,
	// the two as one reference.
	if got := spans(layoutOf(t, p, 1500, msgs)); got != "k0-1 e1-9 k9-10 k10-12 k12-13" {
		t.Errorf("by topic: %s", got)
	}
	// Down to 100 + 70 % (1,080): the concluded topic alone.
	p.Target = 0.7
	if got := spans(layoutOf(t, p, 1500, msgs)); got != "k0-1 k1-2 k2-4 k4-5 e5-9 k9-10 k10-12 k12-13" {
		t.Errorf("by topic, the concluded one alone: %s", got)
	}
	// By task: "done." completes task b, which goes before a.
	msgs[8] = text(RoleAssistant, "Done. beta.go is fixed.")
	msgs[8].Tokens = 100
	p = PolicyFor("architect")
	p.KeepTurns, p.Target = 0, 0.7
	if got := spans(layoutOf(t, p, 1500, msgs)); got != "k0-1 k1-2 k2-4 k4-5 e5-9 k9-10 k10-12 k12-13" {
		t.Errorf("by task: %s", got)
	}
}

// TestLayout_Readmit: a reference's messages come back whole, in their
// places, the oldest of the rest leaving to make room; what cannot fit is
// refused, the window unchanged; a later eviction may take them again.
func TestLayout_Readmit(t *testing.T) {
	p := PolicyFor(DefaultRole)
	p.KeepTurns, p.Clip = 1, 0
	msgs := hundreds([]Message{
		text(RoleSystem, "sys"),
		text(RoleUser, "task"),
		call("a"), result(RoleUser, "a"),
		text(RoleAssistant, "ans"),
		text(RoleUser, "next"),
		text(RoleAssistant, "ok"),
		text(RoleAssistant, "more"),
	}, 200)
	l := layoutOf(t, p, 2000, msgs)
	if err := l.Readmit(4, 5); !errors.Is(err, ErrInvalid) {
		t.Errorf("readmitting messages shown whole: %v", err)
	}
	if err := l.Readmit(1, 4); err != nil {
		t.Fatal(err)
	}
	// Back: 1,600 tokens again, over the threshold; what may go to make
	// room is the answer (the last turn stays), and then the window is at
	// its target.
	if got := spans(l); got != "k0-1 k1-2 k2-4 e4-5 k5-6 k6-7 k7-8" || l.Tokens() > 2000 {
		t.Errorf("re-admitted: %s (%d tokens)", got, l.Tokens())
	}
	// A window too small to take it back refuses, unchanged.
	small := layoutOf(t, p, 700, msgs)
	before := spans(small)
	if err := small.Readmit(1, 7); !errors.Is(err, ErrNoRoom) || before != "k0-1 e1-7 k7-8" {
		t.Errorf("readmitting 1,200 tokens into 700 (%s): %v", before, err)
	}
	if spans(small) != before {
		t.Errorf("a refused re-admission changed the window: %s, was %s", spans(small), before)
	}
	// Over the budget, the kept units make room as an append's would, all
	// but the newest, which is never evicted nor clipped for older ones: in
	// every window size, the re-admission is refused, unchanged, or the
	// newest unit is shown whole, or as it was (clipped already, so that
	// the window could keep the prompt before it: keepTask).
	refusedForNewest := 0
	for _, clip := range []float64{0, 0.3} {
		pc := p
		pc.Clip = clip
		for budget := 700; budget <= 2000; budget += 25 {
			w := layoutOf(t, pc, budget, msgs)
			before := spans(w)
			newest := w.Segments()[len(w.Segments())-1]
			var ref Segment
			for _, s := range w.Segments() {
				if s.Kind == Evicted {
					ref = s
					break
				}
			}
			if ref.Kind == 0 {
				continue
			}
			err := w.Readmit(ref.From, ref.To)
			segs := w.Segments()
			switch {
			case errors.Is(err, ErrNoRoom):
				if spans(w) != before {
					t.Errorf("clip %g, budget %d: a refused re-admission changed the window: %s, was %s", clip, budget, spans(w), before)
				}
				if strings.Contains(err.Error(), "newest") {
					refusedForNewest++
				}
			case err != nil:
				t.Errorf("clip %g, budget %d: %v", clip, budget, err)
			case (segs[len(segs)-1].Kind != Kept || segs[len(segs)-1].From != 7) && !reflect.DeepEqual(segs[len(segs)-1], newest):
				t.Errorf("clip %g, budget %d: re-admitted %d-%d (%s), the newest message not shown whole: %s", clip, budget, ref.From, ref.To, before, spans(w))
			}
		}
	}
	if refusedForNewest == 0 {
		t.Error("no window size refused a re-admission for its newest message: the case is not tried")
	}
	// A newest unit clipped already, a long answer of real text, stays as
	// it is shown: a re-admission that would clip it further, or put it
	// under a reference, is refused.
	var long strings.Builder
	for i := range 300 {
		fmt.Fprintf(&long, "line %d of a long answer about the upload retry loop\n", i)
	}
	big := slices.Clone(msgs)
	big[len(big)-1] = text(RoleAssistant, long.String())
	big[len(big)-1].Tokens = o200k.Count(long.String())
	pc := p
	pc.Clip = 0.3
	tried := 0
	for budget := 1200; budget <= 3000; budget += 50 {
		w := layoutOf(t, pc, budget, big)
		segs := w.Segments()
		last := segs[len(segs)-1]
		var ref Segment
		for _, s := range segs {
			if s.Kind == Evicted {
				ref = s
				break
			}
		}
		if last.Kind != Clipped || ref.Kind == 0 {
			continue
		}
		tried++
		before := spans(w)
		err := w.Readmit(ref.From, ref.To)
		segs = w.Segments()
		after := segs[len(segs)-1]
		switch {
		case errors.Is(err, ErrNoRoom):
			if spans(w) != before {
				t.Errorf("budget %d: a refused re-admission changed the window: %s, was %s", budget, spans(w), before)
			}
		case err != nil:
			t.Errorf("budget %d: %v", budget, err)
		case after.From != last.From || after.Kind == Evicted || after.Kind == Clipped && after.Excerpt.Tokens < last.Excerpt.Tokens:
			t.Errorf("budget %d: the clipped newest message (%d tokens shown) is now %v with %d: %s, was %s",
				budget, last.Excerpt.Tokens, after.Kind, after.Excerpt.Tokens, spans(w), before)
		}
	}
	if tried == 0 {
		t.Error("no window size clipped the newest message and held a reference: the case is not tried")
	}
	// The next eviction takes the re-admitted messages as any.
	for i := range 3 {
		if err := l.Append(hundreds([]Message{text(RoleAssistant, fmt.Sprint("step ", i))}, 200)[0]); err != nil {
			t.Fatal(err)
		}
	}
	if got := spans(l); !strings.HasPrefix(got, "k0-1 e1-") {
		t.Errorf("after later appends: %s", got)
	}
}
