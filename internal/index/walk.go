package index

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// candidate is a file the walk found and did not exclude by directory,
// ignore rule or symlink.
type candidate struct {
	path    string // relative, slash-separated
	abs     string
	size    int64
	modTime time.Time
}

// walkResult is what a walk found.
type walkResult struct {
	files []candidate
	// dirs are the directories walked, absolute.
	dirs []string
	// ignored counts files and directories left out, by reason.
	ignored map[string]int
	// errors are directories that could not be read.
	errors []FileError
	// unwalked are the directories (slash paths from the root) that
	// could not be read: what the index holds below them is kept as it
	// is, not taken for deleted.
	unwalked []string
}

// Reasons files are left out by the walk; they are counted, not recorded.
const (
	ignoredDir        = "excluded directory"
	ignoredRule       = "ignore rule (.gitignore, .ignore, config)"
	ignoredSymlinkIn  = "symlink inside the project (indexed at its target)"
	ignoredSymlinkOut = "symlink outside the project"
	ignoredSymlinkBad = "broken symlink"
	ignoredSpecial    = "not a regular file"
	ignoredName       = "name engram cannot store (not UTF-8, or holding a backslash)"
)

// badName reports whether a file or directory name cannot be part of a
// stored path (store.ValidPath): the walk leaves it out, and says where,
// rather than failing the batch it would be stored in.
func badName(name string) bool {
	return !store.ValidPath(name)
}

// walk lists the files under the directory at parts (nil for the root)
// that are candidates for indexing, depth first, honouring excluded
// directory names and ignore files at every level; r holds the ignore
// rules in force there (nil: the root's). Symlinks are not followed: a
// link inside the project names something indexed at its own path, a link
// outside it leads out of the project, and loops cannot arise. Unreadable
// directories are reported and skipped.
func walk(ctx context.Context, root string, parts []string, r *rules, extra []string) (walkResult, error) {
	res := walkResult{ignored: map[string]int{}}
	if r == nil {
		var err error
		if r, err = rootRules(root, extra); err != nil {
			return res, err
		}
	}
	type dir struct {
		abs   string
		parts []string
		rules *rules
	}
	stack := []dir{{abs: filepath.Join(append([]string{root}, parts...)...), parts: parts, rules: r}}
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		res.dirs = append(res.dirs, d.abs)
		entries, err := os.ReadDir(d.abs)
		if err != nil {
			res.errors = append(res.errors, FileError{Path: relPath(d.parts), Err: err.Error()})
			res.unwalked = append(res.unwalked, relPath(d.parts))
			if len(entries) == 0 {
				continue
			}
		}
		// Push subdirectories in reverse so that they are walked in name order.
		var subdirs []dir
		for _, e := range entries {
			name := e.Name()
			parts := append(append(make([]string, 0, len(d.parts)+1), d.parts...), name)
			abs := filepath.Join(d.abs, name)
			mode := e.Type()
			if mode&fs.ModeSymlink != 0 {
				res.ignored[symlinkReason(root, abs)]++
				continue
			}
			unstorable := func() {
				res.ignored[ignoredName]++
				res.errors = append(res.errors, FileError{Path: strconv.Quote(relPath(parts)),
					Err: "not indexed: its name is not UTF-8, or holds a backslash, which engram cannot store as a path"})
			}
			if e.IsDir() {
				if reason := d.rules.dirExcluded(parts); reason != "" {
					res.ignored[reason]++
					continue
				}
				if badName(name) {
					unstorable()
					continue
				}
				r, err := d.rules.child(abs, parts)
				if err != nil {
					res.errors = append(res.errors, unwalkable(parts, err))
					res.unwalked = append(res.unwalked, relPath(parts))
					continue
				}
				subdirs = append(subdirs, dir{abs: abs, parts: parts, rules: r})
				continue
			}
			if !mode.IsRegular() {
				res.ignored[ignoredSpecial]++
				continue
			}
			if name == ".git" { // a linked work tree's pointer to its git directory
				res.ignored[ignoredDir]++
				continue
			}
			if d.rules.ignored(parts, false) {
				res.ignored[ignoredRule]++
				continue
			}
			if badName(name) {
				unstorable()
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted since the directory was read
			}
			if err != nil {
				res.errors = append(res.errors, FileError{Path: relPath(parts), Err: err.Error()})
				continue
			}
			res.files = append(res.files, candidate{path: relPath(parts), abs: abs, size: info.Size(), modTime: info.ModTime()})
		}
		for i := len(subdirs) - 1; i >= 0; i-- {
			stack = append(stack, subdirs[i])
		}
	}
	return res, nil
}

