package window_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
	"github.com/engramhq/engram/internal/window"
)

// The differential test of windows: a window kept in a Manager's memory
// and the same window laid out anew from its ledger must agree, on what
// they show and on their answers to what comes next. Random sequences of
// operations (appends of every shape, forgets, re-admissions, settings
// changes, handoffs) run in two stores side by side: in one, a single
// Manager makes every change, with its layouts in memory; in the other,
// each change is made by a new Manager, which lays the window out from
// the ledger, as a server just restarted would. After each step, the
// answers of the two, the window of the first as its Manager shows it, as
// a new Manager over the same store shows it, and as the second store's
// shows it must be the same.
//
// ENGRAM_WINDOW_DIFF_SEED=N runs the sequence of seed N alone;
// ENGRAM_WINDOW_DIFF_SOAK=10m runs random seeds for that long, and
// ENGRAM_WINDOW_DIFF_STEPS=N makes sequences of N steps (20, 80 in a
// soak). A failure
// prints its seed and the sequence, cut down to the steps that still fail.

// diffOp is one step of a differential run.
type diffOp struct {
	// Kind is open, append, forget, readmit, reopen or handoff.
	Kind string
	// Msgs are an append's messages.
	Msgs []window.Message
	// Pick chooses a forget's item of the ledger, or a re-admission's
	// marker, modulo how many there are.
	Pick int
	// All forgets all of an item's entries, else its last.
	All bool
	// Open is an open's or a reopen's options, and those a window opens
	// with again after its session is forgotten.
	Open window.OpenOptions
	// Key is an append's key (AppendOnce), if any.
	Key string
	// Text is what a redaction takes out.
	Text string
}

func (o diffOp) String() string {
	switch o.Kind {
	case "append":
		parts := make([]string, len(o.Msgs))
		for i, m := range o.Msgs {
			parts[i] = describe(m)
		}
		key := ""
		if o.Key != "" {
			key = " once as " + o.Key
		}
		return "append" + key + " " + strings.Join(parts, ", ")
	case "redact":
		return fmt.Sprintf("redact %q", o.Text)
	case "forget":
		return fmt.Sprintf("forget item %d (all: %t)", o.Pick, o.All)
	case "readmit":
		return fmt.Sprintf("readmit marker %d", o.Pick)
	case "open", "reopen", "forget session":
		role := o.Open.Role
		if o.Open.Policy != nil {
			role += "+policy"
		}
		return fmt.Sprintf("%s role %q limit %d", o.Kind, role, o.Open.Limit)
	}
	return o.Kind
}

// describe is a message in a few words: role, shape, pin, blocks.
func describe(m window.Message) string {
	var b strings.Builder
	b.WriteString(string(m.Role))
	if m.Shape != nil {
		b.WriteString("/" + string(m.Shape.Vendor))
	}
	if m.Pinned {
		b.WriteString("/pinned")
	}
	b.WriteString("[")
	for i, bl := range m.Blocks {
		if i > 0 {
			b.WriteString(" ")
		}
		switch bl.Type {
		case window.BlockText:
			fmt.Fprintf(&b, "text(%d)", len(bl.Text))
		case window.BlockToolUse:
			fmt.Fprintf(&b, "call(%s)", bl.ID)
		case window.BlockToolResult:
			fmt.Fprintf(&b, "result(%s", bl.ToolUseID)
			if bl.IsError {
				b.WriteString(",error")
			}
			fmt.Fprintf(&b, ",%d)", len(bl.Text))
		default:
			b.WriteString(string(bl.Type))
		}
	}
	b.WriteString("]")
	return b.String()
}

// diffGen makes random sequences of operations: mostly what a harness
// sends, with mistakes among them (prompts while calls wait, results of
// no call, results twice).
type diffGen struct {
	r       *rand.Rand
	calls   int
	pending []string // calls waiting for their results
	done    []string // calls answered
}

var diffWords = []string{"the", "handler", "returns", "an", "error", "when", "queue", "drains", "internal/queue/queue.go",
	"cmd/engram/main.go", "TestDrainTimeout", "retrieveContext", "internal/window/layout.go", "because", "we", "fix",
	"timeout", "flaky", "go", "test", "passes", "now", "look", "at", "config.toml", "PrepareBatch", "and", "then"}

// text is n words of a coding session, some of them names.
func (g *diffGen) text(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = diffWords[g.r.IntN(len(diffWords))]
		if g.r.IntN(9) == 0 {
			w[i] += "\n"
		}
	}
	return strings.Join(w, " ")
}

// size is a message's words: mostly small, some large.
func (g *diffGen) size() int {
	switch g.r.IntN(6) {
	case 0:
		return 150 + g.r.IntN(500)
	case 1, 2:
		return 30 + g.r.IntN(100)
	}
	return 2 + g.r.IntN(25)
}

