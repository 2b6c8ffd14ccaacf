package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/pictest"
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

// TestCLI_SearchFiles: engram search --files ranks distinct files, each
// with its best spans and their lines, as many as --limit asks; bad
// --spans is a usage error. (retrieve's TestSearchPlaces has the files
// crowd the plain search's hits.)
func TestCLI_SearchFiles(t *testing.T) {
	e := newEnv(t)
	for f := range 6 {
		var b strings.Builder
		b.WriteString("package up\n\n")
		for i := range 6 {
			fmt.Fprintf(&b, "// Retry%d%d backs off with jitter before the upload retries.\nfunc Retry%d%d() {\n", f, i, f, i)
			for l := range 40 {
				fmt.Fprintf(&b, "\tx%d := %d // filler\n", l, l)
			}
			b.WriteString("}\n\n")
		}
		writeFile(t, e.project, fmt.Sprintf("up/f%d.go", f), b.String())
	}
	e.ok("", "index", "--yes")
	q := "upload retries back off with jitter"
	var res placesJSON
	if err := json.Unmarshal([]byte(e.ok("", "search", "--files", "--spans", "2", "--json", "--limit", "5", q)), &res); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range res.Places {
		if seen[p.Key] || len(p.Spans) == 0 || len(p.Spans) > 2 || p.Spans[0].StartLine == 0 {
			t.Errorf("place %+v", p)
		}
		seen[p.Key] = true
	}
	if len(res.Places) != 5 {
		t.Errorf("--files --limit 5: %d places", len(res.Places))
	}
	out := e.ok("", "search", "--files", "--limit", "3", q)
	if !strings.Contains(out, " 3. ") || !strings.Contains(out, "lines ") || strings.Contains(out, " 4. ") {
		t.Errorf("--files output:\n%s", out)
	}
	if code, _, errOut := e.run("", "search", "--files", "--spans", "9", q); code != 2 || !strings.Contains(errOut, "spans") {
		t.Errorf("--spans 9: exit %d, %s", code, errOut)
	}
}

// TestCLI_SearchMedia: a tool result holding a screenshot is found by
// its words, and its snippet shows the picture as a placeholder that
// names engram show, not its base64.
func TestCLI_SearchMedia(t *testing.T) {
	e := newEnv(t)
	data := pictest.NoisePNGBase64(64, 48)
	result := `{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + data +
		`"}},{"type":"text","text":"the quokka login page, as rendered"}]}`
	line, _ := json.Marshal(map[string]string{"session": "s1", "type": "tool_result", "content": result})
	e.ok(string(line)+"\n", "add")
	out := e.ok("", "search", "--mode", "lexical", "quokka login page")
	if strings.Contains(out, data[100:140]) || !strings.Contains(out, "[image: image/png, 64×48, ") || !strings.Contains(out, "whole: engram show ") {
		t.Errorf("search:\n%s", out)
	}
}

// TestCLI_SearchBeforeIndex searches a project nothing has indexed yet, as
// a newcomer may before engram index. With no store at all, the error
// names engram index beside engram add; with a store that holds only a
// session, "no matches" alone reads as an answer about the code, so the
// search says the project is not indexed and what indexes it. Once
// indexed, the same search finds the file and says nothing of the kind.
func TestCLI_SearchBeforeIndex(t *testing.T) {
	e := newEnv(t)
	if err := os.WriteFile(filepath.Join(e.project, "upload.go"), []byte("package upload\n\n// retryUpload retries a dropped upload.\nfunc retryUpload() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run("", "search", "retryUpload")
	if code != 1 || out != "" || !strings.Contains(errOut, "no store yet") || !strings.Contains(errOut, "'engram index'") {
		t.Errorf("search before any store: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	e.ok(`{"session":"s1","agent":"a","role":"user","content":"hello"}`+"\n", "add")
	code, out, errOut = e.run("", "search", "retryUpload")
	if code != 0 || out != "" || !strings.Contains(errOut, `no matches for "retryUpload"`) ||
		!strings.Contains(errOut, e.project+" is not indexed yet") || !strings.Contains(errOut, "engram index") {
		t.Errorf("search before the index: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	e.ok("", "index", "--yes")
	if out := e.ok("", "search", "retryUpload"); !strings.Contains(out, "upload.go:") {
		t.Errorf("search after the index:\n%s", out)
	}
	code, _, errOut = e.run("", "search", "quokka")
	if code != 0 || !strings.Contains(errOut, `no matches for "quokka"`) || strings.Contains(errOut, "not indexed") {
		t.Errorf("no match in an indexed project: exit %d, stderr %q", code, errOut)
	}
}
