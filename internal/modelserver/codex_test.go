package modelserver

import (
	"fmt"
	"strings"
	"testing"
)

// TestCodex runs the real CLI through a scripted session: the model runs
// a command and answers from its output; a second run resumes the
// session.
func TestCodex(t *testing.T) {
	srv := Start(Options{})
	defer srv.Close()
	cx := NewCodex(t, srv)
	srv.Add(
		Reply(Text("Let me run it."), ToolUse("exec_command", map[string]any{"cmd": "echo hello-$((6*7))"})),
		func(r *Request) (Response, error) {
			if got := FunctionOutput(t, r); !strings.Contains(got, "hello-42") {
				return Response{}, fmt.Errorf("the command's output lacks hello-42: %q", got)
			}
			return Response{Content: []Block{Text("The command said hello-42.")}}, nil
		},
	)
	res := cx.Exec(t, "Run a command.")
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Message != "The command said hello-42." || res.ThreadID == "" {
		t.Errorf("result: message %q, thread %q", res.Message, res.ThreadID)
	}
	main := srv.Requests(KindMain)
	if len(main) != 2 || srv.Remaining() != 0 {
		t.Fatalf("%d main requests, %d steps left; want 2 and 0", len(main), srv.Remaining())
	}
	for _, r := range main {
		if !r.Responses.Stream || !r.Responses.HasTool("exec_command") {
			t.Errorf("request %d: stream %v, exec_command offered %v", r.Seq, r.Responses.Stream, r.Responses.HasTool("exec_command"))
		}
		if got := r.Header.Get("Session-Id"); got != res.ThreadID {
			t.Errorf("request %d: session-id = %q, want the thread's %q", r.Seq, got, res.ThreadID)
		}
	}

	// Resumed, the conversation goes on where it ended.
	srv.Add(func(r *Request) (Response, error) {
		if got := r.Responses.UserTexts(); !strings.Contains(strings.Join(got, "\n"), "Run a command.") {
			return Response{}, fmt.Errorf("the resumed request lacks the first prompt: %q", got)
		}
		return Response{Content: []Block{Text("Resumed.")}}, nil
	})
	res2 := cx.Exec(t, "Go on.", "resume", res.ThreadID)
	if err := srv.Err(); err != nil {
		t.Fatal(err)
	}
	if res2.Message != "Resumed." || res2.ThreadID != res.ThreadID {
		t.Errorf("resumed: message %q thread %q, want %q in thread %q", res2.Message, res2.ThreadID, "Resumed.", res.ThreadID)
	}
}
