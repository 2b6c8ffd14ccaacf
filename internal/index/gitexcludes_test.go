package index

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain keeps the developer's own git configs and global excludes out
// of every test here: each test that wants them sets its own.
func TestMain(m *testing.M) {
	home, err := os.MkdirTemp("", "engram-index-home-")
	if err != nil {
		panic(err)
	}
	for k, v := range map[string]string{"HOME": home, "GIT_CONFIG_NOSYSTEM": "1"} {
		if err := os.Setenv(k, v); err != nil {
			panic(err)
		}
	}
	for _, k := range []string{"XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"} {
		if err := os.Unsetenv(k); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(home)
	os.Exit(code)
}

// gitHome gives the test a home directory of its own, with the files
// given (paths relative to it), and returns it.
func gitHome(t *testing.T, files map[string]string) string {
	t.Helper()
	home := tree(t, files)
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "")
	return home
}

// indexed runs an index of root and returns which of paths are indexed.
func indexed(t *testing.T, root string, paths ...string) map[string]bool {
	t.Helper()
	s := openStore(t)
	run(t, s, root, Options{})
	m := manifest(t, s)
	out := map[string]bool{}
	for _, p := range paths {
		_, out[p] = m[p]
	}
	return out
}

// TestRun_GlobalExcludes: git's global excludes apply, found where git
// finds them. Before, neither ~/.config/git/ignore nor core.excludesFile
// was read, so a user's globally ignored scratch files were indexed.
func TestRun_GlobalExcludes(t *testing.T) {
	project := map[string]string{
		"main.go":            "package main\n\nfunc main() {}\n",
		"scratch.local.go":   "package main\n",
		"notes/todo.md":      "# todo\n",
		"keep/notes/plan.md": "# plan\n",
		"debug.log.go":       "package main\n",
	}
	all := []string{"main.go", "scratch.local.go", "notes/todo.md", "keep/notes/plan.md", "debug.log.go"}

	t.Run("xdg default", func(t *testing.T) {
		gitHome(t, map[string]string{".config/git/ignore": "*.local.go\n/notes/\n"})
		got := indexed(t, tree(t, project), all...)
		want := map[string]bool{"main.go": true, "scratch.local.go": false, "notes/todo.md": false, "keep/notes/plan.md": true, "debug.log.go": true}
		checkIndexed(t, got, want)
	})
	t.Run("XDG_CONFIG_HOME", func(t *testing.T) {
		gitHome(t, map[string]string{".config/git/ignore": "main.go\n"})
		xdg := tree(t, map[string]string{"git/ignore": "*.local.go\n"})
		t.Setenv("XDG_CONFIG_HOME", xdg)
		got := indexed(t, tree(t, project), "main.go", "scratch.local.go")
		checkIndexed(t, got, map[string]bool{"main.go": true, "scratch.local.go": false})
	})
	t.Run("core.excludesFile through an include", func(t *testing.T) {
		gitHome(t, map[string]string{
			".gitconfig":         "[user]\n\tname = A\n[include]\n\tpath = .gitconfig.d/main\n",
			".gitconfig.d/main":  "[Core]\n\tExcludesFile = ~/my ignores\n",
			"my ignores":         "debug.*\n",
			".config/git/ignore": "main.go\n", // not read: core.excludesFile is set
		})
		got := indexed(t, tree(t, project), "main.go", "debug.log.go")
		checkIndexed(t, got, map[string]bool{"main.go": true, "debug.log.go": false})
	})
	t.Run("the repository's config wins, its ignore files outweigh", func(t *testing.T) {
		gitHome(t, map[string]string{
			".gitconfig":    "[core]\n\texcludesFile = ~/global-ignore\n",
			"global-ignore": "main.go\n",
			"repo-ignore":   "*.local.go\nnotes/\n",
		})
		root := tree(t, project)
		home, _ := os.UserHomeDir()
		write(t, root, ".git/config", "[core]\n\texcludesfile = "+filepath.Join(home, "repo-ignore")+"\n")
		write(t, root, ".gitignore", "!keep/notes/\n")
		got := indexed(t, root, all...)
		want := map[string]bool{"main.go": true, "scratch.local.go": false, "notes/todo.md": false, "keep/notes/plan.md": true, "debug.log.go": true}
		checkIndexed(t, got, want)
	})
	t.Run("GIT_CONFIG_GLOBAL", func(t *testing.T) {
		home := gitHome(t, map[string]string{
			".gitconfig":   "[core]\n\texcludesFile = ~/a\n",
			"a":            "main.go\n",
			"other/config": "[core]\n\texcludesFile = b\n",
			"other/b":      "*.local.go\n",
		})
		t.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(home, "other", "config"))
		// A relative excludesFile is relative to the work tree, as git
		// runs at its top.
		root := tree(t, project)
		write(t, root, "b", "*.local.go\n")
		got := indexed(t, root, "main.go", "scratch.local.go")
		checkIndexed(t, got, map[string]bool{"main.go": true, "scratch.local.go": false})
	})
	t.Run("set to nothing", func(t *testing.T) {
		gitHome(t, map[string]string{
			".gitconfig":         "[core]\n\texcludesFile = \"\"\n",
			".config/git/ignore": "main.go\n",
		})
		got := indexed(t, tree(t, project), "main.go")
		checkIndexed(t, got, map[string]bool{"main.go": true})
	})
}

