package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCLI_SearchLooksBack: engram search reads a time phrase from now,
// says which span it read, and ranks what was said then first, though an
// older message matches the words better.
func TestCLI_SearchLooksBack(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC()
	var in strings.Builder
	line := func(session, content string, at time.Time) {
		fmt.Fprintf(&in, `{"session":%q,"role":"user","content":%q,"time":%q}`+"\n", session, content, at.Format(time.RFC3339))
	}
	line("old", "my friend and I cook pasta, we cook together every week", now.Add(-40*24*time.Hour))
	line("new", "I tried to cook a mushroom risotto for my friend", now.Add(-50*time.Hour))
	for i := range 20 {
		line(fmt.Sprintf("o%d", i), fmt.Sprintf("the train to the office was late again on morning %d", i), now.Add(-time.Duration(i)*24*time.Hour))
	}
	e.ok(in.String(), "add")
	q := "what did I cook for my friend a couple of days ago"

	code, out, errOut := e.run("", "search", "--mode", "lexical", q)
	if code != 0 || !strings.Contains(errOut, `looked back to "a couple of days ago"`) {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if i, j := strings.Index(out, "risotto"), strings.Index(out, "pasta"); i < 0 || j >= 0 && j < i {
		t.Errorf("the risotto should come first:\n%s", out)
	}

	var res searchJSON
	if err := json.Unmarshal([]byte(e.ok("", "search", "--mode", "lexical", "--json", q)), &res); err != nil {
		t.Fatal(err)
	}
	if res.Span == nil || res.Span.Phrase != "a couple of days ago" || len(res.Hits) == 0 || !strings.Contains(res.Hits[0].Text, "risotto") {
		t.Errorf("--json: span %v, hits %+v", res.Span, res.Hits)
	}
	// --since takes precedence over the phrase.
	_, _, errOut = e.run("", "search", "--mode", "lexical", "--since", "90d", q)
	if strings.Contains(errOut, "looked back") {
		t.Errorf("with --since, stderr:\n%s", errOut)
	}
}
