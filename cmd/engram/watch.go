package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/metrics"
)

func (a *app) watchCmd() *cobra.Command {
	var (
		yes     bool
		noEmbed bool
		opts    index.Options
	)
	cmd := &cobra.Command{
		Use:   "watch [PATH]",
		Short: "Index a repository, then keep the index current as files change",
		Long: `Index the repository at PATH (default: the project) as engram index does, then
watch it and index each burst of changes (a save, a git checkout of hundreds
of files) as one batch, with the same exclusions; new chunks are embedded in
the background unless --no-embed is given. Stops cleanly on Ctrl-C.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runIndex(cmd.Context(), args, opts, indexRun{yes: yes, embed: !noEmbed, watch: true})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&yes, "yes", "y", false, "grant permission to read the project without asking")
	f.BoolVar(&noEmbed, "no-embed", false, "do not embed new chunks, indexed or stored by agents (engram embed does it later)")
	f.IntVar(&opts.Workers, "workers", 0, "files read in parallel (default from index.workers: one per core)")
	f.Int64Var(&opts.MaxFileBytes, "max-file-size", 0, "skip files larger than this many bytes (default from index.max_file_bytes: 1 MiB)")
	f.StringSliceVar(&opts.Exclude, "exclude", nil, "more gitignore-style patterns to leave out, added to index.exclude (repeatable)")
	return cmd
}

// runWatch watches the project until ctx ends (Ctrl-C), printing a line
// per batch of changes; with embed, a background goroutine embeds what
// each batch stored, and what the store gains from other writers (see
// embedLoop). The queue and updates go to m and act (either may be nil).
func (a *app) runWatch(ctx context.Context, opts index.Options, embed bool, m *metrics.Metrics, act *index.Activity) error {
	opts.Progress = nil
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	ectx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
	}()
	if embed {
		wg.Go(func() { a.embedLoop(ectx, kick) })
	}

	err := a.eng.Watch(ctx, a.cfg.Project, opts, index.WatchOptions{
		Ready: func() { fmt.Fprintf(a.stderr, "watching %s (Ctrl-C to stop)\n", a.cfg.Project) },
		OnPending: func(n int) {
			m.IndexPending(n)
			act.Pending(n)
		},
		OnUpdate: func(s index.Summary, err error) {
			m.IndexUpdated(s, err)
			act.Updated(s, err)
			stamp := time.Now().Format(time.TimeOnly)
			if err != nil {
				fmt.Fprintf(a.stderr, "%s update failed: %v\n", stamp, err)
				return
			}
			if s.Indexed()+s.Deleted+s.Touched == 0 && len(s.Skipped) == 0 {
				return
			}
			fmt.Fprintf(a.stdout, "%s %d new, %d changed, %d deleted (renamed %d), %d touched in %v\n",
				stamp, s.New, s.Changed, s.Deleted, s.Renamed, s.Touched, s.Elapsed.Round(time.Millisecond))
			if s.Indexed() > 0 {
				select {
				case kick <- struct{}{}:
				default: // a run is already due
				}
			}
		},
	})
	if err == nil && ctx.Err() != nil {
		fmt.Fprintln(a.stderr, "stopped watching")
	}
	return err
}

// embedPoll is how often a watcher's embedder looks for chunks that other
// writers stored: engram's hooks, its proxy, and the MCP and HTTP front
// ends store without embedding, so that an agent never waits for it.
var embedPoll = 30 * time.Second

// embedLoop embeds until ctx ends: at once when kick says the watcher
// indexed files, and every embedPoll when the store holds chunks without
// a vector (or, with no corpus model yet, holds more chunks than when it
// last tried to train one). A failure is said once, not at every poll,
// until an embedding succeeds again.
func (a *app) embedLoop(ctx context.Context, kick <-chan struct{}) {
	t := time.NewTicker(embedPoll)
	defer t.Stop()
	failing := false
	tried := int64(-1) // the chunks when a corpus model was last tried
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
			st, err := a.eng.EmbedStatus(ctx)
			if err != nil || st.Pending == 0 && (st.Model != "" || st.Chunks == tried) {
				continue
			}
			tried = st.Chunks
		}
		rep, err := a.eng.Embed(ctx, nil)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				fmt.Fprintf(a.stderr, "%s embedding failed (search stays lexical for the new chunks): %v\n", time.Now().Format(time.TimeOnly), err)
			}
			failing = true
		case err == nil:
			failing = false
			if rep.Embedded > 0 {
				a.log.Info("embedded", "chunks", rep.Embedded, "model", rep.Model, "took", rep.Took)
			}
		}
	}
}