// TestRun_GlobalExcludesOddConfigs: configs git reads, however odd, are
// read as git reads them, and what git would refuse fails nothing. Before,
// a config with a byte order mark or an old-style [branch.main] section,
// which git reads, failed every index (a stricter parser), and a value
// continued on the next line was read wrong. The cases git reads were
// checked against git check-ignore (git 2.39); git refuses the unclosed
// header, the include loop and the missing value (it fails), where engram
// reads what it can and goes on.
func TestRun_GlobalExcludesOddConfigs(t *testing.T) {
	for name, c := range map[string]struct {
		gitconfig string
		ignored   bool
	}{
		"byte order mark":         {"\ufeff[core]\n\texcludesFile = ~/ign\n", true},
		"old-style section":       {"[branch.main]\n\tremote = origin\n[core]\n\texcludesFile = ~/ign\n", true},
		"continued line":          {"[core]\n\texcludesFile = ~/i\\\ngn\n", true},
		"quoted, with a comment":  {"[core]\n\texcludesFile = \"~/ign\" # mine\n", true},
		"variable after a header": {"[core] excludesFile = ~/ign\n", true},
		"unclosed header":         {"[core\n\texcludesFile = ~/ign\n", false},
		"include loop":            {"[include]\n\tpath = ~/.gitconfig\n[core]\n\texcludesFile = ~/ign\n", true},
		"missing value":           {"[core]\n\texcludesFile\n", false},
		"another user's home":     {"[core]\n\texcludesFile = ~nobody/ign\n", false},
		"leading blanks, quoted":  {"[core]\n\texcludesFile = \"  ~/ign\"\n", false}, // not ~/ign
		"an empty subsection":     {"[core \"\"]\n\texcludesFile = ~/ign\n", false},
		"an empty old subsection": {"[core.]\n\texcludesFile = ~/ign\n", false},
	} {
		t.Run(name, func(t *testing.T) {
			gitHome(t, map[string]string{".gitconfig": c.gitconfig, "ign": "*.local.go\n"})
			got := indexed(t, tree(t, map[string]string{"main.go": "package main\n", "x.local.go": "package main\n"}), "main.go", "x.local.go")
			checkIndexed(t, got, map[string]bool{"main.go": true, "x.local.go": !c.ignored})
		})
	}
}

func checkIndexed(t *testing.T, got, want map[string]bool) {
	t.Helper()
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s indexed = %v, want %v", p, got[p], w)
		}
	}
}