// vendor picks how a message is written: engram's form, Anthropic's or
// OpenAI's.
func (g *diffGen) vendor() string { return []string{"", "anthropic", "openai"}[g.r.IntN(3)] }

func mustWire(m window.Message, err error) window.Message {
	if err != nil {
		panic(err)
	}
	return m
}

func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (g *diffGen) plain(role window.Role) window.Message {
	var m window.Message
	switch g.vendor() {
	case "anthropic":
		if g.r.IntN(2) == 0 {
			m = mustWire(window.FromAnthropic(fmt.Appendf(nil, `{"role": %q, "content": %s}`, role, jsonText(g.text(g.size())))))
		} else {
			m = mustWire(window.FromAnthropic(fmt.Appendf(nil, `{"role": %q, "content": [{"type": "text", "text": %s}, {"type": "text", "text": %s}]}`,
				role, jsonText(g.text(g.size())), jsonText(g.text(g.size())))))
		}
	case "openai":
		m = mustWire(window.FromOpenAI(fmt.Appendf(nil, `{"role": %q, "content": %s}`, role, jsonText(g.text(g.size())))))
	default:
		m = textMsg(role, g.text(g.size()))
		if g.r.IntN(4) == 0 {
			m.Blocks = append(m.Blocks, window.Block{Type: window.BlockText, Text: g.text(g.size())})
		}
	}
	m.Pinned = g.r.IntN(8) == 0
	return m
}

// call is an assistant's message of one or two tool calls, with text
// beside them or not.
func (g *diffGen) call() window.Message {
	n := 1 + g.r.IntN(2)
	ids := make([]string, n)
	for i := range ids {
		g.calls++
		ids[i] = fmt.Sprintf("call_%d", g.calls)
	}
	g.pending = append(g.pending, ids...)
	text := ""
	if g.r.IntN(2) == 0 {
		text = g.text(2 + g.r.IntN(12))
	}
	switch g.vendor() {
	case "openai":
		var calls []string
		for _, id := range ids {
			calls = append(calls, fmt.Sprintf(`{"id": %q, "type": "function", "function": {"name": "read_file", "arguments": %s}}`, id, jsonText(`{"path": "internal/queue/`+id+`.go"}`)))
		}
		content := "null"
		if text != "" {
			content = jsonText(text)
		}
		return mustWire(window.FromOpenAI(fmt.Appendf(nil, `{"role": "assistant", "content": %s, "tool_calls": [%s]}`, content, strings.Join(calls, ", "))))
	case "anthropic":
		var blocks []string
		if text != "" {
			blocks = append(blocks, fmt.Sprintf(`{"type": "text", "text": %s}`, jsonText(text)))
		}
		for _, id := range ids {
			blocks = append(blocks, fmt.Sprintf(`{"type": "tool_use", "id": %q, "name": "bash", "input": {"command": "go test ./internal/%s"}}`, id, id))
		}
		return mustWire(window.FromAnthropic(fmt.Appendf(nil, `{"role": "assistant", "content": [%s]}`, strings.Join(blocks, ", "))))
	}
	m := window.Message{Role: window.RoleAssistant}
	if text != "" {
		m.Blocks = append(m.Blocks, window.Block{Type: window.BlockText, Text: text})
	}
	for _, id := range ids {
		// Most calls' input is their own; a forget of one that is not
		// takes every call of it.
		input := `{"pattern": "Drain"}`
		if g.r.IntN(3) > 0 {
			input = fmt.Sprintf(`{"pattern": %q}`, id)
		}
		m.Blocks = append(m.Blocks, window.Block{Type: window.BlockToolUse, ID: id, Name: "grep", Input: json.RawMessage(input)})
	}
	return m
}

// results answers calls ids: in one user message (Anthropic's way) or a
// tool message each (OpenAI's).
func (g *diffGen) results(ids []string) []window.Message {
	isErr := g.r.IntN(5) == 0
	if g.r.IntN(2) == 0 {
		var out []window.Message
		for _, id := range ids {
			out = append(out, mustWire(window.FromOpenAI(fmt.Appendf(nil, `{"role": "tool", "tool_call_id": %q, "content": %s}`, id, jsonText(g.text(g.size()))))))
		}
		return out
	}
	var blocks []string
	for _, id := range ids {
		blocks = append(blocks, fmt.Sprintf(`{"type": "tool_result", "tool_use_id": %q, "is_error": %t, "content": %s}`, id, isErr, jsonText(g.text(g.size()))))
	}
	if g.r.IntN(5) == 0 {
		// Claude Code adds the user's words after results at times.
		blocks = append(blocks, fmt.Sprintf(`{"type": "text", "text": %s}`, jsonText(g.text(4))))
	}
	return []window.Message{mustWire(window.FromAnthropic(fmt.Appendf(nil, `{"role": "user", "content": [%s]}`, strings.Join(blocks, ", "))))}
}

