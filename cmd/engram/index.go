package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/config"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/metrics"
	"github.com/engramhq/engram/internal/store"
)

// consentKey is the store setting that records the user's permission to
// read the project.
const consentKey = "index.consent"

func (a *app) indexCmd() *cobra.Command {
	var (
		yes     bool
		watch   bool
		jsonOut bool
		noEmbed bool
		opts    index.Options
	)
	cmd := &cobra.Command{
		Use:   "index [PATH]",
		Short: "Index a repository so that its code is searchable",
		Long: `Index the repository at PATH (default: the project) into its store: every file
worth reading, split into chunks that follow its declarations, searchable by
symbol, by the words of identifiers and comments, and by path.

Left out: .git, node_modules, vendor, dist, build, target, .cache, coverage,
__pycache__, .next and similar directories; what .gitignore and .ignore files
(at every level), .git/info/exclude and git's global excludes
(core.excludesFile, or ~/.config/git/ignore) ignore; symlinks; lock, minified,
generated (unless --generated or index.generated) and binary files; files over
--max-file-size. Generated files are those with a "Code generated ... DO NOT
EDIT." header or an @generated marker, and names such as *.pb.go; some hold
real code (Go's net/http keeps HTTP/2 in h2_bundle.go). Files that hold
secrets never enter the store: .env files, keys, credential files are skipped
by name, files with a private key block are withheld, and tokens of known
formats (cloud keys, API tokens) are redacted; each is reported by path.

A second run reads only what changed (by size and time, then content hash):
changed files get a new version (the old one stays retrievable, search returns
the current one), deleted files stop being current, renames are recognised.
An interrupted run keeps what it stored and the next one continues.

Then the new chunks are embedded for semantic search, as engram embed does,
unless --no-embed is given.

The first index of a project asks permission on a terminal; elsewhere pass
--yes.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runIndex(cmd.Context(), args, opts, indexRun{yes: yes, embed: !noEmbed, watch: watch, json: jsonOut})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&yes, "yes", "y", false, "grant permission to read the project without asking")
	f.BoolVar(&watch, "watch", false, "keep the index current after indexing, as engram watch does")
	f.BoolVar(&jsonOut, "json", false, "print the summary as JSON")
	f.BoolVar(&noEmbed, "no-embed", false, "do not embed the new chunks now (engram embed does it later)")
	f.IntVar(&opts.Workers, "workers", 0, "files read in parallel (default from index.workers: one per core)")
	f.Int64Var(&opts.MaxFileBytes, "max-file-size", 0, "skip files larger than this many bytes (default from index.max_file_bytes: 1 MiB)")
	f.StringSliceVar(&opts.Exclude, "exclude", nil, "more gitignore-style patterns to leave out, added to index.exclude (repeatable)")
	f.BoolVar(&opts.Generated, "generated", false, "index generated files too (default from index.generated: false)")
	return cmd
}

// checkIndexFlags refuses what the index flags cannot mean: a negative
// count or size (zero is the config's), an exclude pattern that does not
// parse.
func checkIndexFlags(opts index.Options) error {
	if opts.Workers < 0 || opts.MaxFileBytes < 0 {
		return usagef("--workers and --max-file-size must be 0 (the configured default) or more")
	}
	if opts.Workers > config.MaxWorkers {
		return usagef("--workers %d: at most %d", opts.Workers, config.MaxWorkers)
	}
	for _, p := range opts.Exclude {
		if _, err := path.Match(strings.TrimPrefix(p, "!"), ""); err != nil {
			return usagef("--exclude %q: %v", p, err)
		}
	}
	return nil
}

// indexOptions completes index options from the flags with the config.
func (a *app) indexOptions(opts *index.Options) {
	if opts.Workers == 0 {
		opts.Workers = a.cfg.Index.Workers
	}
	if opts.MaxFileBytes == 0 {
		opts.MaxFileBytes = a.cfg.Index.MaxFileBytes
	}
	opts.Exclude = append(append([]string(nil), a.cfg.Index.Exclude...), opts.Exclude...)
	opts.Generated = opts.Generated || a.cfg.Index.Generated
	opts.ChunkTokens = a.cfg.Ingest.ChunkTokens
	opts.Logger = a.log
}

// consent makes sure the user allowed engram to read the project: once per
// store, on a terminal or with --yes.
func (a *app) consent(ctx context.Context, st store.Store, yes bool) error {
	if _, err := st.Setting(ctx, consentKey); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	how := "--yes"
	if !yes {
		in, ok := a.stdin.(*os.File)
		if !ok || !isTerminal(in) {
			return fmt.Errorf("engram needs permission to read %s and store what it finds: run engram index on a terminal to be asked, or pass --yes", a.cfg.Project)
		}
		fmt.Fprintf(a.stderr, "engram will read the files of %s and keep a searchable copy in\n%s\n(secrets are withheld). Allow? [y/N] ", a.cfg.Project, a.cfg.Store.Path)
		answer, _ := bufio.NewReader(in).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return errors.New("permission refused: nothing was indexed")
		}
		how = "terminal"
	}
	return st.PutSetting(ctx, consentKey, fmt.Sprintf("granted %s (%s) for %s", time.Now().UTC().Format(time.RFC3339), how, a.cfg.Project))
}

// indexProgress shows a run's progress on standard error: a bar with
// files, rate and time left on a terminal, a line every few seconds
// otherwise.
type indexProgress struct {
	w        io.Writer
	terminal bool
	bar      *progressbar.ProgressBar
	last     time.Time
	start    time.Time
	phase    index.Phase
}

func newIndexProgress(w io.Writer) *indexProgress {
	f, ok := w.(*os.File)
	now := time.Now()
	return &indexProgress{w: w, terminal: ok && isTerminal(f), start: now, last: now}
}

func (p *indexProgress) update(pr index.Progress) {
	if pr.Phase != p.phase {
		p.phase = pr.Phase
		if p.bar != nil {
			_ = p.bar.Finish()
			p.bar = nil
		}
		if pr.Phase == index.PhaseIndex && p.terminal && pr.Files > 0 {
			p.bar = progressbar.NewOptions(pr.Files,
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription("indexing"),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetItsString("files"),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(),
			)
		}
	}
	if p.bar != nil {
		_ = p.bar.Set(pr.Done)
		return
	}
	if pr.Phase == index.PhaseIndex && time.Since(p.last) >= 2*time.Second && pr.Done > 0 {
		p.last = time.Now()
		rate := float64(pr.Done) / time.Since(p.start).Seconds()
		eta := time.Duration(float64(pr.Files-pr.Done)/max(rate, 1e-9)) * time.Second
		fmt.Fprintf(p.w, "indexing: %d/%d files (%.0f files/s, %s, ETA %v)\n", pr.Done, pr.Files, rate, humanBytes(pr.Bytes), eta.Round(time.Second))
	}
}

func (p *indexProgress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

func printSummary(w io.Writer, s index.Summary) {
	verb := "indexed"
	if s.Interrupted {
		verb = "interrupted indexing"
	}
	fmt.Fprintf(w, "%s %s in %v: %s seen\n", verb, s.Root, s.Elapsed.Round(time.Millisecond), plural(s.Seen, "file"))
	fmt.Fprintf(w, "  new %s, changed %s, unchanged %s, touched %s, deleted %s (renamed %s)\n",
		commas(int64(s.New)), commas(int64(s.Changed)), commas(int64(s.Unchanged)), commas(int64(s.Touched)),
		commas(int64(s.Deleted)), commas(int64(s.Renamed)))
	if s.Indexed() > 0 {
		fmt.Fprintf(w, "  stored %s, %s, %s tokens (read %s)\n", plural(s.Chunks, "chunk"), humanBytes(s.Bytes), commas(s.Tokens), humanBytes(s.Read))
	}
	if line := counts(s.Skipped); line != "" {
		fmt.Fprintf(w, "  skipped: %s\n", line)
	}
	if line := counts(s.Ignored); line != "" {
		fmt.Fprintf(w, "  left out by the walk: %s\n", line)
	}
	if len(s.Secrets) > 0 {
		fmt.Fprintf(w, "  secrets kept out of the store (%s):\n", plural(len(s.Secrets), "file"))
		for _, f := range s.Secrets {
			what := "redacted"
			if f.Withheld {
				what = "withheld"
			}
			fmt.Fprintf(w, "    %s: %s (%s)\n", shownPath(f.Path), what, strings.Join(f.Kinds, ", "))
		}
	}
	var notes []string
	if s.NonUTF8 > 0 {
		notes = append(notes, fmt.Sprintf("%d not valid UTF-8 (stored as is)", s.NonUTF8))
	}
	if s.Unstable > 0 {
		notes = append(notes, fmt.Sprintf("%d changed while read (read again next run)", s.Unstable))
	}
	if s.Vanished > 0 {
		notes = append(notes, fmt.Sprintf("%d deleted during the run", s.Vanished))
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "  files: %s\n", strings.Join(notes, ", "))
	}
	if len(s.Errors) > 0 {
		fmt.Fprintf(w, "  errors (%d):\n", len(s.Errors))
		for _, e := range s.Errors[:min(len(s.Errors), 20)] {
			fmt.Fprintf(w, "    %s: %s\n", shownPath(e.Path), e.Err)
		}
		if len(s.Errors) > 20 {
			fmt.Fprintf(w, "    ... and %d more\n", len(s.Errors)-20)
		}
	}
}

// counts formats a count per reason, largest first.
func counts(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		if v > 0 {
			all = append(all, kv{k, v})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	parts := make([]string, len(all))
	for i, e := range all {
		parts[i] = fmt.Sprintf("%s %s", commas(int64(e.v)), e.k)
	}
	return strings.Join(parts, ", ")
}

type summaryJSON struct {
	Root        string             `json:"root"`
	Seen        int                `json:"seen"`
	New         int                `json:"new"`
	Changed     int                `json:"changed"`
	Unchanged   int                `json:"unchanged"`
	Touched     int                `json:"touched"`
	Deleted     int                `json:"deleted"`
	Renamed     int                `json:"renamed"`
	Skipped     map[string]int     `json:"skipped"`
	Ignored     map[string]int     `json:"ignored"`
	Secrets     []index.SecretFile `json:"secrets"`
	NonUTF8     int                `json:"non_utf8"`
	Unstable    int                `json:"unstable"`
	Vanished    int                `json:"vanished"`
	Errors      []index.FileError  `json:"errors"`
	Chunks      int                `json:"chunks"`
	Bytes       int64              `json:"bytes"`
	Tokens      int64              `json:"tokens"`
	Read        int64              `json:"read_bytes"`
	Seconds     float64            `json:"seconds"`
	Interrupted bool               `json:"interrupted"`
}

func toSummaryJSON(s index.Summary) summaryJSON {
	// Empty lists and maps are [] and {}, not null.
	if s.Secrets == nil {
		s.Secrets = []index.SecretFile{}
	}
	if s.Errors == nil {
		s.Errors = []index.FileError{}
	}
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	if s.Ignored == nil {
		s.Ignored = map[string]int{}
	}
	return summaryJSON{Root: s.Root, Seen: s.Seen, New: s.New, Changed: s.Changed, Unchanged: s.Unchanged,
		Touched: s.Touched, Deleted: s.Deleted, Renamed: s.Renamed, Skipped: s.Skipped, Ignored: s.Ignored,
		Secrets: s.Secrets, NonUTF8: s.NonUTF8, Unstable: s.Unstable, Vanished: s.Vanished, Errors: s.Errors,
		Chunks: s.Chunks, Bytes: s.Bytes, Tokens: s.Tokens, Read: s.Read, Seconds: s.Elapsed.Seconds(), Interrupted: s.Interrupted}
}

// indexRun says what engram index (or watch) does around the index itself.
type indexRun struct {
	yes, embed, watch, json bool
	// metrics, if set, records the watcher's queue and updates.
	metrics *metrics.Metrics
	// activity, if set, keeps the index's live state for the status API:
	// the first run's summary, then the watcher's queue and updates.
	activity *index.Activity
}

// withinProject reports whether dir belongs to the current project: a
// command run in dir would find that project (config.FindProject: the
// git work tree holding it), and it is not the project's root itself
// (then the path relative to the root is returned, else ""). A directory
// outside any work tree is its own project, as is a nested repository.
func (a *app) withinProject(dir string) (string, bool) {
	abs, err := filepath.Abs(dir)
	if err != nil || a.cfg.Project == "" {
		return "", false
	}
	root := evalSymlinks(a.cfg.Project)
	if evalSymlinks(config.FindProject(abs)) != root {
		return "", false
	}
	rel, err := filepath.Rel(root, evalSymlinks(abs))
	if err != nil || rel == "." {
		return "", true
	}
	return rel, true
}

// runIndex indexes the project (or the tree of args[0]) with progress,
// prints the summary, embeds the new chunks, and then watches, as r says.
func (a *app) runIndex(ctx context.Context, args []string, opts index.Options, r indexRun) error {
	if err := checkIndexFlags(opts); err != nil {
		return err
	}
	if len(args) == 1 {
		if inside, ok := a.withinProject(args[0]); ok {
			// A directory of the project (engram index . from a
			// subdirectory) is the project: a store of its own would be
			// one that nothing run there reads.
			if inside != "" {
				fmt.Fprintf(a.stderr, "%s is in the project %s: indexing the project\n", args[0], a.cfg.Project)
			}
		} else {
			a.flags.Project = args[0]
			if err := a.loadConfig(); err != nil {
				return err
			}
		}
	}
	eng, err := a.engine(ctx, false)
	if err != nil {
		return err
	}
	if err := a.consent(ctx, eng.Store(), r.yes); err != nil {
		return err
	}
	a.indexOptions(&opts)
	p := newIndexProgress(a.stderr)
	opts.Progress = p.update
	sum, err := eng.Index(ctx, a.cfg.Project, opts)
	p.finish()
	r.activity.Updated(sum, err)
	if r.json {
		if jerr := writeJSON(a.stdout, toSummaryJSON(sum)); jerr != nil {
			return jerr
		}
	} else {
		printSummary(a.stdout, sum)
	}
	if err != nil {
		return err
	}
	if r.embed {
		if _, err := a.runEmbed(ctx, eng, true); err != nil {
			return err
		}
	}
	if r.watch {
		return a.runWatch(ctx, opts, r.embed, r.metrics, r.activity)
	}
	return nil
}
