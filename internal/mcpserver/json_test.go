package mcpserver

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestStructuredContentJSON: every tool's structured content names its
// fields in snake_case and sends empty lists as [], not null.
func TestStructuredContentJSON(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1", Structured: true})
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"search", map[string]any{"query": "nothing matches quokka"}},
		{"prefetch", map[string]any{"query": "nothing matches quokka"}},
		{"retrieve_context", map[string]any{"query": "nothing matches quokka"}},
		{"search_history", map[string]any{"query": "nothing matches quokka"}},
		{"get_turn_range", map[string]any{"from": 1, "to": 3}},
		{"window", map[string]any{"action": "list"}},
		{"briefing", map[string]any{"tier": "full"}},
		{"record_pattern", map[string]any{"category": "testing.unit", "pattern": "never sleep in tests; use a fake clock"}},
		{"record_failure", map[string]any{"approach": "raising timeouts", "reason": "still flaky", "resolution": "inject a clock", "outcome": "success"}},
		{"record_insight", map[string]any{"insight": "CI has two cores"}},
		{"record_decision", map[string]any{"decision": "retries use full jitter"}},
		{"declare_intent", map[string]any{"description": "rename upload.Retry", "paths": []string{"internal/upload"}}},
		{"update_resume", map[string]any{"task": "fix the flaky test", "next": []string{"patch"}}},
		{"update_file", map[string]any{"path": "internal/upload/retry.go"}},
		{"record", map[string]any{"type": "user_prompt", "content": "why does TestUploadRetry time out? context deadline exceeded"}},
		{"search", map[string]any{"query": "deadline exceeded"}},
		{"search_history", map[string]any{"query": "deadline exceeded"}},
		{"retrieve_context", map[string]any{"query": "deadline exceeded"}},
		{"get_turn_range", map[string]any{"from": 1, "to": 1}},
		{"recall", map[string]any{"query": "what did we learn about timeouts? how should we fix it?"}},
		{"briefing", map[string]any{"tier": "full"}},
	} {
		text, res := call(t, cs, c.tool, c.args)
		if res.IsError {
			t.Fatalf("%s: %s", c.tool, text)
		}
		raw, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		var walk func(path string, v any)
		walk = func(path string, v any) {
			switch v := v.(type) {
			case nil:
				t.Errorf("%s: %s is null in %s", c.tool, path, raw)
			case map[string]any:
				for k, x := range v {
					if !snakeCase.MatchString(k) {
						t.Errorf("%s: key %s.%s is not snake_case", c.tool, path, k)
					}
					walk(path+"."+k, x)
				}
			case []any:
				for _, x := range v {
					walk(path+"[]", x)
				}
			}
		}
		walk("$", v)
	}
}

// TestTextOnlyByDefault: by default no tool declares an output schema and
// a result is its text alone, which is what Claude Code and Codex then
// show the model; with Structured, every tool declares one and its
// results carry structured content beside the text.
func TestTextOnlyByDefault(t *testing.T) {
	for _, structured := range []bool{false, true} {
		cs, _ := newClient(t, Options{Session: "s1", Agent: "a1", Structured: structured})
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			if (tool.OutputSchema != nil) != structured {
				t.Errorf("structured %v: tool %s output schema %v", structured, tool.Name, tool.OutputSchema)
			}
		}
		for _, c := range []struct {
			tool string
			args map[string]any
		}{{"briefing", nil}, {"search", map[string]any{"query": "retry"}}, {"record", map[string]any{"type": "note", "content": "a note"}}} {
			text, r := call(t, cs, c.tool, c.args)
			if r.IsError || text == "" {
				t.Fatalf("structured %v: %s: %q", structured, c.tool, text)
			}
			if (r.StructuredContent != nil) != structured {
				t.Errorf("structured %v: %s: structured content %v", structured, c.tool, r.StructuredContent)
			}
		}
	}
}

// TestRecordText: record's text says what its structured form says, since
// a harness shows the model one or the other: content stored before, a
// msg_id replayed, secrets redacted.
func TestRecordText(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
	note := map[string]any{"type": "note", "content": "the build needs Go 1.26"}
	if got := ok(t, cs, "record", note); !regexp.MustCompile(`^recorded [0-9a-f]{12} \(turn 1\)$`).MatchString(got) {
		t.Errorf("first record: %q", got)
	}
	if got := ok(t, cs, "record", note); !strings.HasSuffix(got, "; the same content was stored before)") {
		t.Errorf("the same content again: %q", got)
	}
	msg := map[string]any{"type": "note", "content": "another note", "msg_id": "m-1"}
	ok(t, cs, "record", msg)
	if got := ok(t, cs, "record", msg); !strings.Contains(got, "its msg_id was recorded before: nothing new stored") {
		t.Errorf("a msg_id replayed: %q", got)
	}
	secret := map[string]any{"type": "tool_result", "content": "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLQ"}
	if got := ok(t, cs, "record", secret); !strings.Contains(got, "; redacted: ") {
		t.Errorf("a secret: %q", got)
	}
}
