package index

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/engramhq/engram/internal/store"
)

// Defaults for WatchOptions.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultMaxDelay = 2 * time.Second
)

// WatchOptions configure Watch. The zero value uses the defaults.
type WatchOptions struct {
	// Debounce is the quiet time after the last file event before the
	// changes are indexed: a git checkout of 500 files is one batch. Zero
	// means DefaultDebounce.
	Debounce time.Duration
	// MaxDelay bounds how long a steady stream of events can hold a batch
	// back. Zero means DefaultMaxDelay.
	MaxDelay time.Duration
	// OnUpdate, if set, is called after each batch with what it did.
	OnUpdate func(Summary, error)
	// Ready, if set, is called once the watches are in place.
	Ready func()
	// OnPending, if set, is called with the number of changed paths that
	// wait for the next update, when it grows and when an update is done.
	OnPending func(paths int)
	// RootCheck is how often Watch makes sure root is still where it
	// was: moving a directory above it sends no event. Zero means
	// DefaultRootCheck.
	RootCheck time.Duration
}

// DefaultRootCheck is how often Watch checks that its root has not moved.
const DefaultRootCheck = 5 * time.Second

// Watch keeps the index of root current until ctx ends, and then returns
// nil. It watches every directory the index walks (fsnotify is not
// recursive: directories are added as they appear), gathers the changed
// paths of a burst of events, and indexes them with Update; a change to an
// ignore file, or events lost by the kernel, cause a full Run instead. An
// update that fails (the store unreachable) keeps its paths and is tried
// again, after a second, then longer. A directory renamed within the
// tree has its watches laid again. Watch does not index what changed
// before it started: run Run first. It returns ErrRootGone when root is
// moved or removed, or a directory above it is moved (seen at the next
// update, or within RootCheck).
func Watch(ctx context.Context, st store.Store, root string, opts Options, wopts WatchOptions) (err error) {
	opts.defaults()
	if wopts.Debounce <= 0 {
		wopts.Debounce = DefaultDebounce
	}
	if wopts.MaxDelay <= 0 {
		wopts.MaxDelay = DefaultMaxDelay
	}
	if wopts.RootCheck <= 0 {
		wopts.RootCheck = DefaultRootCheck
	}
	abs, err := resolveRoot(root)
	if err != nil {
		return err
	}
	rootInfo, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("watch %s: %w", abs, err)
	}
	// rootGone reports the root moved or removed: its own rename or
	// removal is an event, but a move of a directory above it is not, and
	// its files' events then name paths that are no longer there.
	errGone := fmt.Errorf("%w: %s was moved or removed; index and watch the project where it is now", ErrRootGone, abs)
	rootGone := func() error {
		fi, err := os.Stat(abs)
		if errors.Is(err, fs.ErrNotExist) || err == nil && !os.SameFile(fi, rootInfo) {
			return errGone
		}
		return nil
	}
	check := time.NewTicker(wopts.RootCheck)
	defer check.Stop()
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", abs, err)
	}
	defer func() { err = errors.Join(err, fw.Close()) }()
	found, err := walk(ctx, abs, nil, nil, opts.Exclude)
	if err != nil {
		return err
	}
	// dirs are the directories watched, so that an event can tell a
	// directory's rename from a file's without asking fsnotify (whose
	// list is a copy, under its lock).
	dirs := map[string]bool{}
	for _, d := range found.dirs {
		if err := addWatch(fw, d); err != nil {
			return err
		}
		dirs[d] = true
	}
	opts.Logger.Info("watching", "root", abs, "directories", len(found.dirs))
	if wopts.Ready != nil {
		wopts.Ready()
	}

	pending := map[string]bool{}
	full, rewatch := false, false
	var watchErr error // what ends the watch, from flush
	var first time.Time
	// After a failed update (the store unreachable), its paths stay
	// pending and it is tried again at retryAt, the pause doubling up
	// to a minute; events meanwhile do not bring it sooner.
	var retryAt time.Time
	backoff := time.Second
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if watchErr = rootGone(); watchErr != nil {
			return
		}
		paths := make([]string, 0, len(pending))
		for p := range pending {
			paths = append(paths, p)
		}
		var sum Summary
		var err error
		if rewatch {
			d, err := relay(ctx, fw, abs, opts.Exclude)
			if err != nil {
				// Half the tree unwatched would go unnoticed: stop.
				if ctx.Err() == nil {
					watchErr = fmt.Errorf("watch %s again after a directory moved: %w", abs, err)
				}
				return
			}
			dirs = d
			rewatch = false
		}
		if full {
			sum, err = Run(ctx, st, abs, opts)
		} else {
			sum, err = Update(ctx, st, abs, paths, opts)
		}
		if ctx.Err() == nil {
			if err != nil {
				opts.Logger.Warn("watch update failed: trying again", "err", err, "paths", len(paths), "in", backoff)
			}
			if wopts.OnUpdate != nil {
				wopts.OnUpdate(sum, err)
			}
			if err != nil {
				retryAt = time.Now().Add(backoff)
				timer.Reset(backoff)
				backoff = min(2*backoff, time.Minute)
				return
			}
		}
		retryAt, backoff = time.Time{}, time.Second
		clear(pending)
		full, first = false, time.Time{}
		if wopts.OnPending != nil {
			wopts.OnPending(0)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			rel, err := filepath.Rel(abs, ev.Name)
			if err == nil && rel == "." && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// Its watches would go on under the old name, or none.
				return errGone
			}
			if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
				continue
			}
			if ev.Has(fsnotify.Rename) && dirs[ev.Name] {
				// A directory moved within the tree keeps its watches, which
				// go on reporting its files under the old name: the watches
				// are laid again, and the tree indexed, at the next update.
				rewatch, full = true, true
			}
			rel = filepath.ToSlash(rel)
			if base := filepath.Base(rel); base == ".gitignore" || base == ".ignore" {
				full = true // what is ignored may have changed anywhere below
			}
			if ev.Has(fsnotify.Create) {
				// A new directory needs watches before files appear in it;
				// those that appeared already are found by the update,
				// which walks it.
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					sub, err := walkPath(ctx, abs, strings.Split(rel, "/"), opts.Exclude)
					if err == nil {
						for _, d := range sub.dirs {
							if err := addWatch(fw, d); err != nil {
								opts.Logger.Warn("cannot watch directory", "dir", d, "err", err)
								continue
							}
							dirs[d] = true
						}
					}
				}
			}
			if !pending[rel] {
				pending[rel] = true
				if wopts.OnPending != nil {
					wopts.OnPending(len(pending))
				}
			}
			if first.IsZero() {
				first = time.Now()
			}
			wait := min(wopts.Debounce, wopts.MaxDelay-time.Since(first))
			timer.Reset(max(wait, time.Until(retryAt), 0))
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				opts.Logger.Warn("file events were lost: indexing the whole tree")
				full = true
				if first.IsZero() {
					first = time.Now()
				}
				timer.Reset(wopts.Debounce)
				continue
			}
			opts.Logger.Warn("watch error", "err", err)
		case <-timer.C:
			flush()
			if watchErr != nil {
				return watchErr
			}
		case <-check.C:
			if err := rootGone(); err != nil {
				return err
			}
		}
	}
}

