package assemble_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

func assembler(t testing.TB) *assemble.Assembler {
	t.Helper()
	return assemblerOn(t, sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{}))
}

// assemblerOn is an Assembler over st.
func assemblerOn(t testing.TB, st store.Store) *assemble.Assembler {
	t.Helper()
	// Searches wait for both signals: on a loaded machine one can take
	// more than the default 250 ms, and a signal left out gives another
	// context (TestGate4_RetrievalDeterministic failed so under -race).
	eng, err := engine.New(st, engine.Options{Retrieve: retrieve.Options{Deadline: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	return &assemble.Assembler{Engine: eng, Windows: window.NewManager(eng, cat)}
}

func text(role window.Role, s string) window.Message {
	return window.Message{Role: role, Blocks: []window.Block{{Type: window.BlockText, Text: s}}}
}

// conversation is n turns of a coding session: a prompt, a tool call and
// its ~300-token result, an answer.
func conversation(n int) []window.Message {
	msgs := []window.Message{text(window.RoleSystem, "You are a careful Go engineer.")}
	for i := range n {
		id := fmt.Sprintf("call-%d", i)
		msgs = append(msgs,
			text(window.RoleUser, fmt.Sprintf("Step %d: why does handler%d in internal/pkg%d/server.go time out?", i, i, i)),
			window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: id, Name: "read",
				Input: []byte(fmt.Sprintf(`{"path":"internal/pkg%d/server.go"}`, i))}}},
			window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: id,
				Text: fmt.Sprintf("package pkg%d\n\n// handler%d serves requests.\n%s", i, i, strings.Repeat("\tdeadline := time.Second // the timeout\n", 30))}}},
			text(window.RoleAssistant, fmt.Sprintf("handler%d waits on a one-second deadline; raising it fixes the timeout.", i)))
	}
	return msgs
}

