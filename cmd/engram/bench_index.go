package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/bench"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

func (a *app) benchIndexCmd() *cobra.Command {
	var (
		dir     string
		workers int
		saves   int
	)
	cmd := &cobra.Command{
		Use:     "index [PATH]",
		PreRunE: atLeast(map[string]int64{"workers": 0, "saves": 1}),
		Short:   "Indexing time against the read-and-hash floor; re-index and watch latency",
		Long: `Copy the tree at PATH (default: the Go source tree, $GOROOT/src) to a scratch
directory and measure, in one run:

  floor        walking it and reading and hashing (SHA-256) every file engram
               would read, with the same workers, after a warm-up pass
  cold index   indexing it into a new store: time, files/s, MB/s, chunks/s,
               peak RSS of this process
  no-op        indexing it again with nothing changed
  one file     indexing after one file is edited, in process and as a new
               engram index process (end to end)
  watch        from saving a file to its new content being searchable, with
               engram watch running (--saves times)`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			var src string
			if len(args) == 1 {
				src = args[0]
			} else {
				out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
				if err != nil {
					return usagef("no PATH given and no go command to find the Go source tree: %v", err)
				}
				src = filepath.Join(strings.TrimSpace(string(out)), "src")
			}
			d, cleanup, err := benchDir(dir)
			if err != nil {
				return err
			}
			defer cleanup()
			tree, err := scratchDir(d, "tree")
			if err != nil {
				return err
			}
			root := filepath.Join(tree, "src") // beside the scratch mark, not with it
			copied, err := copyTree(src, root)
			if err != nil {
				return fmt.Errorf("copy %s: %w", src, err)
			}
			fmt.Fprintf(a.stdout, "tree: %s copied from %s (%s files, %s); %d workers\n", root, src,
				commas(int64(copied.files)), humanBytes(copied.bytes), max(workers, runtime.GOMAXPROCS(0)))
			opts := index.Options{Workers: workers, Logger: a.log}

			// Floor, after a pass that warms the page cache.
			if _, err := index.Floor(ctx, root, opts); err != nil {
				return err
			}
			floor, err := index.Floor(ctx, root, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "floor (walk, read, SHA-256): %v for %s files, %s: %.0f files/s, %.0f MB/s\n",
				floor.Elapsed.Round(time.Millisecond), commas(int64(floor.Files)), humanBytes(floor.Bytes),
				float64(floor.Files)/floor.Elapsed.Seconds(), float64(floor.Bytes)/1e6/floor.Elapsed.Seconds())

			storePath := filepath.Join(d, "engram.db")
			if err := removeStore(storePath); err != nil {
				return err
			}
			st, err := sqlite.Open(ctx, storePath, sqlite.Options{Logger: a.log})
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, st.Close()) }()
			eng, err := engine.New(st, engine.Options{Encoding: a.cfg.Tokens.Encoding, Logger: a.log})
			if err != nil {
				return err
			}
			cold, err := eng.Index(ctx, root, opts)
			if err != nil {
				return err
			}
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			s := cold.Elapsed.Seconds()
			fmt.Fprintf(a.stdout, "cold index: %v: %s files read (%s new), %.0f files/s, %.1f MB/s read, %s chunks (%.0f chunks/s), %s tokens; %.1fx the floor; peak RSS %s\n",
				cold.Elapsed.Round(time.Millisecond), commas(int64(cold.Indexed()+countSkips(cold))), commas(int64(cold.New)),
				float64(cold.Indexed())/s, float64(cold.Read)/1e6/s, commas(int64(cold.Chunks)), float64(cold.Chunks)/s,
				commas(cold.Tokens), cold.Elapsed.Seconds()/floor.Elapsed.Seconds(), humanBytes(ru.Maxrss*1024))
			fmt.Fprintf(a.stdout, "  skipped: %s\n", counts(cold.Skipped))

			noop, err := eng.Index(ctx, root, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "no-op re-index: %v (%s unchanged, %s bytes read)\n", noop.Elapsed.Round(time.Millisecond),
				commas(int64(noop.Unchanged)), commas(noop.Read))

			target, err := pickGoFile(root)
			if err != nil {
				return err
			}
			appendLine(target, "\n// edited by engram bench\n")
			one, err := eng.Index(ctx, root, opts)
			if err != nil {
				return err
			}
			// The same, end to end: a new engram index process, as a user
			// or a hook runs it, after an edit and after a touch.
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			runIndex := func() (time.Duration, error) {
				t0 := time.Now()
				out, err := exec.CommandContext(ctx, exe, "index", root, "--yes", "--store", storePath, "--json").CombinedOutput()
				if err != nil {
					return 0, fmt.Errorf("engram index: %v\n%s", err, out)
				}
				return time.Since(t0), nil
			}
			appendLine(target, "// edited again\n")
			edited, err := runIndex()
			if err != nil {
				return err
			}
			later := time.Now().Add(time.Minute)
			if err := os.Chtimes(target, later, later); err != nil {
				return err
			}
			touched, err := runIndex()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "one file edited: re-index %v in process (%d changed); as a new engram index process: %v after an edit, %v after a touch\n",
				one.Elapsed.Round(time.Millisecond), one.Changed, edited.Round(time.Millisecond), touched.Round(time.Millisecond))

			lat, err := watchLatency(ctx, eng, root, target, saves, a.log)
			if err != nil {
				return err
			}
			l := bench.Summarize(lat)
			fmt.Fprintf(a.stdout, "watch, save to searchable (%d saves): p50 %s  p95 %s  max %s ms\n", l.N, ms(l.P50), ms(l.P95), ms(l.Max))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "scratch directory (default: a temporary one, removed after)")
	f.IntVar(&workers, "workers", 0, "workers (default: one per core)")
	f.IntVar(&saves, "saves", 20, "file saves timed with engram watch running")
	return cmd
}

