package index

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/unpriv"
)

// TestRun_UnreadableDirectory: a directory that cannot be entered or read
// is reported once, its files are neither indexed nor, if indexed before,
// taken for deleted, and they come back when it can be read again. Before,
// a directory without search permission was reported once for its ignore
// file and again for each of its files and subdirectories, and indexed
// without its .gitignore's rules; and the files of an unreadable
// directory were marked deleted.
func TestRun_UnreadableDirectory(t *testing.T) {
	if !unpriv.Rerun(t) {
		return
	}
	root := tree(t, map[string]string{
		"main.go":         "package main\n\nfunc main() {}\n",
		"noexec/a.go":     "package noexec\n",
		"noexec/sub/b.go": "package sub\n",
		"noread/c.go":     "package noread\n",
	})
	s := openStore(t)
	run(t, s, root, Options{})
	for dir, mode := range map[string]os.FileMode{"noexec": 0o644, "noread": 0o311} {
		if err := os.Chmod(filepath.Join(root, dir), mode); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, dir), 0o755) })
	}
	check := func(sum Summary) {
		t.Helper()
		got := map[string]int{}
		for _, e := range sum.Errors {
			got[e.Path]++
		}
		if len(sum.Errors) != 2 || got["noexec"] != 1 || got["noread"] != 1 {
			t.Errorf("errors %v, want one for noexec and one for noread", sum.Errors)
		}
		if sum.Deleted != 0 {
			t.Errorf("%d files deleted", sum.Deleted)
		}
		m := manifest(t, s)
		for _, p := range []string{"main.go", "noexec/a.go", "noexec/sub/b.go", "noread/c.go"} {
			if f, ok := m[p]; !ok || f.State != store.FileCurrent {
				t.Errorf("%s: %+v, want it current", p, f)
			}
		}
	}
	check(run(t, s, root, Options{}))
	sum, err := Update(context.Background(), s, root, []string{"noexec/a.go", "noexec/sub", "noread"}, Options{})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	check(sum)

	for _, dir := range []string{"noexec", "noread"} {
		if err := os.Chmod(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, root, "noread/c.go", "package noread // changed while unreadable\n")
	sum = run(t, s, root, Options{})
	if len(sum.Errors) != 0 || sum.Changed != 1 {
		t.Errorf("readable again: errors %v, %d changed, want none and 1", sum.Errors, sum.Changed)
	}
}
