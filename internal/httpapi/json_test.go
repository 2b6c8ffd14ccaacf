package httpapi

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// checkJSON reports every object key of a JSON document that is not
// snake_case and every null: the API names fields one way, and an empty
// list is [], not null.
func checkJSON(t *testing.T, what, doc string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%s: %v in %s", what, err, doc)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case nil:
			t.Errorf("%s: %s is null", what, path)
		case map[string]any:
			for k, x := range v {
				if !snakeCase.MatchString(k) {
					t.Errorf("%s: key %s.%s is not snake_case", what, path, k)
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

// keys returns the sorted keys of the first object of a list in a JSON
// document, at doc[field][0].
func keys(t *testing.T, doc, field string) []string {
	t.Helper()
	var v map[string][]map[string]any
	if err := json.Unmarshal([]byte(doc), &v); err != nil || len(v[field]) == 0 {
		t.Fatalf("no %s in %s: %v", field, doc, err)
	}
	var out []string
	for k := range v[field][0] {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestV1JSON: every answer of the API names its fields in snake_case and
// sends empty lists as [], the event log and the agents included.
func TestV1JSON(t *testing.T) {
	eng := newEngine(t)
	if _, err := eng.Add(context.Background(), []engine.Record{{Session: "s0", Agent: "x", Type: store.ToolResult,
		Content: []byte("TestUploadRetry failed: context deadline exceeded after 3 retries")}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}

	var docs []struct{ what, body string }
	get := func(status int, method, path, body string) string {
		t.Helper()
		_, b := c.want(status, method, path, body, "")
		docs = append(docs, struct{ what, body string }{method + " " + path, b})
		return b
	}
	// Before anything is written: empty answers.
	get(200, "GET", "/v1/events", "")
	get(200, "GET", "/v1/agents", "")
	get(200, "GET", "/v1/patterns", "")
	get(200, "GET", "/v1/search?q=nothing+matches+quokka", "")
	get(200, "GET", "/v1/history?q=nothing+matches+quokka", "")
	get(200, "POST", "/v1/prefetch", `{"query":"nothing matches quokka"}`)
	get(200, "POST", "/v1/retrieve", `{"query":"nothing matches quokka"}`)
	// Writes, and what reads of them answer.
	get(201, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"never sleep in tests; use a fake clock","scope":["internal/upload"]}`)
	get(201, "POST", "/v1/failures", `{"approach":"raising timeouts","reason":"still flaky","resolution":"inject a clock","outcome":"success"}`)
	get(201, "POST", "/v1/intents", `{"description":"rename upload.Retry","paths":["internal/upload"]}`)
	get(200, "PUT", "/v1/sessions/s1/resume", `{"task":"fix the flaky test","next":["patch"]}`)
	get(200, "PUT", "/v1/sessions/s1/files/internal/upload/retry.go", `{"summary":"jitter"}`)
	get(201, "POST", "/v1/sessions/s1/records", `{"type":"user_prompt","content":"why does TestUploadRetry time out?"}`)
	get(200, "GET", "/v1/search?q=context+deadline+retries", "")
	get(200, "GET", "/v1/history?q=context+deadline+retries&type=tool_result", "")
	get(200, "POST", "/v1/prefetch", `{"query":"TestUploadRetry deadline","budget":300}`)
	get(200, "POST", "/v1/retrieve", `{"query":"deadline exceeded"}`)
	get(200, "POST", "/v1/recall", `{"query":"what did we learn about flaky timeouts? how should we fix it?"}`)
	get(200, "GET", "/v1/sessions/s1", "")
	get(200, "GET", "/v1/sessions/s1/briefing?tier=full", "")
	get(200, "GET", "/v1/sessions/s1/turns?from=1&to=1", "")
	get(200, "GET", "/v1/failures", "")
	get(200, "GET", "/v1/intents", "")
	events := get(200, "GET", "/v1/events", "")
	agents := get(200, "GET", "/v1/agents?session=s1", "")
	for _, d := range docs {
		checkJSON(t, d.what, d.body)
	}
	if got, want := keys(t, events, "events"), []string{"agent", "at", "detail", "gv", "record", "scope", "seq", "session", "sv", "type"}; !slices.Equal(got, want) {
		t.Errorf("an event's fields: %v, want %v", got, want)
	}
	if got, want := keys(t, agents, "agents"), []string{"credential", "has_key", "id", "model", "name", "parent", "registered_at", "role", "session"}; !slices.Equal(got, want) {
		t.Errorf("an agent's fields: %v, want %v", got, want)
	}
	if !strings.Contains(agents, `"id":"h1","name":"h1","session":"s1"`) {
		t.Errorf("agents: %s", agents)
	}
}
