// Package index keeps engram's copy of a repository current: Run walks the
// tree and stores every file worth reading, chunked by its declarations, as
// versions in the store's file index; Watch keeps it current as files
// change.
//
// A run walks the tree (walk.go) honouring excluded directories, the
// .gitignore and .ignore files at every level and configured patterns,
// without following symlinks. It compares what it finds with the manifest
// (the store's file records: size, modification time, content hash) and
// reads only files that are new or changed, most relevant first (recently
// modified, then core paths, then source code before other text). Workers,
// one per core and each holding one open file, read, classify (classify.go:
// secret names, lock, minified, generated and binary files), redact
// secrets, chunk and count; one writer stores the results in large
// transactions. A run that is interrupted keeps what it stored, so the next
// one continues where it stopped. Files the walk no longer finds are
// marked deleted only after a complete walk, and not below a directory it
// could not read: that is reported once and its files kept as they were.
package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/chunk"
	"github.com/engramhq/engram/internal/secrets"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
)

// Defaults for Options.
const (
	DefaultMaxFileBytes = 1 << 20
	DefaultBatchBytes   = 16 << 20
	DefaultBatchFiles   = 2000
)

// Options configure indexing. The zero value uses the defaults.
type Options struct {
	// Workers read and chunk files in parallel, each holding at most one
	// open file. Zero means one per core.
	Workers int
	// MaxFileBytes skips larger files. Zero means DefaultMaxFileBytes.
	MaxFileBytes int64
	// ChunkTokens bounds a chunk's tokens. Zero means chunk.DefaultMaxTokens.
	ChunkTokens int
	// BatchBytes and BatchFiles bound one write transaction. Zero means
	// DefaultBatchBytes and DefaultBatchFiles.
	BatchBytes int64
	BatchFiles int
	// Exclude holds extra gitignore-style patterns, relative to the root.
	Exclude []string
	// Generated indexes generated files too (ReasonGenerated: a "Code
	// generated ... DO NOT EDIT." header, an @generated marker, a .pb.go
	// name), which are left out by default: they are rarely what an agent
	// should read or change, and their bulk crowds the code they come
	// from. Some projects keep real code in them (Go's net/http holds
	// HTTP/2 in h2_bundle.go).
	Generated bool
	// Encoding names the encoding that counts tokens; it is loaded only
	// when a file must be read. Empty means tokens.DefaultEncoding.
	Encoding string
	// Progress, if set, is called as work advances, from one goroutine at
	// a time.
	Progress func(Progress)
	// Logger receives indexing events. Nil discards them.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	if o.BatchFiles <= 0 {
		o.BatchFiles = DefaultBatchFiles
	}
	if o.Encoding == "" {
		o.Encoding = tokens.DefaultEncoding
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Phase names a stage of a run.
type Phase string

// The phases of a run.
const (
	PhaseScan  Phase = "scanning"
	PhaseIndex Phase = "indexing"
)

// Progress reports how far a run has come.
type Progress struct {
	Phase Phase
	// Files is the number of files found (scanning) or to read (indexing);
	// Done how many of them are finished.
	Files, Done int
	// Bytes counts the bytes of the files finished.
	Bytes int64
}

// FileError is a file or directory that could not be read.
type FileError struct {
	Path string `json:"path"`
	Err  string `json:"error"`
}

// Summary reports what a run did.
type Summary struct {
	Root string
	// Seen counts the files the walk found.
	Seen int
	// New and Changed count files stored as a new version; Unchanged the
	// files whose size and time matched the manifest; Touched the files
	// whose time changed but not their content.
	New, Changed, Unchanged, Touched int
	// Deleted counts files gone from the tree, Renamed those of them whose
	// content reappeared at another path.
	Deleted, Renamed int
	// Skipped counts files recorded but not indexed, by reason.
	Skipped map[string]int
	// Ignored counts files and directories the walk left out, by reason.
	Ignored map[string]int
	// Secrets lists the files withheld or redacted for holding secrets,
	// with the kinds found; never the secrets.
	Secrets []SecretFile
	// NonUTF8 counts files indexed whose text is not valid UTF-8; Unstable
	// the files that changed while being read (read again next run);
	// Vanished the files deleted between the walk and their reading.
	NonUTF8, Unstable, Vanished int
	Errors                      []FileError
	// Chunks, Bytes and Tokens sum over the versions stored.
	Chunks int
	Bytes  int64
	Tokens int64
	// Read counts the bytes read from disk.
	Read        int64
	Elapsed     time.Duration
	Interrupted bool
}

// SecretFile is a file withheld (Withheld) or stored with secrets redacted.
type SecretFile struct {
	Path     string   `json:"path"`
	Kinds    []string `json:"kinds"`
	Withheld bool     `json:"withheld"`
}

// Indexed counts the files stored as a new version.
func (s Summary) Indexed() int { return s.New + s.Changed }

// work is a file to read, with its manifest record if it has one.
type work struct {
	c   candidate
	old *store.File
}

// result is what reading one file gives the writer.
type result struct {
	w        work
	change   *store.FileChange
	secret   *SecretFile
	nonUTF8  bool
	unstable bool
	vanished bool
	err      error
}

// Run indexes the tree at root into st. It returns the summary and, if the
// run was interrupted or the store failed, an error; the summary then says
// what was stored before.
func Run(ctx context.Context, st store.Store, root string, opts Options) (Summary, error) {
	opts.defaults()
	start := time.Now()
	sum := Summary{Skipped: map[string]int{}}
	abs, err := resolveRoot(root)
	if err != nil {
		return sum, err
	}
	sum.Root = abs
	opts.report(Progress{Phase: PhaseScan})
	// Walking the tree waits on the file system, reading the manifest on
	// the store: do both at once.
	var manifest []store.File
	var manifestErr error
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		manifest, manifestErr = st.Files(ctx, store.FileFilter{Brief: true})
	}()
	found, err := walk(ctx, abs, nil, nil, opts.Exclude)
	<-loaded
	if err != nil {
		return sum, interrupted(&sum, start, err)
	}
	if manifestErr != nil {
		return sum, manifestErr
	}
	sum.Ignored, sum.Errors = found.ignored, found.errors
	opts.report(Progress{Phase: PhaseScan, Files: len(found.files), Done: len(found.files)})
	return reconcile(ctx, st, &opts, &sum, start, found.files, keepUnwalked(manifest, found.files, found.unwalked))
}

