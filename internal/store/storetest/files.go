package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// Version builds a ChangeVersion of path with content.
func Version(path, content string) store.FileChange {
	e := store.Entry{Content: []byte(content), TokenCount: len(content) / 4, Chunks: Chunks([]byte(content))}
	return store.FileChange{Kind: store.ChangeVersion, Path: path, Size: int64(len(content)),
		ModTime: time.Unix(1_700_000_000, 0).UTC(), Hash: store.ID([]byte(content)), Language: "go", Entry: &e}
}

func putFiles(t testing.TB, s store.Store, changes ...store.FileChange) {
	t.Helper()
	if err := s.PutFiles(context.Background(), changes); err != nil {
		t.Fatalf("PutFiles: %v", err)
	}
}

// found returns the paths of the hits of a search, with History as given,
// best first.
func found(t testing.TB, s store.Store, q string, history bool) []string {
	t.Helper()
	hits := search(t, s, store.Query{Text: q, Limit: 50, Filter: store.Filter{History: history}})
	var out []string
	for _, h := range hits {
		p := "(no file)"
		if len(h.Occurrence.Files) > 0 {
			p = h.Occurrence.Files[0]
		}
		out = append(out, p)
	}
	return out
}

func testFiles(t *testing.T, s store.Store) {
	ctx := context.Background()
	putFiles(t, s,
		Version("cmd/app/main.go", "package main\n\nfunc main() { startServer() }\n"),
		Version("internal/server/server.go", "package server\n\n// startServer listens on the quokka port.\nfunc startServer() {}\n"),
	)
	if got := found(t, s, "quokka", false); !slices.Equal(got, []string{"internal/server/server.go"}) {
		t.Errorf("search quokka = %v", got)
	}
	if got := found(t, s, "internal/server", false); len(got) == 0 || got[0] != "internal/server/server.go" {
		t.Errorf("search by path = %v", got)
	}
	hits := search(t, s, store.Query{Text: "quokka"})
	if len(hits) != 1 || hits[0].Occurrence.Type != store.CodeFile || hits[0].Occurrence.SessionID != "" {
		t.Errorf("file hit = %+v", hits)
	}

	// A new version replaces the old one in default search; the old one
	// stays retrievable and searchable with History.
	putFiles(t, s, Version("internal/server/server.go", "package server\n\n// startServer listens on the wombat port.\nfunc startServer() {}\n"))
	if got := found(t, s, "quokka", false); len(got) != 0 {
		t.Errorf("old version still found by default: %v", got)
	}
	if got := found(t, s, "quokka", true); !slices.Equal(got, []string{"internal/server/server.go"}) {
		t.Errorf("old version with History: %v", got)
	}
	if got := found(t, s, "wombat", false); !slices.Equal(got, []string{"internal/server/server.go"}) {
		t.Errorf("new version: %v", got)
	}
	versions, err := s.FileVersions(ctx, "internal/server/server.go")
	if err != nil || len(versions) != 2 || versions[0].Version != 1 || versions[1].Version != 2 {
		t.Fatalf("FileVersions = %+v, %v", versions, err)
	}
	if ents, err := s.Entries(ctx, []string{versions[0].EntryID}); err != nil || string(ents[0].Content) == "" {
		t.Errorf("old version not retrievable: %v", err)
	}
	f, err := s.File(ctx, "internal/server/server.go")
	if err != nil || f.State != store.FileCurrent || f.Version != 2 || f.EntryID != versions[1].EntryID || f.Chunks == 0 || f.Language != "go" {
		t.Errorf("File = %+v, %v", f, err)
	}

	// The same content again is not a new version.
	putFiles(t, s, Version("internal/server/server.go", "package server\n\n// startServer listens on the wombat port.\nfunc startServer() {}\n"))
	if f, _ := s.File(ctx, "internal/server/server.go"); f.Version != 2 {
		t.Errorf("re-recording the same content made version %d", f.Version)
	}

	// Touch: new time, same version.
	later := time.Unix(1_800_000_000, 0).UTC()
	putFiles(t, s, store.FileChange{Kind: store.ChangeTouch, Path: "cmd/app/main.go", Size: 44, ModTime: later, Hash: "h"})
	if f, _ := s.File(ctx, "cmd/app/main.go"); !f.ModTime.Equal(later) || f.Version != 1 || f.Size != 44 {
		t.Errorf("after touch: %+v", f)
	}

	// Delete: gone from default search, kept in history.
	putFiles(t, s, store.FileChange{Kind: store.ChangeDelete, Path: "internal/server/server.go"})
	if got := found(t, s, "wombat", false); len(got) != 0 {
		t.Errorf("deleted file still found: %v", got)
	}
	if got := found(t, s, "wombat", true); len(got) != 1 {
		t.Errorf("deleted file not in history: %v", got)
	}
	if f, _ := s.File(ctx, "internal/server/server.go"); f.State != store.FileDeleted {
		t.Errorf("deleted file state %s", f.State)
	}

	// Rename: the content stays searchable under its new path.
	putFiles(t, s,
		store.FileChange{Kind: store.ChangeDelete, Path: "cmd/app/main.go", Reason: "renamed to cmd/tool/main.go"},
		Version("cmd/tool/main.go", "package main\n\nfunc main() { startServer() }\n"),
	)
	if got := found(t, s, "startServer", false); !slices.Equal(got, []string{"cmd/tool/main.go"}) {
		t.Errorf("after rename: %v", got)
	}
	if got := found(t, s, "cmd/tool", false); len(got) == 0 || got[0] != "cmd/tool/main.go" {
		t.Errorf("renamed file by its new path: %v", got)
	}

	// The same content at two paths stays searchable while either is current.
	putFiles(t, s, Version("LICENSE", "Permission is hereby granted, free of charge\n"), Version("vendor2/LICENSE", "Permission is hereby granted, free of charge\n"))
	putFiles(t, s, store.FileChange{Kind: store.ChangeDelete, Path: "LICENSE"})
	if got := found(t, s, "hereby granted", false); !slices.Equal(got, []string{"vendor2/LICENSE"}) {
		t.Errorf("shared content after deleting one copy: %v", got)
	}

	// A session that sees an old version brings it back to default search.
	old := Entry("s1", "claude", store.ToolResult, "package server\n\n// startServer listens on the quokka port.\nfunc startServer() {}\n")
	put(t, s, old)
	if got := found(t, s, "quokka", false); len(got) != 1 {
		t.Errorf("old version seen in a session: %v", got)
	}

	// Skipped files are listed with their reason; a current file that
	// becomes skipped leaves search.
	putFiles(t, s,
		store.FileChange{Kind: store.ChangeSkip, Path: ".env", Reason: "secret file name", Size: 10},
		store.FileChange{Kind: store.ChangeSkip, Path: "cmd/tool/main.go", Reason: "too large"},
	)
	if got := found(t, s, "cmd/tool", false); slices.Contains(got, "cmd/tool/main.go") {
		t.Errorf("skipped file still found: %v", got)
	}
	skipped, err := s.Files(ctx, store.FileFilter{States: []store.FileState{store.FileSkipped}})
	if err != nil || len(skipped) != 2 || skipped[0].Path != ".env" || skipped[0].Reason != "secret file name" {
		t.Errorf("skipped files = %+v, %v", skipped, err)
	}
	under, err := s.Files(ctx, store.FileFilter{Prefix: "cmd/"})
	if err != nil || len(under) != 2 {
		t.Errorf("Files(cmd/) = %+v, %v", under, err)
	}
	if st := stats(t, s); st.Files[store.FileSkipped] != 2 || st.Files[store.FileDeleted] != 3 || st.Files[store.FileCurrent] != 1 {
		t.Errorf("Stats.Files = %v", st.Files)
	}
	if _, err := s.File(ctx, "nope.go"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("File(missing) = %v", err)
	}
}

func testFilesInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	good := Version("ok.go", "package ok\n")
	noEntry := Version("x.go", "x")
	noEntry.Entry = nil
	for name, c := range map[string]store.FileChange{
		"dotdot":         Version("../etc/passwd", "x"),
		"absolute":       Version("/etc/passwd", "x"),
		"double slash":   Version("a//b.go", "x"),
		"no entry":       noEntry,
		"skip no reason": {Kind: store.ChangeSkip, Path: "a.bin"},
		"bad kind":       {Kind: "rename", Path: "a.go"},
		"delete unknown": {Kind: store.ChangeDelete, Path: "never.go"},
		"touch unknown":  {Kind: store.ChangeTouch, Path: "never.go"},
	} {
		if err := s.PutFiles(ctx, []store.FileChange{good, c}); err == nil {
			t.Errorf("%s: PutFiles succeeded", name)
		}
	}
	if files, _ := s.Files(ctx, store.FileFilter{}); len(files) != 0 {
		t.Errorf("failed PutFiles calls wrote %d files", len(files))
	}
	if _, err := s.Setting(ctx, "consent"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Setting(missing) = %v", err)
	}
	if err := s.PutSetting(ctx, "consent", "yes"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSetting(ctx, "consent", "granted"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Setting(ctx, "consent"); err != nil || v != "granted" {
		t.Errorf("Setting = %q, %v", v, err)
	}
}

func testFilesBrief(t *testing.T, s store.Store) {
	putFiles(t, s, Version("a.go", "package a\n"), store.FileChange{Kind: store.ChangeSkip, Path: "b.bin", Reason: "binary", Size: 3})
	full, err := s.Files(context.Background(), store.FileFilter{})
	if err != nil {
		t.Fatal(err)
	}
	brief, err := s.Files(context.Background(), store.FileFilter{Brief: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(brief) != 2 || brief[0].Path != "a.go" || brief[0].Hash != full[0].Hash || !brief[0].ModTime.Equal(full[0].ModTime) ||
		brief[0].State != store.FileCurrent || brief[1].Reason != "binary" || brief[0].Size != full[0].Size {
		t.Errorf("brief = %+v, full = %+v", brief, full)
	}
}

func testSearchSeesNewContent(t *testing.T, s store.Store) {
	// A word searched for before it exists is found once it is stored:
	// no cache may remember its absence.
	if hits := search(t, s, store.Query{Text: "axolotl"}); len(hits) != 0 {
		t.Fatalf("found %d hits in an empty store", len(hits))
	}
	put(t, s, Entry("s", "a", store.Note, "the axolotl regrows limbs"))
	if hits := search(t, s, store.Query{Text: "axolotl"}); len(hits) != 1 {
		t.Errorf("after storing it: %d hits", len(hits))
	}
	putFiles(t, s, Version("zoo/axolotl.go", "package zoo\n\n// Axolotl swims.\ntype Axolotl struct{}\n"))
	if got := found(t, s, "axolotl swims", false); !slices.Contains(got, "zoo/axolotl.go") {
		t.Errorf("after indexing a file: %v", got)
	}
}