func countSkips(s index.Summary) int {
	n := 0
	for _, v := range s.Skipped {
		n += v
	}
	return n
}

type copyStats struct {
	files int
	bytes int64
}

// copyTree copies the regular files and directories of src to dst.
func copyTree(src, dst string) (copyStats, error) {
	var cs copyStats
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		n, err := io.Copy(out, in)
		cs.files++
		cs.bytes += n
		return errors.Join(err, out.Close())
	})
	return cs, err
}

// pickGoFile returns a source file of the tree to edit: a mid-sized .go
// file, else any indexed-looking file.
func pickGoFile(root string) (string, error) {
	var pick string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || pick != "" {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if info, err := d.Info(); err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && info.Size() > 4000 && info.Size() < 40000 {
			pick = p
		}
		return nil
	})
	if pick == "" && err == nil {
		err = errors.New("no Go file of 4 to 40 KB to edit in the tree")
	}
	return pick, err
}

func appendLine(path, s string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(s)
	_ = f.Close()
}

// watchLatency runs a watch on root and times, for each of n saves of
// target, how long its new content takes to be searchable.
func watchLatency(ctx context.Context, eng *engine.Engine, root, target string, n int, logger *slog.Logger) ([]time.Duration, error) {
	logger.Debug("timing saves", "file", target)
	wctx, cancel := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- eng.Watch(wctx, root, index.Options{Logger: logger}, index.WatchOptions{Ready: func() { close(ready) }, OnUpdate: func(s index.Summary, err error) {
			logger.Debug("watch update", "changed", s.Changed, "new", s.New, "err", err)
		}})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		return nil, err
	}
	var out []time.Duration
	for i := range n {
		token := fmt.Sprintf("benchlatencyword%dx%d", i, time.Now().UnixNano()%1000000)
		start := time.Now()
		appendLine(target, "// "+token+"\n")
		for {
			hits, err := eng.Search(ctx, store.Query{Text: token, Limit: 1})
			if err != nil {
				cancel()
				return nil, err
			}
			if len(hits) > 0 {
				out = append(out, time.Since(start))
				break
			}
			if time.Since(start) > 10*time.Second {
				cancel()
				return nil, fmt.Errorf("save %d not searchable after 10s", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // let the watch settle between saves
	}
	cancel()
	return out, <-done
}
