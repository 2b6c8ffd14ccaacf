package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
)

// Repo is the corpus every question of a code set is asked against: its
// repository.
const Repo = "repo"

// MaxLineErrors bounds the bad lines a loader reports before it stops.
const MaxLineErrors = 20

// maxLineBytes bounds one line of a queries file.
const maxLineBytes = 1 << 20

// codeQuery is one line of a code set's queries file.
type codeQuery struct {
	// ID names the query; empty means "line N".
	ID string `json:"id"`
	// Query is what is searched for.
	Query string `json:"query"`
	// Prefix is the commit subject's component prefix ("net/http"); it
	// names the answer, so it is never searched, only used to group
	// queries by area.
	Prefix string `json:"prefix"`
	// Relevant lists the files that answer the query, relative to the
	// corpus directory.
	Relevant []string `json:"relevant"`
}

// LoadCode loads a code set: queries from a JSON Lines file against the
// tree at dir, which engram eval indexes as engram index would. Each line
// is {"id", "query", "prefix", "relevant"} (the gocommits and ripgrep
// shape; id and prefix may be left out); the query is searched for, the
// prefix never, and relevant names files relative to dir. Blank lines are
// skipped.
//
// Nothing is scored on bad input: a missing queries file or corpus (an
// error wrapping fs.ErrNotExist), an empty one, and every malformed line
// (not JSON, an unknown field, no query, no relevant file, a path that is
// not relative, a repeated id, a relevant file that is not a regular file
// under dir) is an error naming the file and line (up to MaxLineErrors of
// them, as a *LineError each).
func LoadCode(name, queries, dir string) (*Set, error) {
	if err := checkCorpus(dir); err != nil {
		return nil, err
	}
	f, err := os.Open(queries)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	set := &Set{Name: name, Code: true, Dir: dir}
	var errs []error
	bad := func(n int, format string, args ...any) {
		errs = append(errs, &LineError{File: queries, Line: n, Err: fmt.Errorf(format, args...)})
	}
	ids := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), maxLineBytes)
	n := 0
	for sc.Scan() && len(errs) < MaxLineErrors {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a byte-order mark some editors write
		}
		if len(line) == 0 {
			continue
		}
		var rec codeQuery
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			bad(n, "not a query record: %v", recordError(err))
			continue
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			bad(n, "not a query record: text after the JSON object")
			continue
		}
		if rec.ID == "" {
			rec.ID = fmt.Sprintf("line %d", n)
		}
		if first, ok := ids[rec.ID]; ok {
			bad(n, "id %q repeats line %d", rec.ID, first)
			continue
		}
		ids[rec.ID] = n
		if strings.TrimSpace(rec.Query) == "" {
			bad(n, "query is missing or empty")
			continue
		}
		if len(rec.Relevant) == 0 {
			bad(n, "relevant is missing or empty: name the files that answer the query")
			continue
		}
		ok := true
		for _, p := range rec.Relevant {
			if err := relevantFile(dir, p); err != nil {
				bad(n, "%v", err)
				ok = false
			}
		}
		if !ok {
			continue
		}
		area, _, _ := strings.Cut(rec.Prefix, "/")
		area, _, _ = strings.Cut(area, ",")
		set.Questions = append(set.Questions, Question{ID: rec.ID, Text: rec.Query, Corpus: Repo,
			Relevant: dedupe(rec.Relevant), Kind: area})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line longer than %d bytes", maxLineBytes)
		}
		errs = append(errs, &LineError{File: queries, Line: n + 1, Err: err})
	}
	if len(errs) >= MaxLineErrors {
		errs = append(errs, fmt.Errorf("%s: stopped after %d bad lines", queries, MaxLineErrors))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(set.Questions) == 0 {
		return nil, fmt.Errorf("%s: no queries: the file is empty", queries)
	}
	return set, nil
}

// recordError words a query line's decoding error without Go's names of
// types and fields.
func recordError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		what := te.Value
		if what == "number" || what == "string" || what == "bool" || what == "array" || what == "object" {
			what = "a " + what
		}
		if te.Field == "" {
			return fmt.Errorf("want a JSON object of query, relevant (and id, prefix), not %s", what)
		}
		return fmt.Errorf("%s: want %s, not %s", te.Field, jsonKind(te.Type.Kind()), what)
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s: a query record has id, query, relevant and prefix", msg)
	}
	return err
}