// message is the next message of a conversation, with a mistake at times.
func (g *diffGen) message() []window.Message {
	k := g.r.IntN(100)
	if len(g.pending) > 0 && k < 45 {
		n := 1 + g.r.IntN(len(g.pending))
		ids := g.pending[:n]
		g.pending = append([]string(nil), g.pending[n:]...)
		g.done = append(g.done, ids...)
		return g.results(ids)
	}
	switch {
	case k < 55:
		return []window.Message{g.call()}
	case k < 58:
		// A result of no call.
		return g.results([]string{fmt.Sprintf("ghost_%d", g.r.IntN(1000))})
	case k < 61 && len(g.done) > 0:
		// A result again.
		return g.results([]string{g.done[g.r.IntN(len(g.done))]})
	case k < 64:
		// A Responses reasoning item, and the call it leads to.
		g.calls++
		id := fmt.Sprintf("call_%d", g.calls)
		g.pending = append(g.pending, id)
		return []window.Message{
			mustWire(window.FromResponses(fmt.Appendf(nil, `{"type": "reasoning", "id": "rs_%d", "summary": [], "encrypted_content": "gAAAAB-%d"}`, g.calls, g.calls))),
			mustWire(window.FromResponses(fmt.Appendf(nil, `{"type": "function_call", "call_id": %q, "name": "exec_command", "arguments": "{}"}`, id))),
		}
	case k < 66:
		return []window.Message{g.plain(window.RoleSystem)}
	case k < 82:
		return []window.Message{g.plain(window.RoleAssistant)}
	}
	if len(g.pending) > 0 && g.r.IntN(3) > 0 {
		// Mostly, a prompt waits for the results: a mistake otherwise.
		return g.message()
	}
	return []window.Message{g.plain(window.RoleUser)}
}

// open is a window's options: a small window, so that it evicts.
func (g *diffGen) open() window.OpenOptions {
	o := window.OpenOptions{Limit: 1200 + 400*g.r.IntN(8), Output: 100, Safety: 40,
		Role: []string{"", "librarian", "academic", "architect", "engineer", "tester", window.ToolLoopRole, window.ToolLoopRole}[g.r.IntN(8)]}
	if g.r.IntN(4) == 0 {
		p := window.PolicyFor(o.Role)
		p.MaxRefTokens = 300 + 100*g.r.IntN(10)
		p.KeepTurns = g.r.IntN(4)
		o.Policy = &p
	}
	return o
}

// diffSource gives a run's steps: a generator's, or a list's to run again.
type diffSource interface {
	// next returns step i, or false past the last; accepted says whether
	// the store in memory took step i-1.
	next(i int, accepted bool) (diffOp, bool)
}

// diffList is a sequence of steps run again.
type diffList []diffOp

func (l diffList) next(i int, _ bool) (diffOp, bool) {
	if i >= len(l) {
		return diffOp{}, false
	}
	return l[i], true
}

// diffSteps is a generator of n steps after the window's opening: each
// step follows what the window took of the steps before it, so that a
// refused append does not make every later result one of no call.
type diffSteps struct {
	*diffGen
	n int
	// before is the generator's state before the last step.
	before struct{ pending, done []string }
	// keyed is the last append made once, to try again; opened the
	// window's first options.
	keyed  *diffOp
	opened window.OpenOptions
}

func (g *diffSteps) next(i int, accepted bool) (diffOp, bool) {
	if i == 0 {
		g.opened = g.open()
		return diffOp{Kind: "open", Open: g.opened}, true
	}
	if !accepted {
		g.pending, g.done = g.before.pending, g.before.done
	}
	if i > g.n {
		return diffOp{}, false
	}
	g.before.pending, g.before.done = slices.Clone(g.pending), slices.Clone(g.done)
	switch k := g.r.IntN(100); {
	case k < 8:
		return diffOp{Kind: "forget", Pick: g.r.IntN(1 << 20), All: g.r.IntN(2) == 0}, true
	case k < 16:
		return diffOp{Kind: "readmit", Pick: g.r.IntN(1 << 20)}, true
	case k < 18:
		o := g.open()
		if g.r.IntN(3) > 0 {
			o.Role = "" // the window's role, its limit changed
		}
		return diffOp{Kind: "reopen", Open: o}, true
	case k < 19:
		g.pending = nil
		return diffOp{Kind: "handoff"}, true
	case k < 21:
		return diffOp{Kind: "redact", Text: []string{"TestDrainTimeout", "internal/queue/queue.go", "flaky", "call_1"}[g.r.IntN(4)]}, true
	case k < 22:
		g.pending, g.done = nil, nil
		return diffOp{Kind: "forget session", Open: g.opened}, true
	case k < 26 && g.keyed != nil:
		// The last append made once, tried again: the same messages
		// (its answer lost), or others under its key (a mistake).
		op := *g.keyed
		if g.r.IntN(3) == 0 {
			op.Msgs = []window.Message{g.plain(window.RoleAssistant)}
		}
		return op, true
	}
	var msgs []window.Message
	for range 1 + g.r.IntN(3) {
		msgs = append(msgs, g.message()...)
	}
	op := diffOp{Kind: "append", Msgs: msgs}
	if g.r.IntN(4) == 0 {
		op.Key = fmt.Sprintf("turn-%d", i)
		g.keyed = &op
	}
	return op, true
}

