package window_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// engineAt opens an engine over a store at path, as one process would.
func engineAt(t testing.TB, path string) *engine.Engine {
	t.Helper()
	eng, err := engine.New(sqlitetest.OpenPath(t, path, sqlite.Options{}), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func catalog(t testing.TB) *tokens.Catalog {
	t.Helper()
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// manager opens a Manager over a store at path, as one process would.
func manager(t testing.TB, path string) *window.Manager {
	t.Helper()
	return window.NewManager(engineAt(t, path), catalog(t))
}

// testWindow is the window s/claude of a new store, opened, for a test
// that reaches into the store under it (to read the ledger, to forget).
type testWindow struct {
	eng *engine.Engine
	cat *tokens.Catalog
	m   *window.Manager
	key store.WindowKey
}

// openWindow opens a testWindow with o, then appends turns exchanges.
func openWindow(t testing.TB, o window.OpenOptions, turns int) *testWindow {
	t.Helper()
	eng := engineAt(t, filepath.Join(t.TempDir(), "engram.db"))
	cat := catalog(t)
	w := &testWindow{eng: eng, cat: cat, m: window.NewManager(eng, cat), key: store.WindowKey{SessionID: "s", AgentID: "claude"}}
	if _, err := w.m.Open(context.Background(), w.key, o); err != nil {
		t.Fatal(err)
	}
	for i := range turns {
		if _, err := w.m.Append(context.Background(), w.key, exchange(i)); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// fresh returns a new Manager over the window's store, which lays the
// window out from its ledger as another process would.
func (w *testWindow) fresh() *window.Manager { return window.NewManager(w.eng, w.cat) }

// ledger returns the window's items with from <= Pos < to (-1: all).
func (w *testWindow) ledger(t testing.TB, from, to int) []store.WindowItem {
	t.Helper()
	items, err := w.eng.Store().WindowItems(context.Background(), w.key, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// forget forgets entries, as an operator does.
func (w *testWindow) forget(t testing.TB, ids []string) {
	t.Helper()
	if _, err := w.eng.Forget(context.Background(), engine.ForgetRequest{Entries: ids, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
}

// severalRefs is a small window's policy that makes several references.
func severalRefs() window.OpenOptions {
	p := window.PolicyFor("claude")
	p.MaxRefTokens = 1500
	return window.OpenOptions{Limit: 4000, Output: 100, Safety: 100, Policy: &p}
}

func textMsg(role window.Role, s string) window.Message {
	return window.Message{Role: role, Blocks: []window.Block{{Type: window.BlockText, Text: s}}}
}

// exchange is a turn of a coding agent: a prompt, a tool call, its result
// (Anthropic's shape) and an answer.
func exchange(i int) []window.Message {
	return []window.Message{
		textMsg(window.RoleUser, fmt.Sprintf("Step %d: look at internal/pkg%d/file%d.go and explain handler%d.", i, i, i, i)),
		{Role: window.RoleAssistant, Blocks: []window.Block{
			{Type: window.BlockText, Text: "Reading it."},
			{Type: window.BlockToolUse, ID: fmt.Sprintf("call-%d", i), Name: "read_file", Input: json.RawMessage(fmt.Sprintf(`{"path": "internal/pkg%d/file%d.go"}`, i, i))},
		}},
		{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: fmt.Sprintf("call-%d", i),
			Text: fmt.Sprintf("package pkg%d\n\n// handler%d serves requests.\nfunc handler%d() {\n%s}\n", i, i, i, strings.Repeat("\t// a line of the body, ünïcödé ✓\n", 40))}}},
		textMsg(window.RoleAssistant, fmt.Sprintf("handler%d serves requests; it has a long body.", i)),
	}
}

// TestManager: a window evicts past its threshold, leaves one marker per
// evicted run, expands each back byte for byte with tool pairs whole,
// survives a restart, and refuses bad input without storing anything.
func TestManager(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	m := manager(t, path)
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	if _, err := m.Append(ctx, key, exchange(0)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("append to an unopened window: %v, want ErrNotFound", err)
	}
	if _, err := m.Open(ctx, key, window.OpenOptions{}); !errors.Is(err, window.ErrNoSize) {
		t.Fatalf("open without a size: %v", err)
	}
	if _, err := m.Open(ctx, key, window.OpenOptions{Model: "no-such-model"}); err == nil || !strings.Contains(err.Error(), "unknown model") {
		t.Fatalf("open with an unknown model: %v", err)
	}
	st, err := m.Open(ctx, key, window.OpenOptions{Limit: 6000, Output: 500, Safety: 100})
	if err != nil {
		t.Fatal(err)
	}
	// 6000 - 500 - 100, less the 10 % margin of an unknown tokenizer.
	if st.Budget != 4860 || st.EvictAt != 3645 || st.Target != 2430 || st.Settings.Role != window.DefaultRole {
		t.Fatalf("status: %+v", st)
	}
	system := textMsg(window.RoleSystem, "You are a careful engineer.")
	if _, err := m.Append(ctx, key, []window.Message{system}); err != nil {
		t.Fatal(err)
	}
	// The thresholds of eviction are shares of the room above the system
	// prompt, which is never evicted: where the window evicts.
	if st, err = m.Status(ctx, key); err != nil {
		t.Fatal(err)
	}
	if fixed := st.Used; fixed == 0 || st.EvictAt != fixed+int(0.75*float64(4860-fixed)) || st.Target != fixed+int(0.5*float64(4860-fixed)) {
		t.Fatalf("status with a system prompt of %d tokens: %+v", fixed, st)
	}
	var appended [][]window.Message
	var evicted []window.Ref
	for i := range 12 {
		turn := exchange(i)
		res, err := m.Append(ctx, key, turn)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		appended = append(appended, turn)
		evicted = append(evicted, res.Evicted...)
		if res.Used > res.Budget {
			t.Fatalf("append %d: %d tokens over a budget of %d", i, res.Used, res.Budget)
		}
	}
	if len(evicted) == 0 {
		t.Fatal("twelve turns of about 600 tokens in a 4,860-token window evicted nothing")
	}
	// The context: the system prompt first, then markers where runs were
	// evicted, each parseable and naming its reference, then messages.
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if items[0].Message == nil || items[0].Message.Blocks[0].Text != system.Blocks[0].Text {
		t.Fatalf("the system prompt is not first: %+v", items[0])
	}
	markers := 0
	for _, it := range items {
		if it.Marker == "" {
			continue
		}
		markers++
		mk, err := ctxref.Parse(it.Marker)
		if err != nil || mk.ID != it.RefID {
			t.Fatalf("marker %q: %v (id %q, want %q)", it.Marker, err, mk.ID, it.RefID)
		}
	}
	// Runs evicted one after another join one reference while it stands
	// for at most MaxRefTokens: fewer markers than evictions.
	if markers == 0 || markers >= len(evicted) {
		t.Errorf("%d markers in the context after %d evictions", markers, len(evicted))
	}
	// Every reference made still expands, those taken over included.
	for _, r := range evicted {
		back, err := m.Expand(ctx, r.ID)
		if err != nil || len(back) == 0 {
			t.Errorf("reference %s: %d messages, %v", r.ID, len(back), err)
		}
	}
	// Every evicted message comes back byte for byte, in order: the
	// expansions of all references and the messages still in the window
	// are, together, everything appended.
	var got []window.Message
	for _, it := range items {
		if it.Message != nil {
			got = append(got, *it.Message)
			continue
		}
		back, err := m.Expand(ctx, it.RefID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := window.Units(back); err != nil {
			t.Errorf("reference %s separates a tool call from its result: %v", it.RefID, err)
		}
		got = append(got, back...)
	}
	want := []window.Message{system}
	for _, turn := range appended {
		want = append(want, turn...)
	}
	if diff := cmp.Diff(stripped(want), stripped(got)); diff != "" {
		t.Fatalf("context and expansions differ from what was appended (-want +got):\n%s", diff)
	}
	// A restart: another process opens the store and sees the same window.
	again := manager(t, path)
	st2, err := again.Status(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := m.Status(ctx, key)
	if diff := cmp.Diff(st1, st2); diff != "" {
		t.Errorf("status after reopening (-before +after):\n%s", diff)
	}
	// A model switch keeps the messages and takes the model's limits:
	// the window is laid out anew, and in 169,000 tokens every message is
	// back in it.
	st3, err := again.Open(ctx, key, window.OpenOptions{Model: "claude-sonnet-4-5"})
	if err != nil {
		t.Fatal(err)
	}
	if st3.Messages != st2.Messages+st2.Evicted || st3.Evicted != 0 || st3.Refs != 0 || st3.Settings.Limits.Margin != 0.10 || st3.Budget <= st2.Budget {
		t.Errorf("after a model switch: %+v", st3)
	}
	// And back: the small window evicts again, appends go on, and every
	// reference made before still expands.
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 6000, Output: 500, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	res, err := again.Append(ctx, key, exchange(12))
	if err != nil {
		t.Fatal(err)
	}
	if res.Evicted = nil; res.Refs == 0 || res.Used > res.Budget {
		t.Errorf("back in the small window: %+v", res.Status)
	}
	for _, r := range evicted {
		if back, err := m.Expand(ctx, r.ID); err != nil || len(back) == 0 {
			t.Errorf("reference %s after two model switches: %d messages, %v", r.ID, len(back), err)
		}
	}
	// A tool result whose call no message made: refused, nothing stored.
	before, _ := m.Status(ctx, key)
	orphan := window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "nope", Text: "output of nothing"}}}
	if _, err := m.Append(ctx, key, []window.Message{textMsg(window.RoleUser, "fine"), orphan}); !errors.Is(err, window.ErrInvalid) {
		t.Errorf("an orphan tool result: %v, want ErrInvalid", err)
	}
	after, _ := m.Status(ctx, key)
	if after.Version != before.Version || after.Messages != before.Messages {
		t.Errorf("a refused append changed the window: %+v -> %+v", before, after)
	}
}

// TestManagerConcurrentAppends: processes appending to one window at once
// lose nothing and never interleave a turn.
func TestManagerConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := manager(t, path).Open(ctx, key, window.OpenOptions{Limit: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	const procs, turns = 3, 8
	var wg sync.WaitGroup
	for p := range procs {
		m := manager(t, path)
		wg.Go(func() {
			for i := range turns {
				if _, err := m.Append(ctx, key, exchange(100*p+i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	items, err := manager(t, path).Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != procs*turns*4 {
		t.Fatalf("%d messages, want %d", len(items), procs*turns*4)
	}
	for i := 0; i < len(items); i += 4 {
		first := items[i].Message.Blocks[0].Text
		var n int
		if _, err := fmt.Sscanf(first, "Step %d:", &n); err != nil {
			t.Fatalf("message %d does not open a turn: %q", i, first)
		}
		if diff := cmp.Diff(exchange(n), tokensOff(items[i:i+4])); diff != "" {
			t.Fatalf("turn at %d is interleaved (-want +got):\n%s", i, diff)
		}
	}
}

// TestManagerBusy: a change another server's changes kept stale until
// its attempts ran out is a conflict that says to try again (Busy), with
// nothing written; tried again, it goes in once.
func TestManagerBusy(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	a, b := manager(t, path), manager(t, path)
	if _, err := a.Open(ctx, key, window.OpenOptions{Limit: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, key, exchange(0)); err != nil {
		t.Fatal(err)
	}
	// b changes the window after a read its layout and before a writes,
	// and a has one attempt only.
	window.SetMaxAttempts(t, 0)
	a.BeforeWrite(func() {
		a.BeforeWrite(nil)
		if _, err := b.Append(ctx, key, exchange(1)); err != nil {
			t.Error(err)
		}
	})
	_, err := a.Append(ctx, key, exchange(2))
	var ce *store.ConflictError
	if !errors.As(err, &ce) || !ce.Busy {
		t.Fatalf("an append whose attempts ran out: %v, want a busy *store.ConflictError", err)
	}
	st, err := b.Status(ctx, key)
	if err != nil || st.Messages != 8 {
		t.Fatalf("after the busy append: %d messages (%v), want 8", st.Messages, err)
	}
	// Not busy: another append under the same key with other messages.
	if _, err := b.AppendOnce(ctx, key, "k", exchange(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendOnce(ctx, key, "k", exchange(4)); !errors.As(err, &ce) || ce.Busy {
		t.Errorf("a key with other messages: %v, want a *store.ConflictError not busy", err)
	}
	if _, err := a.Append(ctx, key, exchange(2)); err != nil {
		t.Fatalf("the busy append again: %v", err)
	}
	if st, err := a.Status(ctx, key); err != nil || st.Messages != 16 {
		t.Errorf("at the end: %d messages (%v), want 16", st.Messages, err)
	}
}

func tokensOff(items []window.Item) []window.Message {
	var out []window.Message
	for _, it := range items {
		m := *it.Message
		m.Tokens, m.Entities, m.Time = 0, nil, time.Time{}
		out = append(out, m)
	}
	return out
}

// TestManagerReadmit: an evicted run comes back into its place within
// the budget, older runs leaving to make room; a run that cannot fit is
// refused with nothing changed; evicted again, it goes back under the
// same reference.
func TestManagerReadmit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	m := manager(t, path)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	p := window.PolicyFor("claude")
	p.KeepTurns = 1
	p.Checkpoints = []float64{0.25, 0.5}
	p.MaxRefTokens = 4000 // about six turns a reference at most
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 4000, Output: 100, Safety: 100, Policy: &p}); err != nil {
		t.Fatal(err)
	}
	var refs []window.Ref
	var checkpoints []int
	for i := range 10 {
		res, err := m.Append(ctx, key, exchange(i))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, res.Evicted...)
		if res.Checkpoint {
			checkpoints = append(checkpoints, i)
		}
	}
	// 636 tokens a turn in a 3,420-token budget: past 855 at the second
	// turn, past 1,710 at the third; again whenever an eviction took the
	// window back under one.
	if len(checkpoints) < 2 || !slices.Equal(checkpoints[:2], []int{1, 2}) {
		t.Errorf("checkpoints due at turns %v, want 1 and 2 first", checkpoints)
	}
	if len(refs) < 2 {
		t.Fatalf("expected at least two references, got %v", refs)
	}
	// Runs evicted one after another join while the reference stays
	// under 4,000 tokens: a reference taken over is not in the context,
	// and readmitting it says which one to readmit.
	ctxItems, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inContext := map[string]bool{}
	var first window.Ref
	for _, it := range ctxItems {
		if it.RefID != "" {
			inContext[it.RefID] = true
			if first.ID == "" {
				first = window.Ref{ID: it.RefID, From: it.Pos}
			}
		}
	}
	taken := slices.IndexFunc(refs, func(r window.Ref) bool { return !inContext[r.ID] })
	if taken < 0 {
		t.Fatalf("no reference was taken over: %v", refs)
	}
	if _, err := m.Readmit(ctx, refs[taken].ID); err == nil || !strings.Contains(err.Error(), "readmit that") {
		t.Errorf("readmitting a reference taken over: %v", err)
	}
	// A reference of up to 4,000 tokens needs a larger window to come
	// back. The larger window is laid out anew: its first marker is what
	// it evicted of the 10 turns.
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 9000, Output: 100, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	first = firstRef(t, m, key)
	firstMsgs, err := m.Expand(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Readmit(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Used > res.Budget || len(res.Positions) != len(firstMsgs) {
		t.Errorf("after readmission the window holds %d tokens of %d; %d messages back of %d", res.Used, res.Budget, len(res.Positions), len(firstMsgs))
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if items[0].Message == nil || items[0].Pos != first.From {
		t.Errorf("the readmitted run should be back at %d, first item: %+v", first.From, items[0])
	}
	for _, it := range items {
		if it.RefID == first.ID {
			t.Errorf("the readmitted reference's marker is still in the context")
		}
	}
	if _, err := m.Readmit(ctx, first.ID); !errors.Is(err, window.ErrNotEvicted) {
		t.Errorf("readmitting twice: %v, want ErrNotEvicted", err)
	}
	// A restart lays the window out with the re-admission where it was
	// made.
	if diff := cmp.Diff(items, contextOf(t, manager(t, path), key)); diff != "" {
		t.Errorf("after a restart (-before +after):\n%s", diff)
	}
	// Too big: a window too small for a run that was evicted from a
	// larger one.
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 1000, Output: 100, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	before, _ := m.Status(ctx, key)
	big := firstRef(t, m, key)
	if _, err := m.Readmit(ctx, big.ID); !errors.Is(err, window.ErrNoRoom) {
		t.Errorf("readmitting %d messages into a %d-token window: %v, want ErrNoRoom", big.Messages, before.Budget, err)
	}
	if after, _ := m.Status(ctx, key); after.Version != before.Version {
		t.Errorf("a refused readmission changed the window")
	}
	// Evicted again, its messages leave the window, and its reference
	// still expands to them.
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 4000}); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 14; i++ {
		if _, err := m.Append(ctx, key, exchange(i)); err != nil {
			t.Fatal(err)
		}
	}
	items, err = m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if items[0].Message != nil {
		t.Errorf("the readmitted run was not evicted again: %+v", items[0])
	}
	again, err := m.Expand(ctx, first.ID)
	if err != nil || len(again) != len(firstMsgs) {
		t.Errorf("reference %s after a second eviction: %d messages (was %d), %v", first.ID, len(again), len(firstMsgs), err)
	}
}

// firstRef returns the first marker's reference in a window's context.
func firstRef(t *testing.T, m *window.Manager, key store.WindowKey) window.Ref {
	t.Helper()
	for _, it := range contextOf(t, m, key) {
		if it.RefID != "" {
			back, err := m.Expand(context.Background(), it.RefID)
			if err != nil {
				t.Fatal(err)
			}
			return window.Ref{ID: it.RefID, From: it.Pos, Messages: len(back)}
		}
	}
	t.Fatal("the window shows no marker")
	return window.Ref{}
}

func contextOf(t *testing.T, m *window.Manager, key store.WindowKey) []window.Item {
	t.Helper()
	items, err := m.Context(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestCheckConfig: the [window] section is checked on its own, as
// engram loads it: every mistake at once, each naming its key, a preserve
// type that is no content type among them; a good section passes.
func TestCheckConfig(t *testing.T) {
	role := func(r config.WindowRole) config.WindowRole {
		if r.Strategy == "" {
			r.Strategy = "recency"
		}
		if r.Evict == 0 && r.Target == 0 {
			r.Evict, r.Target = 0.8, 0.5
		}
		return r
	}
	good := config.Window{Margin: 0.2, Roles: map[string]config.WindowRole{
		"reviewer": role(config.WindowRole{KeepTurns: 2, Preserve: []string{"user_prompt", "plan_workflow"}, Handoff: 0.7}),
	}}
	if err := window.CheckConfig(good); err != nil {
		t.Errorf("a good [window]: %v", err)
	}
	if err := window.CheckConfig(config.Window{}); err != nil {
		t.Errorf("an empty [window]: %v", err)
	}
	for _, c := range []struct {
		w    config.Window
		want []string
	}{
		{config.Window{Output: -1, Safety: -0.5}, []string{"window.output is -1", "window.safety is -0.5"}},
		{config.Window{MaxRefTokens: -8000}, []string{"window.max_ref_tokens is -8000"}},
		{config.Window{Safety: 0.6, Margin: 0.5}, []string{"window.safety (0.60) and window.margin (0.50)"}},
		{config.Window{Roles: map[string]config.WindowRole{
			"a": role(config.WindowRole{Preserve: []string{"user_prompt", "user_promt"}}),
			"b": role(config.WindowRole{Evict: 0.5, Target: 0.8}),
			"c": role(config.WindowRole{Strategy: "newest"}),
			"d": role(config.WindowRole{KeepTurns: -1}),
		}}, []string{`window.roles.a: invalid window settings: preserve: "user_promt" is not a content type (user_prompt, agent_response`,
			"window.roles.b: invalid window settings: the target (0.80)", `window.roles.c: invalid window settings: strategy "newest"`, "window.roles.d: invalid window settings: keep_turns"}},
	} {
		err := window.CheckConfig(c.w)
		if !errors.Is(err, window.ErrInvalidSettings) {
			t.Errorf("%+v: %v, want invalid settings", c.w, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want it to say %q", c.w, err, w)
			}
		}
	}
	// A policy is refused a preserve type that would match no message,
	// however it comes.
	p := window.PolicyFor("librarian")
	p.Preserve = append(p.Preserve, "research")
	if err := p.Validate(); !errors.Is(err, window.ErrInvalidSettings) || !strings.Contains(err.Error(), `"research"`) {
		t.Errorf("an unknown preserve type: %v", err)
	}
}

// TestStoredUnknownPreserve: a window whose settings an older engram
// stored with a preserve type that is no content type (it matched no
// message) goes on working: the type is dropped as read, not refused.
func TestStoredUnknownPreserve(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	m := manager(t, path)
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 6000, Output: 500, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append(ctx, key, exchange(0)); err != nil {
		t.Fatal(err)
	}
	st := sqlitetest.OpenPath(t, path, sqlite.Options{})
	w, err := st.Window(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var settings map[string]any
	if err := json.Unmarshal(w.Settings, &settings); err != nil {
		t.Fatal(err)
	}
	settings["policy"].(map[string]any)["Preserve"] = []string{"user_promt", "user_prompt"}
	raw, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutWindow(ctx, key, raw); err != nil {
		t.Fatal(err)
	}
	later := manager(t, path)
	if _, err := later.Append(ctx, key, exchange(1)); err != nil {
		t.Fatalf("append to a window stored with an unknown preserve type: %v", err)
	}
	status, err := later.Status(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := status.Settings.Policy.Preserve; !slices.Equal(got, []store.ContentType{store.UserPrompt}) {
		t.Errorf("preserve types read: %v, want the known one only", got)
	}
	if items := contextOf(t, later, key); len(items) != 8 {
		t.Errorf("the window shows %d items, want the 8 messages appended", len(items))
	}
}

// TestConfigure: a role's policy and the defaults come from the [window]
// configuration; a policy that is not valid is refused, naming its role.
func TestConfigure(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	err := m.Configure(window.ConfigFrom(config.Window{Margin: 0.2, Roles: map[string]config.WindowRole{
		"reviewer": {Strategy: "task_completion", Evict: 0.6, Target: 0.3, KeepTurns: 2, Preserve: []string{"user_prompt"}, Handoff: 0.55},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Open(ctx, store.WindowKey{SessionID: "s", AgentID: "r"}, window.OpenOptions{Role: "Reviewer", Model: "claude-sonnet-4-5"})
	if err != nil {
		t.Fatal(err)
	}
	p := st.Settings.Policy
	if p.Strategy != window.TaskCompletion || p.Evict != 0.6 || p.KeepTurns != 2 || p.MaxRefTokens != window.DefaultMaxRefTokens || st.Settings.Limits.Margin != 0.2 ||
		p.Handoff != 0.55 || st.HandoffAt != int(0.55*float64(st.Budget)) {
		t.Errorf("configured policy and margin: %+v %+v", p, st.Settings.Limits)
	}
	err = m.Configure(window.ConfigFrom(config.Window{Roles: map[string]config.WindowRole{"late": {Strategy: "recency", Evict: 0.8, Target: 0.5, Handoff: 0.9}}}))
	if err == nil || !strings.Contains(err.Error(), "handoff share") {
		t.Errorf("a handoff past the eviction: %v", err)
	}
	err = m.Configure(window.ConfigFrom(config.Window{Roles: map[string]config.WindowRole{"bad": {Strategy: "lru", Evict: 0.8, Target: 0.5}}}))
	if err == nil || !strings.Contains(err.Error(), `window.roles.bad`) {
		t.Errorf("a bad strategy: %v", err)
	}
	// A negative default is refused, naming it, not taken for zero (the
	// default); every one at once.
	err = m.Configure(window.Config{Defaults: window.Defaults{Output: -100, Safety: -0.02, Margin: -0.1, MaxRefTokens: -8000}})
	if !errors.Is(err, window.ErrInvalidSettings) {
		t.Errorf("negative defaults: %v", err)
	}
	for _, field := range []string{"output is -100", "safety is -0.02", "margin is -0.1", "max_ref_tokens is -8000"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("negative defaults: %v, want it to name %s", err, field)
		}
	}
	for _, d := range []window.Defaults{{Output: -1}, {Safety: -0.5}, {Margin: -0.01}, {MaxRefTokens: -1}} {
		if err := m.Configure(window.Config{Defaults: d}); !errors.Is(err, window.ErrInvalidSettings) {
			t.Errorf("%+v: %v", d, err)
		}
	}
	after, err := m.Open(ctx, store.WindowKey{SessionID: "s", AgentID: "r2"}, window.OpenOptions{Role: "Reviewer", Model: "claude-sonnet-4-5"})
	if err != nil {
		t.Fatal(err)
	}
	if after.Settings.Limits != st.Settings.Limits || after.Settings.Policy.MaxRefTokens != window.DefaultMaxRefTokens {
		t.Errorf("refused defaults changed the Manager's: %+v, was %+v", after.Settings, st.Settings)
	}
	// Settings are refused as settings, not as a message; still an
	// ErrInvalid, which front ends refuse as bad input.
	for name, err := range map[string]error{
		"policy":   m.Configure(window.ConfigFrom(config.Window{Roles: map[string]config.WindowRole{"bad": {Strategy: "lru", Evict: 0.8, Target: 0.5}}})),
		"defaults": m.Configure(window.Config{Defaults: window.Defaults{Safety: 0.6, Margin: 0.5}}),
		"limits": func() error {
			_, err := m.Open(ctx, store.WindowKey{SessionID: "s", AgentID: "small"}, window.OpenOptions{Limit: 1000, Output: 1000})
			return err
		}(),
	} {
		if !errors.Is(err, window.ErrInvalidSettings) || !errors.Is(err, window.ErrInvalid) ||
			strings.Contains(err.Error(), "invalid message") || !strings.Contains(err.Error(), "invalid window settings") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestManagerHugeMessage: a tool result larger than the whole budget is
// stored whole, never refused; the window stays within its budget, and
// the result comes back byte for byte.
func TestManagerHugeMessage(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 2000}); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("line of a very long build log, ünïcödé ✓ 12345\n", 4000) // ~60k tokens
	msgs := []window.Message{
		textMsg(window.RoleUser, "build it"),
		{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "c1", Name: "bash", Input: json.RawMessage(`{"cmd":"make"}`)}}},
		{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "c1", Text: huge}}},
	}
	res, err := m.Append(ctx, key, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Used > res.Budget || len(res.Evicted) == 0 {
		t.Fatalf("after a result of ~60k tokens: %d of %d tokens, %d references", res.Used, res.Budget, len(res.Evicted))
	}
	var got string
	for _, r := range res.Evicted {
		back, err := m.Expand(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range back {
			for _, b := range msg.Blocks {
				if b.Type == window.BlockToolResult {
					got = b.Text
				}
			}
		}
	}
	if got != huge {
		t.Errorf("the huge result came back as %d bytes, want %d", len(got), len(huge))
	}
	// The prompt before it, which fits, stays: the huge unit went first.
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if items[0].Message == nil || items[0].Message.Blocks[0].Text != "build it" {
		t.Errorf("the prompt left with the huge result: %+v", items[0])
	}
}

// TestManagerRelay: the ledger's references stay those the window shows
// when its settings change (a model switch lays it out anew) and when an
// operator forgets content under a reference (the next append finds the
// ledger's references stale and lays the window out anew first); appends
// go on, and every marker still expands.
func TestManagerRelay(t *testing.T) {
	ctx := context.Background()
	w := openWindow(t, severalRefs(), 12)
	m, key := w.m, w.key
	// consistent checks that each item of the ledger is under the
	// reference whose marker the context shows for it, or under none when
	// the context shows it whole, and that every marker expands.
	consistent := func(when string) {
		t.Helper()
		items := w.ledger(t, 0, -1)
		ctxItems := contextOf(t, m, key)
		under := map[int]string{}
		for i, it := range ctxItems {
			switch {
			case it.Message != nil:
				under[it.Pos] = ""
			case it.RefID != "":
				end := math.MaxInt
				for _, next := range ctxItems[i+1:] {
					if next.Excerpt == "" {
						end = next.Pos
						break
					}
				}
				for _, item := range items {
					if item.Pos >= it.Pos && item.Pos < end {
						under[item.Pos] = it.RefID
					}
				}
				if back, err := m.Expand(ctx, it.RefID); err != nil || len(back) == 0 {
					t.Errorf("%s: marker %s: %d messages, %v", when, it.RefID, len(back), err)
				}
			}
		}
		for _, it := range items {
			if want, ok := under[it.Pos]; !ok || it.RefID != want {
				t.Errorf("%s: item %d is under %q in the ledger, the context shows it under %q (%v)", when, it.Pos, it.RefID, want, ok)
			}
		}
	}
	consistent("after the appends")
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 6000}); err != nil {
		t.Fatal(err)
	}
	consistent("after a model switch")
	// Forget a message evicted in the middle of the window's history.
	items := w.ledger(t, 0, -1)
	var victim []string
	for _, it := range items[len(items)/3:] {
		if it.RefID != "" && len(it.EntryIDs) > 0 {
			victim = it.EntryIDs
			break
		}
	}
	if victim == nil {
		t.Fatal("nothing evicted to forget")
	}
	w.forget(t, victim)
	res, err := m.Append(ctx, key, exchange(12))
	if err != nil {
		t.Fatalf("an append after forgetting: %v", err)
	}
	if res.Used > res.Budget {
		t.Errorf("after forgetting: %d tokens of %d", res.Used, res.Budget)
	}
	consistent("after forgetting and an append")
}

// TestManagerReadmitAfterForget: an operator forgets a message the window
// evicted, or one after messages it re-admitted. The marker the agent
// holds still brings back what is left of its run, each message once, the
// forgotten one never; what was re-admitted stays shown, once, in this
// process and in one that lays the window out from its ledger; the
// ledger's references are those the context shows, and every marker
// expands.
func TestManagerReadmitAfterForget(t *testing.T) {
	ctx := context.Background()
	// firstRef is the first marker of the context and the ledger's items
	// under it.
	firstRef := func(t *testing.T, w *testWindow) (string, []store.WindowItem) {
		t.Helper()
		for _, it := range contextOf(t, w.m, w.key) {
			if it.RefID == "" {
				continue
			}
			var under []store.WindowItem
			for _, item := range w.ledger(t, 0, -1) {
				if item.RefID == it.RefID {
					under = append(under, item)
				}
			}
			return it.RefID, under
		}
		t.Fatal("the window evicted nothing")
		return "", nil
	}
	// check: each place of want shown whole once, gone never, the
	// ledger's references those of the context, every marker expands,
	// none to the forgotten message; m shows w.
	check := func(t *testing.T, when string, w *testWindow, m *window.Manager, want []int, gone int) {
		t.Helper()
		shown := map[int]int{}
		for _, it := range contextOf(t, m, w.key) {
			switch {
			case it.Message != nil:
				shown[it.Pos]++
			case it.RefID != "":
				back, err := m.Expand(ctx, it.RefID)
				if err != nil || len(back) == 0 {
					t.Errorf("%s: marker %s: %d messages, %v", when, it.RefID, len(back), err)
				}
				for _, msg := range back {
					if msg.Role == window.RoleUser && strings.HasPrefix(msg.Blocks[0].Text, "Step 1:") {
						t.Errorf("%s: marker %s expands to the forgotten message", when, it.RefID)
					}
				}
			}
		}
		for _, pos := range want {
			if shown[pos] != 1 {
				t.Errorf("%s: message %d shown %d times, want once", when, pos, shown[pos])
			}
		}
		if shown[gone] != 0 {
			t.Errorf("%s: the forgotten message %d is shown", when, gone)
		}
		for _, it := range w.ledger(t, 0, -1) {
			if it.Pos == gone {
				t.Errorf("%s: the ledger keeps the forgotten message %d", when, gone)
			}
			if it.RefID == "" && shown[it.Pos] != 1 {
				t.Errorf("%s: message %d is in the window in the ledger, shown %d times", when, it.Pos, shown[it.Pos])
			}
		}
	}

	t.Run("evicted", func(t *testing.T) {
		w := openWindow(t, severalRefs(), 8)
		ref, under := firstRef(t, w)
		// The prompt of the second turn under the reference.
		victim := under[4]
		if victim.Pos != 4 || len(under) < 6 {
			t.Fatalf("reference %s holds %d messages from %d; the test wants turns 0 and 1 under it", ref, len(under), under[0].Pos)
		}
		w.forget(t, victim.EntryIDs)
		res, err := w.m.Readmit(ctx, ref)
		if err != nil {
			t.Fatalf("readmit %s after forgetting message %d of it: %v", ref, victim.Pos, err)
		}
		var want []int
		for _, it := range under {
			if it.Pos != victim.Pos {
				want = append(want, it.Pos)
			}
		}
		if !slices.Equal(res.Positions, want) {
			t.Errorf("readmitted %v, want %v", res.Positions, want)
		}
		check(t, "after the re-admission", w, w.m, want, victim.Pos)
		check(t, "laid out again", w, w.fresh(), want, victim.Pos)
		if _, err := w.m.Append(ctx, w.key, exchange(8)); err != nil {
			t.Fatal(err)
		}
		check(t, "after an append", w, w.fresh(), nil, victim.Pos)
	})

	t.Run("readmitted", func(t *testing.T) {
		w := openWindow(t, severalRefs(), 6)
		ref, under := firstRef(t, w)
		res, err := w.m.Readmit(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		// The prompt of the turn after those re-admitted, evicted: its
		// turn's messages join the unit before, and the window's runs
		// change.
		victim := under[len(under)-1].Pos + 1
		items := w.ledger(t, victim, victim+1)
		if len(items) != 1 || items[0].RefID == "" {
			t.Fatalf("message %d: %+v; the test wants it evicted", victim, items)
		}
		w.forget(t, items[0].EntryIDs)
		check(t, "after forgetting", w, w.m, res.Positions, victim)
		check(t, "laid out again", w, w.fresh(), res.Positions, victim)
		if _, err := w.m.Append(ctx, w.key, exchange(6)); err != nil {
			t.Fatal(err)
		}
		check(t, "after an append", w, w.m, nil, victim)
	})
}

// TestManagerForgetToolPair: an operator forgets a message that makes a
// tool call (its text beside it goes too), or one that holds a result.
// The window is still laid out, in this Manager and a new one, without
// the half left behind: no result without its call, no call unanswered
// with the conversation gone on; appends go on, and the rest is shown.
func TestManagerForgetToolPair(t *testing.T) {
	ctx := context.Background()
	for _, victim := range []int{1, 2} {
		t.Run(fmt.Sprint("message ", victim), func(t *testing.T) {
			w := openWindow(t, window.OpenOptions{Limit: 200_000}, 3)
			m, key := w.m, w.key
			items := w.ledger(t, victim, victim+1)
			if len(items) != 1 {
				t.Fatalf("message %d: %+v", victim, items)
			}
			w.forget(t, items[0].EntryIDs)
			paired := func(when string, m *window.Manager) {
				t.Helper()
				got, err := m.Context(ctx, key)
				if err != nil {
					t.Fatalf("%s: the window's context: %v", when, err)
				}
				calls, results := map[string]bool{}, map[string]bool{}
				shown := map[int]bool{}
				for _, it := range got {
					if it.Message == nil {
						continue
					}
					shown[it.Pos] = true
					for _, id := range it.Message.Results() {
						if !calls[id] {
							t.Errorf("%s: message %d: a result for call %s, which the window does not show", when, it.Pos, id)
						}
						results[id] = true
					}
					for _, id := range it.Message.Calls() {
						calls[id] = true
					}
				}
				for id := range calls {
					if !results[id] {
						t.Errorf("%s: call %s is shown without its result", when, id)
					}
				}
				// (The text beside a call is one entry in every turn:
				// forgotten, it takes each of their calls from the ledger.)
				ledger := w.ledger(t, 0, -1)
				for _, it := range ledger {
					if it.Pos == victim || !shown[it.Pos] {
						t.Errorf("%s: message %d of the ledger is not shown, or is the forgotten one", when, it.Pos)
					}
				}
				if len(ledger) < 9 {
					t.Errorf("%s: the ledger holds %d messages", when, len(ledger))
				}
			}
			paired("after the forget", m)
			if _, err := m.Append(ctx, key, exchange(3)); err != nil {
				t.Fatalf("append after the forget: %v", err)
			}
			paired("after an append", m)
			paired("laid out again", w.fresh())
		})
	}
}

// TestManagerForgottenWindow: a window whose session another process
// forgets and opens again starts its versions over; a Manager's cached
// layout of the old window is never shown for the new one, even when the
// new one reaches the old version.
func TestManagerForgottenWindow(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	cat := catalog(t)
	m, eng2 := window.NewManager(engineAt(t, path), cat), engineAt(t, path)
	other := window.NewManager(eng2, cat)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 8000}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := m.Append(ctx, key, []window.Message{textMsg(window.RoleUser, fmt.Sprintf("secret plan number %d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := m.Status(ctx, key) // m caches the layout at this version
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng2.Forget(ctx, engine.ForgetRequest{Sessions: []string{"s"}, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(ctx, key, window.OpenOptions{Limit: 8000}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		st, err := other.Status(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Version >= before.Version {
			if st.Version != before.Version {
				t.Fatalf("the new window passed version %d: %d", before.Version, st.Version)
			}
			break
		}
		if _, err := other.Append(ctx, key, []window.Message{textMsg(window.RoleUser, fmt.Sprintf("new message %d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	for _, it := range contextOf(t, m, key) {
		if it.Message != nil && strings.Contains(it.Message.Blocks[0].Text, "secret plan") {
			t.Fatalf("the forgotten window's message shows in the new one: %q", it.Message.Blocks[0].Text)
		}
	}
}

// TestOpen_Again: opening a window again as it is writes nothing; with
// other settings, it is laid out anew under them.
func TestOpen_Again(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	o := window.OpenOptions{Limit: 4000, Output: 100, Safety: 100}
	if _, err := m.Open(ctx, key, o); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := m.Append(ctx, key, exchange(i)); err != nil {
			t.Fatal(err)
		}
	}
	before, err := m.Status(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.Open(ctx, key, o)
	if err != nil || again.Version != before.Version {
		t.Errorf("opened again as it is: version %d -> %d, %v", before.Version, again.Version, err)
	}
	o.Limit = 5000
	other, err := m.Open(ctx, key, o)
	if err != nil || other.Version <= before.Version || other.Settings.Limits.Context != 5000 {
		t.Errorf("opened again with another limit: version %d -> %d, limit %d, %v", before.Version, other.Version, other.Settings.Limits.Context, err)
	}
}

// TestAppend_PromptWhileCallWaits: a prompt appended while a tool call
// waits for its result is refused, nothing written, since no API takes it
// and the call would hold the window open to its end; the result, then
// the prompt, are taken. Parallel calls, one message each as the
// Responses API sends them, and their results are taken.
func TestAppend_PromptWhileCallWaits(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 4000, Output: 100, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	ex := exchange(0)
	if _, err := m.Append(ctx, key, ex[:2]); err != nil { // the prompt and the call
		t.Fatal(err)
	}
	before, err := m.Status(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for name, msgs := range map[string][]window.Message{
		"a prompt":               {textMsg(window.RoleUser, "never mind, do something else")},
		"an answer and a prompt": {textMsg(window.RoleAssistant, "Hm."), textMsg(window.RoleUser, "go on")},
		"the result and another call, then a prompt": {ex[2], {Role: window.RoleAssistant, Blocks: []window.Block{
			{Type: window.BlockToolUse, ID: "call-x", Name: "ls", Input: json.RawMessage(`{}`)}}}, textMsg(window.RoleUser, "stop")},
	} {
		_, err := m.Append(ctx, key, msgs)
		var pe *window.PairingError
		if !errors.As(err, &pe) || !errors.Is(err, window.ErrInvalid) || !strings.Contains(err.Error(), "waits for its result") {
			t.Errorf("%s: %v, want a PairingError", name, err)
		} else if pe.Message != len(msgs)-1 {
			// The prompt, by its place in the append.
			t.Errorf("%s: the error names message %d of the append, want %d (the prompt)", name, pe.Message, len(msgs)-1)
		}
		if st, err := m.Status(ctx, key); err != nil || st.Messages != before.Messages || st.Version != before.Version {
			t.Errorf("%s: the refused append wrote: %+v, %v", name, st, err)
		}
	}
	if _, err := m.Append(ctx, key, ex[2:]); err != nil {
		t.Fatal(err)
	}
	// Parallel calls as two messages, their results, then a prompt.
	call := func(id string) window.Message {
		return window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: id, Name: "read", Input: json.RawMessage(`{}`)}}}
	}
	result := func(id string) window.Message {
		return window.Message{Role: window.RoleTool, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: id, Text: "ok"}}}
	}
	if _, err := m.Append(ctx, key, []window.Message{textMsg(window.RoleUser, "read both"), call("p1"), call("p2"), result("p1"), result("p2"),
		textMsg(window.RoleAssistant, "Both read."), textMsg(window.RoleUser, "thanks")}); err != nil {
		t.Errorf("parallel calls as messages of their own: %v", err)
	}
}

// TestOpen_Names: a new window's session and agent are names a URL and a
// reader can tell apart: no white space at their ends, no control or
// invisible formatting characters, not . or ..; a sub-agent's path-like
// name is fine.
func TestOpen_Names(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	for _, k := range []store.WindowKey{
		{SessionID: "s", AgentID: " "}, {SessionID: "s", AgentID: " claude"}, {SessionID: "s", AgentID: "\u202eedoc"},
		{SessionID: "s", AgentID: "a\u200bb"}, {SessionID: "s", AgentID: ".."}, {SessionID: ".", AgentID: "claude"},
		{SessionID: "s", AgentID: "dev\u00adops"}, {SessionID: "s", AgentID: "alice\U000E0041"}, {SessionID: "s", AgentID: "a\u061cb"},
		{SessionID: "s\n", AgentID: "claude"},
	} {
		if _, err := m.Open(ctx, k, window.OpenOptions{Limit: 4000}); !errors.Is(err, window.ErrInvalid) {
			t.Errorf("window %q/%q: %v, want ErrInvalid", k.SessionID, k.AgentID, err)
		}
	}
	for _, k := range []store.WindowKey{{SessionID: "../../etc", AgentID: "claude-code@s/a1b2"}, {SessionID: "sé", AgentID: "ünï"},
		{SessionID: "s", AgentID: "🧑\u200d💻"}, {SessionID: "s", AgentID: "می\u200cخواهم"}} {
		if _, err := m.Open(ctx, k, window.OpenOptions{Limit: 4000}); err != nil {
			t.Errorf("window %q/%q: %v", k.SessionID, k.AgentID, err)
		}
	}
	// A role is printed as a name: no control characters (an escape
	// sequence drove the terminal that showed the window's status), and
	// short.
	k := store.WindowKey{SessionID: "s", AgentID: "roles"}
	for _, role := range []string{"a\x00b", "eng\x1b[31mineer", "x\u202eevil", strings.Repeat("r", 65)} {
		if _, err := m.Open(ctx, k, window.OpenOptions{Limit: 4000, Role: role}); !errors.Is(err, window.ErrInvalid) {
			t.Errorf("role %q: %v, want ErrInvalid", role, err)
		}
	}
	if st, err := m.Open(ctx, k, window.OpenOptions{Limit: 4000, Role: "Reviewer"}); err != nil || st.Settings.Role != "reviewer" {
		t.Errorf("role Reviewer: %+v, %v", st.Settings.Role, err)
	}
}

// TestManager_AppendOnce: an append tried again under its key, by this
// process or another, writes nothing and gives the first append's
// places; the key with other messages is refused; a message whose
// secret was redacted is the same message again.
func TestManager_AppendOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	m := manager(t, path)
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 6000, Output: 500, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	var firsts []window.AppendResult
	for i := range 6 {
		res, err := m.AppendOnce(ctx, key, fmt.Sprintf("turn-%d", i), exchange(i))
		if err != nil || res.Replayed {
			t.Fatalf("turn %d: %+v, %v", i, res, err)
		}
		firsts = append(firsts, res)
	}
	if len(firsts[5].Evicted) == 0 && firsts[5].Status.Evicted == 0 {
		t.Fatalf("the window evicted nothing: %+v", firsts[5].Status)
	}
	before, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A retry of an early turn, evicted since, and of the last, from
	// this process and from another.
	for _, mm := range []*window.Manager{m, manager(t, path)} {
		for _, i := range []int{0, 5} {
			res, err := mm.AppendOnce(ctx, key, fmt.Sprintf("turn-%d", i), exchange(i))
			if err != nil || !res.Replayed || !slices.Equal(res.Positions, firsts[i].Positions) || len(res.Evicted) != 0 {
				t.Fatalf("turn %d again: %+v, %v; want it replayed at %v", i, res, err, firsts[i].Positions)
			}
			if res.Version != firsts[5].Version || res.Messages != firsts[5].Messages {
				t.Errorf("turn %d again: the window is at version %d with %d messages, want %d and %d", i,
					res.Version, res.Messages, firsts[5].Version, firsts[5].Messages)
			}
		}
	}
	after, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the context changed with the retries (-before +after):\n%s", diff)
	}
	var ce *store.ConflictError
	if _, err := m.AppendOnce(ctx, key, "turn-1", exchange(7)); !errors.As(err, &ce) || !strings.Contains(err.Error(), `"turn-1"`) {
		t.Fatalf("the key of turn 1 with other messages: %v, want a conflict naming the key", err)
	}
	pinned := exchange(1)
	pinned[0].Pinned = true
	if _, err := m.AppendOnce(ctx, key, "turn-1", pinned); !errors.As(err, &ce) {
		t.Fatalf("the messages of turn 1 with one pinned: %v, want a conflict", err)
	}
	var ve *store.ValidationError
	for _, bad := range []string{"", "turn\n1", strings.Repeat("k", store.MaxAppendKey+1), "tür"} {
		if _, err := m.AppendOnce(ctx, key, bad, exchange(8)); !errors.As(err, &ve) {
			t.Errorf("append key %q: %v, want a validation error", bad, err)
		}
	}
	secret := []window.Message{textMsg(window.RoleUser, "the token is ghp_"+strings.Repeat("aB3", 12)+" for internal/auth/token.go")}
	res, err := m.AppendOnce(ctx, key, "secret", secret)
	if err != nil || len(res.Redacted) == 0 {
		t.Fatalf("a message with a secret: %+v, %v", res, err)
	}
	again, err := m.AppendOnce(ctx, key, "secret", secret)
	if err != nil || !again.Replayed || !slices.Equal(again.Positions, res.Positions) {
		t.Fatalf("the message with a secret again: %+v, %v; want it replayed", again, err)
	}
	_, _, items, err := m.Messages(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := 6*len(exchange(0)) + 1; len(items) != want {
		t.Errorf("the window holds %d messages, want %d", len(items), want)
	}
}

// TestManager_SystemPromptNearlyFills: in a window its system prompt
// nearly fills, a short prompt that fits is shown whole beside it; it
// used to be clipped to a marker larger than itself, which took the
// window over its budget and evicted the system prompt and the prompt.
func TestManager_SystemPromptNearlyFills(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	st, err := m.Open(ctx, key, window.OpenOptions{Limit: 400, Output: 50, Safety: 20})
	if err != nil {
		t.Fatal(err)
	}
	system := textMsg(window.RoleSystem, strings.TrimSpace(strings.Repeat("careful ", st.Budget-15)))
	if _, err := m.Append(ctx, key, []window.Message{system}); err != nil {
		t.Fatal(err)
	}
	res, err := m.Append(ctx, key, []window.Message{textMsg(window.RoleUser, "Fix the bug")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 2 || res.Status.Evicted != 0 || len(res.Evicted) != 0 || res.Used > res.Budget {
		t.Fatalf("after a short prompt: %d messages in the window, %d evicted (%d references made), %d of %d tokens",
			res.Messages, res.Status.Evicted, len(res.Evicted), res.Used, res.Budget)
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].Message == nil || items[0].Message.Role != window.RoleSystem || items[1].Message == nil {
		t.Fatalf("the context: %+v", items)
	}
}

// TestOpen_ModelAndLimit: a model and a smaller limit reserve for output
// and safety from the limit, as without a model. Before, the model's 2 %
// of 200k (4,000 tokens) and its 8,192 of output stood in a 20k window,
// and a 12k one was refused as leaving no room.
func TestOpen_ModelAndLimit(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	for _, limit := range []int{20000, 12000} {
		st, err := m.Open(ctx, store.WindowKey{SessionID: "s", AgentID: fmt.Sprint("a", limit)}, window.OpenOptions{Model: "claude-sonnet-4-5", Limit: limit})
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		l := st.Settings.Limits
		if l.Context != limit || l.Safety != limit/50 || l.Output != min(8192, limit/4) {
			t.Errorf("limit %d: %+v, want safety %d and output %d", limit, l, limit/50, min(8192, limit/4))
		}
	}
}

// TestAppend_MarkersDoNotCrowdOutTheNewest: in a small window whose
// references are many, their markers are joined before the newest
// message is clipped. Before, once the markers of the references filled
// the window, every append left its newest message cut to a marker and a
// few words.
func TestAppend_MarkersDoNotCrowdOutTheNewest(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	p := window.Policies[window.DefaultRole]
	p.MaxRefTokens = 700 // a reference a message: many markers soon
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 3000, Policy: &p}); err != nil {
		t.Fatal(err)
	}
	var last string
	for i := range 60 {
		role := window.RoleUser
		if i%2 == 1 {
			role = window.RoleAssistant
		}
		last = fmt.Sprintf("msg %d %s", i, strings.Repeat(fmt.Sprintf("word%d ", i), 300))
		if _, err := m.Append(ctx, key, []window.Message{textMsg(role, last)}); err != nil {
			t.Fatal(err)
		}
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	newest := items[len(items)-1]
	if newest.Message == nil || newest.Message.Blocks[0].Text != last {
		t.Errorf("the newest message is not shown whole: %+v", newest)
	}
	st, err := m.Status(ctx, key)
	if err != nil || st.Used > st.Budget {
		t.Errorf("status %+v, %v", st, err)
	}
}

// TestManagerForgetLastResult: an operator forgets the result of a
// window's last tool call. A harness that still has it sends it again, in
// its place, and the window takes it; a prompt instead ends the call,
// which the window leaves out as any call whose result was forgotten,
// and the rest stays, in this Manager and laid out anew. Forgetting the
// call instead leaves its result out, and the prompt is taken too; while
// a call waits for a result that was never appended, a prompt is still
// refused, whatever else was forgotten.
func TestManagerForgetLastResult(t *testing.T) {
	ctx := context.Background()
	// setup appends a turn, then the next turn's prompt and call, and
	// with result set its result; it forgets the content of message
	// victim that is its own (the text beside a call is every turn's).
	setup := func(t *testing.T, result bool, victim int) *testWindow {
		w := openWindow(t, window.OpenOptions{Limit: 200_000}, 1)
		ex := exchange(1)
		turns := [][]window.Message{ex[:2]}
		if result {
			turns = append(turns, ex[2:3])
		}
		for _, msgs := range turns {
			if _, err := w.m.Append(ctx, w.key, msgs); err != nil {
				t.Fatal(err)
			}
		}
		items := w.ledger(t, victim, victim+1)
		if len(items) != 1 {
			t.Fatalf("message %d: %+v", victim, items)
		}
		ids := items[0].EntryIDs
		w.forget(t, ids[len(ids)-1:])
		return w
	}
	prompt := []window.Message{textMsg(window.RoleUser, "go on")}
	// shows checks the messages the window shows whole, by place, and
	// that none makes a call or holds a result without the other half.
	shows := func(t *testing.T, w *testWindow, want []int) {
		t.Helper()
		for name, m := range map[string]*window.Manager{"this Manager": w.m, "laid out anew": w.fresh()} {
			var shown []int
			calls, results := map[string]bool{}, map[string]bool{}
			for _, it := range contextOf(t, m, w.key) {
				if it.Message == nil {
					t.Errorf("%s: a marker in a window that evicts nothing: %+v", name, it)
					continue
				}
				shown = append(shown, it.Pos)
				for _, id := range it.Message.Calls() {
					calls[id] = true
				}
				for _, id := range it.Message.Results() {
					results[id] = true
				}
			}
			if !slices.Equal(shown, want) {
				t.Errorf("%s: the window shows messages %v, want %v", name, shown, want)
			}
			if !maps.Equal(calls, results) {
				t.Errorf("%s: calls %v, results %v", name, calls, results)
			}
		}
	}

	t.Run("the result, then a prompt", func(t *testing.T) {
		w := setup(t, true, 6)
		res, err := w.m.Append(ctx, w.key, prompt)
		if err != nil {
			t.Fatalf("a prompt after the last result was forgotten: %v", err)
		}
		if !slices.Equal(res.Positions, []int{6}) {
			t.Errorf("the prompt went to %v, want [6]", res.Positions)
		}
		shows(t, w, []int{0, 1, 2, 3, 4, 5, 6})
		got := contextOf(t, w.m, w.key)[5].Message
		if want := textMsg(window.RoleAssistant, "Reading it."); len(got.Blocks) != 1 || got.Blocks[0].Text != want.Blocks[0].Text {
			t.Errorf("the message that made the call shows %+v, want its text alone", got.Blocks)
		}
		// The window goes on.
		if _, err := w.m.Append(ctx, w.key, exchange(2)); err != nil {
			t.Fatal(err)
		}
		shows(t, w, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	})

	t.Run("the result, sent again", func(t *testing.T) {
		w := setup(t, true, 6)
		if _, err := w.m.Append(ctx, w.key, append([]window.Message{exchange(1)[2]}, prompt...)); err != nil {
			t.Fatalf("the forgotten result sent again, then a prompt: %v", err)
		}
		shows(t, w, []int{0, 1, 2, 3, 4, 5, 6, 7})
	})

	t.Run("the call", func(t *testing.T) {
		w := setup(t, true, 5)
		if _, err := w.m.Append(ctx, w.key, prompt); err != nil {
			t.Fatalf("a prompt after the last call was forgotten: %v", err)
		}
		shows(t, w, []int{0, 1, 2, 3, 4, 6, 7})
	})

	t.Run("no result yet", func(t *testing.T) {
		w := setup(t, false, 0)
		var pe *window.PairingError
		if _, err := w.m.Append(ctx, w.key, prompt); !errors.As(err, &pe) || pe.CallID != "call-1" {
			t.Fatalf("a prompt while call-1 waits, turn 0's prompt forgotten: %v, want a PairingError", err)
		}
		if _, err := w.m.Append(ctx, w.key, append([]window.Message{exchange(1)[2]}, prompt...)); err != nil {
			t.Fatalf("the result, then the prompt: %v", err)
		}
		shows(t, w, []int{1, 2, 3, 4, 5, 6, 7})
	})
}
