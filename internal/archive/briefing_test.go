package archive

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// seedHistory fills the global history from session s0, as other agents
// would have: patterns, an unresolved and a resolved failure, a decision,
// an insight and an open intent. It returns the ids by what they are.
func seedHistory(t *testing.T, a *Archive) map[string]string {
	t.Helper()
	ctx := context.Background()
	h := register(t, a, AgentSpec{ID: "c1", SessionID: "s0", Model: "codex"})
	ids := map[string]string{}
	ids["ui pattern"] = ok(t)(h.RecordPattern(ctx, Pattern{Category: "ui.forms", Pattern: "debounce text inputs before validating them"})).ID
	ids["error pattern"] = ok(t)(h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "wrap errors with %w so callers can match them",
		Authority: Established})).ID
	ids["database pattern"] = ok(t)(h.RecordPattern(ctx, Pattern{Category: "database.sql", Pattern: "use parameterized queries, never string concatenation"})).ID
	ids["unresolved failure"] = ok(t)(h.RecordFailure(ctx, Failure{Category: "testing.integration", Approach: "sleeping two seconds before asserting",
		Reason: "still flaky on loaded CI machines"})).ID
	ids["resolved failure"] = ok(t)(h.RecordFailure(ctx, Failure{Category: "api.http", Approach: "retrying every 500 immediately",
		Reason: "hammered the upstream during its outage", Resolution: &Resolution{Approach: "exponential backoff with jitter", Outcome: Success}})).ID
	ids["decision"] = ok(t)(h.RecordDecision(ctx, Decision{Category: "api.versioning", Decision: "version the API in the URL path",
		Rationale: "caches and logs see it"})).ID
	ids["insight"] = ok(t)(h.RecordInsight(ctx, Insight{Category: "performance.io", Insight: "the CI disk is slow: fsync costs 4 ms"})).ID
	ids["intent"] = ok(t)(h.DeclareIntent(ctx, Intent{Description: "rename store.Conn to store.Pool", Paths: []string{"internal/store"}})).ID
	return ids
}

// TestBriefingNewSession: a session with no state of its own yet (no
// task, no files, no records) is briefed on the shared memory: the most
// important items of each kind within the tier's budget.
func TestBriefingNewSession(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	ids := seedHistory(t, a)
	register(t, a, AgentSpec{ID: "n1", SessionID: "new"})

	std, err := a.Briefing(ctx, "new", Standard, nil)
	if err != nil {
		t.Fatal(err)
	}
	for what, id := range ids {
		if what == "insight" {
			continue // insights are the full tier's
		}
		if !strings.Contains(std.Text, id) {
			t.Errorf("a new session's standard briefing lacks the %s %s:\n%s", what, id, std.Text)
		}
	}
	for _, want := range []string{"→ fix: exponential backoff with jitter", "sleeping two seconds before asserting — still flaky on loaded CI machines → no fix yet",
		"version the API in the URL path — because caches and logs see it", "rename store.Conn to store.Pool"} {
		if !strings.Contains(std.Text, want) {
			t.Errorf("standard briefing lacks %q:\n%s", want, std.Text)
		}
	}
	if std.Tokens > Standard.Budget() || std.Tokens != a.enc.Count(std.Text) || std.Omitted != 0 {
		t.Errorf("standard briefing: %d tokens (counted %d), %d omitted", std.Tokens, a.enc.Count(std.Text), std.Omitted)
	}
	// The established pattern is the most important one.
	if i, j := strings.Index(std.Text, ids["error pattern"]), strings.Index(std.Text, ids["database pattern"]); i > j {
		t.Errorf("an established pattern after a suggestion:\n%s", std.Text)
	}

	full, err := a.Briefing(ctx, "new", Full, nil)
	if err != nil {
		t.Fatal(err)
	}
	for what, id := range ids {
		if !strings.Contains(full.Text, id) {
			t.Errorf("a new session's full briefing lacks the %s %s:\n%s", what, id, full.Text)
		}
	}
	micro, err := a.Briefing(ctx, "new", Micro, nil)
	if err != nil {
		t.Fatal(err)
	}
	if micro.Text != "none:1/1:-:block=none:mem=3p,2f,1d,1i" || micro.Tokens > Micro.Budget() {
		t.Errorf("micro = %q (%d tokens)", micro.Text, micro.Tokens)
	}
}