// diffStore opens engines over one store, each as another process would.
type diffStore func(t testing.TB) *engine.Engine

func sqliteStores(t testing.TB) (diffStore, diffStore) {
	a, b := filepath.Join(t.TempDir(), "a.db"), filepath.Join(t.TempDir(), "b.db")
	return func(t testing.TB) *engine.Engine { return engineAt(t, a) }, func(t testing.TB) *engine.Engine { return engineAt(t, b) }
}

func postgresStores(t testing.TB) (diffStore, diffStore) {
	open := func(url string) diffStore {
		return func(t testing.TB) *engine.Engine {
			st, err := postgres.Open(context.Background(), url, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			eng, err := engine.New(st, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return eng
		}
	}
	return open(pgtest.Database(t)), open(pgtest.Database(t))
}

// diffShown is a window as a Manager shows it: its status, its context,
// and a turn's view of it in half its budget (an assembled turn's
// history layer).
type diffShown struct {
	Status  window.Status
	Context []window.Item
	View    window.View
	Err     string
}

func shownBy(ctx context.Context, m *window.Manager, key store.WindowKey) diffShown {
	var d diffShown
	st, err := m.Status(ctx, key)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	_, msgs, _, err := m.Messages(ctx, key)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	view, err := m.View(ctx, key, 0, len(msgs), st.Budget/2)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	d.Status, d.Context, d.View = st, items, view
	return d
}

var diffOpts = []cmp.Option{cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(window.Message{})}

// diff is cmp.Diff, made only when a and b are not equal (cmp.Equal is
// some times faster, and this is most of the test's time).
func diff(a, b any) string {
	if cmp.Equal(a, b, diffOpts...) {
		return ""
	}
	return cmp.Diff(a, b, diffOpts...)
}

// diffRun runs the steps of src in two stores (see above) and returns
// them and the first disagreement, "" for none. With logf set, it logs
// each step's answers and what each side shows.
func diffRun(t testing.TB, stores func(testing.TB) (diffStore, diffStore), src diffSource, logf func(string, ...any)) ([]diffOp, string) {
	ctx := context.Background()
	cat := catalog(t)
	openA, openB := stores(t)
	engA, engA2, engB := openA(t), openA(t), openB(t)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	step := 0
	clock := func() time.Time { return base.Add(time.Duration(step) * time.Minute) }
	live := window.NewManager(engA, cat)
	live.SetNow(clock)
	fresh := func(eng *engine.Engine) *window.Manager {
		m := window.NewManager(eng, cat)
		m.SetNow(clock)
		return m
	}
	key := store.WindowKey{SessionID: "s", AgentID: "agent"}
	var ran []diffOp
	accepted := true
	for i := 0; ; i++ {
		op, ok := src.next(i, accepted)
		if !ok {
			return ran, ""
		}
		ran = append(ran, op)
		step, accepted = i, true
		rebuilt := fresh(engB)
		var a, b any
		var errA, errB error
		switch op.Kind {
		case "open", "reopen":
			a, errA = live.Open(ctx, key, op.Open)
			b, errB = rebuilt.Open(ctx, key, op.Open)
		case "append":
			if op.Key != "" {
				a, errA = live.AppendOnce(ctx, key, op.Key, op.Msgs)
				b, errB = rebuilt.AppendOnce(ctx, key, op.Key, op.Msgs)
				break
			}
			a, errA = live.Append(ctx, key, op.Msgs)
			b, errB = rebuilt.Append(ctx, key, op.Msgs)
		case "redact":
			req := engine.RedactRequest{Text: []byte(op.Text), Actor: "test"}
			_, errA = engA.Redact(ctx, req)
			_, errB = engB.Redact(ctx, req)
		case "forget session":
			req := engine.ForgetRequest{Sessions: []string{key.SessionID}, Actor: "test"}
			if _, errA = engA.Forget(ctx, req); errA == nil {
				a, errA = live.Open(ctx, key, op.Open)
			}
			if _, errB = engB.Forget(ctx, req); errB == nil {
				b, errB = rebuilt.Open(ctx, key, op.Open)
			}
		case "forget":
			items, err := engA.Store().WindowItems(ctx, key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			if len(items) == 0 {
				continue
			}
			ids := items[op.Pick%len(items)].EntryIDs
			if !op.All && len(ids) > 0 {
				ids = ids[len(ids)-1:]
			}
			if len(ids) == 0 {
				continue
			}
			req := engine.ForgetRequest{Entries: ids, Actor: "test"}
			_, errA = engA.Forget(ctx, req)
			_, errB = engB.Forget(ctx, req)
		case "readmit":
			items, err := live.Context(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			var refs []string
			for _, it := range items {
				if it.RefID != "" {
					refs = append(refs, it.RefID)
				}
			}
			if len(refs) == 0 {
				continue
			}
			id := refs[op.Pick%len(refs)]
			a, errA = live.Readmit(ctx, id)
			b, errB = rebuilt.Readmit(ctx, id)
		case "handoff":
			ra, err := live.Handoff(ctx, key, window.HandoffOptions{})
			a, errA = ra, err
			rb, err := rebuilt.Handoff(ctx, key, window.HandoffOptions{})
			b, errB = rb, err
			if errA == nil && errB == nil {
				key.AgentID = ra.Window.AgentID
			}
		}
		if logf != nil {
			logf("step %d (%s): in memory: %v; laid out anew: %v", i, op, answer(a, errA), answer(b, errB))
			for _, m := range []*window.Manager{live, fresh(engA2)} {
				its, _ := m.Context(ctx, key)
				var parts []string
				for _, it := range its {
					if it.Message != nil {
						parts = append(parts, fmt.Sprintf("%d:%s", it.Pos, describe(*it.Message)))
					} else {
						parts = append(parts, fmt.Sprintf("%d:marker", it.Pos))
					}
				}
				logf("   %s", strings.Join(parts, " "))
			}
		}
		accepted = errA == nil
		if fmt.Sprint(errA) != fmt.Sprint(errB) {
			return ran, fmt.Sprintf("step %d (%s): in memory: %v; laid out anew: %v", i, op, errA, errB)
		}
		if errA == nil {
			if diff := diff(a, b); diff != "" {
				return ran, fmt.Sprintf("step %d (%s): answers differ (-in memory +laid out anew):\n%s", i, op, diff)
			}
		}
		shown := shownBy(ctx, live, key)
		if diff := diff(shown, shownBy(ctx, fresh(engA2), key)); diff != "" {
			return ran, fmt.Sprintf("step %d (%s): the window differs (-in memory +laid out anew from the same store):\n%s", i, op, diff)
		}
		if diff := diff(shown, shownBy(ctx, fresh(engB), key)); diff != "" {
			return ran, fmt.Sprintf("step %d (%s): the window differs (-in memory +changed by new Managers only):\n%s", i, op, diff)
		}
	}
}

// answer is an operation's answer in short.
func answer(a any, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	switch r := a.(type) {
	case window.AppendResult:
		return fmt.Sprintf("positions %v, %d evicted, used %d of %d", r.Positions, len(r.Evicted), r.Used, r.Budget)
	case window.Status:
		return fmt.Sprintf("used %d of %d", r.Used, r.Budget)
	case window.HandoffResult:
		return "to " + r.Window.AgentID
	}
	return "ok"
}

// minimize cuts ops down to the fewest that still disagree, greedily:
// chunks, then single steps (never the opening), within a few minutes.
func minimize(t testing.TB, stores func(testing.TB) (diffStore, diffStore), ops []diffOp, fail string) ([]diffOp, string) {
	deadline := time.Now().Add(3 * time.Minute)
	for size := len(ops) / 2; size >= 1 && time.Now().Before(deadline); size /= 2 {
		for from := 1; from+size <= len(ops) && time.Now().Before(deadline); {
			try := append(append([]diffOp{}, ops[:from]...), ops[from+size:]...)
			if _, f := diffRun(t, stores, diffList(try), nil); f != "" {
				ops, fail = try, f
				continue
			}
			from += size
		}
	}
	return ops, fail
}

// TestWindowDifferential: see the comment at the top of this file.
func TestWindowDifferential(t *testing.T) {
	backends := map[string]func(testing.TB) (diffStore, diffStore){"sqlite": sqliteStores, "postgres": postgresStores}
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			stores := backends[name]
			if name == "postgres" && os.Getenv("ENGRAM_TEST_POSTGRES") == "" {
				t.Skip("ENGRAM_TEST_POSTGRES names no PostgreSQL server")
			}
			// A few seconds under -race: the SQLite driver is Go, and
			// slow so.
			seeds, length := []uint64{1}, 20
			var soak time.Duration
			if s := os.Getenv("ENGRAM_WINDOW_DIFF_SEED"); s != "" {
				seed, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					t.Fatalf("ENGRAM_WINDOW_DIFF_SEED: %v", err)
				}
				seeds = []uint64{seed}
			}
			if s := os.Getenv("ENGRAM_WINDOW_DIFF_SOAK"); s != "" {
				d, err := time.ParseDuration(s)
				if err != nil {
					t.Fatalf("ENGRAM_WINDOW_DIFF_SOAK: %v", err)
				}
				soak, length = d, 80
			}
			if s := os.Getenv("ENGRAM_WINDOW_DIFF_STEPS"); s != "" {
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 {
					t.Fatalf("ENGRAM_WINDOW_DIFF_STEPS=%q: a number of steps, from 1", s)
				}
				length = n
			}
			run := func(seed uint64) bool {
				g := &diffSteps{diffGen: &diffGen{r: rand.New(rand.NewPCG(seed, 0x656e6772616d))}, n: length}
				ops, fail := diffRun(t, stores, g, nil)
				if fail == "" {
					return true
				}
				small, fail := minimize(t, stores, ops, fail)
				diffRun(t, stores, diffList(small), t.Logf)
				var b strings.Builder
				for i, op := range small {
					fmt.Fprintf(&b, "\n  %d: %s", i, op)
				}
				t.Errorf("seed %d (ENGRAM_WINDOW_DIFF_SEED=%d ENGRAM_WINDOW_DIFF_STEPS=%d): %d steps of %d still disagree:%s\n%s",
					seed, seed, length, len(small), len(ops), b.String(), fail)
				return false
			}
			for _, seed := range seeds {
				run(seed)
			}
			if soak == 0 {
				return
			}
			first := uint64(time.Now().UnixNano())
			seed := first
			for end := time.Now().Add(soak); time.Now().Before(end); seed++ {
				if !run(seed) {
					return
				}
			}
			t.Logf("soak: %d seeds agree (%d to %d), %d steps each", seed-first, first, seed-1, length)
		})
	}
}

