package eval

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTree writes files (path: content) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, body := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadCode(t *testing.T) {
	src := writeTree(t, map[string]string{"go/parser/parser.go": "package parser\n", "go/parser/parser_test.go": "package parser\n"})
	q := write(t, "queries.jsonl", `{"id":"c1","query":"fix the parser","prefix":"go/parser","relevant":["go/parser/parser.go"]}

{"query":"parse faster","relevant":["go/parser/parser.go","go/parser/parser.go"]}
`)
	set, err := LoadCode("mine", q, src)
	if err != nil {
		t.Fatal(err)
	}
	// A byte-order mark before the first line, as some editors write.
	bom, err := LoadCode("mine", write(t, "bom.jsonl", "\xef\xbb\xbf"+`{"query":"fix the parser","relevant":["go/parser/parser.go"]}`), src)
	if err != nil || len(bom.Questions) != 1 {
		t.Errorf("a file with a byte-order mark: %v", err)
	}
	if !set.Code || set.Dir != src || set.Name != "mine" {
		t.Errorf("set %+v", set)
	}
	want := []Question{
		{ID: "c1", Text: "fix the parser", Corpus: Repo, Relevant: []string{"go/parser/parser.go"}, Kind: "go"},
		{ID: "line 3", Text: "parse faster", Corpus: Repo, Relevant: []string{"go/parser/parser.go"}},
	}
	if !reflect.DeepEqual(set.Questions, want) {
		t.Errorf("questions\n%+v\nwant\n%+v", set.Questions, want)
	}
	if err := set.Close(); err != nil {
		t.Error(err)
	}
}

