package assemble_test

// Seed 002's verification gate: the seven checks its phase closes on, as
// tests. Check 5 (migration continuity) is the store's:
// TestMigrate_RollingSummaries in internal/store/sqlite. Others have a
// broader test beside the gate's: TestAssemble_Properties (budgets over
// random conversations) and TestRollingSummaries_StaleModel (a slow model
// overtaken).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/window"
)

// TestGate1_BudgetEnforcement: whatever the strategy, the sources and the
// tools, a context never exceeds the model's limit less the output
// reservation, the safety buffer, the margin and the tools.
func TestGate1_BudgetEnforcement(t *testing.T) {
	ctx := context.Background()
	for _, limit := range []int{1500, 5000, 12000, 30000, 60000} {
		a, key, _ := opened(t, limit, 60)
		st, err := a.Windows.Status(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// The reservations (100 and 50), then the margin of what is left.
		room := int(float64(limit-100-50) * (1 - window.DefaultMargin))
		for _, req := range []assemble.Request{
			{Key: key, Message: "Why does handler9 time out?"},
			{Key: key, Message: "Why does handler9 time out?", Retrieve: true, Tools: limit / 10,
				Preferences: strings.Repeat("Prefer the standard library. ", 40), Briefing: strings.Repeat("Decision: deadlines come from the request. ", 80)},
		} {
			turn, err := a.Assemble(ctx, req)
			if err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			if turn.Budget != st.Budget-req.Tools || turn.Tokens > turn.Budget || turn.Tokens > room-req.Tools {
				t.Errorf("limit %d, %s: %d tokens, budget %d (window's %d, tools %d)", limit, turn.History.Strategy, turn.Tokens, turn.Budget, st.Budget, req.Tools)
			}
			if _, err := window.Units(turn.Messages); err != nil {
				t.Errorf("limit %d: %v", limit, err)
			}
		}
	}
}

// TestGate2_SummarizationTrigger: the turn whose history crosses into the
// multi-level strategy makes and writes the rolling summaries; none are
// made before.
func TestGate2_SummarizationTrigger(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 3000, 1)
	crossed := false
	for step := 1; step < 40 && !crossed; step++ {
		conv := conversation(step + 1)
		if _, err := a.Windows.Append(ctx, key, conv[len(conv)-4:]); err != nil {
			t.Fatal(err)
		}
		turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "go on"})
		if err != nil {
			t.Fatal(err)
		}
		epoch, sums, err := a.Engine.Store().WindowSummaries(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		crossed = turn.History.Strategy == assemble.MultiLevel
		switch {
		case !crossed && epoch != 0:
			t.Fatalf("step %d (%s): summaries written before the threshold", step, turn.History.Strategy)
		case crossed && (epoch != 1 || len(sums) == 0 || len(sums) != turn.History.Summaries.Chunks):
			t.Fatalf("step %d: crossing wrote epoch %d, %d summaries for %+v", step, epoch, len(sums), turn.History.Summaries)
		}
	}
	if !crossed {
		t.Fatal("the history never crossed into the multi-level strategy")
	}
}

// TestGate3_RaceSafety: turns assembled at once over one window, each by
// its own Assembler (as processes would), all succeed and agree: one
// summarizer's write wins, the others find it and use it.
func TestGate3_RaceSafety(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 1500, 60)
	turns := make([]assemble.Turn, 4)
	errs := make([]error, len(turns))
	var wg sync.WaitGroup
	for i := range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &assemble.Assembler{Engine: a.Engine, Windows: a.Windows}
			turns[i], errs[i] = b.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
		}()
	}
	wg.Wait()
	stale := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if fmt.Sprint(turns[i].Messages) != fmt.Sprint(turns[0].Messages) {
			t.Errorf("turn %d differs from turn 0", i)
		}
		stale += turns[i].History.Summaries.Stale
	}
	epoch, sums, err := a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || len(sums) != turns[0].History.Summaries.Chunks || int(epoch) > len(turns) {
		t.Fatalf("epoch %d, %d summaries, %v", epoch, len(sums), err)
	}
	t.Logf("%d writes won, %d summaries found stale", epoch, stale)
}

