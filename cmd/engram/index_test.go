package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, root, p, content string) {
	t.Helper()
	abs := filepath.Join(root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(abs, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCLI_Index(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.project, "internal/auth/token.go", "package auth\n\n// ValidateToken checks a bearer token.\nfunc ValidateToken(s string) bool {\n\treturn s != \"\"\n}\n")
	writeFile(t, e.project, "README.md", "# Demo\n\nA demo project.\n")
	writeFile(t, e.project, ".env", "API_KEY=abc")

	// Without a terminal, permission must be given with --yes.
	code, _, errOut := e.run("", "index")
	if code != 1 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("index without consent: exit %d, %s", code, errOut)
	}
	out := e.ok("", "index", "--yes")
	for _, want := range []string{"new 2", "skipped: 1 secret file name", ".env: withheld"} {
		if !strings.Contains(out, want) {
			t.Errorf("index summary lacks %q:\n%s", want, out)
		}
	}
	// Consent is remembered; a second run reads nothing.
	if out := e.ok("", "index"); !strings.Contains(out, "unchanged 2") {
		t.Errorf("second index:\n%s", out)
	}
	if out := e.ok("", "search", "ValidateToken"); !strings.Contains(out, "internal/auth/token.go:1-6") {
		t.Errorf("search:\n%s", out)
	}
	for _, p := range []string{"internal/auth/token.go", filepath.Join(e.project, "internal/auth/token.go"), "./internal/x/../auth/token.go"} {
		if got := e.ok("", "show", p+":3-4"); got != "// ValidateToken checks a bearer token.\nfunc ValidateToken(s string) bool {\n" {
			t.Errorf("show %s:3-4 = %q", p, got)
		}
	}
	files := e.ok("", "files")
	for _, want := range []string{"current", "internal/auth/token.go", "skipped", "secret file name"} {
		if !strings.Contains(files, want) {
			t.Errorf("files lacks %q:\n%s", want, files)
		}
	}
	var list []fileJSON
	if err := jsonUnmarshal(e.ok("", "files", "internal/", "--json"), &list); err != nil || len(list) != 1 || list[0].Language != "go" {
		t.Errorf("files --json = %+v, %v", list, err)
	}

	// An edit makes version 2; the old version stays reachable.
	writeFile(t, e.project, "internal/auth/token.go", "package auth\n\nfunc CheckToken(s string) bool { return true }\n")
	if out := e.ok("", "index"); !strings.Contains(out, "changed 1") {
		t.Errorf("index after an edit:\n%s", out)
	}
	if got := e.ok("", "show", "internal/auth/token.go", "--version", "1"); !strings.Contains(got, "ValidateToken") {
		t.Errorf("show --version 1 = %q", got)
	}
	if versions := e.ok("", "files", "internal/auth/token.go", "--versions"); strings.Count(versions, "\n") != 3 {
		t.Errorf("versions:\n%s", versions)
	}
	// A deleted file says how to reach its last version.
	if err := os.Remove(filepath.Join(e.project, "README.md")); err != nil {
		t.Fatal(err)
	}
	e.ok("", "index")
	if code, _, errOut := e.run("", "show", "README.md"); code != 1 || !strings.Contains(errOut, "--version 1") {
		t.Errorf("show deleted: exit %d, %s", code, errOut)
	}
	if code, _, errOut := e.run("", "show", "internal/auth/token.go:9-12"); code != 1 || !strings.Contains(errOut, "has 3 lines") {
		t.Errorf("show past the end: exit %d, %s", code, errOut)
	}
	if code, _, _ := e.run("", "show", "nothing/here.go"); code != 1 {
		t.Errorf("show unknown path: exit %d", code)
	}

	// index PATH indexes another tree into that tree's own store.
	other := t.TempDir()
	writeFile(t, other, "lib.py", "def other_tree():\n    pass\n")
	if out := e.ok("", "index", other, "--yes", "--json"); !strings.Contains(out, `"new": 1`) {
		t.Errorf("index PATH --json:\n%s", out)
	}
}

// TestCLI_FilesOddNames: a path with a newline or an escape sequence is
// listed quoted, so that it neither breaks the table nor reaches the
// terminal; the JSON form keeps it as it is.
func TestCLI_FilesOddNames(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.project, "a\nb.txt", "x\n")
	writeFile(t, e.project, "e\x1b[31mred.txt", "y\n")
	e.ok("", "index", "--yes")
	files := e.ok("", "files")
	if strings.Contains(files, "\x1b") || !strings.Contains(files, `"a\nb.txt"`) || !strings.Contains(files, `"e\x1b[31mred.txt"`) {
		t.Errorf("files:\n%q", files)
	}
	if strings.Count(files, "\n") != 3 {
		t.Errorf("files: %d lines, want a header and two:\n%s", strings.Count(files, "\n"), files)
	}
	if j := e.ok("", "files", "--json"); !strings.Contains(j, `"a\nb.txt"`) {
		t.Errorf("files --json:\n%s", j)
	}
}

