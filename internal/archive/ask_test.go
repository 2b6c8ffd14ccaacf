package archive

import (
	"context"
	"strings"
	"testing"
)

func TestAsk(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	ok(t)(h.RecordPattern(ctx, Pattern{Category: "auth.tokens", Pattern: "validate JWT expiry on every request"}))
	ok(t)(h.RecordPattern(ctx, Pattern{Category: "database.orm", Pattern: "load relations eagerly in list views"}))
	ok(t)(h.RecordDecision(ctx, Decision{Category: "api.versioning", Decision: "version the API in the URL path", Rationale: "caches and logs see it"}))
	ok(t)(h.UpdateFile(ctx, FileState{Path: "internal/auth/jwt.go", Status: Modified, Summary: "expiry check"}))

	// A store in the DSL, the seed's own example (with the resolution's outcome).
	ans, err := a.Ask(ctx, h, `@arch:store:failure{approach:"recursive walk",outcome:"stack overflow on deep trees",resolution:"use an explicit stack",resolution_outcome:"success",category:"performance.memory"}`, AskOptions{})
	if err != nil || len(ans) != 1 || ans[0].Write == nil || ans[0].Write.Status != "created" {
		t.Fatalf("store: %+v, %v", ans, err)
	}
	failID := ans[0].Write.ID

	// Recall by words, most relevant first, through the full-text signal.
	ans, err = a.Ask(ctx, nil, "@arch:recall:patterns?q=JWT expiry", AskOptions{})
	if err != nil || len(ans[0].Records) == 0 || ans[0].Records[0].Pattern.Pattern != "validate JWT expiry on every request" {
		t.Fatalf("recall: %+v, %v", ans, err)
	}
	if !strings.Contains(ans[0].Text, "pattern pat-1 [auth.tokens] validate JWT expiry") || ans[0].Signals[0] != "lexical" {
		t.Errorf("recall text: %q, signals %v", ans[0].Text, ans[0].Signals)
	}
	// Filters without words: the newest active records of the category.
	ans, _ = a.Ask(ctx, nil, "@arch:recall:patterns?scope=database", AskOptions{})
	if len(ans[0].Records) != 1 || ans[0].Records[0].Category != "database.orm" {
		t.Errorf("scope filter: %+v", ans[0].Records)
	}
	// Multi-query, checks, files.
	ans, err = a.Ask(ctx, nil, "@arch:check:decisions?id=api-versioning; @arch:check:failures?approach=recursive walk; @arch:check:patterns?q=graphql schema stitching; @arch:recall:files?path=internal/auth", AskOptions{})
	if err != nil || len(ans) != 4 {
		t.Fatalf("multi-query: %+v, %v", ans, err)
	}
	if !*ans[0].Found || !*ans[1].Found || *ans[2].Found {
		t.Errorf("checks: %v %v %v", *ans[0].Found, *ans[1].Found, *ans[2].Found)
	}
	if !strings.Contains(ans[1].Text, failID) || !strings.Contains(ans[1].Text, "use an explicit stack") {
		t.Errorf("failure check: %q", ans[1].Text)
	}
	if len(ans[3].Files) != 1 || ans[3].Files[0].Session != "s1" {
		t.Errorf("files: %+v", ans[3].Files)
	}
	// Questions in words: a retrospective one runs, a prospective one is refused with the reason.
	ans, err = a.Ask(ctx, nil, "What decisions did we make about the API versioning? What patterns should we use for caching?", AskOptions{})
	if err != nil || len(ans) != 2 {
		t.Fatalf("questions: %+v, %v", ans, err)
	}
	if ans[0].Status != StatusOK || len(ans[0].Records) == 0 || ans[0].Records[0].Decision == nil {
		t.Errorf("retrospective question: %+v", ans[0])
	}
	if ans[1].Status != StatusRefused || !strings.Contains(ans[1].Text, "should") {
		t.Errorf("prospective question: %+v", ans[1])
	}
	// A question about what the memory holds now is answered.
	ans, err = a.Ask(ctx, nil, "What patterns do we have for auth?", AskOptions{})
	if err != nil || len(ans) != 1 || ans[0].Status != StatusOK || len(ans[0].Records) != 1 || ans[0].Records[0].Category != "auth.tokens" {
		t.Errorf("a question about what the memory holds: %+v, %v", ans, err)
	}
	// The budget bounds the answer.
	for i := range 40 {
		ok(t)(h.RecordInsight(ctx, Insight{Insight: strings.Repeat("cache ", 5) + "insight about eviction number " + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))}))
	}
	ans, _ = a.Ask(ctx, nil, "@arch:recall:learnings?q=cache eviction&limit=40&budget=120", AskOptions{})
	if ans[0].Tokens > 120 || ans[0].Omitted == 0 {
		t.Errorf("budget: %d tokens, %d omitted", ans[0].Tokens, ans[0].Omitted)
	}

	// Bad input: errors that name the problem; nothing written.
	gv, _ := a.Versions(ctx, "")
	for in, want := range map[string]string{
		"@arch:recall:patterns?colour=red":                            `unknown parameter "colour"`,
		`@arch:store:pattern{"pattern":"x"}`:                          "category",
		`@arch:store:pattern{"pattern":"x","category":"a.b","z":1}`:   `unknown field "z"`,
		`@arch:store:failure{approach:"a",reason:"b",resolution:"c"}`: "resolution_outcome",
		`@arch:recall:patterns?limit=lots`:                            "limit",
		"   ":                                                         "empty",
	} {
		if _, err := a.Ask(ctx, h, in, AskOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Ask(%q) = %v, want an error with %q", in, err, want)
		}
	}
	// A bad store in a multi-query stops the good one before it too.
	if _, err := a.Ask(ctx, h, `@arch:store:learnings{"insight":"fine"}; @arch:store:pattern{"pattern":"x"}`, AskOptions{}); err == nil {
		t.Error("a bad store in a multi-query was accepted")
	}
	if _, err := a.Ask(ctx, nil, `@arch:store:learnings{"insight":"fine"}`, AskOptions{}); err == nil || !strings.Contains(err.Error(), "writer") {
		t.Errorf("store without a writer: %v", err)
	}
	if after, _ := a.Versions(ctx, ""); after.GV != gv.GV {
		t.Errorf("bad input moved the global version %d -> %d", gv.GV, after.GV)
	}
}

