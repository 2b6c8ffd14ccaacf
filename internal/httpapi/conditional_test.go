package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestV1StaleETags: an If-None-Match that holds an older version gets 200
// with what changed and the new ETag; only the current one gets 304. For a
// session's state, a list of the global history and a briefing.
func TestV1StaleETags(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	conditional := func(path, stale, want string) string {
		t.Helper()
		h, _ := c.want(200, "GET", path, "", want, "If-None-Match", stale)
		tag := h.Get("ETag")
		if tag == stale || tag == "" {
			t.Errorf("GET %s with the stale ETag %s: ETag %q", path, stale, tag)
		}
		if st, _, body := c.do("GET", path, "", "If-None-Match", tag); st != 304 || body != "" {
			t.Errorf("GET %s with the current ETag %s: HTTP %d %q", path, tag, st, body)
		}
		return tag
	}

	c.want(200, "PUT", "/v1/sessions/s1/resume", `{"task":"first task"}`, `"sv":`)
	session, _ := c.want(200, "GET", "/v1/sessions/s1", "", "first task")
	briefing, _ := c.want(200, "GET", "/v1/sessions/s1/briefing", "", "first task")
	c.want(201, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"never sleep in tests; use a fake clock"}`, "created")
	patterns, _ := c.want(200, "GET", "/v1/patterns", "", "fake clock")

	c.want(200, "PUT", "/v1/sessions/s1/resume", `{"task":"second task"}`, `"sv":`)
	conditional("/v1/sessions/s1", session.Get("ETag"), "second task")
	c.want(201, "POST", "/v1/patterns", `{"category":"error.handling","pattern":"wrap errors with %w"}`, "created")
	conditional("/v1/patterns", patterns.Get("ETag"), "wrap errors with %w")
	// The briefing's ETag holds both versions; each moved since.
	tag := conditional("/v1/sessions/s1/briefing", briefing.Get("ETag"), "second task")
	c.want(200, "PUT", "/v1/sessions/s1/resume", `{"task":"third task"}`, `"sv":`) // sv only
	tag = conditional("/v1/sessions/s1/briefing", tag, "third task")
	c.want(201, "POST", "/v1/decisions", `{"decision":"retries use full jitter"}`, "created") // gv only
	conditional("/v1/sessions/s1/briefing", tag, "retries use full jitter")
	if !strings.HasPrefix(tag, `"`) {
		t.Errorf("ETag %s is not quoted", tag)
	}
}