// TestAssemble: a turn's context over a long window fits the budget, keeps
// every tool call with its result, shows what it cannot show whole as
// markers that expand, leads the turn's message with the arc and the
// pre-fetch, and is the same when asked again.
func TestAssemble(t *testing.T) {
	ctx := context.Background()
	a := assembler(t)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 8000, Output: 500, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	conv := conversation(20)
	if _, err := a.Windows.Append(ctx, key, conv); err != nil {
		t.Fatal(err)
	}
	req := assemble.Request{Key: key, Message: "Why does handler3 time out again?", Tools: 300, Retrieve: true,
		Briefing: "Decision: every handler takes its deadline from the request context."}
	turn, err := a.Assemble(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if turn.Tokens > turn.Budget || turn.Budget != 6660-300 {
		t.Errorf("%d tokens in a budget of %d", turn.Tokens, turn.Budget)
	}
	if _, err := window.Units(turn.Messages); err != nil {
		t.Errorf("the assembled context breaks a tool pair: %v", err)
	}
	if turn.Messages[0].Role != window.RoleSystem || !strings.Contains(turn.Messages[0].Blocks[len(turn.Messages[0].Blocks)-1].Text, "Decision: every handler") {
		t.Errorf("the system message lacks the briefing: %+v", turn.Messages[0])
	}
	last := turn.Messages[len(turn.Messages)-1]
	if got := last.Blocks[len(last.Blocks)-1].Text; got != req.Message {
		t.Errorf("the turn ends with %q", got)
	}
	all := ""
	for _, b := range last.Blocks {
		all += b.Text + "\n"
	}
	whole := ""
	for _, m := range turn.Messages {
		for _, b := range m.Blocks {
			whole += b.Text + "\n"
		}
	}
	if !strings.Contains(whole, "Step 0: why does handler0") {
		t.Errorf("neither the arc nor a summary gives the first request, no longer shown whole:\n%s", whole)
	}
	t.Logf("strategy %s, zones %+v\n%s", turn.History.Strategy, turn.History.Zones, whole)
	if !strings.Contains(all, "handler3") || turn.Layers[assemble.Retrieval] == 0 {
		t.Errorf("the pre-fetch found nothing about handler3 (%d tokens):\n%s", turn.Layers[assemble.Retrieval], all)
	}
	// What the pre-fetch quoted is named, so that forgetting it finds
	// the turn's snapshot.
	if len(turn.Sources) == 0 {
		t.Error("the turn names no sources of its pre-fetch")
	}
	if _, err := a.Engine.Store().Entries(context.Background(), turn.Sources); err != nil {
		t.Errorf("the turn's sources: %v", err)
	}
	// Every message of the conversation is shown whole or stands under a
	// marker of the history that expands to it.
	if turn.History.Refs == 0 || turn.History.Shown == turn.History.Messages {
		t.Fatalf("a 20-turn conversation in %d tokens showed everything: %+v", turn.Plan.Tokens(assemble.History), turn.History)
	}
	covered := 0
	for _, it := range turn.History.Items {
		switch {
		case it.Message != nil:
			covered++
		case it.RefID != "":
			back, err := a.Windows.Expand(ctx, it.RefID)
			if err != nil {
				t.Fatalf("marker %s: %v", it.RefID, err)
			}
			covered += len(back)
		}
	}
	if covered != len(conv)-1 {
		t.Errorf("the history covers %d messages of %d", covered, len(conv)-1)
	}
	again, err := a.Assemble(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(turn.Messages, again.Messages); diff != "" {
		t.Errorf("the same request gave another context (-first +second):\n%s", diff)
	}
}

// TestAssembleBadInput: a budget the fixed layers overflow, tools larger
// than the budget, a turn without a message, an unknown window: clear
// errors.
func TestAssembleBadInput(t *testing.T) {
	ctx := context.Background()
	a := assembler(t)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "hi"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an unknown window: %v", err)
	}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 4000, Output: 100, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Windows.Append(ctx, key, conversation(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Assemble(ctx, assemble.Request{Key: key}); !errors.Is(err, assemble.ErrNoTurn) {
		t.Errorf("no message: %v", err)
	}
	if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "hi", Tools: 1 << 20}); !errors.Is(err, assemble.ErrInvalid) {
		t.Errorf("tools over the budget: %v", err)
	}
	huge := strings.Repeat("a long message about the deadline. ", 800)
	if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: huge}); !errors.Is(err, assemble.ErrOverBudget) && !errors.Is(err, assemble.ErrNoHistoryRoom) {
		t.Errorf("a message filling the budget: %v", err)
	}
	// A tool call still waiting for its result cannot be sent before a
	// user's message: refused.
	open := store.WindowKey{SessionID: "s", AgentID: "open"}
	if _, err := a.Windows.Open(ctx, open, window.OpenOptions{Limit: 4000, Output: 100, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Windows.Append(ctx, open, []window.Message{text(window.RoleUser, "list the files"),
		{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "c1", Name: "ls", Input: []byte(`{}`)}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Assemble(ctx, assemble.Request{Key: open, Message: "and?"}); !errors.Is(err, assemble.ErrNoTurn) {
		t.Errorf("an open tool call before the message: %v", err)
	}
	// A short conversation is shown whole, however small its share.
	short := store.WindowKey{SessionID: "s", AgentID: "short"}
	if _, err := a.Windows.Open(ctx, short, window.OpenOptions{Limit: 4000, Output: 100, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Windows.Append(ctx, short, []window.Message{text(window.RoleUser, "hello"), text(window.RoleAssistant, "hi")}); err != nil {
		t.Fatal(err)
	}
	if turn, err := a.Assemble(ctx, assemble.Request{Key: short, Message: "and now?"}); err != nil || turn.History.Shown != 2 || len(turn.Messages) != 3 {
		t.Errorf("a two-message conversation: %+v, %v", turn.History, err)
	}
	// The window's newest message is the turn's when it is a prompt.
	if _, err := a.Windows.Append(ctx, key, []window.Message{text(window.RoleUser, "And handler1?")}); err != nil {
		t.Fatal(err)
	}
	turn, err := a.Assemble(ctx, assemble.Request{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	last := turn.Messages[len(turn.Messages)-1]
	if last.Blocks[len(last.Blocks)-1].Text != "And handler1?" || turn.Tokens > turn.Budget {
		t.Errorf("the window's prompt as the turn's: %+v (%d of %d)", last, turn.Tokens, turn.Budget)
	}
}

// TestAssemble_Properties: over random conversations (tool calls, results
// of any size) and budgets, an assembled context is within its budget or
// refused with a budget error, keeps every tool call with its result, and
// covers every message of the history: shown whole, or under a marker
// that expands to it.
func TestAssemble_Properties(t *testing.T) {
	ctx := context.Background()
	a := assembler(t)
	assembled := 0
	for seed := range uint64(25) {
		r := rand.New(rand.NewPCG(seed, 9))
		key := store.WindowKey{SessionID: "s", AgentID: fmt.Sprint("a", seed)}
		limit := 600 + r.IntN(8000)
		if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: limit, Output: 50, Safety: 10}); err != nil {
			t.Fatal(err)
		}
		msgs := []window.Message{text(window.RoleSystem, "You are an agent.")}
		for i := range 5 + r.IntN(60) {
			switch r.IntN(3) {
			case 0:
				msgs = append(msgs, text(window.RoleUser, fmt.Sprintf("request %d about file%d.go", i, r.IntN(9))))
			case 1:
				msgs = append(msgs, text(window.RoleAssistant, strings.Repeat(fmt.Sprintf("answer %d. ", i), 1+r.IntN(40))))
			default:
				id := fmt.Sprint("c", i)
				msgs = append(msgs,
					window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: id, Name: "bash", Input: []byte(`{"cmd":"ls"}`)}}},
					window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: id,
						Text: strings.Repeat(fmt.Sprintf("line %d of output\n", i), 1+r.IntN(300))}}})
			}
		}
		if _, err := a.Windows.Append(ctx, key, msgs); err != nil {
			t.Fatal(err)
		}
		turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "what next?", Retrieve: r.IntN(2) == 0, Tools: r.IntN(200)})
		if errors.Is(err, assemble.ErrOverBudget) || errors.Is(err, assemble.ErrNoHistoryRoom) {
			continue
		}
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if turn.Tokens > turn.Budget {
			t.Fatalf("seed %d: %d tokens of %d", seed, turn.Tokens, turn.Budget)
		}
		if _, err := window.Units(turn.Messages); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		covered(t, a, turn, msgs)
		assembled++
	}
	if assembled < 20 {
		t.Errorf("only %d of 25 contexts assembled; the rest were refused for their budget", assembled)
	}
}

