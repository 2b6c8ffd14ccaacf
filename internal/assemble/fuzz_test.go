package assemble_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// FuzzAssemble grows a window exchange by exchange, from a seed's random
// conversation (prompts, answers, single and parallel tool calls, failed
// results, text of any script and whitespace), some appended by another
// Manager as another process would, with evicted runs re-admitted now
// and then, and assembles a turn after each
// append, at a random budget, with or without a message and retrieval.
// Every turn must take exactly the tokens it reports, counted again from
// its messages, within its budget; keep every tool call with its result;
// show each message of the history whole or under a marker that expands
// to it; and be the context a new Assembler, with none of this one's
// caches, gives for the same request. Conversations stop at 60
// exchanges, 25 when fuzzing, since a fuzzing worker gives an input 10
// seconds. The seeds
// below run with the tests (under the race detector, which makes them
// twenty times slower, only seed 5 for 30 exchanges: its small window goes
// through every strategy but windowed); `go test -fuzz FuzzAssemble
// ./internal/assemble` (make fuzz) looks for more.
func FuzzAssemble(f *testing.F) {
	seeds, steps := []uint64{0, 5, 81, 163}, 60
	switch {
	case raceOn:
		seeds, steps = []uint64{5}, 30
	case fuzzWorker():
		// Code built for fuzzing runs three to five times slower here.
		steps = 25
	}
	for _, seed := range seeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { growWindow(t, seed, steps) })
}

// fuzzWorker reports whether this process is a worker of go test -fuzz,
// which stops an input after 10 seconds.
func fuzzWorker() bool {
	w := flag.Lookup("test.fuzzworker")
	return w != nil && w.Value.String() == "true"
}

// scraps are what the random messages are made of: words, code, other
// scripts, emoji, and the whitespace that token counts get wrong first.
var scraps = []string{"deadline", "handler", "時間", "timeout", "  ", "\n\n", "\t", "server.go", "🙂", "ok", "the",
	"fix", "   \n", "x", "résumé", "{", "}", `"q"`, "naïve", "--", "\r\n"}

func scrap(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(scraps[r.IntN(len(scraps))])
		if r.IntN(3) > 0 {
			b.WriteByte(' ')
		}
		if r.IntN(12) == 0 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// exchange is one to four random messages, tool calls with their results.
func exchange(r *rand.Rand, step int) []window.Message {
	var msgs []window.Message
	for range 1 + r.IntN(4) {
		switch r.IntN(5) {
		case 0:
			msgs = append(msgs, text(window.RoleUser, scrap(r, 1+r.IntN(40))))
		case 1:
			msgs = append(msgs, text(window.RoleAssistant, scrap(r, 1+r.IntN(120))))
		case 2: // parallel calls, words before them, some failing
			call := window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockText, Text: scrap(r, 1+r.IntN(20))}}}
			res := window.Message{Role: window.RoleUser}
			for k := range 2 + r.IntN(3) {
				id := fmt.Sprint("p", step, "_", len(msgs), "_", k)
				call.Blocks = append(call.Blocks, window.Block{Type: window.BlockToolUse, ID: id, Name: "read", Input: []byte(`{"path":"a.go"}`)})
				res.Blocks = append(res.Blocks, window.Block{Type: window.BlockToolResult, ToolUseID: id, IsError: r.IntN(4) == 0,
					Text: scrap(r, 1+r.IntN(300))})
			}
			msgs = append(msgs, call, res)
		default:
			id := fmt.Sprint("c", step, "_", len(msgs))
			msgs = append(msgs,
				window.Message{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: id, Name: "bash", Input: []byte(`{"cmd":"ls"}`)}}},
				window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: id, Text: scrap(r, 1+r.IntN(600))}}})
		}
	}
	return msgs
}