// TestGate4_RetrievalDeterministic: the hybrid pre-fetch (vector and
// full-text merged) gives the same context for the same inputs, from a
// fresh Assembler and Manager too.
func TestGate4_RetrievalDeterministic(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 6000, 30)
	if _, err := a.Engine.Embed(ctx, nil); err != nil {
		t.Fatal(err)
	}
	req := assemble.Request{Key: key, Message: "Which deadline does handler12 wait on?", Retrieve: true}
	first, err := a.Assemble(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Layers[assemble.Retrieval] == 0 {
		t.Fatal("the pre-fetch found nothing")
	}
	m := window.NewManager(a.Engine, nil)
	for i := range 3 {
		b := &assemble.Assembler{Engine: a.Engine, Windows: m}
		again, err := b.Assemble(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(again.Messages) != fmt.Sprint(first.Messages) {
			t.Fatalf("run %d gave another context", i)
		}
	}
}

// TestGate6_MemoryDisabled: with no pre-fetch, briefing or preferences, a
// context is the window's system prompt, its conversation and the
// message, as the window alone would give them when they fit.
func TestGate6_MemoryDisabled(t *testing.T) {
	ctx := context.Background()
	a, key, conv := opened(t, 60000, 10)
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "next?"})
	if err != nil {
		t.Fatal(err)
	}
	want := append(conv[:len(conv):len(conv)], window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockText, Text: "next?"}}})
	if len(turn.Messages) != len(want) {
		t.Fatalf("%d messages, want %d", len(turn.Messages), len(want))
	}
	for i := range want {
		if fmt.Sprint(turn.Messages[i].Blocks) != fmt.Sprint(want[i].Blocks) || turn.Messages[i].Role != want[i].Role {
			t.Errorf("message %d: %+v, want %+v", i, turn.Messages[i], want[i])
		}
	}
	for _, l := range []string{assemble.Retrieval, assemble.Topics, assemble.Preferences, assemble.Arc} {
		if turn.Layers[l] != 0 {
			t.Errorf("layer %s holds %d tokens", l, turn.Layers[l])
		}
	}
}

// TestGate7_ConfigValidation: invalid budget, summarizer and window
// settings fail fast, naming the setting.
func TestGate7_ConfigValidation(t *testing.T) {
	ctx := context.Background()
	home, proj := t.TempDir(), t.TempDir()
	file := filepath.Join(proj, "engram.toml")
	for body, want := range map[string]string{
		"[assemble]\nsummarizer = \"magic\"\n":      "assemble.summarizer",
		"[assemble]\nsummarizer = \"model\"\n":      "assemble.summarizer: model needs a chat model",
		"[assemble]\nsummary_timeout = \"-1s\"\n":   "assemble.summary_timeout",
		"[llm]\nprovider = \"openai\"\n":            "llm.model",
		"[assemble]\nsummary_timeout = \"often\"\n": "summary_timeout",
	} {
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(proj, func(k string) string { return map[string]string{"HOME": home}[k] }, config.Flags{ConfigFile: file})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", body, err, want)
		}
	}
	a := assembler(t)
	if _, err := api.NewAssembler(a.Engine, a.Windows, "model", 0); err == nil {
		t.Error("a model summarizer with no model configured was accepted")
	}
	if _, err := api.NewAssembler(a.Engine, a.Windows, "magic", 0); err == nil {
		t.Error("an unknown summarizer was accepted")
	}
	if err := a.Windows.Configure(window.Config{Defaults: window.Defaults{Safety: 0.6, Margin: 0.5}}); !errors.Is(err, window.ErrInvalid) {
		t.Errorf("safety and margin over the whole window: %v", err)
	}
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	for _, o := range []window.OpenOptions{{Limit: 1000, Output: 1000}, {Limit: -5}, {}} {
		if _, err := a.Windows.Open(ctx, key, o); err == nil {
			t.Errorf("a window of %+v was opened", o)
		}
	}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 2000, Output: 100, Safety: 10}); err != nil {
		t.Fatal(err)
	}
	for _, tools := range []int{-1, 5000} {
		if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "hi", Tools: tools}); !errors.Is(err, assemble.ErrInvalid) {
			t.Errorf("tools %d: %v", tools, err)
		}
	}
	if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: strings.Repeat("a long message ", 600)}); !errors.Is(err, assemble.ErrOverBudget) {
		t.Errorf("a message over the budget: %v", err)
	}
}
