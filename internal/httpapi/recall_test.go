package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestV1Recall_StoresAllOrNothing: POST /v1/recall with several stores,
// one of which is refused when it runs (it contradicts an active
// pattern), writes none of them, not even the agent its first write
// would register, and its error says which query failed and that
// nothing was written.
func TestV1Recall_StoresAllOrNothing(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	c.want(201, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"never sleep in tests; use a fake clock"}`, `"status":"created"`)

	as := []string{"X-Engram-Session", "s2", "X-Engram-Agent", "h2"}
	insight := `@arch:store:learnings{\"insight\":\"the CI runners have two cores\"}`
	_, b := c.want(409, "POST", "/v1/recall", `{"query":"`+insight+`; @arch:store:pattern{\"category\":\"testing.unit\",\"pattern\":\"always sleep in tests instead of a fake clock\"}"}`,
		"contradicts", as...)
	for _, want := range []string{"nothing was written", "query 2 of 2 (@arch:store:patterns{"} {
		if !strings.Contains(b, want) {
			t.Errorf("the refusal %s does not say %q", b, want)
		}
	}
	c.want(200, "POST", "/v1/recall", `{"query":"@arch:check:learnings?q=CI runners cores"}`, `"found":false`)
	if _, b := c.want(200, "GET", "/v1/agents?session=s2", "", `"agents":`); strings.Contains(b, `"h2"`) {
		t.Errorf("a refused request registered its agent: %s", b)
	}

	// Without the contradiction, both are written, and the agent.
	_, b = c.want(200, "POST", "/v1/recall", `{"query":"`+insight+`; @arch:store:pattern{\"category\":\"testing.unit\",\"pattern\":\"name each test after the behaviour it checks\"}"}`,
		`"status":"created"`, as...)
	if strings.Count(b, `"status":"created"`) != 2 {
		t.Errorf("two stores answered %s", b)
	}
	c.want(200, "POST", "/v1/recall", `{"query":"@arch:check:learnings?q=CI runners cores"}`, `"found":true`)
	c.want(200, "GET", "/v1/agents?session=s2", "", `"h2"`)
}