// TestManagerCallThenText: a tool call, then an assistant's text (one
// Responses item each, or a harness's reminder between them): the call
// waits for its result, in memory and laid out anew from the ledger
// alike, so that a prompt is refused by both, and the result then taken.
// Laid out anew, the window used to drop the call as one the conversation
// had gone on past, and took the prompt a live window refused.
func TestManagerCallThenText(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, window.OpenOptions{Limit: 8000}, 1)
	call := window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "call-x", Name: "bash", Input: json.RawMessage(`{"command": "ls"}`)}}}
	for _, msgs := range [][]window.Message{{call}, {textMsg(window.RoleAssistant, "Listing the files.")}} {
		if _, err := w.m.Append(ctx, w.key, msgs); err != nil {
			t.Fatal(err)
		}
	}
	prompt := []window.Message{textMsg(window.RoleUser, "go on")}
	for _, side := range []struct {
		name string
		m    *window.Manager
	}{{"in memory", w.m}, {"laid out anew", w.fresh()}} {
		name, m := side.name, side.m
		items := contextOf(t, m, w.key)
		if got := items[len(items)-2].Message; got == nil || len(got.Calls()) != 1 {
			t.Errorf("%s: the window shows %+v where the call is", name, items[len(items)-2])
		}
		var pe *window.PairingError
		if _, err := m.Append(ctx, w.key, prompt); !errors.As(err, &pe) || pe.CallID != "call-x" {
			t.Errorf("%s: a prompt while call-x waits: %v, want a PairingError naming it", name, err)
		}
	}
	result := window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "call-x", Text: "go.mod\nmain.go\n"}}}
	if _, err := w.m.Append(ctx, w.key, append([]window.Message{result}, prompt...)); err != nil {
		t.Fatalf("the result, then the prompt: %v", err)
	}
	if diff := cmp.Diff(contextOf(t, w.m, w.key), contextOf(t, w.fresh(), w.key), diffOpts...); diff != "" {
		t.Errorf("the window in memory and laid out anew (-in memory +anew):\n%s", diff)
	}
}

