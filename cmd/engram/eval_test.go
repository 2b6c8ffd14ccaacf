package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

func TestItemsOf(t *testing.T) {
	hit := func(entry, msg string, files ...string) store.Hit {
		var h store.Hit
		h.Chunk.EntryID, h.Occurrence.MsgID, h.Occurrence.Files = entry, msg, files
		return h
	}
	// Turns with the same content are one entry: a hit on it finds them
	// all, the hit's own occurrence first; repeats count once.
	shared := map[string][]string{"e1": {"s1:1", "s9:1"}, "e2": {"s1:2"}}
	hits := []store.Hit{hit("e1", "s9:1"), hit("e1", "s1:1"), hit("e2", "s1:2"), hit("e3", "")}
	if got := itemsOf(hits, false, shared, 10); !slices.Equal(got, []string{"s9:1", "s1:1", "s1:2"}) {
		t.Errorf("turns: %v", got)
	}
	if got := itemsOf(hits, false, shared, 2); !slices.Equal(got, []string{"s9:1", "s1:1"}) {
		t.Errorf("turns, k 2: %v", got)
	}
	files := []store.Hit{hit("a", "", "x.go"), hit("b", "", "x.go"), hit("c", "", "y.go")}
	if got := itemsOf(files, true, nil, 10); !slices.Equal(got, []string{"x.go", "y.go"}) {
		t.Errorf("files: %v", got)
	}
}

