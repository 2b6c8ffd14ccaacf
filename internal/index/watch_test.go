package index

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// watcher runs Watch in the background and collects its updates.
type watcher struct {
	t       *testing.T
	updates chan Summary
	stop    func()
	done    chan error
	// pending is the last count OnPending reported, maxPending the most.
	pending, maxPending atomic.Int64
}

func startWatch(t *testing.T, s store.Store, root string) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{t: t, updates: make(chan Summary, 100), stop: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		w.done <- Watch(ctx, s, root, Options{}, WatchOptions{
			Debounce: 50 * time.Millisecond,
			Ready:    func() { close(ready) },
			OnPending: func(n int) {
				w.pending.Store(int64(n))
				if int64(n) > w.maxPending.Load() {
					w.maxPending.Store(int64(n))
				}
			},
			OnUpdate: func(sum Summary, err error) {
				if err != nil {
					t.Errorf("watch update: %v", err)
				}
				w.updates <- sum
			},
		})
	}()
	select {
	case <-ready:
	case err := <-w.done:
		t.Fatalf("Watch ended before it was ready: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Watch not ready after 10s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-w.done; err != nil {
			t.Errorf("Watch returned %v", err)
		}
	})
	return w
}

// next waits for updates until cond holds on their sum, and returns how many
// updates it took.
func (w *watcher) next(what string, cond func(Summary) bool) int {
	w.t.Helper()
	var total Summary
	n := 0
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-w.updates:
			n++
			total.New += s.New
			total.Changed += s.Changed
			total.Deleted += s.Deleted
			total.Renamed += s.Renamed
			if cond(total) {
				return n
			}
		case <-deadline:
			w.t.Fatalf("%s: no such update after 10s (so far %+v)", what, total)
		}
	}
}

