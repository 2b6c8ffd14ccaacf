package archive

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Query
	}{
		{"@arch:recall:patterns?scope=auth&limit=5", Query{Intent: Recall, Domain: Patterns, Params: map[string]string{"scope": "auth", "limit": "5"}}},
		{"@arch:recall:failures?error=timeout&agent=opus", Query{Intent: Recall, Domain: Failures, Params: map[string]string{"error": "timeout", "agent": "opus"}}},
		{`@arch:store:failure{approach:"recursive walk",outcome:"stack overflow",resolution:"use iterative"}`, Query{Intent: Store, Domain: Failures,
			Data: json.RawMessage(`{"approach":"recursive walk","outcome":"stack overflow","resolution":"use iterative"}`)}},
		{"@arch:check:decisions?id=api-versioning", Query{Intent: Check, Domain: Decisions, Params: map[string]string{"id": "api-versioning"}}},
		{"@arch:recall:learnings?q=race%20in%20cache", Query{Intent: Recall, Domain: Learnings, Params: map[string]string{"q": "race in cache"}}},
		{`  @arch:store:pattern?x=1{"pattern":"a {b}; c","category":"error.handling"}  `, Query{Intent: Store, Domain: Patterns,
			Params: map[string]string{"x": "1"}, Data: json.RawMessage(`{"category":"error.handling","pattern":"a {b}; c"}`)}},
		{"@arch:recall:insights", Query{Intent: Recall, Domain: Learnings}},
	} {
		got, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if again, err := Parse(got.String()); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("round trip of %q through %q: %+v, %v", c.in, got.String(), again, err)
		}
	}
	for in, want := range map[string]string{
		"recall:patterns":                        "starts with @arch:",
		"@arch:remember:patterns":                `unknown intent "remember"`,
		"@arch:recall:widgets":                   `unknown domain "widgets"`,
		"@arch:recall:patterns?scope":            "want key=value",
		"@arch:recall:patterns?Scope=x":          "lower-case",
		"@arch:recall:patterns?scope=":           "no value",
		"@arch:recall:patterns?a=1&a=2":          "given twice",
		"@arch:store:patterns":                   "store needs data",
		"@arch:recall:patterns{\"a\":1}":         "only store takes data",
		"@arch:store:patterns{\"a\":1} trailing": "text after",
		"@arch:store:patterns{not json}":         "data:",
		"@arch:recall:patterns?q=%zz":            "value of q",
		"@arch:recall":                           "want @arch:INTENT:DOMAIN",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", in, err, want)
		}
	}
	qs, err := ParseAll(`@arch:recall:patterns?scope=auth; @arch:recall:failures?scope=auth;`)
	if err != nil || len(qs) != 2 || qs[1].Domain != Failures {
		t.Errorf("multi-query: %+v, %v", qs, err)
	}
	if _, err := ParseAll(`@arch:store:patterns{"a":"x"; @arch:recall:files`); err == nil {
		t.Error("an unterminated object was accepted")
	}
}

// FuzzParse checks the parser never panics, and that whatever it accepts
// renders to a query that parses back to the same thing.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"@arch:recall:patterns?scope=auth&limit=5",
		`@arch:store:failure{approach:"recursive walk",outcome:"stack overflow"}`,
		"@arch:check:decisions?id=api-versioning; @arch:recall:files?path=a/b.go",
		`@arch:store:learnings{"insight":"x \"y\" {z}"}`,
		"@arch:recall:patterns?q=%41%26",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		qs, err := ParseAll(in)
		if err != nil {
			return
		}
		for _, q := range qs {
			again, err := Parse(q.String())
			if err != nil {
				t.Fatalf("%q parsed to %+v, whose rendering %q does not parse: %v", in, q, q.String(), err)
			}
			if !reflect.DeepEqual(again, q) {
				t.Fatalf("%q: %+v renders as %q, which parses to %+v", in, q, q.String(), again)
			}
		}
	})
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		q      string
		retro  bool
		intent QueryIntent
		domain Domain
	}{
		{"What authentication patterns have we used?", true, Recall, Patterns},
		{"Did we encounter any timeout errors?", true, Recall, Failures},
		{"What decisions did we make about the API design?", true, Recall, Decisions},
		{"Have we modified the config file?", true, Check, Files},
		{"What did we learn from the refactoring?", true, Recall, Learnings},
		{"Log this: recursive approach caused stack overflow", true, Store, Failures},
		// What the shared memory holds now is a recall too.
		{"What patterns do we have for error handling?", true, Recall, Patterns},
		{"Which decisions are on record for the API?", true, Recall, Decisions},
		{"What do we know about flaky tests?", true, Recall, ""},
		{"Are there known issues with the cache?", true, Check, Failures},
		{"Do we have a pattern for retries?", true, Check, Patterns},
		{"List the failures in the database layer", true, Recall, Failures},
		{"What patterns should we use?", false, "", ""},
		{"How do we implement caching?", false, "", ""},
		{"What's the best approach for this?", false, "", ""},
		{"We need to add authentication", false, "", ""},
		{"Should we use Redis or Memcached?", false, "", ""},
		{"How should we handle errors?", false, "", ""},
		{"What do we have to do next?", false, "", ""},
		{"Are there patterns we should follow for caching?", false, "", ""},
		{"Fix the login page", false, "", ""},
	} {
		got := Classify(c.q)
		if got.Retrospective != c.retro {
			t.Errorf("%q: retrospective %v (%s), want %v", c.q, got.Retrospective, got.Reason, c.retro)
			continue
		}
		if !c.retro {
			if got.Reason == "" || got.Action != ActionReject {
				t.Errorf("%q: refused without a reason: %+v", c.q, got)
			}
			continue
		}
		if got.Intent != c.intent || got.Domain != c.domain {
			t.Errorf("%q: %s %s, want %s %s", c.q, got.Intent, got.Domain, c.intent, c.domain)
		}
		if got.Confidence < 0.5 || got.Action == ActionReject {
			t.Errorf("%q: confidence %.2f, action %s", c.q, got.Confidence, got.Action)
		}
	}
	c := Classify("Did the opus agent hit a TimeoutError in internal/cache/lru.go yesterday?")
	if e := c.Entities; e.Agent != "opus" || e.ErrorType != "TimeoutError" || len(e.Files) != 1 || e.Files[0] != "internal/cache/lru.go" || e.Timeframe != "yesterday" {
		t.Errorf("entities = %+v", e)
	}
}

// FuzzClassify checks the classifier never panics and always decides.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"What did we decide about X?", "how should we do it", "log this: a caused b", "", "?;?;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, q := range SplitQuestions(in) {
			c := Classify(q)
			if c.Action == "" || (c.Action == ActionReject) != (!c.Retrospective || c.Confidence < 0.5) {
				t.Fatalf("%q: %+v", q, c)
			}
			if c.Query != "" {
				if _, err := Parse(c.Query); err != nil {
					t.Fatalf("%q: classification query %q does not parse: %v", q, c.Query, err)
				}
			}
		}
	})
}