// TestAssemble_ToolLoop: a step of a tool loop (the window's newest
// message a tool's results) is assembled with its call: the pair ends the
// context whole, the results lead their message, and the pre-fetch is for
// the prompt the loop answers.
func TestAssemble_ToolLoop(t *testing.T) {
	ctx := context.Background()
	a := assembler(t)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 4000, Output: 200, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	conv := conversation(20)
	conv = conv[:len(conv)-1] // the last step's answer is not given yet
	if _, err := a.Windows.Append(ctx, key, conv); err != nil {
		t.Fatal(err)
	}
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Retrieve: true})
	if err != nil {
		t.Fatal(err)
	}
	if turn.Tokens > turn.Budget {
		t.Errorf("%d tokens over %d", turn.Tokens, turn.Budget)
	}
	if _, err := window.Units(turn.Messages); err != nil {
		t.Errorf("a tool pair is broken: %v", err)
	}
	n := len(turn.Messages)
	call, results := turn.Messages[n-2], turn.Messages[n-1]
	if len(call.Blocks) != 1 || call.Blocks[0].ID != "call-19" || results.Blocks[0].Type != window.BlockToolResult || results.Blocks[0].ToolUseID != "call-19" {
		t.Fatalf("the context ends with %+v and %+v", call, results)
	}
	if turn.Layers[assemble.Retrieval] == 0 || !strings.Contains(results.Blocks[len(results.Blocks)-1].Text, "handler") {
		t.Errorf("no pre-fetch for the prompt the loop answers (%d tokens): %+v", turn.Layers[assemble.Retrieval], results.Blocks[1:])
	}
	covered(t, a, turn, conv[:len(conv)-2])
}

// TestAssemble_Briefing: asked to, the assembler fetches the
// archivalist's briefing of the window's session into the topics layer; a
// session the archivalist does not know has none, and says so.
func TestAssemble_Briefing(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 12000, 5)
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "next?", Brief: true})
	if err != nil || turn.Layers[assemble.Topics] != 0 || !strings.HasPrefix(turn.Briefing, "none") {
		t.Fatalf("a session unknown to the archivalist: %q, %d tokens, %v", turn.Briefing, turn.Layers[assemble.Topics], err)
	}
	arc, err := a.Engine.Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := arc.Register(ctx, archive.AgentSpec{SessionID: key.SessionID, Name: "claude"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.UpdateResume(ctx, archive.Resume{Task: "make handler7 honour the request deadline", Next: []string{"run the race tests"}}); err != nil {
		t.Fatal(err)
	}
	turn, err = a.Assemble(ctx, assemble.Request{Key: key, Message: "next?", Brief: true})
	if err != nil {
		t.Fatal(err)
	}
	sys := turn.Messages[0]
	if turn.Briefing != "standard" || turn.Layers[assemble.Topics] == 0 || !strings.Contains(fmt.Sprint(sys.Blocks), "handler7 honour the request deadline") {
		t.Errorf("briefing %q, %d tokens, system message %+v", turn.Briefing, turn.Layers[assemble.Topics], sys.Blocks)
	}
	given, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "next?", Brief: true, Briefing: "Decision: deadlines come from the request."})
	if err != nil || given.Briefing != "request" || strings.Contains(fmt.Sprint(given.Messages[0].Blocks), "handler7 honour") {
		t.Errorf("a briefing given: %q, %v", given.Briefing, err)
	}
}