// TestManagerForgetResultBeforeText: an operator forgets the result of a
// call that an assistant's text followed. The call waits for a result
// again, in memory and laid out anew alike; a prompt, which may no longer
// be answered in the result's place, ends it, as after a last result
// forgotten (TestManagerForgetLastResult), and the window goes on.
func TestManagerForgetResultBeforeText(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, window.OpenOptions{Limit: 8000}, 1)
	ex := exchange(1)
	if _, err := w.m.Append(ctx, w.key, ex); err != nil {
		t.Fatal(err)
	}
	items := w.ledger(t, 6, 7)
	if len(items) != 1 {
		t.Fatalf("message 6: %+v", items)
	}
	w.forget(t, items[0].EntryIDs)
	prompt := []window.Message{textMsg(window.RoleUser, "go on")}
	if _, err := w.m.Append(ctx, w.key, prompt); err != nil {
		t.Fatalf("a prompt after the result of call-1 was forgotten: %v", err)
	}
	if _, err := w.m.Append(ctx, w.key, exchange(2)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(contextOf(t, w.m, w.key), contextOf(t, w.fresh(), w.key), diffOpts...); diff != "" {
		t.Errorf("the window in memory and laid out anew (-in memory +anew):\n%s", diff)
	}
}

// TestManagerForgetLeavesPrompt: parallel calls, one answered and one
// waiting, and an operator forgets the answered one. Its result,
// left without it, is laid out as the user's words, which the window
// takes for a prompt (Layout.interrupts): the waiting call is one the
// conversation went on past. The window in memory and laid out anew
// agree on it, before and after the next prompt. The window in memory
// used to keep the call waiting and take the prompt without ending it,
// while laid out anew it was left out.
func TestManagerForgetLeavesPrompt(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, window.OpenOptions{Limit: 8000}, 1)
	call := func(id, cmd string) window.Message {
		return window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: id, Name: "bash", Input: json.RawMessage(fmt.Sprintf(`{"command": %q}`, cmd))}}}
	}
	// Parallel calls, one Responses item each.
	turn := []window.Message{
		call("call-b", "go test ./internal/queue"),
		call("call-a", "make lint"),
		{Role: window.RoleTool, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "call-b", Text: "ok  queue 0.02s"}}},
	}
	res, err := w.m.Append(ctx, w.key, turn)
	if err != nil {
		t.Fatal(err)
	}
	items := w.ledger(t, res.Positions[0], res.Positions[0]+1)
	if len(items) != 1 {
		t.Fatalf("the call of call-b: %+v", items)
	}
	w.forget(t, items[0].EntryIDs)
	same := func(when string) {
		t.Helper()
		if diff := cmp.Diff(contextOf(t, w.m, w.key), contextOf(t, w.fresh(), w.key), diffOpts...); diff != "" {
			t.Errorf("%s: the window in memory and laid out anew (-in memory +anew):\n%s", when, diff)
		}
	}
	same("after the forget")
	if _, err := w.m.Append(ctx, w.key, []window.Message{textMsg(window.RoleUser, "go on")}); err != nil {
		t.Fatalf("a prompt: %v", err)
	}
	same("after a prompt")
	for _, it := range contextOf(t, w.fresh(), w.key) {
		if it.Message != nil && len(it.Message.Calls()) > 0 && it.Message.Calls()[0] == "call-a" {
			t.Errorf("message %d: call-a is shown, though a prompt came after it with no result", it.Pos)
		}
	}
}

