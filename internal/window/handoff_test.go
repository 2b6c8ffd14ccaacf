package window_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// TestBuildHandoff: with no model, the task is the first prompt, files
// come from tool calls (read, modified by a tool that writes) and results
// (mentioned), decisions, questions, next steps and blockers from the
// lines that say them; the archivalist's facts win where they speak.
func TestBuildHandoff(t *testing.T) {
	msgs := []window.Message{
		textMsg(window.RoleSystem, "You are an engineer."),
		textMsg(window.RoleUser, "Add rate limiting to the upload API.\nKeep it simple."),
		{Role: window.RoleAssistant, Blocks: []window.Block{
			{Type: window.BlockToolUse, ID: "c1", Name: "read_file", Input: json.RawMessage(`{"path":"internal/upload/handler.go"}`)},
			{Type: window.BlockToolUse, ID: "c2", Name: "edit_file", Input: json.RawMessage(`{"path":"./internal/upload/limit.go","text":"see https://example.com/a/b.go"}`)},
		}},
		{Role: window.RoleUser, Blocks: []window.Block{
			{Type: window.BlockToolResult, ToolUseID: "c1", Text: "package upload // see internal/upload/handler_test.go:12 and v1.2/3.4"},
			{Type: window.BlockToolResult, ToolUseID: "c2", Text: "--- FAIL: TestLimit (0.01s)\nFAILED tests/test_upload.py::test_burst - assert"},
		}},
		textMsg(window.RoleAssistant, "I decided to use a token bucket per client.\n- Should the limit be per user or per key?\n- Next: wire the limiter into the router.\nThe tests are blocked on the missing fixture.\nFixed the off-by-one in the refill."),
		textMsg(window.RoleUser, "Now add metrics for rejected uploads."),
	}
	got := window.BuildHandoff("tester", msgs, nil)
	want := window.HandoffState{Role: "tester", Task: "Add rate limiting to the upload API.\nKeep it simple.",
		Progress: window.HandoffProgress{Done: []string{"Fixed the off-by-one in the refill."}, InProgress: "Now add metrics for rejected uploads."},
		Files: []window.HandoffFile{{Path: "internal/upload/handler.go", Status: "read"}, {Path: "internal/upload/limit.go", Status: "modified"},
			{Path: "internal/upload/handler_test.go", Status: "mentioned"}, {Path: "tests/test_upload.py", Status: "mentioned"}},
		Decisions: []string{"I decided to use a token bucket per client."},
		Questions: []string{"Should the limit be per user or per key?"},
		Next:      []string{"Next: wire the limiter into the router."},
		Blockers:  []string{"The tests are blocked on the missing fixture."},
		Refs:      []window.HandoffRef{}, Sources: []string{"window"},
		Tester: &window.TesterHandoff{FailingTests: []string{"TestLimit", "tests/test_upload.py::test_burst"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BuildHandoff from the window (-want +got):\n%s", diff)
	}

	facts := &window.SessionFacts{Task: "Rate-limit uploads (ticket 42)", Current: "metrics", Next: []string{"add the metric"},
		Files:       []window.HandoffFile{{Path: "internal/upload/limit.go", Status: "created", Summary: "the token bucket"}},
		FilesToRead: []string{"docs/limits.md"}, Decisions: []string{"Limits live in config"}}
	got = window.BuildHandoff("engineer", msgs, facts)
	if got.Task != facts.Task || got.Progress.InProgress != "metrics" || !slices.Equal(got.Next, facts.Next) || got.Tester != nil {
		t.Errorf("the facts do not win: %+v", got)
	}
	wantFiles := []window.HandoffFile{{Path: "internal/upload/limit.go", Status: "created", Summary: "the token bucket"},
		{Path: "docs/limits.md", Status: "to_read"}, {Path: "internal/upload/handler.go", Status: "read"},
		{Path: "internal/upload/handler_test.go", Status: "mentioned"}, {Path: "tests/test_upload.py", Status: "mentioned"}}
	if diff := cmp.Diff(wantFiles, got.Files); diff != "" {
		t.Errorf("files with the facts (-want +got):\n%s", diff)
	}
	if !slices.Equal(got.Decisions, []string{"Limits live in config", "I decided to use a token bucket per client."}) ||
		!slices.Equal(got.Sources, []string{"window", "archivalist"}) || !slices.Equal(got.Blockers, want.Blockers) {
		t.Errorf("decisions %q, sources %q, blockers %q", got.Decisions, got.Sources, got.Blockers)
	}
	// The same input gives the same state.
	if diff := cmp.Diff(got, window.BuildHandoff("engineer", msgs, facts)); diff != "" {
		t.Errorf("not deterministic:\n%s", diff)
	}
}

func TestNextAgent(t *testing.T) {
	for in, want := range map[string]string{"engineer": "engineer-2", "engineer-2": "engineer-3", "engineer-9": "engineer-10",
		"eng-1": "eng-1-2", "x-02": "x-02-2", "a-b": "a-b-2"} {
		if got := window.NextAgent(in); got != want {
			t.Errorf("NextAgent(%q) = %q, want %q", in, got, want)
		}
	}
}

// fillPastHandoff appends exchanges to a window until its handoff is due,
// and returns every message appended.
func fillPastHandoff(t *testing.T, m *window.Manager, key store.WindowKey, from int) []window.Message {
	t.Helper()
	var sent []window.Message
	for i := from; ; i++ {
		ex := exchange(i)
		res, err := m.Append(context.Background(), key, ex)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, ex...)
		if res.HandoffDue {
			if len(res.Evicted) > 0 {
				t.Fatalf("the window evicted before its handoff was due: %+v", res.Evicted)
			}
			return sent
		}
		if i > from+40 {
			t.Fatalf("no handoff due after %d exchanges: %+v", i-from, res.Status)
		}
	}
}

// expandAll returns the messages a handoff state's references stand for,
// in order, content only.
func expandAll(t *testing.T, m *window.Manager, refs []window.HandoffRef) []window.Message {
	t.Helper()
	var out []window.Message
	for _, r := range refs {
		mk, err := ctxref.Parse(r.Marker)
		if err != nil || mk.ID != r.ID {
			t.Fatalf("marker %q: %v", r.Marker, err)
		}
		msgs, err := m.Expand(context.Background(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != r.Messages {
			t.Errorf("reference %s expands to %d messages, says %d", r.ID, len(msgs), r.Messages)
		}
		out = append(out, msgs...)
	}
	return contentOnly(out)
}

func contentOnly(msgs []window.Message) []window.Message {
	out := make([]window.Message, len(msgs))
	for i, m := range msgs {
		out[i] = window.Message{Role: m.Role, Blocks: m.Blocks}
	}
	return out
}

// TestManagerHandoff: an engineer's window past 75 % says its handoff is
// due; the handoff stores the state (index 1), opens engineer-2 with the
// system prompt and the state pinned, and its references give back every
// message of the prior window byte for byte; engineer-2's own handoff is
// index 2 and names the first; the archivalist's facts appear; bad
// input is refused with nothing written.
func TestManagerHandoff(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{})
	e, err := engine.New(st, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := window.NewManager(e, cat)
	eng := store.WindowKey{SessionID: "s1", AgentID: "engineer"}
	open, err := m.Open(ctx, eng, window.OpenOptions{Role: "engineer", Limit: 6000, Output: 500, Safety: 100})
	if err != nil {
		t.Fatal(err)
	}
	if open.HandoffAt != int(0.75*float64(open.Budget)) || open.EvictAt != int(0.90*float64(open.Budget)) || open.HandoffDue {
		t.Fatalf("an engineer's window: %+v", open)
	}
	if _, err := m.Handoff(ctx, eng, window.HandoffOptions{}); !errors.Is(err, window.ErrEmptyWindow) || !errors.Is(err, window.ErrInvalid) {
		t.Fatalf("handoff of an empty window: %v", err)
	}
	if _, err := m.Handoff(ctx, store.WindowKey{SessionID: "s1", AgentID: "nobody"}, window.HandoffOptions{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("handoff of an unknown window: %v", err)
	}
	system := textMsg(window.RoleSystem, "You are a careful Go engineer.")
	if _, err := m.Append(ctx, eng, []window.Message{system}); err != nil {
		t.Fatal(err)
	}
	// A system prompt alone is nothing to hand off either (the state
	// would know no task), and nothing is written.
	before, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Handoff(ctx, eng, window.HandoffOptions{}); !errors.Is(err, window.ErrEmptyWindow) {
		t.Fatalf("handoff of a window holding only its system prompt: %v", err)
	}
	if after, err := st.Stats(ctx); err != nil || !cmp.Equal(before, after) {
		t.Fatalf("the refused handoff wrote: %v (-before +after):\n%s", err, cmp.Diff(before, after))
	}
	if _, err := m.Status(ctx, store.WindowKey{SessionID: "s1", AgentID: window.NextAgent("engineer")}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused handoff opened the next window: %v", err)
	}
	sent := append([]window.Message{system}, fillPastHandoff(t, m, eng, 0)...)
	prior, err := m.Status(ctx, eng)
	if err != nil {
		t.Fatal(err)
	}
	if !prior.HandoffDue || prior.Used < prior.HandoffAt || prior.Evicted != 0 {
		t.Fatalf("past 75 %%: %+v", prior)
	}

	// A handoff to a window that exists (even an empty one another opened)
	// is a conflict, and writes nothing.
	taken := store.WindowKey{SessionID: "s1", AgentID: "taken"}
	if _, err := m.Open(ctx, taken, window.OpenOptions{Limit: 4000}); err != nil {
		t.Fatal(err)
	}
	before, err = st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ce *store.ConflictError
	if _, err := m.Handoff(ctx, eng, window.HandoffOptions{To: "taken"}); !errors.As(err, &ce) {
		t.Fatalf("handoff to a window that exists: %v", err)
	}
	for _, bad := range []string{" padded", "a\nb", "engineer"} {
		if _, err := m.Handoff(ctx, eng, window.HandoffOptions{To: bad}); !errors.Is(err, window.ErrInvalid) {
			t.Errorf("handoff to %q: %v", bad, err)
		}
	}
	after, err := st.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("refused handoffs wrote (-before +after):\n%s", diff)
	}

	// A handoff cut short after it opened engineer-2 and before its
	// append left the window empty, with its settings: it is taken over.
	cut := prior.Settings
	cut.Handoff = &window.HandoffLink{Index: 1, Entry: strings.Repeat("0", 64), From: "engineer"}
	raw, err := json.Marshal(cut)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutWindow(ctx, store.WindowKey{SessionID: "s1", AgentID: "engineer-2"}, raw); err != nil {
		t.Fatal(err)
	}
	res, err := m.Handoff(ctx, eng, window.HandoffOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := res.State
	if s.Index != 1 || s.Previous != "" || s.FromAgent != "engineer" || s.ToAgent != "engineer-2" || s.Role != "engineer" ||
		s.Reason != "context_75%" || s.Session != "s1" || res.Fallback == "" || !slices.Equal(s.Sources, []string{"window"}) {
		t.Errorf("the first handoff: %+v, fallback %q", s, res.Fallback)
	}
	if s.Task != "Step 0: look at internal/pkg0/file0.go and explain handler0." {
		t.Errorf("task %q", s.Task)
	}
	if len(s.Files) == 0 || s.Files[0] != (window.HandoffFile{Path: "internal/pkg0/file0.go", Status: "read"}) {
		t.Errorf("files %+v", s.Files)
	}
	// The entry holds the state, as JSON, with its index and agents.
	es, err := st.Entries(ctx, []string{res.Entry})
	if err != nil {
		t.Fatal(err)
	}
	var stored window.HandoffState
	if err := json.Unmarshal(es[0].Content, &stored); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, stored); diff != "" {
		t.Errorf("the stored state (-returned +stored):\n%s", diff)
	}
	if e := es[0]; e.Type != store.HandoffState || e.SessionID != "s1" || e.AgentID != "engineer" ||
		e.Metadata["handoff_index"] != float64(1) || e.Metadata["to_agent"] != "engineer-2" || e.Metadata["from_agent"] != "engineer" {
		t.Errorf("the entry: %+v", e.Occurrence)
	}
	// Every message of the prior window, from its references, byte for
	// byte; each reference within the cap, or one unit alone.
	if diff := cmp.Diff(contentOnly(sent), expandAll(t, m, s.Refs)); diff != "" {
		t.Errorf("the prior window from the state's references (-sent +expanded):\n%s", diff)
	}
	for _, r := range s.Refs {
		if r.Tokens > window.DefaultMaxRefTokens {
			t.Errorf("reference %s: %d tokens", r.ID, r.Tokens)
		}
	}
	// The prior window is as it was.
	if again, err := m.Status(ctx, eng); err != nil || again.Version != prior.Version || again.Messages != prior.Messages {
		t.Errorf("the prior window changed: %+v, %v", again, err)
	}
	// engineer-2 opens with the system prompt and the state, pinned, and
	// the prior window's settings.
	eng2 := store.WindowKey{SessionID: "s1", AgentID: "engineer-2"}
	if res.Window.AgentID != "engineer-2" || res.Window.Settings.Role != "engineer" || res.Window.Settings.Limits != prior.Settings.Limits ||
		res.Window.Messages != 2 || res.Window.HandoffDue {
		t.Errorf("the new window: %+v", res.Window)
	}
	items := contextOf(t, m, eng2)
	if len(items) != 2 || items[0].Message == nil || items[1].Message == nil {
		t.Fatalf("engineer-2's context: %+v", items)
	}
	if got := items[0].Message; got.Role != window.RoleSystem || got.Blocks[0].Text != system.Blocks[0].Text {
		t.Errorf("first message %+v", got)
	}
	text := items[1].Message.Blocks[0].Text
	if !items[1].Message.Pinned || text != s.Render() || !strings.HasPrefix(text, "[HANDOFF 1: engineer-2 takes over from engineer (engineer), context_75%") {
		t.Errorf("second message (pinned %v):\n%s", items[1].Message.Pinned, text)
	}
	for _, r := range s.Refs {
		if !strings.Contains(text, r.Marker) {
			t.Errorf("the state's text lacks marker %s", r.Marker)
		}
	}
	if found := ctxref.Find(text); len(found) != len(s.Refs) {
		t.Errorf("%d markers in the state's text, %d references", len(found), len(s.Refs))
	}
	// Handing off to engineer-2 again is a conflict.
	if _, err := m.Handoff(ctx, eng, window.HandoffOptions{}); !errors.As(err, &ce) {
		t.Errorf("a second handoff to engineer-2: %v", err)
	}

	// engineer-2 works, and hands off in turn, with the archivalist's
	// facts: index 2, naming the first.
	sent2 := fillPastHandoff(t, m, eng2, 100)
	facts := &window.SessionFacts{Task: "Explain every handler", Current: "handler 105", Next: []string{"write the summary"},
		Files: []window.HandoffFile{{Path: "internal/pkg0/file0.go", Status: "read", Summary: "handler0"}}, Decisions: []string{"one handler a step"}}
	res2, err := m.Handoff(ctx, eng2, window.HandoffOptions{Facts: facts})
	if err != nil {
		t.Fatal(err)
	}
	s2 := res2.State
	if s2.Index != 2 || s2.Previous != res.Entry || s2.ToAgent != "engineer-3" || res2.Fallback != "" || s2.Task != facts.Task ||
		s2.Progress.InProgress != "handler 105" || !slices.Equal(s2.Next, facts.Next) || s2.Decisions[0] != "one handler a step" ||
		s2.Files[0] != facts.Files[0] || !slices.Contains(s2.Sources, "archivalist") {
		t.Errorf("the second handoff: %+v", s2)
	}
	if !strings.Contains(res2.State.Render(), "Previous handoff state: entry "+res.Entry) {
		t.Errorf("the second state's text does not name the first")
	}
	// engineer-2's window, expanded, is its two first messages and what
	// it was sent.
	got2 := expandAll(t, m, s2.Refs)
	if len(got2) != 2+len(sent2) {
		t.Fatalf("engineer-2's window expands to %d messages, want %d", len(got2), 2+len(sent2))
	}
	if diff := cmp.Diff(contentOnly(sent2), got2[2:]); diff != "" {
		t.Errorf("engineer-2's messages (-sent +expanded):\n%s", diff)
	}
	if got2[1].Blocks[0].Text != text {
		t.Errorf("engineer-2's pinned state does not expand back")
	}
	// engineer-3 hands off with no facts: the task and decisions carry
	// over from the state before, not from the state's own text.
	eng3 := store.WindowKey{SessionID: "s1", AgentID: "engineer-3"}
	fillPastHandoff(t, m, eng3, 200)
	res3, err := m.Handoff(ctx, eng3, window.HandoffOptions{To: "engineer-final"})
	if err != nil {
		t.Fatal(err)
	}
	if s3 := res3.State; s3.Index != 3 || s3.Previous != res2.Entry || s3.Task != facts.Task || !slices.Contains(s3.Decisions, "one handler a step") ||
		!slices.Contains(s3.Files, facts.Files[0]) || !slices.Equal(s3.Next, facts.Next) ||
		s3.ToAgent != "engineer-final" || res3.Window.AgentID != "engineer-final" {
		t.Errorf("the third handoff: %+v", s3)
	}
}
