package modelserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClaudeCode runs the real CLI through a scripted session: the model
// reads a file, runs a command and answers from both; a second run resumes
// the session.
func TestClaudeCode(t *testing.T) {
	srv := Start(Options{})
	defer srv.Close()
	cc := NewClaudeCode(t, srv)
	notes := filepath.Join(cc.Dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("the secret word is PAPAYA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv.Add(
		Call("Read", map[string]any{"file_path": notes}),
		func(r *Request) (Response, error) {
			if got := ToolResult(t, r); !strings.Contains(got, "PAPAYA") {
				return Response{}, fmt.Errorf("Read's result lacks the file's content: %q", got)
			}
			return Response{Content: []Block{Text("Now the command."),
				ToolUse("Bash", map[string]any{"command": "echo hello-$((6*7))", "description": "Print a greeting"})}}, nil
		},
		func(r *Request) (Response, error) {
			if got := ToolResult(t, r); !strings.Contains(got, "hello-42") {
				return Response{}, fmt.Errorf("Bash's result lacks the command's output: %q", got)
			}
			return Response{Content: []Block{Text("The word is PAPAYA and the command said hello-42.")}}, nil
		},
	)
	res := cc.Prompt(t, "Read notes.txt, then run a command.", "--allowedTools", "Read,Bash")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "The word is PAPAYA and the command said hello-42."; res.Result != want {
		t.Errorf("result = %q, want %q", res.Result, want)
	}
	if res.SessionID == "" {
		t.Error("result has no session_id")
	}
	main := srv.Requests(KindMain)
	if len(main) != 3 || srv.Remaining() != 0 {
		t.Fatalf("%d main requests, %d steps left; want 3 and 0", len(main), srv.Remaining())
	}
	for _, r := range main {
		if !r.Params.Stream || !r.Params.HasTool("Read") || !r.Params.HasTool("Bash") {
			t.Errorf("request %d: stream %v, tools Read %v Bash %v; want a streamed request offering both",
				r.Seq, r.Params.Stream, r.Params.HasTool("Read"), r.Params.HasTool("Bash"))
		}
		if got := r.Header.Get("X-Claude-Code-Session-Id"); got != res.SessionID {
			t.Errorf("request %d: X-Claude-Code-Session-Id = %q, want the session's %q", r.Seq, got, res.SessionID)
		}
	}

	// Resumed, the conversation goes on where it ended.
	srv.Add(func(r *Request) (Response, error) {
		if n := len(r.Params.Messages); n < 7 {
			return Response{}, fmt.Errorf("resumed request has %d messages, want the 6 before and the new prompt", n)
		}
		return Response{Content: []Block{Text("Resumed.")}}, nil
	})
	res2 := cc.Prompt(t, "Go on.", "--resume", res.SessionID)
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res2.Result != "Resumed." || res2.SessionID != res.SessionID {
		t.Errorf("resumed: result %q session %q, want %q in session %q", res2.Result, res2.SessionID, "Resumed.", res.SessionID)
	}
}