// TestCLI_IndexSubdirectory: engram index given a directory of the
// project indexes the project, into its store, rather than a store of
// the directory's own that nothing run in the project reads.
func TestCLI_IndexSubdirectory(t *testing.T) {
	e := newEnv(t)
	if err := os.Mkdir(filepath.Join(e.project, ".git"), 0o755); err != nil { // a git work tree
		t.Fatal(err)
	}
	writeFile(t, e.project, "internal/zebra.go", "package internal\n\n// Zebracorn is rare.\nconst Zebracorn = 1\n")
	if code, _, errOut := e.run("", "index", "--yes", filepath.Join(e.project, "internal")); code != 0 || !strings.Contains(errOut, "indexing the project") {
		t.Errorf("index of a subdirectory: exit %d, %q", code, errOut)
	}
	if out := e.ok("", "search", "Zebracorn"); !strings.Contains(out, "internal/zebra.go") {
		t.Errorf("search in the project:\n%s", out)
	}
	stores, err := os.ReadDir(filepath.Join(e.vars["ENGRAM_DATA_DIR"], "projects"))
	if err != nil || len(stores) != 1 {
		t.Errorf("stores: %v %v; want the project's alone", stores, err)
	}
}

// TestCLI_OneOfEach: the summaries of a project of one file speak of one
// file, one chunk and one excerpt, not of "1 files seen".
func TestCLI_OneOfEach(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.project, "zebra.go", "package zebra\n\n// Zebracorn is rare.\nconst Zebracorn = 1\n")
	out := e.ok("", "index", "--yes")
	if !strings.Contains(out, ": 1 file seen\n") || !strings.Contains(out, "  stored 1 chunk, ") {
		t.Errorf("index of one file:\n%s", out)
	}
	code, _, errOut := e.run("", "prefetch", "Zebracorn", "--budget", "500")
	if code != 0 || !strings.Contains(errOut, ": 1 excerpt, 0 hints") {
		t.Errorf("prefetch of one excerpt: exit %d, %q", code, errOut)
	}
}

// TestCLI_IndexTreeBelow: from a directory that is no git work tree (a
// home directory), engram index of a repository below it indexes that
// repository alone, into its own store, never the directory around it.
func TestCLI_IndexTreeBelow(t *testing.T) {
	e := newEnv(t) // e.project: no .git, as a home directory
	writeFile(t, e.project, "notes/diary.txt", "dear diary, the quokka\n")
	repo := filepath.Join(e.project, "code", "foo")
	writeFile(t, repo, "a.go", "package foo\n\n// Numbat digs.\nfunc Numbat() {}\n")
	if err := os.Mkdir(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := e.run("", "index", "--yes", repo); code != 0 || strings.Contains(errOut, "indexing the project") {
		t.Fatalf("index of a repository below: exit %d, %q", code, errOut)
	}
	stores, err := os.ReadDir(filepath.Join(e.vars["ENGRAM_DATA_DIR"], "projects"))
	if err != nil || len(stores) != 1 || !strings.HasPrefix(stores[0].Name(), "foo-") {
		t.Fatalf("stores: %v %v; want foo's alone", stores, err)
	}
	e.vars["ENGRAM_PROJECT"] = repo
	if files := e.ok("", "files"); !strings.Contains(files, "a.go") || strings.Contains(files, "diary") {
		t.Errorf("files of the repository:\n%s", files)
	}
}
