package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestCLI_WindowHandoff: an engineer's window filled past 75 % says its
// handoff is due; engram window handoff opens engineer-2 with the state
// and the archivalist's resume point, its references expand back to every
// message; an empty window, a taken next agent and a window the
// archivalist knows nothing of are refused or reported.
func TestCLI_WindowHandoff(t *testing.T) {
	e := newEnv(t)
	win := []string{"--session", "s1", "--agent", "engineer"}
	args := func(a ...string) []string { return append(a, win...) }
	e.ok("", args("window", "open", "--role", "engineer", "--limit", "6000", "--output", "500", "--safety", "100")...)
	e.fail("", 1, "no messages but its system prompt: nothing to hand off", args("window", "handoff")...)

	sent := []string{`{"role":"system","content":"You are a careful engineer."}`}
	e.ok(sent[0]+"\n", args("window", "append")...)
	e.fail("", 1, "no messages but its system prompt: nothing to hand off", args("window", "handoff")...)
	for i := 0; ; i++ {
		turn := anthropicTurn(i)
		sent = append(sent, strings.Split(strings.TrimSpace(turn), "\n")...)
		f := filepath.Join(t.TempDir(), "turn.jsonl")
		if err := os.WriteFile(f, []byte(turn), 0o644); err != nil {
			t.Fatal(err)
		}
		e.ok("", args("window", "append", "--format", "anthropic", "--file", f)...)
		if strings.Contains(e.ok("", args("window", "status")...), "handoff due") {
			break
		}
		if i > 20 {
			t.Fatal("no handoff due after 20 turns")
		}
	}
	if got := e.ok("", args("window", "status")...); !strings.Contains(got, "(engineer, recency, 6000-token context): ") || !strings.Contains(got, "handoff due (at 3645)") {
		t.Errorf("status: %q", got)
	}
	e.ok("", "session", "resume", "--session", "s1", "--task", "Explain the handlers", "--next", "write it up")
	e.ok("", "window", "open", "--session", "s1", "--agent", "taken", "--limit", "4000")
	e.fail("", 1, "exists already", args("window", "handoff", "--to", "taken")...)

	var out struct {
		State struct {
			Index int `json:"handoff_index"`
			Task  string
			Refs  []struct{ ID string }
		}
		Entry, Key, Fallback string
		Window               struct{ Agent string }
	}
	if err := json.Unmarshal([]byte(e.ok("", args("window", "handoff", "--json")...)), &out); err != nil {
		t.Fatal(err)
	}
	if out.State.Index != 1 || out.State.Task != "Explain the handlers" || out.Key != "s1/engineer-2" || out.Window.Agent != "engineer-2" ||
		out.Fallback != "" || out.Entry == "" {
		t.Errorf("handoff: %+v", out)
	}
	var whole []json.RawMessage
	for _, r := range out.State.Refs {
		var exp struct{ Messages []json.RawMessage }
		if err := json.Unmarshal([]byte(e.ok("", "window", "expand", r.ID, "--format", "anthropic", "--json")), &exp); err != nil {
			t.Fatal(err)
		}
		whole = append(whole, exp.Messages...)
	}
	if len(whole) != len(sent) {
		t.Fatalf("the state's references expand to %d messages, %d were sent", len(whole), len(sent))
	}
	for i := range sent {
		var got, want any
		_ = json.Unmarshal(whole[i], &got)
		_ = json.Unmarshal([]byte(sent[i]), &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("message %d: %s, want %s", i, whole[i], sent[i])
		}
	}
	ctx := e.ok("", "window", "context", "--session", "s1", "--agent", "engineer-2")
	if !strings.HasPrefix(ctx, "--- 0 system (") || !strings.Contains(ctx, "[HANDOFF 1: engineer-2 takes over from engineer (engineer), context_75%") {
		t.Errorf("engineer-2's context: %s", ctx)
	}

	// A session the archivalist knows nothing of: the window alone, said.
	e.ok("", "window", "open", "--session", "s2", "--agent", "guide", "--role", "guide", "--limit", "6000")
	e.ok(`{"role":"user","content":"Help me plan the release."}`+"\n", "window", "append", "--session", "s2", "--agent", "guide")
	text := e.ok("", "window", "handoff", "--session", "s2", "--agent", "guide")
	if !strings.HasPrefix(text, "handed off s2/guide to s2/guide-2 (handoff 1, requested): state entry ") ||
		!strings.Contains(text, "\nfallback: the archivalist holds no state of session s2") {
		t.Errorf("the fallback handoff: %s", text)
	}
}