// TestAssemble_ToolLoopRole: a tool loop's window keeps its own layout
// for the history, the newest step included (a step too large for the
// budget shown clipped, as the window shows it, not refused), within the
// budget, tool pairs intact; the pre-fetch runs in a step only when asked
// for steps, within a tenth of the budget, and asked for the turn alone
// it is left out, the history as without it.
func TestAssemble_ToolLoopRole(t *testing.T) {
	ctx := context.Background()
	a := assembler(t)
	key := store.WindowKey{SessionID: "s", AgentID: "agent"}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Role: window.ToolLoopRole, Limit: 4000, Output: 1, Safety: 1}); err != nil {
		t.Fatal(err)
	}
	conv := conversation(30)
	conv = conv[:len(conv)-1]
	huge := window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockText, Text: "Reading the log."},
		{Type: window.BlockToolUse, ID: "big", Name: "bash", Input: []byte(`{"cmd":"cat build.log"}`)}}}
	out := window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "big",
		Text: strings.Repeat("build step ok: internal/pkg/server.go compiled\n", 900)}}}
	for _, step := range [][]window.Message{conv, {text(window.RoleAssistant, "Done with that."), huge, out}} {
		if _, err := a.Windows.Append(ctx, key, step); err != nil {
			t.Fatal(err)
		}
		turn, err := a.Assemble(ctx, assemble.Request{Key: key, Retrieve: true, RetrieveSteps: true, Scope: store.Filter{SessionID: "s"}})
		if err != nil {
			t.Fatal(err)
		}
		if turn.History.Strategy != assemble.WindowLayout || turn.Tokens > turn.Budget || turn.Layers[assemble.Retrieval] > turn.Budget/10 ||
			turn.Retrieval != assemble.RetrievalOn {
			t.Errorf("%s, %d of %d tokens, pre-fetch %d (%s)", turn.History.Strategy, turn.Tokens, turn.Budget, turn.Layers[assemble.Retrieval], turn.Retrieval)
		}
		if _, err := window.Units(turn.Messages); err != nil {
			t.Errorf("a tool pair is broken: %v", err)
		}
		plain, err := a.Assemble(ctx, assemble.Request{Key: key, Scope: store.Filter{SessionID: "s"}})
		if err != nil {
			t.Fatal(err)
		}
		stepped, err := a.Assemble(ctx, assemble.Request{Key: key, Retrieve: true, Scope: store.Filter{SessionID: "s"}})
		if err != nil {
			t.Fatal(err)
		}
		if stepped.Retrieval != assemble.RetrievalStep || stepped.Layers[assemble.Retrieval] != 0 || stepped.Tokens != plain.Tokens ||
			stepped.History.Tokens != plain.History.Tokens || plain.Retrieval != assemble.RetrievalOff {
			t.Errorf("a step asked for retrieval, not for steps: %s, %d tokens, history %d; without retrieval (%s) %d, history %d",
				stepped.Retrieval, stepped.Tokens, stepped.History.Tokens, plain.Retrieval, plain.Tokens, plain.History.Tokens)
		}
	}
	// A prompt in a tool loop's window is no step: the pre-fetch runs.
	if _, err := a.Windows.Append(ctx, key, []window.Message{text(window.RoleAssistant, "The build is fine."), text(window.RoleUser, "Why did server.go compile twice?")}); err != nil {
		t.Fatal(err)
	}
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Retrieve: true, Scope: store.Filter{SessionID: "s"}})
	if err != nil || turn.Retrieval != assemble.RetrievalOn {
		t.Errorf("a prompt in a tool loop's window: retrieval %q, %v", turn.Retrieval, err)
	}
}

// TestAssemble_LongPreferences: standing instructions or a briefing
// written as one line longer than their allocation are cut after a word,
// the cut marked, rather than left out; within their allocation.
func TestAssemble_LongPreferences(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 8000, 20)
	long := strings.Repeat("Prefer the standard library and small functions. ", 2000)
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "Why does handler3 time out?", Preferences: long, Briefing: long})
	if err != nil {
		t.Fatal(err)
	}
	sys := turn.Messages[0]
	if len(sys.Blocks) != 3 {
		t.Fatalf("the system message holds %d blocks, want the prompt, the preferences and the briefing", len(sys.Blocks))
	}
	for i, layer := range []string{assemble.Preferences, assemble.Topics} {
		got, alloc := turn.Layers[layer], turn.Plan.Tokens(layer)
		if got == 0 || got > alloc {
			t.Errorf("%s: %d tokens of %d allocated", layer, got, alloc)
		}
		if b := sys.Blocks[len(sys.Blocks)-2+i]; !strings.HasPrefix(b.Text, "Prefer the standard library") || !strings.HasSuffix(b.Text, "…") || len(b.Text) > len(long)/2 {
			t.Errorf("%s: %.80q … %q", layer, b.Text, b.Text[max(0, len(b.Text)-30):])
		}
	}
	if turn.Tokens > turn.Budget {
		t.Errorf("%d tokens over a budget of %d", turn.Tokens, turn.Budget)
	}
}
