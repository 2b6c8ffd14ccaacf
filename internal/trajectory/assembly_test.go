package trajectory_test

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/trajectory"
	"github.com/engramhq/engram/internal/window"
)

// newAssembly returns an Assembly over a new store, as engram bench
// trajectories --assembly makes it: o200k_base, secrets kept, no embedder.
func newAssembly(t testing.TB) *trajectory.Assembly {
	t.Helper()
	st := sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{})
	eng, err := engine.New(st, engine.Options{Encoding: tokens.O200kBase, KeepSecrets: true, Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	return &trajectory.Assembly{Engine: eng, Catalog: cat, Limit: func(budget int) int {
		l := window.Limits{Context: budget, Output: 1, Safety: 1, Margin: window.DefaultMargin}
		for l.Budget() < budget {
			l.Context++
		}
		return l.Context
	}}
}

// longRun is a run of steps steps: each command names a file and a
// function seen in an earlier observation, and each observation holds 30
// lines naming files and functions of its own, and the word futureN, N
// its index, that no other message holds.
func longRun(steps int) trajectory.Run {
	enc := tokens.MustGet(tokens.O200kBase)
	msgs := []trajectory.Message{
		{Role: trajectory.System, Content: "You are a helpful agent that fixes bugs with bash commands."},
		{Role: trajectory.User, Content: "Fix the failing test in the checkout module."},
	}
	for i := range steps {
		cmd := "```bash\nls pkg\n```"
		if i >= 3 {
			j := i - 3 // an earlier step's names
			cmd = fmt.Sprintf("THOUGHT: look again.\n```bash\ngrep -n handler_%d_%d pkg/mod%d/file%d.py\n```", j, j%7, j, j%5)
		}
		var out strings.Builder
		fmt.Fprintf(&out, "<returncode>0</returncode>\n<output>\nfuture%d\n", len(msgs)+1)
		// What the task asks about: the pre-fetch, which looks for the
		// task in a tool loop, finds these lines.
		fmt.Fprintf(&out, "checkout module failing test: handler_%d_%d\n", i, i%7)
		for k := range 30 {
			fmt.Fprintf(&out, "pkg/mod%d/file%d.py:%d: def handler_%d_%d(request):\n", i, k%5, 100+k, i, k%7)
		}
		out.WriteString("</output>")
		msgs = append(msgs, trajectory.Message{Role: trajectory.Assistant, Content: cmd}, trajectory.Message{Role: trajectory.User, Content: out.String()})
	}
	msgs = append(msgs, trajectory.Message{Role: trajectory.Assistant, Content: "```bash\necho done\n```"})
	run := trajectory.Run{ID: "long", Messages: msgs}
	for _, m := range msgs {
		run.Tokens = append(run.Tokens, enc.Count(m.Content))
	}
	return run
}

// recorder wraps a strategy and checks each of its contexts: no text
// holds a message not yet given (futureN with N at least the messages
// given), and blocks of each kind are counted.
type recorder struct {
	s     trajectory.Strategy
	n     int
	t     testing.TB
	kinds map[trajectory.Kind]int
	// dropText sends the contexts without their text blocks.
	dropText bool
}

var futureWord = regexp.MustCompile(`future(\d+)`)

func (r *recorder) Add(m trajectory.Message, tokens int) error {
	r.n++
	return r.s.Add(m, tokens)
}

func (r *recorder) Context() ([]trajectory.Block, error) {
	blocks, err := r.s.Context()
	var out []trajectory.Block
	for _, b := range blocks {
		r.kinds[b.Kind]++
		if b.Kind == trajectory.Text {
			for _, m := range futureWord.FindAllStringSubmatch(b.Text, -1) {
				if i, _ := strconv.Atoi(m[1]); i >= r.n {
					r.t.Errorf("a text sent after %d messages holds %s, of message %d", r.n, m[0], i)
				}
			}
			if r.dropText {
				continue
			}
		}
		out = append(out, b)
	}
	return out, err
}

// TestAssembly_Replay replays a run through engram's assembly, with and
// without the pre-fetch, at a budget it overflows many times: every
// context within the budget, every action with its observation, every
// message kept or under a marker, texts scored and never ahead of the run.
func TestAssembly_Replay(t *testing.T) {
	run := longRun(40)
	asm := newAssembly(t)
	const budget = 2000
	specs := asm.Specs(t.Context(), 100, budget) // 100 is under a window's least
	if len(specs) != 2 || specs[0].Name != trajectory.AssemblyName || specs[1].Name != trajectory.AssemblyNoPrefetchName || specs[0].Budget != budget {
		t.Fatalf("specs %+v", specs)
	}
	kinds := map[trajectory.Kind]int{}
	wrap := func(s trajectory.Spec, dropText bool) trajectory.Spec {
		return trajectory.Spec{Name: s.Name, Budget: s.Budget, New: func(b int) trajectory.Strategy {
			return &recorder{s: s.New(b), t: t, kinds: kinds, dropText: dropText}
		}}
	}
	full, scores, err := trajectory.Replay(run, []trajectory.Spec{wrap(specs[0], false), wrap(specs[1], false), wrap(specs[0], true)})
	if err != nil {
		t.Fatal(err)
	}
	if full.TokensSent <= 10*budget || full.Needles < 30 {
		t.Fatalf("the run is too small to test: %+v", full)
	}
	for i, sc := range scores {
		if sc.Turns != full.Turns || sc.Needles != full.Needles {
			t.Errorf("spec %d: %d turns, %d needles; want %d and %d", i, sc.Turns, sc.Needles, full.Turns, full.Needles)
		}
		if sc.OverBudget != 0 || sc.Unpaired != 0 || sc.Refused != 0 {
			t.Errorf("spec %d: over budget %d, unpaired %d, refused %d: want none", i, sc.OverBudget, sc.Unpaired, sc.Refused)
		}
		if sc.ExpansionHits != sc.Needles {
			t.Errorf("spec %d: %d of %d needles within one expansion: every message is kept or under a marker", i, sc.ExpansionHits, sc.Needles)
		}
		if sc.TokensSent > int64(sc.Turns)*budget || sc.TokensSent >= full.TokensSent {
			t.Errorf("spec %d: %d tokens sent in %d turns", i, sc.TokensSent, sc.Turns)
		}
	}
	if kinds[trajectory.Kept] == 0 || kinds[trajectory.Marker] == 0 || kinds[trajectory.Text] == 0 {
		t.Errorf("blocks by kind %v: want kept messages, markers and texts", kinds)
	}
	if kinds[trajectory.Excerpt] != 0 || kinds[trajectory.Placeholder] != 0 {
		t.Errorf("blocks by kind %v: an assembly sends no excerpts or placeholders", kinds)
	}
	// The texts are scored: without them, the same contexts find fewer
	// needles.
	with, without := scores[0], scores[2]
	if without.StringHits >= with.StringHits || without.LineHits > with.LineHits || without.TokensSent >= with.TokensSent {
		t.Errorf("with texts %+v, without %+v: want the texts to find needles and cost tokens", with, without)
	}
	// The pre-fetch adds what the history does not show.
	if scores[0].TokensSent <= scores[1].TokensSent {
		t.Errorf("with the pre-fetch %d tokens sent, without %d", scores[0].TokensSent, scores[1].TokensSent)
	}
}

// TestAssembly_LargeStep: a step larger than the budget is shown as the
// tool loop's window shows it (its head, tail and marker), not refused,
// and no context is over the budget.
func TestAssembly_LargeStep(t *testing.T) {
	run := longRun(3)
	// Message 5, the second observation, is larger than the budget.
	run.Messages[5].Content = strings.Repeat("pkg/mod1/big.py: def handler_9_9(request):\n", 200)
	run.Tokens[5] = tokens.MustGet(tokens.O200kBase).Count(run.Messages[5].Content)
	specs := newAssembly(t).Specs(t.Context(), 2000)
	_, scores, err := trajectory.Replay(run, specs[1:])
	if err != nil {
		t.Fatal(err)
	}
	if sc := scores[0]; sc.Refused != 0 || sc.Turns != 3 || sc.OverBudget != 0 || sc.Unpaired != 0 {
		t.Errorf("score %+v: want 3 turns assembled, none over budget or unpaired", sc)
	}
}

// capture wraps a strategy and keeps the text of each of its contexts.
type capture struct {
	s        trajectory.Strategy
	contexts []string
}

func (c *capture) Add(m trajectory.Message, tokens int) error { return c.s.Add(m, tokens) }

func (c *capture) Context() ([]trajectory.Block, error) {
	blocks, err := c.s.Context()
	var b strings.Builder
	for _, bl := range blocks {
		fmt.Fprintf(&b, "%v %d %s\n", bl.Kind, bl.Tokens, bl.Text)
	}
	c.contexts = append(c.contexts, b.String())
	return blocks, err
}

// TestAssembly_SameEveryTime: the same run replayed into two stores,
// with the pre-fetch, gives the same contexts, byte for byte.
func TestAssembly_SameEveryTime(t *testing.T) {
	run := longRun(30)
	var got [2]*capture
	for i := range got {
		specs := newAssembly(t).Specs(t.Context(), 2000)
		got[i] = &capture{}
		spec := trajectory.Spec{Name: specs[0].Name, Budget: specs[0].Budget, New: func(b int) trajectory.Strategy {
			got[i].s = specs[0].New(b)
			return got[i]
		}}
		if _, _, err := trajectory.Replay(run, []trajectory.Spec{spec}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := got[0].contexts, got[1].contexts
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("%d and %d contexts", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("context %d differs between two replays:\n%s\n---\n%s", i, a[i], b[i])
		}
	}
	if last := a[len(a)-1]; !strings.Contains(last, "[CTX-REF:") || !strings.Contains(last, "checkout module failing test") {
		t.Errorf("the last context should hold markers and the pre-fetch's text:\n%s", last)
	}
}

// TestAssembly_OwnStores: with Open, each run's strategy works in a store
// of its own, which it closes when its run is done: a run replayed after
// another gives the contexts it gives alone (in one store, the other run's
// words would weigh in its pre-fetch's scores).
func TestAssembly_OwnStores(t *testing.T) {
	base := newAssembly(t)
	opened, closed := 0, 0
	asm := &trajectory.Assembly{Catalog: base.Catalog, Limit: base.Limit, Open: func() (*engine.Engine, func() error, error) {
		opened++
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{})
		if err != nil {
			return nil, nil, err
		}
		eng, err := engine.New(st, engine.Options{Encoding: tokens.O200kBase, KeepSecrets: true, Embed: engine.EmbedOptions{Provider: "none"}})
		return eng, func() error { closed++; return st.Close() }, err
	}}
	run := longRun(12)
	contexts := func(runs ...trajectory.Run) []string {
		var got *capture // the last run's
		specs := asm.Specs(t.Context(), 2000)
		spec := trajectory.Spec{Name: specs[0].Name, Budget: specs[0].Budget, New: func(b int) trajectory.Strategy {
			got = &capture{s: specs[0].New(b)}
			return closer{got}
		}}
		for _, r := range runs {
			if _, _, err := trajectory.Replay(r, []trajectory.Spec{spec}); err != nil {
				t.Fatal(err)
			}
		}
		return got.contexts
	}
	alone := contexts(run)
	other := longRun(20)
	other.ID = "other"
	after := contexts(other, run)
	if len(alone) == 0 || strings.Join(alone, "\n") != strings.Join(after, "\n") {
		t.Errorf("a run's contexts differ when another run was replayed before it: %d and %d contexts", len(alone), len(after))
	}
	if opened != 3 || closed != 3 {
		t.Errorf("%d stores opened, %d closed; want 3 and 3", opened, closed)
	}
}

// closer passes Close on to a captured strategy's own.
type closer struct{ *capture }

func (c closer) Close() error {
	if cl, ok := c.s.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}