// TestManagerAppendRedacted: content an operator redacted, appended
// again (to another window: a handoff's next agent, a new session), is
// taken for the entry the store holds, which stays redacted. The window
// holds it as the store does, in memory as laid out anew. The window in
// memory used to hold it as appended, the string in it.
func TestManagerAppendRedacted(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, window.OpenOptions{Limit: 8000}, 0)
	msg := textMsg(window.RoleUser, "Look at internal/queue/drain.go, where the timeout is set.")
	if _, err := w.m.Append(ctx, w.key, []window.Message{msg}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.eng.Redact(ctx, engine.RedactRequest{Text: []byte("internal/queue/drain.go"), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	other := store.WindowKey{SessionID: "s", AgentID: "codex"}
	if _, err := w.m.Open(ctx, other, window.OpenOptions{Limit: 8000}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Append(ctx, other, []window.Message{msg}); err != nil {
		t.Fatal(err)
	}
	got := contextOf(t, w.m, other)
	if diff := cmp.Diff(got, contextOf(t, w.fresh(), other), diffOpts...); diff != "" {
		t.Errorf("the window in memory and laid out anew (-in memory +anew):\n%s", diff)
	}
	if len(got) != 1 || got[0].Message == nil || strings.Contains(got[0].Message.Blocks[0].Text, "drain.go") {
		t.Errorf("the window holds %+v, want the prompt as the store holds it, redacted", got)
	}
}

// TestManagerReadmitThenForgetLast: a marker re-admitted, then the
// window's last message forgotten, then an append, which takes the
// forgotten place again. Laid out anew, the window takes the
// re-admission back before the appended message, as it was made: its
// place (the next message's then) is lowered to the place the append
// took. It used to be taken back after it, and the window laid out anew
// showed what the append had evicted again.
func TestManagerReadmitThenForgetLast(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, severalRefs(), 6)
	var ref string
	for _, it := range contextOf(t, w.m, w.key) {
		if it.RefID != "" {
			ref = it.RefID
			break
		}
	}
	if ref == "" {
		t.Fatal("no marker to re-admit")
	}
	if _, err := w.m.Readmit(ctx, ref); err != nil {
		t.Fatalf("readmit %s: %v", ref, err)
	}
	ledger := w.ledger(t, 0, -1)
	w.forget(t, ledger[len(ledger)-1].EntryIDs)
	for i := 6; i < 8; i++ {
		if _, err := w.m.Append(ctx, w.key, exchange(i)); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(contextOf(t, w.m, w.key), contextOf(t, w.fresh(), w.key), diffOpts...); diff != "" {
			t.Fatalf("after exchange %d: the window in memory and laid out anew (-in memory +anew):\n%s", i, diff)
		}
	}
}

// TestManagerAppendLeavesMessages: an append leaves the caller's
// messages as they were sent, content an operator redacted since among
// them, so that the same messages appended again, by the same Manager or
// by another (a server restarted), are held by the same entries, and
// their references named the same. An append used to write the content
// as stored (redacted) into the caller's blocks: appended again, the
// messages were stored as new entries, and a window's references named
// by them differed from those of the same window changed by new Managers
// (the differential test, seed 1795957762437583911 at 80 steps, cut down
// to: open, append, redact, the same append again, an append that evicts
// it). The window in memory also held the caller's blocks, and showed
// what the caller changed in them after its append.
func TestManagerAppendLeavesMessages(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, window.OpenOptions{Limit: 8000}, 0)
	const prompt = "Look at internal/queue/drain.go, where the timeout is set."
	msgs := []window.Message{textMsg(window.RoleUser, prompt)}
	if _, err := w.m.Append(ctx, w.key, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := w.eng.Redact(ctx, engine.RedactRequest{Text: []byte("internal/queue/drain.go"), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, side := range w.sides() {
		if _, err := side.m.Append(ctx, w.key, msgs); err != nil {
			t.Fatalf("%s: append again: %v", side.name, err)
		}
		if got := msgs[0].Blocks[0].Text; got != prompt {
			t.Errorf("%s: after the append, the caller's message reads %q, want %q as sent", side.name, got, prompt)
		}
	}
	ledger := w.ledger(t, 0, -1)
	if len(ledger) != 3 {
		t.Fatalf("the ledger holds %d items, want 3", len(ledger))
	}
	for _, it := range ledger[1:] {
		if !slices.Equal(it.EntryIDs, ledger[0].EntryIDs) {
			t.Errorf("message %d is held by entries %v, the same message %d by %v", it.Pos, it.EntryIDs, ledger[0].Pos, ledger[0].EntryIDs)
		}
	}
	// A caller that reuses its messages' blocks does not change the
	// window it appended them to.
	msgs[0].Blocks[0].Text = "Something else."
	got := contextOf(t, w.m, w.key)
	if diff := cmp.Diff(got, contextOf(t, w.fresh(), w.key), diffOpts...); diff != "" {
		t.Errorf("the window in memory and laid out anew (-in memory +anew):\n%s", diff)
	}
	for _, it := range got {
		if it.Message == nil || strings.Contains(it.Message.Blocks[0].Text, "drain.go") || strings.Contains(it.Message.Blocks[0].Text, "Something") {
			t.Errorf("message %d: %+v, want the prompt as the store holds it, redacted", it.Pos, it.Message)
		}
	}
}

// TestManagerAppendOnceAfterRedaction: an append tried again under its
// key after an operator redacted part of it is the same append, replayed,
// not a conflict: what the retry's digest compares (the entries, named by
// the content as sent, and the messages' forms) does not change with a
// redaction; the names a message mentions, read from the content as the
// store holds it, did.
func TestManagerAppendOnceAfterRedaction(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, window.OpenOptions{Limit: 8000}, 0)
	msgs := []window.Message{textMsg(window.RoleUser, "Look at internal/queue/drain.go, where the timeout is set.")}
	first, err := w.m.AppendOnce(ctx, w.key, "turn-1", msgs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.eng.Redact(ctx, engine.RedactRequest{Text: []byte("internal/queue/drain.go"), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, side := range w.sides() {
		again, err := side.m.AppendOnce(ctx, w.key, "turn-1", msgs)
		if err != nil {
			t.Fatalf("%s: the retry: %v", side.name, err)
		}
		if !again.Replayed || !slices.Equal(again.Positions, first.Positions) {
			t.Errorf("%s: the retry replayed %v at %v, want the first append's %v", side.name, again.Replayed, again.Positions, first.Positions)
		}
	}
	if n := len(w.ledger(t, 0, -1)); n != 1 {
		t.Errorf("the ledger holds %d items, want the one", n)
	}
}

// side is a Manager of a window's: the one that made it, or one that lays
// it out anew from the store.
type side struct {
	name string
	m    *window.Manager
}

// sides are a fresh Manager of w's window and w's own, in that order.
func (w *testWindow) sides() []side {
	return []side{{"laid out anew", w.fresh()}, {"in memory", w.m}}
}
