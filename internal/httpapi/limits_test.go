package httpapi

import (
	"net/http/httptest"
	"testing"
)

// TestV1Limits: numbers out of their range get 400 with the range, as the
// MCP tools refuse them (the same checks, in internal/api and the
// archive); zero is the default.
func TestV1Limits(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	c.want(201, "POST", "/v1/sessions/s1/records", `{"type":"tool_result","content":"the retry loop backs off with jitter"}`, `"turn":1`)
	for _, r := range []struct{ method, path, body, want string }{
		{"GET", "/v1/search?q=retry&limit=-5", "", "limit is -5; it must be from 1 to 50, or 0 (the default, 10)"},
		{"GET", "/v1/search?q=retry&limit=100000", "", "limit is 100000; it must be from 1 to 50, or 0 (the default, 10)"},
		{"GET", "/v1/search?q=retry&files=true&spans=6", "", "spans is 6; it must be from 1 to 5, or 0 (the default, 3)"},
		{"GET", "/v1/sessions/s1/turns?from=1&to=1&max_tokens=9000", "", "max_tokens is 9000; it must be from 100 to 8000"},
		{"GET", "/v1/files/x.go?start=-3", "", "start_line is -3; it must be from 1 to"},
		{"POST", "/v1/retrieve", `{"query":"retry","max_tokens":-1}`, "max_tokens is -1; it must be from 100 to 8000, or 0 (the default, 4000)"},
		{"POST", "/v1/prefetch", `{"query":"retry","budget":40000}`, "budget is 40000; it must be from 1 to 32000"},
		{"POST", "/v1/recall", `{"query":"what did we decide?","budget":-1}`, "budget is -1; it must be from 1 to 8000"},
		{"POST", "/v1/intents", `{"description":"rename x","paths":["x"],"ttl_minutes":20000}`, "ttl_minutes is 20000; it must be from 1 to 10080"},
		{"GET", "/v1/patterns?limit=5000", "", "limit: is 5000; it must be from 1 to 1000, or 0 (the default, 100)"},
		{"GET", "/v1/patterns?since=-1", "", "since is -1; it must be 0 or more"},
		{"GET", "/v1/events?limit=5000", "", "limit: is 5000; it must be from 1 to 1000, or 0 (the default, 100)"},
		{"GET", "/v1/search?q=retry&files=maybe", "", `files=\"maybe\": want true or false`},
		{"GET", "/v1/history?q=retry&limit=-1", "", "limit is -1; it must be from 1 to 50"},
		{"PUT", "/v1/sessions/s1/files/main.go", `{"path":"other.go"}`, `the body names file \"other.go\", the path \"main.go\"`},
		{"GET", "/v1/patterns?all=yes", "", `all=\"yes\": want true or false`},
	} {
		c.want(400, r.method, r.path, r.body, r.want)
	}
	c.want(200, "GET", "/v1/search?q=retry&limit=50", "", "jitter")
	c.want(200, "GET", "/v1/search?q=retry&limit=0", "", "jitter")
	c.want(200, "GET", "/v1/search?q=retry&files=true&spans=5", "", `"places":[{"where":"session s1`)
	c.want(200, "GET", "/v1/search?q=retry&files=1", "", `"places":[{"where":"session s1`)
	c.want(200, "GET", "/v1/patterns?limit=1000", "", `"status":"OK"`)
}
