package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBenchAssemble runs engram bench assemble on a LoCoMo-format set the
// test writes: a conversation larger than the budget whose questions ask
// about its start, which recency truncation has lost and assembly keeps
// (the arc and the retrieval reach back), every context within its budget;
// and a missing set is a clear error.
func TestBenchAssemble(t *testing.T) {
	e := newEnv(t)
	bench := filepath.Join(t.TempDir(), "bench")
	if err := os.MkdirAll(filepath.Join(bench, "locomo"), 0o755); err != nil {
		t.Fatal(err)
	}
	lines := []string{
		"I adopted a dog last week, a beagle named Rex.",
		"Congratulations! Beagles are lively dogs.",
		"My new job at the bakery starts on Monday.",
		"You will love baking bread every morning.",
	}
	for i := range 60 {
		lines = append(lines, fmt.Sprintf("On day %d the weather was rainy, so we stayed in and played cards until late at night.", i))
	}
	var turns []string
	for i, l := range lines {
		turns = append(turns, fmt.Sprintf(`{"speaker":%q,"dia_id":"D1:%d","text":%q}`, []string{"Ann", "Bo"}[i%2], i+1, l))
	}
	data := `[{"sample_id":"conv-1","conversation":{"speaker_a":"Ann","speaker_b":"Bo",
	  "session_1_date_time":"1:56 pm on 8 May, 2023","session_1":[` + strings.Join(turns, ",") + `]},
	 "qa":[{"question":"What is the name of Ann's beagle?","evidence":["D1:1"],"category":4},
	       {"question":"Where does Ann's new job start?","evidence":["D1:3"],"category":2}]}]`
	if err := os.WriteFile(filepath.Join(bench, "locomo", "locomo10.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "bench", "assemble", "--set", "locomo", "--bench-dir", bench, "--budget", "600", "--lexical", "--json")
	var rows []assembleRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 1 {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	if r.Questions != 2 || r.Fit != 0 || r.HistoryTokens <= 600 || r.ContextTokens > 600 {
		t.Errorf("row %+v", r)
	}
	if r.Engram != 1 || r.Recency != 0 {
		t.Errorf("the evidence is at the start of a conversation over the budget: engram %.2f, recency %.2f", r.Engram, r.Recency)
	}
	if want := []assembleKind{{"single-hop", 1, 1, 0}, {"temporal", 1, 1, 0}}; !slices.Equal(r.Kinds, want) {
		t.Errorf("by kind: %+v, want %+v", r.Kinds, want)
	}
	if out := e.ok("", "bench", "assemble", "--set", "locomo", "--bench-dir", bench, "--budget", "600", "--lexical", "--by-kind"); !strings.Contains(out, "temporal") {
		t.Errorf("--by-kind prints no kinds:\n%s", out)
	}
	// LongMemEval: each question over its own sessions, in order.
	if err := os.MkdirAll(filepath.Join(bench, "longmemeval"), 0o755); err != nil {
		t.Fatal(err)
	}
	var filler []string
	for i := range 40 {
		filler = append(filler, fmt.Sprintf(`{"role":%q,"content":"On day %d it rained and we played cards until late at night, again."}`, []string{"user", "assistant"}[i%2], i))
	}
	lme := `[{"question_id":"q1","question_type":"single-session-user","question":"What breed is my dog?","question_date":"2023/05/30 (Tue) 10:00",
	  "haystack_dates":["2023/05/20 (Sat) 10:00","2023/05/21 (Sun) 10:00"],"haystack_session_ids":["s1","s2"],
	  "haystack_sessions":[[{"role":"user","content":"My dog is a beagle named Rex.","has_answer":true},{"role":"assistant","content":"Beagles are lovely."}],
	    [` + strings.Join(filler, ",") + `]],
	  "answer_session_ids":["s1"]}]`
	if err := os.WriteFile(filepath.Join(bench, "longmemeval", "longmemeval_oracle.json"), []byte(lme), 0o644); err != nil {
		t.Fatal(err)
	}
	out = e.ok("", "bench", "assemble", "--set", "longmemeval", "--bench-dir", bench, "--budget", "600", "--lexical", "--json")
	rows = nil
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rows) != 1 || rows[0].Questions != 1 || rows[0].Engram != 1 || rows[0].Recency != 0 || rows[0].ContextTokens > 600 || rows[0].Refused != 0 {
		t.Errorf("longmemeval rows %+v", rows)
	}
	e.fail("", 1, "locomo10.json", "bench", "assemble", "--bench-dir", filepath.Join(t.TempDir(), "none"))
	e.fail("", 2, "--budget 100", "bench", "assemble", "--budget", "100")
	e.fail("", 2, "--set gocommits", "bench", "assemble", "--set", "gocommits")
}
