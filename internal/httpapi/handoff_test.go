package httpapi

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWindowHandoff drives a pipeline handoff through the JSON API: an
// engineer's window past 75 % says its handoff is due; POST …/handoff
// stores the state with the archivalist's resume point and files, opens
// engineer-2 with it pinned after the system prompt, and every message of
// the prior window expands back from the state's references; an empty
// window is 400, an unknown one 404, a next agent whose window exists 409
// with nothing written; a session the archivalist knows nothing of falls
// back to the window alone and says so.
func TestWindowHandoff(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	const w = "/v1/windows/s1/engineer"

	c.want(404, "POST", "/v1/windows/s1/nobody/handoff", `{}`, "no window for agent")
	_, b := c.want(200, "PUT", w, `{"role":"engineer","limit":6000,"output":500,"safety":100}`, `"handoff_at":3645`)
	checkJSON(t, "PUT "+w, b)
	c.want(400, "POST", w+"/handoff", `{}`, "no messages but its system prompt: nothing to hand off")
	c.want(400, "POST", w+"/handoff", `{"agent":"other"}`, "the body names window")

	sent := []string{`{"role":"system","content":"You are a careful engineer."}`}
	c.want(201, "POST", w+"/messages", appendBody("anthropic", sent...), `"positions":[0]`)
	for i := 0; ; i++ {
		turn := anthropicTurn(i)
		sent = append(sent, turn...)
		_, b := c.want(201, "POST", w+"/messages", appendBody("anthropic", turn...), `"positions":[`)
		if strings.Contains(b, `"handoff_due":true`) {
			if strings.Contains(b, `"evicted":[{`) {
				t.Fatalf("evicted before the handoff was due: %s", b)
			}
			break
		}
		if i > 20 {
			t.Fatalf("no handoff due after %d turns: %s", i, b)
		}
	}
	c.want(200, "GET", w, "", `"handoff_due":true`)
	// The archivalist's state of the session.
	c.want(200, "PUT", "/v1/sessions/s1/resume", `{"task":"Explain the handlers","current":"handler 5","next":["write it up"]}`, "")
	c.want(200, "PUT", "/v1/sessions/s1/files/internal/pkg0/file0.go", `{"status":"read","summary":"handler0"}`, "")

	// A next agent whose window exists: 409, nothing written.
	c.want(200, "PUT", "/v1/windows/s1/taken", `{"limit":4000}`, "")
	before, err := eng.Store().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.want(409, "POST", w+"/handoff", `{"to":"taken"}`, "exists already")
	c.want(400, "POST", w+"/handoff", `{"to":" padded"}`, "white space")
	after, err := eng.Store().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("refused handoffs wrote (-before +after):\n%s", diff)
	}

	_, b = c.want(201, "POST", w+"/handoff", `{}`, `"key":"s1/engineer-2"`)
	checkJSON(t, "handoff", b)
	var out struct {
		State struct {
			Index    int    `json:"handoff_index"`
			Reason   string `json:"handoff_reason"`
			Task     string
			Next     []string `json:"next_steps"`
			Progress struct {
				InProgress string `json:"in_progress"`
			}
			Files []struct{ Path, Status, Summary string }
			Refs  []struct{ ID, Marker string }
		}
		Entry    string
		Window   struct{ Agent, Role string }
		Prior    struct{ Agent string }
		Fallback string
	}
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	s := out.State
	if s.Index != 1 || s.Reason != "context_75%" || s.Task != "Explain the handlers" || s.Progress.InProgress != "handler 5" ||
		len(s.Next) != 1 || out.Fallback != "" || out.Window.Agent != "engineer-2" || out.Window.Role != "engineer" || out.Prior.Agent != "engineer" ||
		len(s.Files) == 0 || s.Files[0].Path != "internal/pkg0/file0.go" || s.Files[0].Summary != "handler0" || out.Entry == "" {
		t.Errorf("the handoff: %s", b)
	}
	// Every message of the prior window, from the state's references.
	var got []string
	for _, r := range s.Refs {
		_, b := c.want(200, "GET", "/v1/refs/"+r.ID+"?format=anthropic", "", `"ref_id":"`+r.ID)
		var exp struct{ Messages []json.RawMessage }
		if err := json.Unmarshal([]byte(b), &exp); err != nil {
			t.Fatal(err)
		}
		for _, m := range exp.Messages {
			got = append(got, string(m))
		}
	}
	if len(got) != len(sent) {
		t.Fatalf("the references expand to %d messages, %d were sent", len(got), len(sent))
	}
	for i := range sent {
		if !sameJSON(t, got[i], sent[i]) {
			t.Errorf("message %d: %s, want %s", i, got[i], sent[i])
		}
	}
	// engineer-2 opens with the system prompt and the state, pinned, its
	// markers included.
	_, b = c.want(200, "GET", "/v1/windows/s1/engineer-2/context", "", `"messages":2`)
	var ctxOut struct {
		Items []struct{ Message json.RawMessage }
	}
	if err := json.Unmarshal([]byte(b), &ctxOut); err != nil {
		t.Fatal(err)
	}
	if len(ctxOut.Items) != 2 || !strings.Contains(string(ctxOut.Items[0].Message), `{"role":"system","blocks":[{"type":"text","text":"You are a careful engineer."}]`) {
		t.Errorf("engineer-2's context: %s", b)
	}
	var state struct {
		Blocks []struct{ Text string }
		Pinned bool
	}
	if len(ctxOut.Items) == 2 {
		if err := json.Unmarshal(ctxOut.Items[1].Message, &state); err != nil {
			t.Fatal(err)
		}
	}
	if !state.Pinned || len(state.Blocks) != 1 || !strings.HasPrefix(state.Blocks[0].Text, "[HANDOFF 1: engineer-2 takes over from engineer") ||
		!strings.Contains(state.Blocks[0].Text, s.Refs[0].Marker) {
		t.Errorf("engineer-2's state message: %+v", state)
	}
	c.want(409, "POST", w+"/handoff", `{}`, "exists already")

	// A session the archivalist knows nothing of: the window alone, said.
	const w2 = "/v1/windows/s2/tester"
	c.want(200, "PUT", w2, `{"role":"tester","limit":6000}`, "", "X-Engram-Session", "s2")
	c.want(201, "POST", w2+"/messages", appendBody("anthropic", anthropicTurn(0)...), "", "X-Engram-Session", "s2")
	_, b = c.want(201, "POST", w2+"/handoff", `{"to":"tester-b"}`, `"fallback":"the archivalist holds no state of session s2`, "X-Engram-Session", "s2")
	if !strings.Contains(b, `"handoff_reason":"requested"`) || !strings.Contains(b, `"tester":{"failing_tests":[]}`) || !strings.Contains(b, `"key":"s2/tester-b"`) {
		t.Errorf("the fallback handoff: %s", b)
	}
}
