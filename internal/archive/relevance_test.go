package archive

import (
	"context"
	"strings"
	"testing"
)

// TestRecallFloor: a recall whose best record holds too little of the
// question finds nothing, and says so, rather than the least bad record;
// a rewording that keeps the subject's words finds its record; a check
// answers no; the floor is a setting.
func TestRecallFloor(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		floor float64
		query string
		want  string // the first record's text; empty for nothing found
	}{
		{0, "what did we decide about the kubernetes API gateway?", ""},
		// One word of three is a third: through. One of four is not.
		{0, "@arch:recall:decisions?q=kubernetes ingress API gateway", ""},
		{0, "@arch:recall:decisions?q=API gateway versions", "version the API in the URL path"},
		{0, "what was our choice on API versioning?", "version the API in the URL path"},
		{0, "@arch:recall:failures?q=flaky timeouts in May 2026", "raising the test timeout — still flaky under load"},
		{0, "what patterns do we have for auth?", "validate JWT expiry on every request"},
		{-1, "@arch:recall:decisions?q=kubernetes ingress API gateway", "version the API in the URL path"},
		{0.99, "what was our choice on API versioning?", ""},
	} {
		a, _ := newArchive(t, Options{RelevanceFloor: c.floor})
		h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
		ok(t)(h.RecordPattern(ctx, Pattern{Category: "auth.tokens", Pattern: "validate JWT expiry on every request"}))
		ok(t)(h.RecordDecision(ctx, Decision{Category: "api.versioning", Decision: "version the API in the URL path", Rationale: "caches and logs see it"}))
		ok(t)(h.RecordFailure(ctx, Failure{Approach: "raising the test timeout", Reason: "still flaky under load"}))
		ok(t)(h.RecordInsight(ctx, Insight{Insight: "CI machines have two cores"}))
		ans, err := a.Ask(ctx, nil, c.query, AskOptions{})
		if err != nil || len(ans) != 1 || ans[0].Status != StatusOK {
			t.Fatalf("floor %v, %q: %+v, %v", c.floor, c.query, ans, err)
		}
		got := ""
		if len(ans[0].Records) > 0 {
			got = ans[0].Records[0].Text()
		}
		if got != c.want {
			t.Errorf("floor %v, %q: first record %q, want %q (%s)", c.floor, c.query, got, c.want, ans[0].Text)
		}
		if c.want == "" && !strings.HasPrefix(ans[0].Text, "nothing found") {
			t.Errorf("floor %v, %q: text %q, want nothing found", c.floor, c.query, ans[0].Text)
		}
	}
	// A check under the floor answers no.
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	ok(t)(h.RecordFailure(ctx, Failure{Approach: "raising the test timeout", Reason: "still flaky under load"}))
	ans, err := a.Ask(ctx, nil, "@arch:check:failures?approach=raising the kubernetes ingress budget", AskOptions{})
	if err != nil || *ans[0].Found || !strings.Contains(ans[0].Text, "no: nothing in the history matches\nnothing found (the closest record matches 25% of the query; the floor is 33%)") {
		t.Errorf("check under the floor: %+v, %v", ans, err)
	}
}