// TestAskChecksEveryQueryFirst: in a request of several queries, one
// malformed anywhere (a parameter unknown or out of range, a bad category
// or status) refuses the whole request before any query runs: a store
// before it writes nothing.
func TestAskChecksEveryQueryFirst(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	before, err := a.Versions(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for bad, want := range map[string]string{
		"@arch:recall:patterns?colour=red":                                                `unknown parameter "colour"`,
		"@arch:recall:patterns?limit=lots":                                                "limit",
		"@arch:recall:patterns?limit=0":                                                   "limit",
		"@arch:recall:failures?since=yesterday":                                           "since",
		"@arch:check:decisions?budget=-3":                                                 "budget",
		"@arch:recall:patterns?category=cooking.x":                                        "category",
		"@arch:recall:files?status=eaten":                                                 "status",
		`@arch:store:learnings?colour=red{"insight":"a parameter a store does not take"}`: `unknown parameter "colour"`,
	} {
		for _, in := range []string{
			`@arch:store:learnings{"insight":"written before a malformed query"}; ` + bad,
			`@arch:store:learnings{"insight":"written before a malformed query"}; @arch:recall:patterns; ` + bad,
		} {
			if ans, err := a.Ask(ctx, h, in, AskOptions{}); err == nil || !strings.Contains(err.Error(), want) || len(ans) != 0 {
				t.Errorf("Ask(%q) = %d answers, %v; want no answer and an error with %q", in, len(ans), err, want)
			}
		}
	}
	if after, _ := a.Versions(ctx, "s1"); after != before {
		t.Errorf("malformed requests moved the versions %+v -> %+v", before, after)
	}
	res, err := a.ReadGlobal(ctx, GlobalRead{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 0 {
		t.Errorf("malformed requests wrote %+v", res.Records)
	}
}