// unwalkable is the error of a directory whose ignore files cannot be
// read (most often, one without search permission): it is left out
// whole, since what they would ignore is unknown, and reported once, not
// again for each of its files.
func unwalkable(parts []string, err error) FileError {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return FileError{Path: relPath(parts), Err: "directory left out: its ignore files cannot be read: " + err.Error()}
}

// dirExcluded returns why the directory at parts is not walked, or "".
func (r *rules) dirExcluded(parts []string) string {
	name := parts[len(parts)-1]
	if defaultExcludedDirs[name] || len(parts) == 1 && topExcludedDirs[name] {
		return ignoredDir
	}
	if r.ignored(parts, true) {
		return ignoredRule
	}
	return ""
}

// walkPath walks what is at parts, a path below root: a directory as walk
// does, a file as one candidate. A path that does not exist, or that an
// excluded directory, an ignore rule or a symlink keeps out, has no
// candidates.
func walkPath(ctx context.Context, root string, parts []string, extra []string) (walkResult, error) {
	res := walkResult{ignored: map[string]int{}}
	r, err := rootRules(root, extra)
	if err != nil {
		return res, err
	}
	// Descend to the parent directory, applying the rules of each level.
	for i := 1; i < len(parts); i++ {
		if reason := r.dirExcluded(parts[:i]); reason != "" {
			res.ignored[reason]++
			return res, nil
		}
		dirAbs := filepath.Join(append([]string{root}, parts[:i]...)...)
		if r, err = r.child(dirAbs, parts[:i]); err != nil {
			res.errors = append(res.errors, unwalkable(parts[:i], err))
			res.unwalked = append(res.unwalked, relPath(parts[:i]))
			return res, nil
		}
	}
	abs := filepath.Join(append([]string{root}, parts...)...)
	info, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return res, nil
	case err != nil:
		res.errors = append(res.errors, FileError{Path: relPath(parts), Err: err.Error()})
		res.unwalked = append(res.unwalked, relPath(parts))
		return res, nil
	case info.Mode()&fs.ModeSymlink != 0:
		res.ignored[symlinkReason(root, abs)]++
		return res, nil
	case info.IsDir():
		if reason := r.dirExcluded(parts); reason != "" {
			res.ignored[reason]++
			return res, nil
		}
		if r, err = r.child(abs, parts); err != nil {
			res.errors = append(res.errors, unwalkable(parts, err))
			res.unwalked = append(res.unwalked, relPath(parts))
			return res, nil
		}
		return walk(ctx, root, parts, r, extra)
	case !info.Mode().IsRegular():
		res.ignored[ignoredSpecial]++
		return res, nil
	case parts[len(parts)-1] == ".git":
		res.ignored[ignoredDir]++
		return res, nil
	case r.ignored(parts, false):
		res.ignored[ignoredRule]++
		return res, nil
	}
	res.files = append(res.files, candidate{path: relPath(parts), abs: abs, size: info.Size(), modTime: info.ModTime()})
	return res, nil
}

func relPath(parts []string) string { return strings.Join(parts, "/") }

// symlinkReason says why a symlink is left out.
func symlinkReason(root, link string) string {
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return ignoredSymlinkBad
	}
	if rel, err := filepath.Rel(root, target); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return ignoredSymlinkIn
	}
	return ignoredSymlinkOut
}