// TestLoadCode_BadInput: every kind of bad input is an error that names
// the file (and the line, for a bad line), and no set comes back.
func TestLoadCode_BadInput(t *testing.T) {
	src := writeTree(t, map[string]string{"a.go": "package a\n", "sub/b.go": "package b\n"})
	// A directory of the corpus that is a link elsewhere: the index does
	// not follow it, and what it holds is not the corpus's.
	elsewhere := writeTree(t, map[string]string{"passwd": "root:x:0:0\n"})
	if err := os.Symlink(elsewhere, filepath.Join(src, "outside")); err != nil {
		t.Fatal(err)
	}
	good := `{"id":"ok","query":"q","relevant":["a.go"]}`
	for _, c := range []struct {
		name, data string
		line       int    // 0: no line
		want       string // in the message
	}{
		{"Empty", "", 0, "no queries"},
		{"Blank", "\n  \n", 0, "no queries"},
		{"NotJSON", good + "\n{\"query\": \n", 2, "not a query record"},
		{"NotAnObject", "[1,2]\n", 1, "not a query record"},
		{"TrailingText", good + " x\n", 1, "text after"},
		{"UnknownField", `{"query":"q","relevant":["a.go"],"files":["a.go"]}`, 1, `unknown field "files"`},
		{"WrongType", `{"query":"q","relevant":"a.go"}`, 1, "relevant: want a list, not a string"},
		{"NotAnObjectAtAll", `"a.go"`, 1, "want a JSON object of query, relevant"},
		{"ThroughALink", `{"query":"q","relevant":["outside/passwd"]}`, 1, "outside is not a directory of the corpus"},
		{"NoQuery", `{"relevant":["a.go"]}`, 1, "query is missing"},
		{"NoRelevant", `{"query":"q"}`, 1, "relevant is missing"},
		{"NotInCorpus", good + "\n" + `{"query":"q","relevant":["a.go","gone.go"]}`, 2, `relevant file "gone.go" is not in the corpus`},
		{"Directory", `{"query":"q","relevant":["sub"]}`, 1, "not a regular file"},
		{"Absolute", `{"query":"q","relevant":["/etc/passwd"]}`, 1, "relative"},
		{"Climbs", `{"query":"q","relevant":["../a.go"]}`, 1, "relative"},
		{"Unclean", `{"query":"q","relevant":["./a.go"]}`, 1, "relative"},
		{"RepeatedID", good + "\n" + good, 2, `id "ok" repeats line 1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := write(t, "queries.jsonl", c.data)
			set, err := LoadCode("mine", q, src)
			if err == nil {
				t.Fatalf("no error; set %+v", set)
			}
			if strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "codeQuery") {
				t.Errorf("error %q names Go's types", err)
			}
			if set != nil {
				t.Errorf("a set came back with the error")
			}
			if !strings.Contains(err.Error(), q) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q: want the file and %q", err, c.want)
			}
			var le *LineError
			if c.line > 0 && (!errors.As(err, &le) || le.Line != c.line || le.File != q) {
				t.Errorf("error %q: want line %d", err, c.line)
			}
		})
	}
	t.Run("TooManyErrors", func(t *testing.T) {
		q := write(t, "queries.jsonl", strings.Repeat("{\n", 50))
		_, err := LoadCode("mine", q, src)
		if err == nil || strings.Count(err.Error(), "not a query record") != MaxLineErrors || !strings.Contains(err.Error(), "stopped after") {
			t.Errorf("50 bad lines: %v", err)
		}
	})
	t.Run("MissingQueries", func(t *testing.T) {
		q := filepath.Join(t.TempDir(), "none.jsonl")
		if _, err := LoadCode("mine", q, src); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), q) {
			t.Errorf("missing queries file: %v", err)
		}
	})
	t.Run("MissingCorpus", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "none")
		if _, err := LoadCode("mine", write(t, "q.jsonl", good), dir); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dir) {
			t.Errorf("missing corpus: %v", err)
		}
	})
	t.Run("EmptyCorpus", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadCode("mine", write(t, "q.jsonl", good), dir); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Errorf("empty corpus: %v", err)
		}
	})
	t.Run("CorpusIsAFile", func(t *testing.T) {
		f := write(t, "file", "x")
		if _, err := LoadCode("mine", write(t, "q.jsonl", good), f); err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("corpus is a file: %v", err)
		}
	})
}

func TestLoadArchive(t *testing.T) {
	archive := writeTarGz(t, []tarEntry{
		{name: "repo/src/main.rs", body: "fn main() {}\n"},
		{name: "repo/CHANGELOG.md", body: "fixed main\n"},
	})
	q := write(t, "queries.jsonl", `{"query":"fix main","relevant":["src/main.rs"]}`)
	set, err := LoadArchive("rg", q, archive, "repo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(set.Dir, "CHANGELOG.md")); err != nil {
		t.Errorf("the whole tree is the corpus: %v", err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(set.Dir)); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", filepath.Dir(set.Dir), err)
	}
	if err := set.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// A relevant file the archive lacks is an error, and the extracted
	// tree goes too.
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "engram-eval-rg-*"))
	bad := write(t, "bad.jsonl", `{"query":"fix lib","relevant":["src/lib.rs"]}`)
	if _, err := LoadArchive("rg", bad, archive, "repo"); err == nil || !strings.Contains(err.Error(), bad+":1:") {
		t.Errorf("relevant file not in the archive: %v", err)
	}
	if after, _ := filepath.Glob(filepath.Join(os.TempDir(), "engram-eval-rg-*")); len(after) != len(before) {
		t.Errorf("a failed load left its extraction: %v", after)
	}
	if _, err := LoadArchive("rg", q, filepath.Join(t.TempDir(), "none.tar.gz"), "repo"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing archive: %v", err)
	}
}

// TestNarrow: a narrowed set's corpus is a copy of the files kept, and
// Close removes it; a relevant file that would go is an error.
func TestNarrow(t *testing.T) {
	src := writeTree(t, map[string]string{
		"net/http/client.go":             "package http\n",
		"net/http/client_test.go":        "package http\n",
		"net/http/testdata/fixture.go":   "package fixture\n",
		"net/http/README.md":             "# http\n",
		"cmd/go/testdata/script/get.txt": "go get\n",
	})
	q := write(t, "q.jsonl", `{"query":"client","relevant":["net/http/client.go"]}`)
	set, err := LoadCode("gocommits", q, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Narrow(NonTestGo); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = filepath.WalkDir(set.Dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(set.Dir, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"net/http/client.go", "net/http/testdata/fixture.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("narrowed corpus %v, want %v", got, want)
	}
	dir := set.Dir
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Close left %s: %v", dir, err)
	}
	set, err = LoadCode("gocommits", q, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Narrow(func(p string) bool { return strings.HasSuffix(p, ".md") }); err == nil || !strings.Contains(err.Error(), "client.go") {
		t.Errorf("narrowing out a relevant file: %v", err)
	}
	if set.Dir != src {
		t.Errorf("a failed Narrow moved the corpus to %s", set.Dir)
	}
}

func TestNonTestGo(t *testing.T) {
	for p, want := range map[string]bool{"a/b.go": true, "a/b_test.go": false, "a/testdata/c.go": true, "a/README.md": false, "go.mod": false} {
		if got := NonTestGo(p); got != want {
			t.Errorf("NonTestGo(%q) = %v", p, got)
		}
	}
}