// jsonKind names what a Go kind is in JSON.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a number"
}

// checkCorpus checks that dir is a directory holding at least one
// regular file.
func checkCorpus(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("corpus: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("corpus %s: not a directory", dir)
	}
	errFound := errors.New("found")
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			return errFound
		}
		return nil
	})
	switch {
	case errors.Is(err, errFound):
		return nil
	case err != nil:
		return fmt.Errorf("corpus %s: %w", dir, err)
	}
	return fmt.Errorf("corpus %s: no files: the directory is empty", dir)
}

// relevantFile checks that p names a regular file under dir.
func relevantFile(dir, p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, `\`) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("relevant path %q: want a clean slash-separated path relative to the corpus %s", p, dir)
	}
	// Each element is looked at as it is, not followed: a directory
	// reached through a symbolic link is outside the corpus the index
	// walks (it follows no link), perhaps outside the corpus at all.
	at := dir
	parts := strings.Split(p, "/")
	for i, part := range parts {
		at = filepath.Join(at, part)
		fi, err := os.Lstat(at)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("relevant file %q is not in the corpus %s", p, dir)
		case err != nil:
			return fmt.Errorf("relevant file %q: %w", p, err)
		case i < len(parts)-1 && !fi.IsDir():
			return fmt.Errorf("relevant file %q: %s is not a directory of the corpus %s (a symbolic link?)", p, path.Join(parts[:i+1]...), dir)
		case i == len(parts)-1 && !fi.Mode().IsRegular():
			return fmt.Errorf("relevant file %q is not a regular file in the corpus %s", p, dir)
		}
	}
	return nil
}

// LoadArchive loads a code set whose corpus is a gzip-compressed tar
// archive (ripgrep's): it is extracted to a new temporary directory, and
// the corpus is its subdirectory root (the archive's top directory, such
// as "ripgrep"), which relevant paths are relative to. Set.Close removes
// the directory. A missing queries file or archive is an error wrapping
// fs.ErrNotExist.
func LoadArchive(name, queries, archive, root string) (*Set, error) {
	for _, p := range []string{queries, archive} {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp("", "engram-eval-"+name+"-")
	if err != nil {
		return nil, err
	}
	if err := ExtractTarGz(archive, tmp); err != nil {
		return nil, errors.Join(err, os.RemoveAll(tmp))
	}
	set, err := LoadCode(name, queries, filepath.Join(tmp, root))
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(tmp))
	}
	set.cleanup = func() error { return os.RemoveAll(tmp) }
	return set, nil
}

// NonTestGo reports whether a path is a Go file that is not a test: the
// files of gocommits' original corpus, as its README counts them (5,959
// in Go 1.26.8), where tests and docs do not compete.
func NonTestGo(p string) bool {
	return strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go")
}

// Narrow makes a code set's corpus the files of its tree that keep
// accepts (given slash-separated paths relative to the tree): they are
// copied to a new temporary directory, which Close removes, and Dir
// names it. A relevant file keep refuses is an error.
func (s *Set) Narrow(keep func(path string) bool) (err error) {
	for _, q := range s.Questions {
		for _, p := range q.Relevant {
			if !keep(p) {
				return fmt.Errorf("narrow %s: question %s: relevant file %q would leave the corpus", s.Name, q.ID, p)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "engram-eval-"+s.Name+"-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(tmp))
		}
	}()
	err = filepath.WalkDir(s.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(s.Dir, p)
		if err != nil || !keep(filepath.ToSlash(rel)) {
			return err
		}
		return copyFile(p, filepath.Join(tmp, rel))
	})
	if err != nil {
		return fmt.Errorf("narrow %s: %w", s.Name, err)
	}
	prev := s.cleanup
	s.cleanup = func() error {
		err := os.RemoveAll(tmp)
		if prev != nil {
			err = errors.Join(err, prev())
		}
		return err
	}
	s.Dir = tmp
	return nil
}

func copyFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