// ErrRootGone is Watch's error when the directory it watches is moved
// or removed.
var ErrRootGone = errors.New("the watched directory is gone")

// relay removes every watch and lays them again from a walk of the tree;
// it returns the directories watched.
func relay(ctx context.Context, fw *fsnotify.Watcher, root string, exclude []string) (map[string]bool, error) {
	for _, p := range fw.WatchList() {
		_ = fw.Remove(p) // one already gone with its directory
	}
	found, err := walk(ctx, root, nil, nil, exclude)
	if err != nil {
		return nil, err
	}
	dirs := make(map[string]bool, len(found.dirs))
	for _, d := range found.dirs {
		if err := addWatch(fw, d); err != nil {
			return nil, err
		}
		dirs[d] = true
	}
	return dirs, nil
}

// errNoSpace is what adding a watch returns past the system's limit.
var errNoSpace = syscall.ENOSPC

// addWatch watches one directory, explaining the usual failure.
func addWatch(fw *fsnotify.Watcher, dir string) error {
	err := fw.Add(dir)
	if errors.Is(err, errNoSpace) {
		return fmt.Errorf("watch %s: the system's limit on watched directories is reached; raise it (on Linux: sysctl fs.inotify.max_user_watches=524288) or exclude directories", dir)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	return nil
}
