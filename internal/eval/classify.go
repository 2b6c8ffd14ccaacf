package eval

import (
	"path"
	"strings"
)

// Class is what a file of a repository is for, as far as ranking code is
// concerned: the code itself, or a file that describes or exercises it
// and so repeats its words (a distractor when the question is about the
// code).
type Class string

// The classes of files.
const (
	ClassCode      Class = "code"
	ClassTest      Class = "test"
	ClassDoc       Class = "doc"
	ClassChangelog Class = "changelog"
)

// Distractor reports whether c is a test, doc or changelog.
func (c Class) Distractor() bool { return c != ClassCode }

// sourceExts are the extensions of program source, which stays code in a
// doc directory (Go's go/doc and cmd/doc packages, ripgrep's
// crates/core/flags/doc/*.rs).
var sourceExts = map[string]bool{
	".go": true, ".rs": true, ".c": true, ".h": true, ".cc": true, ".cpp": true, ".hpp": true, ".s": true,
	".py": true, ".js": true, ".ts": true, ".java": true, ".kt": true, ".cs": true, ".rb": true, ".sh": true,
}

// docExts are the extensions of prose.
var docExts = map[string]bool{".md": true, ".markdown": true, ".txt": true, ".rst": true, ".adoc": true}

// Classify returns the class of a slash-separated path relative to the
// repository's root. The first rule that matches decides:
//
//   - changelog: a file whose name starts with CHANGELOG, RELEASE or NEWS,
//     in any case (CHANGELOG.md, RELEASE-CHECKLIST.md, NEWS);
//   - test: a Go test (*_test.go) or a Rust one (*_test.rs), or any file
//     under a directory named testdata (Go's fixtures) or tests (Rust's
//     integration tests and their data);
//   - doc: prose by extension (.md, .markdown, .txt, .rst, .adoc), or any
//     file under a directory named doc or docs except program source
//     (.go, .rs, .c, .py and the like: go/doc is a Go package);
//   - code: everything else.
func Classify(p string) Class {
	dir, base := path.Split(p)
	name := strings.ToUpper(base)
	for _, prefix := range []string{"CHANGELOG", "RELEASE", "NEWS"} {
		if strings.HasPrefix(name, prefix) {
			return ClassChangelog
		}
	}
	if strings.HasSuffix(base, "_test.go") || strings.HasSuffix(base, "_test.rs") {
		return ClassTest
	}
	dirs := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	for _, d := range dirs {
		if d == "testdata" || d == "tests" {
			return ClassTest
		}
	}
	ext := strings.ToLower(path.Ext(base))
	if docExts[ext] {
		return ClassDoc
	}
	if !sourceExts[ext] {
		for _, d := range dirs {
			if d == "doc" || d == "docs" {
				return ClassDoc
			}
		}
	}
	return ClassCode
}