// Update indexes what changed at the given paths (relative to root,
// slash-separated; files or directories) and nothing else: a path that
// exists is indexed (a directory with everything under it), a path that is
// gone or now ignored leaves the index. Watch calls it for each batch of
// file events.
func Update(ctx context.Context, st store.Store, root string, paths []string, opts Options) (Summary, error) {
	opts.defaults()
	start := time.Now()
	sum := Summary{Skipped: map[string]int{}, Ignored: map[string]int{}}
	abs, err := resolveRoot(root)
	if err != nil {
		return sum, err
	}
	sum.Root = abs
	var files []candidate
	var manifest []store.File
	var unwalked []string
	for _, p := range topPaths(paths) {
		parts := strings.Split(p, "/")
		found, err := walkPath(ctx, abs, parts, opts.Exclude)
		if err != nil {
			return sum, interrupted(&sum, start, err)
		}
		files = append(files, found.files...)
		for k, v := range found.ignored {
			sum.Ignored[k] += v
		}
		for _, e := range found.errors {
			// Paths below one unreadable directory share its error.
			if !slices.Contains(sum.Errors, e) {
				sum.Errors = append(sum.Errors, e)
			}
		}
		unwalked = append(unwalked, found.unwalked...)
		// What the manifest holds at p: the file, or everything under it.
		if f, err := st.File(ctx, p); err == nil {
			manifest = append(manifest, f)
		} else if !errors.Is(err, store.ErrNotFound) {
			return sum, err
		}
		under, err := st.Files(ctx, store.FileFilter{Prefix: p + "/", Brief: true})
		if err != nil {
			return sum, err
		}
		manifest = append(manifest, under...)
	}
	return reconcile(ctx, st, &opts, &sum, start, files, keepUnwalked(manifest, files, unwalked))
}