// growWindow appends up to steps exchanges, assembling after each.
func growWindow(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 77))
	a := assembler(t)
	t.Cleanup(a.Wait)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 800 + r.IntN(12000), Output: r.IntN(200), Safety: r.IntN(100)}); err != nil {
		t.Fatal(err)
	}
	conv := []window.Message{text(window.RoleSystem, "You are an agent. "+scrap(r, r.IntN(30)))}
	if _, err := a.Windows.Append(ctx, key, conv); err != nil {
		t.Fatal(err)
	}
	enc := tokens.MustGet(tokens.O200kBase)
	for step := range min(40+r.IntN(60), steps) {
		msgs := exchange(r, step)
		appender := a.Windows
		if r.IntN(5) == 0 { // another process appends
			appender = window.NewManager(a.Engine, catalog(t))
		}
		if _, err := appender.Append(ctx, key, msgs); err != nil {
			t.Fatalf("step %d: append: %v", step, err)
		}
		conv = append(conv, msgs...)
		if r.IntN(6) == 0 {
			readmitOne(t, r, appender, key)
		}
		req := assemble.Request{Key: key, Message: scrap(r, 1+r.IntN(12)), Retrieve: r.IntN(2) == 0, Tools: r.IntN(100)}
		hist := conv
		if r.IntN(4) == 0 {
			// The window's own newest message is the turn's: a tool
			// call's results with their call, outside the history.
			req.Message = ""
			units, err := window.Units(conv[1:])
			if err != nil {
				t.Fatal(err)
			}
			hist = conv[:1+units[len(units)-1].From]
		}
		turn, err := a.Assemble(ctx, req)
		switch {
		case errors.Is(err, assemble.ErrOverBudget), errors.Is(err, assemble.ErrNoHistoryRoom):
			continue
		case req.Message == "" && msgs[len(msgs)-1].Role == window.RoleAssistant:
			if !errors.Is(err, assemble.ErrNoTurn) {
				t.Fatalf("step %d: a window ending in an answer, with no message: %v, want ErrNoTurn", step, err)
			}
			continue
		case err != nil:
			t.Fatalf("step %d: %v", step, err)
		}
		recount := 0
		for _, m := range turn.Messages {
			recount += 4 // each message's framing, as the assembler counts it
			for _, b := range m.Blocks {
				recount += enc.Count(b.Text) + enc.Count(string(b.Input)) + enc.Count(b.Name)
			}
		}
		if recount != turn.Tokens || turn.Tokens > turn.Budget {
			t.Fatalf("step %d (%s): %d tokens counted again, %d reported, budget %d", step, turn.History.Strategy, recount, turn.Tokens, turn.Budget)
		}
		if _, err := window.Units(turn.Messages); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		covered(t, a, turn, hist)
		if t.Failed() {
			t.Fatalf("step %d (%s)", step, turn.History.Strategy)
		}
		if step%7 == 0 {
			sameFresh(t, a, req, step)
		}
	}
}

// readmitOne brings one of the window's evicted runs, if it has any,
// back into it, as an agent expanding a marker for good would; a run
// that cannot fit is refused with nothing changed.
func readmitOne(t *testing.T, r *rand.Rand, m *window.Manager, key store.WindowKey) {
	t.Helper()
	items, err := m.Context(context.Background(), key)
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
		return
	}
	if _, err := m.Readmit(context.Background(), refs[r.IntN(len(refs))]); err != nil && !errors.Is(err, window.ErrNoRoom) {
		t.Fatalf("readmit: %v", err)
	}
}

// sameFresh checks that an Assembler with no caches gives the turn that
// a has kept them for. Retrieval is left out: it records what it injects
// (the hot tier), so a request asked again may differ there by design.
func sameFresh(t *testing.T, a *assemble.Assembler, req assemble.Request, step int) {
	t.Helper()
	ctx := context.Background()
	a.Wait()
	req.Retrieve = false
	kept, err := a.Assemble(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fresh := &assemble.Assembler{Engine: a.Engine, Windows: window.NewManager(a.Engine, catalog(t))}
	again, err := fresh.Assemble(ctx, req)
	fresh.Wait()
	if err != nil {
		t.Fatalf("step %d: a new assembler: %v", step, err)
	}
	if fmt.Sprint(again.Messages) != fmt.Sprint(kept.Messages) {
		t.Errorf("step %d (%s): a new assembler gave another context", step, kept.History.Strategy)
	}
}

func catalog(t *testing.T) *tokens.Catalog {
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	return cat
}
