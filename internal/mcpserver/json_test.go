package mcpserver

import (
	"encoding/json"
	"regexp"
	"testing"
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestStructuredContentJSON: every tool's structured content names its
// fields in snake_case and sends empty lists as [], not null.
func TestStructuredContentJSON(t *testing.T) {
	cs, _ := newClient(t, Options{Session: "s1", Agent: "a1"})
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