// keepUnwalked leaves out of manifest the records under the directories
// the walk could not read (unwalked), unless the walk found them after
// all (files): a directory that cannot be read for a while (its
// permissions changed) does not make its files deleted from the index.
func keepUnwalked(manifest []store.File, files []candidate, unwalked []string) []store.File {
	if len(unwalked) == 0 {
		return manifest
	}
	seen := make(map[string]bool, len(files))
	for _, c := range files {
		seen[c.path] = true
	}
	under := func(p string) bool {
		for _, d := range unwalked {
			if d == "" || p == d || strings.HasPrefix(p, d+"/") {
				return true
			}
		}
		return false
	}
	out := manifest[:0:0]
	for _, f := range manifest {
		if seen[f.Path] || !under(f.Path) {
			out = append(out, f)
		}
	}
	return out
}

// topPaths returns the distinct, valid paths of ps, leaving out those
// under another path of ps.
func topPaths(ps []string) []string {
	var clean []string
	for _, p := range ps {
		if p = strings.Trim(path.Clean("/"+p), "/"); store.ValidPath(p) {
			clean = append(clean, p)
		}
	}
	sort.Strings(clean)
	var out []string
	for _, p := range clean {
		if n := len(out); n > 0 && (p == out[n-1] || strings.HasPrefix(p, out[n-1]+"/")) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func (o *Options) report(p Progress) {
	if o.Progress != nil {
		o.Progress(p)
	}
}

// reconcile brings the index in line with files, the candidates found, given
// manifest, the records of the part of the tree that was walked: files
// new or changed are read and stored, records that no candidate matches
// are deleted.
func reconcile(ctx context.Context, st store.Store, opts *Options, sum *Summary, start time.Time, files []candidate, manifest []store.File) (Summary, error) {
	sum.Seen += len(files)
	known := make(map[string]*store.File, len(manifest))
	for i := range manifest {
		known[manifest[i].Path] = &manifest[i]
	}

	// Decide from names, sizes and times what must be read.
	var todo []work
	var changes []store.FileChange
	for _, c := range files {
		old := known[c.path]
		reason := opts.nameReason(c.path)
		switch {
		case reason == "" && c.size > opts.MaxFileBytes:
			reason = ReasonTooLarge
		case reason == "" && c.size == 0:
			reason = ReasonEmpty
		}
		if reason != "" {
			sum.Skipped[reason]++
			if reason == ReasonSecretName {
				sum.Secrets = append(sum.Secrets, SecretFile{Path: c.path, Kinds: []string{"file name"}, Withheld: true})
			}
			if old != nil && old.State == store.FileSkipped && old.Reason == reason && sameStat(old, c) {
				continue
			}
			changes = append(changes, store.FileChange{Kind: store.ChangeSkip, Path: c.path, Size: c.size, ModTime: c.modTime, Reason: reason})
			continue
		}
		// A file skipped for a reason that may have gone is read again: a
		// generated file once generated files are wanted, one too large
		// under the limit now in force (it is under it, to get here), an
		// unreadable one whose permissions may have changed (a failed
		// open costs little).
		wantedNow := old != nil && old.State == store.FileSkipped &&
			(opts.Generated && old.Reason == ReasonGenerated || old.Reason == ReasonTooLarge ||
				strings.HasPrefix(old.Reason, ReasonUnreadable))
		if old != nil && sameStat(old, c) && !wantedNow {
			switch old.State {
			case store.FileCurrent:
				sum.Unchanged++
				if kinds, ok := strings.CutPrefix(old.Reason, redactedPrefix); ok {
					sum.Secrets = append(sum.Secrets, SecretFile{Path: c.path, Kinds: strings.Split(kinds, ", ")})
				}
				continue
			case store.FileSkipped:
				sum.Skipped[old.Reason]++
				if old.Reason == ReasonPrivateKey {
					sum.Secrets = append(sum.Secrets, SecretFile{Path: c.path, Kinds: []string{string(secrets.PrivateKey)}, Withheld: true})
				}
				continue
			}
		}
		todo = append(todo, work{c: c, old: old})
	}
	prioritize(todo, time.Now())

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	w := newWriter(context.WithoutCancel(ctx), st, opts, sum, stop)
	w.pending = changes
	total := len(todo)
	opts.report(Progress{Phase: PhaseIndex, Files: total})

	// Workers read and chunk; this goroutine gathers their results into
	// batches, which the writer's goroutine stores.
	jobs := make(chan work)
	results := make(chan result, opts.Workers*2)
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Go(func() {
			for j := range jobs {
				results <- process(j, opts)
			}
		})
	}
	go func() {
		defer close(jobs)
		for _, j := range todo {
			select {
			case jobs <- j:
			case <-runCtx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()
	done := 0
	var bytesDone int64
	for r := range results {
		done++
		w.add(r)
		bytesDone += r.w.c.size
		opts.report(Progress{Phase: PhaseIndex, Files: total, Done: done, Bytes: bytesDone})
	}
	if runCtx.Err() != nil {
		// Keep what was read (the next run then starts after it), unless
		// storing is what failed.
		if err := w.close(); err != nil {
			return *sum, err
		}
		return *sum, interrupted(sum, start, ctx.Err())
	}
	// Only a complete walk can tell what was deleted.
	seen := make(map[string]bool, len(files))
	for _, c := range files {
		seen[c.path] = true
	}
	for _, f := range manifest {
		if seen[f.Path] || f.State == store.FileDeleted {
			continue
		}
		reason := ""
		if to, ok := w.renames[f.Hash]; ok && f.State == store.FileCurrent && f.Hash != "" {
			reason = "renamed to " + to
			sum.Renamed++
		}
		sum.Deleted++
		w.pending = append(w.pending, store.FileChange{Kind: store.ChangeDelete, Path: f.Path, Reason: reason})
	}
	if err := w.close(); err != nil {
		return *sum, err
	}
	sum.Elapsed = time.Since(start)
	return *sum, nil
}

func interrupted(sum *Summary, start time.Time, err error) error {
	sum.Elapsed = time.Since(start)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		sum.Interrupted = true
		return fmt.Errorf("indexing interrupted: %w", err)
	}
	return err
}

// resolveRoot returns the absolute path of the root, symlinks resolved.
func resolveRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", fmt.Errorf("index %s: %w", root, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("index %s: %w", root, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("index %s: not a directory", root)
	}
	return abs, nil
}

// sameStat reports whether a manifest record still describes a file.
func sameStat(f *store.File, c candidate) bool {
	return f.Size == c.size && f.ModTime.Equal(c.modTime) && !f.ModTime.IsZero()
}

// redactedPrefix starts the manifest reason of a file stored with secrets
// redacted.
const redactedPrefix = "redacted: "

// recentWindow is how recently a file must have changed to go first.
const recentWindow = 7 * 24 * time.Hour

// corePaths are top-level directories that hold a project's main code.
var corePaths = map[string]bool{"cmd": true, "src": true, "lib": true, "pkg": true, "internal": true, "app": true, "apps": true, "packages": true}

// languageRank orders languages: source code first, then documentation,
// then the rest.
func languageRank(p string) int {
	switch chunk.Language(p, nil) {
	case chunk.Go, chunk.Python, chunk.TypeScript, chunk.JavaScript, chunk.Rust, chunk.Java, chunk.Kotlin,
		chunk.CSharp, chunk.C, chunk.CPP, chunk.Ruby, chunk.Shell:
		return 0
	case chunk.Markdown:
		return 1
	case "":
		return 3
	}
	return 2
}

// prioritize orders work: recently modified files first, then files under
// core paths, then by language, newest first within each.
func prioritize(todo []work, now time.Time) {
	tier := func(c candidate) int {
		if now.Sub(c.modTime) < recentWindow {
			return 0
		}
		top, _, _ := strings.Cut(c.path, "/")
		if corePaths[top] {
			return 1
		}
		return 2
	}
	sort.SliceStable(todo, func(i, j int) bool {
		a, b := todo[i].c, todo[j].c
		if ta, tb := tier(a), tier(b); ta != tb {
			return ta < tb
		}
		if la, lb := languageRank(a.path), languageRank(b.path); la != lb {
			return la < lb
		}
		return a.modTime.After(b.modTime)
	})
}

// process reads one file and makes its change.
func process(w work, opts *Options) result {
	r := result{w: w}
	c := w.c
	f, err := os.Open(c.abs)
	if err != nil {
		return readFailed(r, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, opts.MaxFileBytes+1))
	info, statErr := f.Stat()
	f.Close()
	if err != nil {
		return readFailed(r, err)
	}
	skip := func(reason string) result {
		r.change = &store.FileChange{Kind: store.ChangeSkip, Path: c.path, Size: int64(len(data)), ModTime: c.modTime, Reason: reason}
		return r
	}
	modTime := c.modTime
	if statErr != nil || info.Size() != int64(len(data)) || !info.ModTime().Equal(c.modTime) {
		// Written to while being read: store what was read, and leave no
		// time in the manifest so that the next run reads it again.
		r.unstable, modTime = true, time.Time{}
	}
	switch {
	case int64(len(data)) > opts.MaxFileBytes:
		return skip(ReasonTooLarge)
	case len(data) == 0:
		return skip(ReasonEmpty)
	case isBinary(data):
		return skip(ReasonBinary)
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	if w.old != nil && w.old.State == store.FileCurrent && w.old.Hash == hash {
		r.change = &store.FileChange{Kind: store.ChangeTouch, Path: c.path, Size: int64(len(data)), ModTime: modTime, Hash: hash}
		return r
	}
	if !opts.Generated && isGenerated(data) {
		return skip(ReasonGenerated)
	}
	if isMinified(data) {
		return skip(ReasonMinified)
	}
	text := string(data)
	redacted, findings := secrets.Redact(text)
	if len(findings) > 0 {
		r.secret = &SecretFile{Path: c.path, Kinds: secrets.Kinds(findings)}
		if secrets.HasPrivateKey(findings) {
			r.secret.Withheld = true
			return skip(ReasonPrivateKey)
		}
		text = redacted
	}
	r.nonUTF8 = !utf8.ValidString(text)
	change, err := Version(c.path, data, text, opts)
	if err != nil {
		r.err = err
		return r
	}
	change.ModTime = modTime
	if r.secret != nil {
		change.Reason = redactedPrefix + strings.Join(r.secret.Kinds, ", ")
	}
	r.change = change
	return r
}

// Version makes the change that stores text as the new version of the file
// at path: its language, chunks that follow its declarations, symbols and
// token counts. data is the file's bytes on disk, whose hash the manifest
// keeps; text is what is stored (data with secrets redacted, or data).
// Version applies no skip rule: Run and Update classify first; callers that
// build a corpus of their own use it directly.
func Version(path string, data []byte, text string, opts *Options) (*store.FileChange, error) {
	opts.defaults()
	enc, err := tokens.Get(opts.Encoding)
	if err != nil {
		return nil, err
	}
	lang := chunk.Language(path, data[:min(len(data), 256)])
	doc := chunk.NewDoc(text, enc.CountLines, enc.Starts)
	ent := &store.Entry{Content: []byte(text)}
	for i, ch := range chunk.Code(doc, lang, chunk.Options{MaxTokens: opts.ChunkTokens}) {
		ent.Chunks = append(ent.Chunks, store.Chunk{Ordinal: i, Start: ch.Start, End: ch.End,
			StartLine: ch.StartLine, EndLine: ch.EndLine, TokenCount: ch.Tokens, Symbols: ch.Symbols})
	}
	for _, n := range doc.Lines {
		ent.TokenCount += n
	}
	if lang != "" {
		ent.Metadata = map[string]any{"language": lang}
	}
	sum := sha256.Sum256(data)
	return &store.FileChange{Kind: store.ChangeVersion, Path: path, Size: int64(len(data)),
		Hash: hex.EncodeToString(sum[:]), Language: lang, Entry: ent}, nil
}

// readFailed turns a read error into a result: a file deleted since the
// walk vanished, one that cannot be read is recorded as skipped.
func readFailed(r result, err error) result {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.vanished = true
	case errors.Is(err, fs.ErrPermission):
		r.change = &store.FileChange{Kind: store.ChangeSkip, Path: r.w.c.path, Size: r.w.c.size, ModTime: r.w.c.modTime,
			Reason: ReasonUnreadable + ": permission denied"}
	default:
		r.err = err
	}
	return r
}

// writer gathers changes into batches; a goroutine of its own stores each
// full batch while the next one fills, so that the readers never wait for
// a commit.
type writer struct {
	ctx     context.Context
	st      store.Store
	opts    *Options
	sum     *Summary
	pending []store.FileChange
	bytes   int64 // content in pending
	// renames maps the disk hash of each version stored to its path.
	renames map[string]string

	batches chan []store.FileChange
	stored  chan error // the storing goroutine's result, once it ends
}

// newWriter starts a writer; a store error calls stop, so that the run
// ends early with that error.
func newWriter(ctx context.Context, st store.Store, opts *Options, sum *Summary, stop func()) *writer {
	w := &writer{ctx: ctx, st: st, opts: opts, sum: sum, renames: map[string]string{},
		batches: make(chan []store.FileChange, 1), stored: make(chan error, 1)}
	go func() {
		var err error
		for b := range w.batches {
			if err == nil {
				if err = w.store(b); err != nil {
					stop()
				}
			}
		}
		w.stored <- err
	}()
	return w
}

// store writes one batch in one transaction.
func (w *writer) store(batch []store.FileChange) error {
	if err := w.st.PutFiles(w.ctx, batch); err != nil {
		var ie *store.ItemError
		if errors.As(err, &ie) && ie.Index < len(batch) {
			return fmt.Errorf("store %s: %w", batch[ie.Index].Path, ie.Err)
		}
		return err
	}
	w.opts.Logger.Debug("stored batch", "changes", len(batch))
	return nil
}

func (w *writer) add(r result) {
	s := w.sum
	switch {
	case r.vanished:
		s.Vanished++
		return
	case r.err != nil:
		s.Errors = append(s.Errors, FileError{Path: r.w.c.path, Err: r.err.Error()})
		return
	}
	if r.secret != nil {
		s.Secrets = append(s.Secrets, *r.secret)
	}
	if r.nonUTF8 {
		s.NonUTF8++
	}
	if r.unstable {
		s.Unstable++
	}
	c := r.change
	s.Read += c.Size
	switch c.Kind {
	case store.ChangeSkip:
		s.Skipped[c.Reason]++
	case store.ChangeTouch:
		s.Touched++
	case store.ChangeVersion:
		if r.w.old != nil && r.w.old.State == store.FileCurrent {
			s.Changed++
		} else {
			s.New++
		}
		s.Chunks += len(c.Entry.Chunks)
		s.Bytes += int64(len(c.Entry.Content))
		s.Tokens += int64(c.Entry.TokenCount)
		w.bytes += int64(len(c.Entry.Content))
		w.renames[c.Hash] = c.Path
	}
	w.pending = append(w.pending, *c)
	if w.bytes >= w.opts.BatchBytes || len(w.pending) >= w.opts.BatchFiles {
		w.send()
	}
}

// send hands the pending changes to the storing goroutine.
func (w *writer) send() {
	if len(w.pending) == 0 {
		return
	}
	w.batches <- w.pending
	w.pending, w.bytes = nil, 0
}

// close stores what is pending and waits for every batch to be stored.
func (w *writer) close() error {
	w.send()
	close(w.batches)
	return <-w.stored
}