// TestBriefingRelevanceOrders: a session's categories and files put what
// concerns it first in each kind; the rest follows while it fits.
func TestBriefingRelevanceOrders(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	ids := seedHistory(t, a)
	h := register(t, a, AgentSpec{ID: "n1", SessionID: "db"})
	ok(t)(h.UpdateResume(ctx, Resume{Task: "speed up the database migrations"}))

	std, err := a.Briefing(ctx, "db", Standard, nil)
	if err != nil {
		t.Fatal(err)
	}
	db, errp, ui := strings.Index(std.Text, ids["database pattern"]), strings.Index(std.Text, ids["error pattern"]), strings.Index(std.Text, ids["ui pattern"])
	if db < 0 || errp < 0 || ui < 0 || db > errp || errp > ui {
		t.Errorf("patterns not relevant first, then by importance (database %d, error %d, ui %d):\n%s", db, errp, ui, std.Text)
	}
	// The intent touches internal/store; a session that works there sees
	// it first.
	ok(t)(h.UpdateFile(ctx, FileState{Path: "internal/store/conn.go", Status: Modified}))
	std, _ = a.Briefing(ctx, "db", Standard, nil)
	if !strings.Contains(std.Text, ids["intent"]+" (session s0") {
		t.Errorf("the intent on the session's files is missing:\n%s", std.Text)
	}
}

// TestBriefingBudgetEachKind: with a large history the standard briefing
// stays within its budget and still shows every kind, each kind's most
// important items first; the full tier likewise, with its stats.
func TestBriefingBudgetEachKind(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{Limits: Limits{PatternsPerMinute: -1, WritesPerMinute: -1}})
	h := register(t, a, AgentSpec{ID: "c1", SessionID: "s0"})
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
		"mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray"}
	fruits := []string{"apple", "banana", "cherry", "damson", "elder", "fig", "grape", "guava", "kiwi", "lemon", "lime", "mango",
		"melon", "nectarine", "olive", "peach", "pear", "plum", "quince", "raisin", "sloe", "tangerine", "ugli", "yuzu"}
	var last map[string]string
	for i, w := range words {
		w2 := fruits[i]
		last = map[string]string{
			"pattern": created(t)(h.RecordPattern(ctx, Pattern{Category: "style.naming", Pattern: fmt.Sprintf("name the %s subsystem's types after its %d nouns", w, i)})),
			"failure": created(t)(h.RecordFailure(ctx, Failure{Approach: fmt.Sprintf("caching %s lookups in the %s layer", w, w2),
				Reason: fmt.Sprintf("%s readers saw stale %s rows for %d seconds", w2, w, i)})),
			"decision": created(t)(h.RecordDecision(ctx, Decision{Decision: fmt.Sprintf("the %s service owns its %d tables", w, i)})),
			"insight":  created(t)(h.RecordInsight(ctx, Insight{Insight: fmt.Sprintf("%s builds take %d minutes on CI when the %s cache is cold after a dependency bump", w, i, w2)})),
		}
	}
	last["intent"] = ok(t)(h.DeclareIntent(ctx, Intent{Description: "move config loading into internal/config", Categories: []string{"config"}})).ID
	register(t, a, AgentSpec{ID: "n1", SessionID: "new"})
	for _, c := range []struct {
		tier  Tier
		kinds []string
	}{
		{Standard, []string{"pattern", "failure", "decision", "intent"}},
		{Full, []string{"pattern", "failure", "decision", "insight", "intent"}},
	} {
		b, err := a.Briefing(ctx, "new", c.tier, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b.Tokens > c.tier.Budget() || b.Tokens != a.enc.Count(b.Text) || b.Omitted == 0 {
			t.Errorf("%s: %d tokens, %d omitted", c.tier, b.Tokens, b.Omitted)
		}
		for _, kind := range c.kinds {
			if !strings.Contains(b.Text, last[kind]) {
				t.Errorf("%s briefing lacks the newest %s %s:\n%s", c.tier, kind, last[kind], b.Text)
			}
		}
		if !strings.Contains(b.Text, "more left out") {
			t.Errorf("%s briefing does not say what it left out:\n%s", c.tier, b.Text)
		}
		if c.tier == Full && !strings.Contains(b.Text, "stats: ") {
			t.Errorf("full briefing without its stats:\n%s", b.Text)
		}
	}
}

// created returns a function that fails the test unless a write created
// a record (not merged it into another), and returns its id.
func created(t *testing.T) func(WriteResult, error) string {
	return func(wr WriteResult, err error) string {
		t.Helper()
		if err != nil || wr.Status != "created" {
			t.Fatalf("write: %+v (%+v), %v", wr, wr.Merged, err)
		}
		return wr.ID
	}
}