// TestCLI_Eval runs engram eval end to end on a LoCoMo-format set the test
// writes: every mode is scored, pre-fetch economy and the confidence table
// come out, and a set whose data is missing is skipped with a reason.
func TestCLI_Eval(t *testing.T) {
	e := newEnv(t)
	bench := filepath.Join(t.TempDir(), "bench")
	if err := os.MkdirAll(filepath.Join(bench, "locomo"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Two speakers talk about their pets, their jobs and a trip; each
	// question's evidence is one turn.
	lines := []string{
		"I adopted a dog last week, a beagle named Rex.",
		"Congratulations! Beagles are lively dogs.",
		"My new job at the bakery starts on Monday.",
		"You will love baking bread every morning.",
		"We are planning a trip to Lisbon in June.",
		"Lisbon has wonderful tiles and trams.",
		"Rex chewed my running shoes yesterday.",
		"Puppies chew everything, get him a toy.",
		"The bakery owner taught me to make croissants.",
		"Croissants take a lot of butter and patience.",
		"We booked a hotel near the Lisbon harbour.",
		"The harbour is lovely at sunset.",
	}
	// Small talk, so that the corpus model has enough to learn from.
	for i := range 30 {
		lines = append(lines, fmt.Sprintf([]string{
			"The weather was rainy and cold on day %d, so we stayed home with music.",
			"On day %d the football match ended in a draw, and the music was loud.",
			"Day %d was sunny; we listened to music and watched the football.",
		}[i%3], i))
	}
	var turns []string
	for i, l := range lines {
		speaker := []string{"Ann", "Bo"}[i%2]
		turns = append(turns, fmt.Sprintf(`{"speaker":%q,"dia_id":"D1:%d","text":%q}`, speaker, i+1, l))
	}
	data := `[{"sample_id":"conv-1","conversation":{"speaker_a":"Ann","speaker_b":"Bo",
	  "session_1_date_time":"1:56 pm on 8 May, 2023","session_1":[` + strings.Join(turns, ",") + `]},
	 "qa":[{"question":"What is the name of Ann's beagle?","evidence":["D1:1"],"category":4},
	       {"question":"Where is Ann's new job?","evidence":["D1:3"],"category":4},
	       {"question":"Which hotel did they book in Lisbon?","evidence":["D1:11"],"category":4}]}]`
	if err := os.WriteFile(filepath.Join(bench, "locomo", "locomo10.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out := e.ok("", "eval", "--bench-dir", bench, "--set", "locomo,longmemeval", "--dir", filepath.Join(t.TempDir(), "stores"),
		"--economy", "100", "--json")
	var got evalResults
	if err := jsonUnmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	modes := map[string]evalRow{}
	for _, r := range got.Results {
		if r.Set != "locomo" || r.Questions != 3 {
			t.Errorf("row %+v", r)
		}
		modes[r.Mode] = r
	}
	if len(modes) != 3 {
		t.Fatalf("want lexical, vector and hybrid rows, got %+v", got.Results)
	}
	for _, m := range []string{"lexical", "hybrid"} {
		if r := modes[m]; r.Recall5 != 1 || r.MRR <= 0.5 {
			t.Errorf("%s: every question names its answer's words, yet recall@5 %.3f, MRR %.3f", m, r.Recall5, r.MRR)
		}
	}
	if len(got.Economy) != 2 {
		t.Fatalf("economy rows %+v", got.Economy)
	}
	for _, r := range got.Economy {
		if r.Budget != 100 || r.Questions != 3 || r.Tokens > 100 {
			t.Errorf("economy %+v", r)
		}
		if r.Policy == "packed" && r.Recall != 1 {
			t.Errorf("a packed 100-token block should hold every answer here: %+v", r)
		}
	}
	// The confidence table accounts for every candidate once, and finds
	// the three evidence turns among them.
	if len(got.Confidence) != len(confidenceBins) {
		t.Fatalf("confidence rows %+v", got.Confidence)
	}
	candidates, relevant := 0, 0
	for _, r := range got.Confidence {
		candidates += r.Candidates
		relevant += r.Relevant
	}
	if most := 3 * retrieve.DefaultCandidates; candidates < 3 || candidates > most || relevant != 3 {
		t.Errorf("confidence: %d candidates, %d relevant; want at most %d and 3\n%+v", candidates, relevant, most, got.Confidence)
	}
	code, out, errOut := e.run("", "eval", "--bench-dir", bench, "--set", "longmemeval", "--dir", filepath.Join(t.TempDir(), "stores"))
	if code != 0 || !strings.Contains(errOut, "longmemeval: skipped: data not found") {
		t.Errorf("missing set: exit %d\n%s\n%s", code, out, errOut)
	}

	// With a re-ranker configured, rerank is one of the default modes; one
	// that prefers small talk puts the evidence lower.
	code, _, errOut = e.run("", "eval", "--bench-dir", bench, "--set", "locomo", "--mode", "rerank", "--economy", "0", "--confidence=false")
	if code != 0 || !strings.Contains(errOut, "mode rerank skipped: no re-ranker") {
		t.Errorf("rerank without a re-ranker: exit %d\n%s", code, errOut)
	}
	tei := &teiServer{}
	tei.favourite.Store("music")
	hs := httptest.NewServer(tei)
	defer hs.Close()
	e.vars["ENGRAM_RERANK_PROVIDER"], e.vars["ENGRAM_RERANK_URL"] = "tei", hs.URL
	out = e.ok("", "eval", "--bench-dir", bench, "--set", "locomo", "--economy", "0", "--confidence=false", "--json")
	got = evalResults{}
	if err := jsonUnmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	modes = map[string]evalRow{}
	for _, r := range got.Results {
		modes[r.Mode] = r
	}
	if r, ok := modes["rerank"]; !ok || len(modes) != 4 || r.MRR >= modes["hybrid"].MRR/2 {
		t.Errorf("with a re-ranker that prefers small talk: %+v", got.Results)
	}
}

func TestConfidenceBin(t *testing.T) {
	for c, want := range map[float64]int{0: 0, 0.49: 0, 0.5: 1, 0.84: 3, 0.85: 4, 0.9: 5, 1: 5} {
		if got := confidenceBin(c); got != want {
			t.Errorf("confidenceBin(%v) = %d (%.2f-), want %d", c, got, confidenceBins[got], want)
		}
	}
}