func TestWatch(t *testing.T) {
	root := tree(t, map[string]string{
		"main.go":    "package main\n",
		".gitignore": "*.tmp\n",
	})
	s := openStore(t)
	run(t, s, root, Options{})
	w := startWatch(t, s, root)

	// A new file becomes searchable.
	write(t, root, "api/handler.go", "package api\n\n// HandleWombat serves wombats.\nfunc HandleWombat() {}\n")
	w.next("new file in a new directory", func(s Summary) bool { return s.New >= 1 })
	if got := paths(t, s, "HandleWombat"); len(got) != 1 || !strings.HasPrefix(got[0], "api/handler.go") {
		t.Errorf("after the new file: %v", got)
	}

	write(t, root, "api/v1/old.go", "package v1\n")
	w.next("a directory below it", func(s Summary) bool { return s.New >= 1 })

	// An edit replaces it; ignored files are not indexed.
	write(t, root, "api/handler.go", "package api\n\nfunc HandleNumbat() {}\n")
	write(t, root, "api/scratch.tmp", "ignored numbat")
	w.next("edit", func(s Summary) bool { return s.Changed >= 1 })
	if got := paths(t, s, "numbat"); len(got) != 1 {
		t.Errorf("after the edit: %v", got)
	}
	if got := paths(t, s, "wombat"); len(got) != 0 {
		t.Errorf("old content still found: %v", got)
	}

	// A burst of 300 files, as a git checkout makes, is a few batches,
	// not 300.
	for i := range 300 {
		write(t, root, fmt.Sprintf("gen/f%03d.go", i), fmt.Sprintf("package gen\n\nconst Burst%d = %d\n", i, i))
	}
	batches := w.next("burst", func(s Summary) bool { return s.New >= 300 })
	if batches > 10 {
		t.Errorf("300 files took %d batches", batches)
	}
	// The queue grew with the burst and is empty once it is indexed.
	if m := w.maxPending.Load(); m < 30 {
		t.Errorf("at most %d paths were reported pending during a burst of 300", m)
	}
	for deadline := time.Now().Add(5 * time.Second); w.pending.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := w.pending.Load(); n != 0 {
		t.Errorf("%d paths still pending after the burst was indexed", n)
	}

	// Removing a directory deletes its files; a rename keeps the content.
	if err := os.RemoveAll(filepath.Join(root, "gen")); err != nil {
		t.Fatal(err)
	}
	w.next("directory removed", func(s Summary) bool { return s.Deleted >= 300 })
	if err := os.Rename(filepath.Join(root, "api"), filepath.Join(root, "routes")); err != nil {
		t.Fatal(err)
	}
	w.next("directory renamed", func(s Summary) bool { return s.New >= 1 && s.Deleted >= 1 })
	if got := paths(t, s, "HandleNumbat"); len(got) != 1 || !strings.HasPrefix(got[0], "routes/handler.go") {
		t.Errorf("after the rename: %v", got)
	}
	// A file made in the renamed directory, and in one below it, after
	// the rename: the directories' old watches would name them under
	// api/, where they are not.
	write(t, root, "routes/v1/deep.go", "package v1\n\nfunc HandleQuokka() {}\n")
	w.next("file made below the renamed directory", func(s Summary) bool { return s.New >= 1 })
	write(t, root, "routes/later.go", "package api\n\nfunc HandleBilby() {}\n")
	write(t, root, "routes/v2/later.go", "package v2\n\nfunc HandleDunnart() {}\n")
	w.next("files made in the renamed directory", func(s Summary) bool { return s.New >= 2 })
	for _, name := range []string{"HandleQuokka", "HandleBilby", "HandleDunnart"} {
		if got := paths(t, s, name); len(got) != 1 || !strings.HasPrefix(got[0], "routes/") {
			t.Errorf("%s after the rename: %v", name, got)
		}
	}
	for _, p := range []string{"routes/v1", "routes/v2", "routes/later.go"} {
		if err := os.RemoveAll(filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	w.next("files removed again", func(s Summary) bool { return s.Deleted >= 4 })
	if files, _ := s.Files(context.Background(), store.FileFilter{States: []store.FileState{store.FileCurrent}}); len(files) != 3 {
		var ps []string
		for _, f := range files {
			ps = append(ps, f.Path)
		}
		t.Errorf("current files %v, want main.go, .gitignore, routes/handler.go", ps)
	}
}

// TestWatch_SaveIsSearchable checks that a saved file becomes searchable,
// logging how long that took; the figure for BENCHMARKS.md comes from
// engram bench index.
func TestWatch_SaveIsSearchable(t *testing.T) {
	root := tree(t, map[string]string{"a.go": "package a\n"})
	s := openStore(t)
	run(t, s, root, Options{})
	startWatch(t, s, root)
	start := time.Now()

	write(t, root, "a.go", "package a\n\nfunc Latency() {}\n")

	for {
		if got := paths(t, s, "Latency"); len(got) == 1 {
			t.Logf("searchable %v after the save", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("not searchable after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// failingStore refuses the index's writes while down is set (a database
// unreachable).
type failingStore struct {
	store.Store
	down atomic.Bool
}

func (s *failingStore) PutFiles(ctx context.Context, changes []store.FileChange) error {
	if s.down.Load() {
		return fmt.Errorf("connection refused")
	}
	return s.Store.PutFiles(ctx, changes)
}

// TestWatch_StoreComesBack: a file saved while the store is unreachable
// is indexed once it is back: the failed update's paths are kept and
// tried again.
func TestWatch_StoreComesBack(t *testing.T) {
	root := tree(t, map[string]string{"main.go": "package main\n"})
	s := &failingStore{Store: openStore(t)}
	run(t, s, root, Options{})
	s.down.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan struct{}, 100)
	ok := make(chan Summary, 100)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, s, root, Options{}, WatchOptions{Debounce: 50 * time.Millisecond, Ready: func() { close(ready) },
			OnUpdate: func(sum Summary, err error) {
				if err != nil {
					failed <- struct{}{}
					return
				}
				ok <- sum
			}})
	}()
	<-ready
	write(t, root, "outage.go", "package main\n\n// OutageMarker was saved while the store was down.\nfunc OutageMarker() {}\n")
	select {
	case <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("no update was tried while the store was down")
	}
	s.down.Store(false)
	select {
	case sum := <-ok:
		if sum.New != 1 {
			t.Errorf("the update after the store came back: %+v", sum)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the file saved during the outage was not indexed once the store came back")
	}
	if got := paths(t, s, "OutageMarker"); len(got) != 1 {
		t.Errorf("the file saved during the outage: %v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestWatch_RootGone: the watched directory moved away, or removed, ends
// the watch with ErrRootGone rather than watching nothing for good.
func TestWatch_RootGone(t *testing.T) {
	// "parent moved, then a file changed" and "parent moved" move the
	// directory above the root, which sends the watch no event: the
	// first is seen at the update its file's event asks for, the second
	// by the periodic check. Before, the watch went on, its updates
	// failing, for good.
	for _, how := range []string{"moved", "removed", "parent moved, then a file changed", "parent moved"} {
		t.Run(how, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "parent")
			root := filepath.Join(parent, "project")
			write(t, root, "main.go", "package main\n")
			write(t, root, "sub/a.go", "package sub\n")
			s := openStore(t)
			run(t, s, root, Options{})
			check := time.Hour
			if how == "parent moved" {
				check = 50 * time.Millisecond
			}
			ready, done := make(chan struct{}), make(chan error, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				done <- Watch(ctx, s, root, Options{}, WatchOptions{Debounce: 50 * time.Millisecond, RootCheck: check, Ready: func() { close(ready) }})
			}()
			<-ready
			var err error
			switch how {
			case "moved":
				err = os.Rename(root, root+".moved")
			case "removed":
				err = os.RemoveAll(root)
			case "parent moved, then a file changed":
				if err = os.Rename(parent, parent+".moved"); err == nil {
					err = os.WriteFile(filepath.Join(parent+".moved", "project", "sub", "a.go"), []byte("package sub // changed\n"), 0o644)
				}
			case "parent moved":
				err = os.Rename(parent, parent+".moved")
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, ErrRootGone) {
					t.Errorf("Watch returned %v, want ErrRootGone", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Watch still running 10 s after its directory was " + how)
			}
		})
	}
}
