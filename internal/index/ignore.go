package index

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// defaultExcludedDirs are directory names never walked, at any depth:
// version control, dependencies and caches.
var defaultExcludedDirs = map[string]bool{
	".git": true, ".hg": true, ".svn": true, ".jj": true,
	"node_modules": true, "bower_components": true, "vendor": true, ".pnpm-store": true, ".yarn": true,
	".next": true, ".nuxt": true, ".svelte-kit": true, ".angular": true, ".turbo": true, ".parcel-cache": true,
	".cache": true, ".nyc_output": true, "__pycache__": true, ".pytest_cache": true,
	".mypy_cache": true, ".ruff_cache": true, ".tox": true, ".venv": true, "venv": true, ".eggs": true,
	".gradle": true, ".idea": true, ".vscode": true, ".terraform": true, ".serverless": true,
	"Pods": true, "DerivedData": true, ".bundle": true, ".direnv": true, ".engram": true,
}

// topExcludedDirs are build outputs, excluded at the top of the project
// only: deeper down the same names are often source (Go's go/build, a
// package's build/ helpers), and build outputs there are what .gitignore
// files are for.
var topExcludedDirs = map[string]bool{
	"dist": true, "build": true, "target": true, "_build": true, "out": true, ".output": true, "coverage": true,
}

// ignoreFiles are read in every directory, in this order, as git reads
// .gitignore and tools such as ripgrep read .ignore.
var ignoreFiles = []string{".gitignore", ".ignore"}

// rules are the ignore patterns in force in one directory: its ancestors'
// and its own, most specific last.
type rules struct {
	patterns []gitignore.Pattern
	matcher  gitignore.Matcher
}

func newRules(patterns []gitignore.Pattern) *rules {
	return &rules{patterns: patterns, matcher: gitignore.NewMatcher(patterns)}
}

// ignored reports whether the path (split at slashes) is ignored.
func (r *rules) ignored(parts []string, isDir bool) bool {
	return len(r.patterns) > 0 && r.matcher.Match(parts, isDir)
}

// child returns the rules of a subdirectory, adding the patterns of its own
// ignore files. domain is the subdirectory's path from the root, split.
func (r *rules) child(dir string, domain []string) (*rules, error) {
	var added []gitignore.Pattern
	for _, name := range ignoreFiles {
		ps, err := readPatterns(filepath.Join(dir, name), domain, true)
		if err != nil {
			return nil, err
		}
		added = append(added, ps...)
	}
	if len(added) == 0 {
		return r, nil
	}
	all := make([]gitignore.Pattern, 0, len(r.patterns)+len(added))
	all = append(append(all, r.patterns...), added...)
	return newRules(all), nil
}

// readPatterns parses an ignore file; a missing file has no patterns, nor
// has one that is not a regular file: a directory has no lines, a FIFO
// would hold the walk, and git reads no ignore file of the tree (inTree)
// through a symlink, though it follows one at .git/info/exclude.
func readPatterns(path string, domain []string, inTree bool) ([]gitignore.Pattern, error) {
	stat := os.Stat
	if inTree {
		stat = os.Lstat
	}
	info, err := stat(path)
	// ENOTDIR: the directory it would be in is a file now (replaced since
	// the walk or the event that named it).
	if os.IsNotExist(err) || errors.Is(err, syscall.ENOTDIR) || err == nil && !info.Mode().IsRegular() {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parsePatterns(data, domain), nil
}

// parsePatterns parses gitignore lines: blank lines and # comments are
// skipped; "\#" and "\!" are left to the pattern, where the backslash
// makes the # or ! a plain character (not a comment, not a negation).
func parsePatterns(data []byte, domain []string) []gitignore.Pattern {
	var out []gitignore.Pattern
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, gitignore.ParsePattern(line, domain))
	}
	return out
}

// gitCommonDir returns the directory holding the repository's shared files
// (info/exclude among them) for a work tree at root: root/.git, or in a
// linked work tree (git worktree add), where .git is a file naming the
// tree's own git directory ("gitdir: PATH"), the common directory that
// one names in its commondir file.
func gitCommonDir(root string) string {
	dotgit := filepath.Join(root, ".git")
	b, err := os.ReadFile(dotgit)
	if err != nil {
		return dotgit // a directory, or none
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return dotgit
	}
	dir = strings.TrimSpace(dir)
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	if c, err := os.ReadFile(filepath.Join(dir, "commondir")); err == nil {
		common := strings.TrimSpace(string(c))
		if !filepath.IsAbs(common) {
			common = filepath.Join(dir, common)
		}
		return common
	}
	return dir
}

// rootRules returns the rules that apply at the root, weakest first, as
// git weighs them: the user's global excludes (core.excludesFile, or
// ~/.config/git/ignore), the repository's .git/info/exclude, extra
// patterns from configuration, and the root's own ignore files.
func rootRules(root string, extra []string) (*rules, error) {
	gitDir := gitCommonDir(root)
	global, err := globalExcludesFile(root, gitDir)
	if err != nil {
		return nil, err
	}
	var ps []gitignore.Pattern
	if global != "" {
		if ps, err = readPatterns(global, nil, false); err != nil {
			return nil, fmt.Errorf("git's global excludes: %w", err)
		}
	}
	local, err := readPatterns(filepath.Join(gitDir, "info", "exclude"), nil, false)
	if err != nil {
		return nil, err
	}
	ps = append(ps, local...)
	for _, p := range extra {
		if strings.TrimSpace(p) != "" {
			ps = append(ps, gitignore.ParsePattern(p, nil))
		}
	}
	return newRules(ps).child(root, nil)
}
