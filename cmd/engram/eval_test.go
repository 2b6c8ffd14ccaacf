package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
	if got := itemsOf(hits, shared, 10); !slices.Equal(got, []string{"s9:1", "s1:1", "s1:2"}) {
		t.Errorf("turns: %v", got)
	}
	if got := itemsOf(hits, shared, 2); !slices.Equal(got, []string{"s9:1", "s1:1"}) {
		t.Errorf("turns, k 2: %v", got)
	}
	files := []store.Hit{hit("a", "", "x.go"), hit("b", "", "x.go"), hit("c", "", "y.go")}
	if got := itemsOf(files, nil, 10); !slices.Equal(got, []string{"x.go", "y.go"}) {
		t.Errorf("files: %v", got)
	}
	// A mixed store's hits are files and turns, each its own item.
	mixed := []store.Hit{hit("a", "", "x.go"), hit("e2", "s1:2"), hit("b", "", "x.go"), hit("e1", "s1:1")}
	if got := itemsOf(mixed, shared, 10); !slices.Equal(got, []string{"x.go", "s1:2", "s1:1", "s9:1"}) {
		t.Errorf("files and turns: %v", got)
	}
}

// TestCLI_Eval runs engram eval end to end on a LoCoMo-format set the test
// writes: every mode is scored, pre-fetch economy and the confidence table
// come out, and a set whose data is missing is skipped with a reason.
func TestCLI_Eval(t *testing.T) {
	e := newEnv(t)
	bench := tinyLoCoMo(t)
	out := e.ok("", "eval", "--bench-dir", bench, "--set", "locomo,longmemeval", "--dir", filepath.Join(t.TempDir(), "stores"),
		"--economy", "100", "--json")
	var got evalResults
	if err := jsonUnmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Backend != backendSQLite {
		t.Errorf("backend %q, want sqlite", got.Backend)
	}
	modes := map[string]evalRow{}
	for _, r := range got.Results {
		if r.Set != "locomo" || r.Questions != 3 {
			t.Errorf("row %+v", r)
		}
		modes[r.Mode] = r
	}
	if len(modes) != 4 {
		t.Fatalf("want lexical, vector, hybrid and bm25 rows, got %+v", got.Results)
	}
	for _, m := range []string{"lexical", "hybrid", "bm25"} {
		if r := modes[m]; r.Recall5 != 1 || r.MRR <= 0.5 {
			t.Errorf("%s: every question names its answer's words, yet recall@5 %.3f, MRR %.3f", m, r.Recall5, r.MRR)
		}
	}
	// The limit check runs on engram's modes, not on the baseline; the
	// test/doc share is for code sets only.
	for m, r := range modes {
		if (r.LimitMoved == nil) != (m == "bm25") || r.DistractorFirst != nil {
			t.Errorf("%s: limit check %v, test/doc first %v", m, r.LimitMoved, r.DistractorFirst)
		}
	}
	if len(got.Economy) != 2 {
		t.Fatalf("economy rows %+v", got.Economy)
	}
	for _, r := range got.Economy {
		if r.Budget != 100 || r.Questions != 3 || r.Tokens > 100 {
			t.Errorf("economy %+v", r)
		}
		if r.Policy == "packed" && (r.Recall != 1 || r.Carried != 1) {
			t.Errorf("a packed 100-token block should hold every answer here: %+v", r)
		}
		// The second question is asked of the conversation without the
		// session that holds its answer: nothing to inject.
		if r.Policy == "default" && (r.Negatives != 1 || r.FalseInjection != 0 || r.Carried == 0) {
			t.Errorf("default policy: %+v", r)
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
	code, _, errOut := e.run("", "eval", "--bench-dir", bench, "--set", "locomo", "--off", "symbols")
	if code != 2 || !strings.Contains(errOut, `unknown search stage "symbols"`) {
		t.Errorf("--off symbols: exit %d\n%s", code, errOut)
	}
	var off evalResults
	if err := jsonUnmarshal(e.ok("", "eval", "--bench-dir", bench, "--set", "locomo", "--mode", "lexical", "--economy", "0",
		"--confidence=false", "--off", "sentence,speaker", "--json"), &off); err != nil || len(off.Results) != 1 {
		t.Errorf("--off: %v %+v", err, off)
	}
	code, out, errOut = e.run("", "eval", "--bench-dir", bench, "--set", "longmemeval", "--dir", filepath.Join(t.TempDir(), "stores"))
	// Skipped, and as nothing else was asked, nothing scored: a failure.
	if code != 1 || !strings.Contains(errOut, "longmemeval: skipped: data not found") || !strings.Contains(errOut, "nothing was scored") {
		t.Errorf("missing set: exit %d\n%s\n%s", code, out, errOut)
	}

	// With a re-ranker configured, rerank is one of the default modes; one
	// that prefers small talk puts the evidence lower.
	code, _, errOut = e.run("", "eval", "--bench-dir", bench, "--set", "locomo", "--mode", "rerank", "--economy", "0", "--confidence=false")
	if code != 1 || !strings.Contains(errOut, "mode rerank skipped: no re-ranker") || !strings.Contains(errOut, "nothing was scored") {
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
	if r, ok := modes["rerank"]; !ok || len(modes) != 5 || r.MRR >= modes["hybrid"].MRR/2 {
		t.Errorf("with a re-ranker that prefers small talk: %+v", got.Results)
	}
}

// tinyLoCoMo writes a bench folder with a LoCoMo-format set of one
// conversation and three questions, and returns the folder.
func tinyLoCoMo(t *testing.T) string {
	t.Helper()
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
	return bench
}

func TestConfidenceBin(t *testing.T) {
	for c, want := range map[float64]int{0: 0, 0.49: 0, 0.5: 1, 0.84: 3, 0.85: 4, 0.9: 5, 1: 5} {
		if got := confidenceBin(c); got != want {
			t.Errorf("confidenceBin(%v) = %d (%.2f-), want %d", c, got, confidenceBins[got], want)
		}
	}
}

// writeFiles writes files (path: content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tinyRepo writes a small Go repository: the code two questions are
// about, a test and a changelog that repeat its words, and enough other
// packages for the corpus model to learn from.
func tinyRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "tinyrepo")
	files := map[string]string{
		"net/cookie.go": `package net

// readSetCookies parses all "Set-Cookie" values from the header and
// returns the successfully parsed cookies.
func readSetCookies(h map[string][]string) []string {
	var cookies []string
	for _, line := range h["Set-Cookie"] {
		cookies = append(cookies, line)
	}
	return cookies
}
`,
		"net/cookie_test.go": `package net

import "testing"

func TestReadSetCookies(t *testing.T) {
	if got := readSetCookies(nil); len(got) != 0 {
		t.Errorf("readSetCookies(nil) = %v", got)
	}
}
`,
		"net/client.go": `package net

import "time"

// Client sends requests. Timeout limits the time a request takes,
// connection, redirects and reading the body included.
type Client struct {
	Timeout time.Duration
}
`,
		"CHANGELOG.md": "# Changes\n\n- net: the client's request timeout covers redirects.\n- net: Set-Cookie values parsed more strictly.\n",
	}
	words := []string{"matrix", "vector", "queue", "stack", "graph", "tree", "heap", "hash", "ring", "list"}
	for i := range 30 {
		w, v := words[i%len(words)], words[(i+3)%len(words)]
		files[fmt.Sprintf("pkg%d/%s.go", i, w)] = fmt.Sprintf(`package pkg%d

// New%s makes an empty %s of %s values, sized for n of them.
func New%s(n int) []int { return make([]int, 0, n) }

// Push%s adds a %s value to the %s.
func Push%s(s []int, v int) []int { return append(s, v) }
`, i, strings.ToUpper(w[:1])+w[1:], w, v, strings.ToUpper(w[:1])+w[1:], strings.ToUpper(v[:1])+v[1:], v, w, strings.ToUpper(v[:1])+v[1:])
	}
	writeFiles(t, repo, files)
	return repo
}

// TestCLI_EvalOwnSet runs engram eval --queries --corpus on a tiny
// repository the test writes: the whole tree is indexed, every mode and
// the BM25 baseline are scored on distinct files, and the ranking checks
// come out.
func TestCLI_EvalOwnSet(t *testing.T) {
	e := newEnv(t)
	repo := tinyRepo(t)
	queries := filepath.Join(t.TempDir(), "queries.jsonl")
	writeFiles(t, filepath.Dir(queries), map[string]string{"queries.jsonl": `{"id":"q1","query":"parse the Set-Cookie header values in readSetCookies","prefix":"net","relevant":["net/cookie.go"]}
{"id":"q2","query":"timeout on a client request","relevant":["net/client.go"]}
`})
	out := e.ok("", "eval", "--queries", queries, "--corpus", repo, "--dir", filepath.Join(t.TempDir(), "stores"), "--json")
	var got evalResults
	if err := jsonUnmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	modes := map[string]evalRow{}
	for _, r := range got.Results {
		if r.Set != "tinyrepo" || r.Questions != 2 || r.Items < 34 {
			t.Errorf("row %+v: want the set named after the corpus, 2 questions, every file indexed", r)
		}
		if r.DistractorFirst == nil || (r.LimitMoved == nil) != (r.Mode == "bm25") {
			t.Errorf("%s: test/doc first %v, limit check %v", r.Mode, r.DistractorFirst, r.LimitMoved)
		}
		modes[r.Mode] = r
	}
	if len(modes) != 4 {
		t.Fatalf("want lexical, vector, hybrid and bm25 rows, got %+v", got.Results)
	}
	for _, m := range []string{"lexical", "hybrid", "bm25"} {
		if r := modes[m]; r.Recall10 != 1 {
			t.Errorf("%s: recall@10 %.3f; the code is among the 34 files for both questions", m, r.Recall10)
		}
	}
	if len(got.Economy) != 0 {
		t.Errorf("economy is for conversation sets: %+v", got.Economy)
	}

	// --dir beside the corpus: its set's stores would go where the
	// corpus is (the set is named after it), which is refused, not
	// emptied; a --dir of an earlier run is emptied and used again.
	before, err := os.ReadDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := e.run("", "eval", "--queries", queries, "--corpus", repo, "--dir", filepath.Dir(repo), "--mode", "lexical")
	if code != 1 || !strings.Contains(errOut, "earlier run") {
		t.Errorf("--dir holding the corpus: exit %d, %s", code, errOut)
	}
	if after, err := os.ReadDir(repo); err != nil || len(after) != len(before) {
		t.Fatalf("the corpus after a refused run: %d entries of %d, %v", len(after), len(before), err)
	}
	stores := filepath.Join(t.TempDir(), "again")
	for range 2 {
		e.ok("", "eval", "--queries", queries, "--corpus", repo, "--dir", stores, "--mode", "lexical", "--confidence=false")
	}

	// The text output has the checks' table.
	out = e.ok("", "eval", "--queries", queries, "--corpus", repo, "--mode", "lexical,bm25", "--confidence=false")
	for _, want := range []string{"tinyrepo", "bm25", "test/doc first", "limit moves top 10"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestCLI_EvalMixed runs engram eval --set mixed on a bench folder the
// test writes: a ripgrep set whose archive is a tiny repository, and a
// LongMemEval pool with a session about the same code. The repository and
// the sessions go into one store; each set's questions are scored as a
// part of their own, over files and turns alike.
func TestCLI_EvalMixed(t *testing.T) {
	e := newEnv(t)
	bench := t.TempDir()
	repo := tinyRepo(t)
	writeFiles(t, bench, map[string]string{
		"ripgrep/queries.jsonl": `{"id":"r1","query":"parse the Set-Cookie header values in readSetCookies","relevant":["net/cookie.go"]}
{"id":"r2","query":"timeout on a client request","relevant":["net/client.go"]}
`,
		"longmemeval/longmemeval_oracle.json": `[{"question_id":"q1","question_type":"single-session-user","question":"What breed is my dog?",
  "haystack_dates":["2023/05/20 (Sat) 10:00","2023/05/21 (Sun) 10:00"],"haystack_session_ids":["s1","s2"],
  "haystack_sessions":[[{"role":"user","content":"My dog is a beagle named Rex.","has_answer":true},{"role":"assistant","content":"Beagles are lovely."}],
    [{"role":"user","content":"My client request needs a timeout, and readSetCookies drops a cookie."},{"role":"assistant","content":"Set Timeout on the Client."}]],
  "answer_session_ids":["s1"]}]`,
	})
	writeTarGz(t, filepath.Join(bench, "ripgrep", "ripgrep.tar.gz"), repo, "ripgrep")
	code, out, errOut := e.run("", "eval", "--bench-dir", bench, "--set", "mixed", "--dir", filepath.Join(t.TempDir(), "stores"), "--json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var got evalResults
	if err := jsonUnmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(errOut, "not indexed") {
		t.Errorf("a turn taken for a file left out of the index:\n%s", errOut)
	}
	rows := map[string]evalRow{}
	for _, r := range got.Results {
		rows[r.Set+" "+r.Mode] = r
		// 34 files and 4 turns, in one store.
		if r.Items != 38 {
			t.Errorf("%s %s: %d items, want the 34 files and 4 turns", r.Set, r.Mode, r.Items)
		}
	}
	for _, part := range []struct {
		name      string
		questions int
		code      bool
	}{{"mixed/ripgrep", 2, true}, {"mixed/longmemeval", 1, false}} {
		for _, m := range []string{"lexical", "vector", "hybrid", "bm25"} {
			r, ok := rows[part.name+" "+m]
			if !ok {
				t.Errorf("no %s row for %s: %+v", m, part.name, got.Results)
				continue
			}
			if r.Questions != part.questions || (r.DistractorFirst != nil) != part.code {
				t.Errorf("%s %s: %d questions, test/doc first %v", part.name, m, r.Questions, r.DistractorFirst)
			}
			if m != "vector" && r.Recall10 != 1 {
				t.Errorf("%s %s: recall@10 %.3f; every answer is among the 38 items", part.name, m, r.Recall10)
			}
		}
	}
	if len(got.Results) != 8 {
		t.Errorf("want 8 rows (4 modes, 2 parts), got %d", len(got.Results))
	}
	if len(got.Economy) != 0 || !strings.Contains(errOut, "pre-fetch economy not measured on a mixed set") {
		t.Errorf("economy on a mixed set: %+v\n%s", got.Economy, errOut)
	}
	sets := map[string]bool{}
	for _, r := range got.Confidence {
		sets[r.Set] = true
	}
	if !sets["mixed/ripgrep"] || !sets["mixed/longmemeval"] || len(sets) != 2 {
		t.Errorf("confidence rows for %v, want one table per part", sets)
	}
}

// writeTarGz writes the tree at dir to a gzip-compressed tar archive at
// path, under the top directory top, as the ripgrep set's archive is.
func writeTarGz(t *testing.T, path, dir, top string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = errors.Join(tw.Close(), zw.Close())
	}
	if err == nil {
		err = os.WriteFile(path, buf.Bytes(), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestCLI_EvalBadInput: bad input stops engram eval with an error that
// names the file (and line), a non-zero exit, and no score.
func TestCLI_EvalBadInput(t *testing.T) {
	e := newEnv(t)
	repo := tinyRepo(t)
	dir := t.TempDir()
	good := `{"query":"timeout on a client request","relevant":["net/client.go"]}`
	writeFiles(t, dir, map[string]string{
		"empty.jsonl":     "",
		"malformed.jsonl": good + "\n{\"query\": \"x\", \"relevant\": [\n",
		"notincorpus.jsonl": good + "\n" + good + "\n" +
			`{"query":"cookies","relevant":["net/cookies.go"]}` + "\n",
	})
	emptyDir := filepath.Join(dir, "nothing")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name            string
		queries, corpus string
		want            []string
	}{
		{"MissingQueries", filepath.Join(dir, "none.jsonl"), repo, []string{filepath.Join(dir, "none.jsonl"), "no such file"}},
		{"EmptyQueries", filepath.Join(dir, "empty.jsonl"), repo, []string{filepath.Join(dir, "empty.jsonl"), "no queries"}},
		{"Malformed", filepath.Join(dir, "malformed.jsonl"), repo, []string{filepath.Join(dir, "malformed.jsonl") + ":2:"}},
		{"NotInCorpus", filepath.Join(dir, "notincorpus.jsonl"), repo, []string{filepath.Join(dir, "notincorpus.jsonl") + ":3:", `"net/cookies.go" is not in the corpus`}},
		{"MissingCorpus", filepath.Join(dir, "notincorpus.jsonl"), filepath.Join(dir, "gone"), []string{filepath.Join(dir, "gone"), "no such file"}},
		{"EmptyCorpus", filepath.Join(dir, "notincorpus.jsonl"), emptyDir, []string{emptyDir, "empty"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := e.run("", "eval", "--queries", c.queries, "--corpus", c.corpus, "--dir", filepath.Join(t.TempDir(), "stores"))
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			if strings.Contains(errOut, "recall") {
				t.Errorf("a score was printed:\n%s", errOut)
			}
		})
	}
	t.Run("QueriesWithoutCorpus", func(t *testing.T) {
		if code, _, errOut := e.run("", "eval", "--queries", filepath.Join(dir, "empty.jsonl")); code != 2 || !strings.Contains(errOut, "--corpus") {
			t.Errorf("exit %d\n%s", code, errOut)
		}
	})
	// A malformed benchmark set stops the run before any set is scored,
	// even one that comes first and is fine.
	t.Run("MalformedBenchSet", func(t *testing.T) {
		bench := filepath.Join(t.TempDir(), "bench")
		writeFiles(t, bench, map[string]string{
			"locomo/locomo10.json": `[{"sample_id":"c","conversation":{"speaker_a":"A","speaker_b":"B",
			  "session_1":[{"speaker":"A","dia_id":"D1:1","text":"I adopted a dog."}]},
			  "qa":[{"question":"What did A adopt?","evidence":["D1:1"],"category":4}]}]`,
			"longmemeval/longmemeval_oracle.json": "[\n{\"question_id\": \"q1\",\n \"haystack_sessions\": [[{\"role\": \"user\", \"content\": ]]}]",
		})
		code, out, errOut := e.run("", "eval", "--bench-dir", bench, "--set", "locomo,longmemeval", "--dir", filepath.Join(t.TempDir(), "stores"))
		lme := filepath.Join(bench, "longmemeval", "longmemeval_oracle.json") + ":3:"
		if code != 1 || out != "" || !strings.Contains(errOut, lme) || strings.Contains(errOut, "recall") {
			t.Errorf("exit %d, stdout %q; want 1, nothing, and %s\n%s", code, out, lme, errOut)
		}
	})
}

// TestCLI_EvalGoCommits runs the gocommits set against a Go tree the test
// writes: the whole tree by default, its non-test .go files with
// --non-test.
func TestCLI_EvalGoCommits(t *testing.T) {
	e := newEnv(t)
	goroot := t.TempDir()
	if err := os.Rename(tinyRepo(t), filepath.Join(goroot, "src")); err != nil {
		t.Fatal(err)
	}
	bench := filepath.Join(t.TempDir(), "bench")
	writeFiles(t, bench, map[string]string{"gocommits/queries.jsonl": `{"id":"c1","query":"parse Set-Cookie header values","prefix":"net","relevant":["net/cookie.go"]}
{"id":"c2","query":"client request timeout","prefix":"net","relevant":["net/client.go"]}
`})
	items := map[bool]int{}
	for _, nonTest := range []bool{false, true} {
		args := []string{"eval", "--bench-dir", bench, "--set", "gocommits", "--goroot", goroot, "--mode", "lexical,hybrid,bm25",
			"--confidence=false", "--dir", filepath.Join(t.TempDir(), "stores"), "--json"}
		want := "gocommits"
		if nonTest {
			args, want = append(args, "--non-test"), "gocommits-nontest"
		}
		var got evalResults
		if out := e.ok("", args...); jsonUnmarshal(out, &got) != nil {
			t.Fatalf("not JSON:\n%s", out)
		}
		if len(got.Results) != 3 {
			t.Fatalf("rows %+v", got.Results)
		}
		for _, r := range got.Results {
			if r.Set != want || r.Questions != 2 || r.Recall10 != 1 {
				t.Errorf("non-test %v: row %+v", nonTest, r)
			}
			items[nonTest] = r.Items
		}
	}
	// The whole tree holds the test and the changelog; the non-test
	// corpus, the 32 non-test .go files alone.
	if items[true] != 32 || items[false] != 34 {
		t.Errorf("files indexed: %d whole, %d non-test; want 34 and 32", items[false], items[true])
	}
}

// TestCLI_EvalBackends runs the same small conversation and code sets on
// SQLite and on PostgreSQL (--postgres, databases made for the run and
// dropped after it): every mode scores the same on both, as issue 27
// asks of the full benchmark sets (recall within 0.01), and pre-fetch
// carries the same evidence.
func TestCLI_EvalBackends(t *testing.T) {
	admin := os.Getenv("ENGRAM_TEST_POSTGRES")
	if admin == "" {
		t.Skip("ENGRAM_TEST_POSTGRES names no PostgreSQL server (postgres://user@host:port/db of a user who may create databases)")
	}
	e := newEnv(t)
	bench := tinyLoCoMo(t)
	repo := tinyRepo(t)
	queries := filepath.Join(t.TempDir(), "queries.jsonl")
	writeFiles(t, filepath.Dir(queries), map[string]string{"queries.jsonl": `{"id":"q1","query":"parse the Set-Cookie header values in readSetCookies","relevant":["net/cookie.go"]}
{"id":"q2","query":"timeout on a client request","relevant":["net/client.go"]}
`})
	runs := map[string]evalResults{}
	for _, backend := range []string{backendSQLite, backendPostgres} {
		var got evalResults
		for _, args := range [][]string{
			{"--bench-dir", bench, "--set", "locomo", "--economy", "100,400"},
			{"--queries", queries, "--corpus", repo, "--economy", "0"},
		} {
			args = append([]string{"eval", "--confidence=false", "--json"}, args...)
			if backend == backendPostgres {
				args = append(args, "--postgres", admin)
			}
			code, out, errOut := e.run("", args...)
			if code != 0 {
				t.Fatalf("%s: exit %d\n%s", backend, code, errOut)
			}
			var res evalResults
			if err := jsonUnmarshal(out, &res); err != nil {
				t.Fatalf("%s: %v\n%s", backend, err, out)
			}
			if res.Backend != backend {
				t.Errorf("ran on %s, output says %q", backend, res.Backend)
			}
			got.Results = append(got.Results, res.Results...)
			got.Economy = append(got.Economy, res.Economy...)
			if backend == backendPostgres {
				dbs := regexp.MustCompile(`is database (engram_eval_\w+)`).FindAllStringSubmatch(errOut, -1)
				if len(dbs) == 0 {
					t.Errorf("no database named in\n%s", errOut)
				}
				for _, db := range dbs {
					if evalDatabaseExists(t, admin, db[1]) {
						t.Errorf("database %s was not dropped", db[1])
					}
				}
			}
		}
		runs[backend] = got
	}
	sq, pg := runs[backendSQLite], runs[backendPostgres]
	if len(sq.Results) != 8 || len(pg.Results) != len(sq.Results) || len(sq.Economy) != 4 || len(pg.Economy) != len(sq.Economy) {
		t.Fatalf("rows: sqlite %d and %d, postgres %d and %d", len(sq.Results), len(sq.Economy), len(pg.Results), len(pg.Economy))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 0.01 }
	for i, s := range sq.Results {
		p := pg.Results[i]
		if s.Set != p.Set || s.Mode != p.Mode || s.Items != p.Items || !near(s.Recall5, p.Recall5) || !near(s.Recall10, p.Recall10) ||
			!near(s.Recall20, p.Recall20) || !near(s.MRR, p.MRR) || !near(s.NDCG10, p.NDCG10) {
			t.Errorf("%s %s: sqlite items %d R@5 %.3f R@10 %.3f R@20 %.3f MRR %.3f nDCG %.3f; postgres %s %s items %d %.3f %.3f %.3f %.3f %.3f",
				s.Set, s.Mode, s.Items, s.Recall5, s.Recall10, s.Recall20, s.MRR, s.NDCG10,
				p.Set, p.Mode, p.Items, p.Recall5, p.Recall10, p.Recall20, p.MRR, p.NDCG10)
		}
	}
	for i, s := range sq.Economy {
		p := pg.Economy[i]
		if s.Budget != p.Budget || s.Policy != p.Policy || !near(s.Recall, p.Recall) || !near(s.Carried, p.Carried) ||
			s.Negatives != p.Negatives || !near(s.FalseInjection, p.FalseInjection) {
			t.Errorf("economy: sqlite %+v\npostgres %+v", s, p)
		}
	}
}

// evalDatabaseExists reports whether the server of admin has the
// database name.
func evalDatabaseExists(t *testing.T, admin, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}
