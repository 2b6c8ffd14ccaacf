package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// These tests run the real engram binary, built once per test run, as
// separate processes on one store.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "engram-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "engram")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// writeRecords writes n JSON Lines records of about 500 bytes, unique per
// prefix, and returns the file's path.
func writeRecords(t *testing.T, dir, prefix string, n int) string {
	t.Helper()
	path := filepath.Join(dir, prefix+".jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	filler := strings.Repeat("the retry budget covers transient 503 responses from the storage backend; ", 6)
	for i := range n {
		fmt.Fprintf(w, `{"session":"%s-%d","agent":"a","role":"user","content":"%s record %d: %s"}`+"\n", prefix, i/100, prefix, i, filler)
	}
	if err := errorsJoin(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

func errorsJoin(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *env) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binary(e.t), args...)
	cmd.Env = os.Environ()
	for k, v := range e.vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// checkStore runs the built binary's integrity check of the store. The
// stores of these tests are large, and the check reads every page: in the
// race-instrumented test process it took two minutes of the package's
// four, in the binary seconds.
func checkStore(t *testing.T, e *env) {
	t.Helper()
	out, err := e.command(t.Context(), "stats", "--check").CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), ": ok") {
		t.Fatalf("integrity check: %v\n%s", err, out)
	}
}

func openStore(t *testing.T, e *env) *sqlite.Store {
	t.Helper()
	var st statsJSON
	code, out, errOut := e.run("", "stats", "--json")
	if code != 0 {
		t.Fatalf("stats: %s", errOut)
	}
	if err := jsonUnmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), st.Store, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestProcesses_ConcurrentWriters runs two engram add processes on one
// store at once: both must succeed, and no lock error may reach the user.
func TestProcesses_ConcurrentWriters(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	const n = 3000
	inputs := []string{writeRecords(t, dir, "alpha", n), writeRecords(t, dir, "beta", n)}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	outs := make([][]byte, len(inputs))
	errs := make([]error, len(inputs))
	for i, in := range inputs {
		wg.Go(func() {
			// Small batches make the two writers interleave many times.
			outs[i], errs[i] = e.command(ctx, "add", "--batch-size", "25", in).CombinedOutput()
		})
	}
	wg.Wait()
	for i := range inputs {
		if errs[i] != nil {
			t.Errorf("writer %d: %v\n%s", i, errs[i], lastLines(string(outs[i]), 5))
		}
		if strings.Contains(strings.ToLower(string(outs[i])), "locked") {
			t.Errorf("writer %d printed a lock error:\n%s", i, lastLines(string(outs[i]), 5))
		}
	}
	s := openStore(t, e)
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 2*n || st.Occurrences != 2*n {
		t.Errorf("store holds %d entries, %d occurrences; want %d each", st.Entries, st.Occurrences, 2*n)
	}
	checkStore(t, e)
}

// TestProcesses_KilledDuringIngest kills engram add with SIGKILL in the
// middle of a large ingest: the store must open, pass integrity checks,
// hold every batch whose IDs were printed, and hold no partial batch.
func TestProcesses_KilledDuringIngest(t *testing.T) {
	e := newEnv(t)
	const n, batch = 40000, 200
	input := writeRecords(t, t.TempDir(), "bulk", n)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := e.command(ctx, "add", "--batch-size", fmt.Sprint(batch), input)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var printed []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if id := sc.Text(); store.ValidID(id) {
			printed = append(printed, id)
		}
		if len(printed) >= 10*batch+batch/2 {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = bufio.NewReader(stdout).WriteTo(devNull{}) }()
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("engram add was not killed by the signal (it finished first?): %v\n%s", err, stderr.String())
	}
	if len(printed) < 10*batch {
		t.Fatalf("only %d IDs printed before the kill", len(printed))
	}

	checkStore(t, e)
	s := openStore(t, e)
	if _, err := s.Entries(context.Background(), printed); err != nil {
		t.Errorf("an acknowledged entry is missing: %v", err)
	}
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries%batch != 0 || st.Entries < int64(len(printed)) || st.Entries >= n {
		t.Errorf("store holds %d entries after %d acknowledged: want a whole number of %d-record batches, at least the acknowledged ones, fewer than %d",
			st.Entries, len(printed), batch, n)
	}
	// The store takes writes again.
	if code, _, errOut := e.run(`{"session":"after","role":"user","content":"still writable"}`, "add"); code != 0 {
		t.Errorf("add after the kill: %s", errOut)
	}
}

type devNull struct{}

func (devNull) Write(p []byte) (int, error) { return len(p), nil }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestProcesses_IndexInterrupted interrupts engram index with SIGINT: it
// exits 130, the store is intact, and the next run reads only what the
// first did not store.
func TestProcesses_IndexInterrupted(t *testing.T) {
	e := newEnv(t)
	const n = 4000
	for i := range n {
		var b strings.Builder
		fmt.Fprintf(&b, "package m%02d\n", i%50)
		for j := range 40 { // about 4 KB a file: long enough a run to interrupt
			fmt.Fprintf(&b, "\n// F%dx%d returns its number, for the interruption test.\nfunc F%dx%d() int { return %d }\n", i, j, i, j, i*j)
		}
		writeFile(t, e.project, fmt.Sprintf("pkg/m%02d/f%04d.go", i%50, i), b.String())
	}
	cmd := e.command(t.Context(), "index", "--yes", "--json", "--no-embed") // embedding is not what is tested
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if err == nil {
		t.Logf("engram index finished before the interrupt:\n%s", lastLines(out.String(), 3))
	} else if code != 130 || !strings.Contains(out.String(), "interrupted") {
		t.Fatalf("exit %d after SIGINT, want 130 and a word about it:\n%s", code, lastLines(out.String(), 5))
	}
	checkStore(t, e)
	s := openStore(t, e)
	files, err := s.Files(context.Background(), store.FileFilter{})
	if err != nil {
		t.Fatal(err)
	}
	stored := len(files)
	t.Logf("%d of %d files stored before the interrupt", stored, n)
	// The next run, as a process too (the test binary may be built with
	// the race detector, which would make an in-process run slow).
	second, err := e.command(t.Context(), "index", "--json", "--no-embed").Output()
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	var sum summaryJSON
	if err := jsonUnmarshal(string(second), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.New != n-stored || sum.Unchanged != stored {
		t.Errorf("after the interrupt %d files were stored; the next run found %d new, %d unchanged (want %d, %d)",
			stored, sum.New, sum.Unchanged, n-stored, stored)
	}
}

// TestProcesses_KilledDuringEmbed kills engram embed with SIGKILL while it
// works: the store stays intact, what was embedded is kept, and the next
// run finishes the queue.
func TestProcesses_KilledDuringEmbed(t *testing.T) {
	e := newEnv(t)
	// Varied text, so that the corpus model has words to learn.
	words := make([]string, 400)
	for i := range words {
		words[i] = fmt.Sprintf("w%c%c%c", 'a'+i%26, 'a'+(i/26)%26, 'k'+i%7)
	}
	path := filepath.Join(t.TempDir(), "varied.jsonl")
	var b strings.Builder
	const n = 30000
	for i := range n {
		var text strings.Builder
		for j := range 40 {
			text.WriteString(words[(i*7+j*j*13+i*j)%len(words)] + " ")
		}
		fmt.Fprintf(&b, `{"session":"s%d","role":"user","content":"record %d %s"}`+"\n", i/100, i, text.String())
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := e.command(t.Context(), "add", "--no-embed", path).CombinedOutput(); err != nil {
		t.Fatalf("add: %v\n%s", err, lastLines(string(out), 3))
	}

	s := openStore(t, e)
	ctx := context.Background()
	cmd := e.command(t.Context(), "embed")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Kill it as soon as some vectors are stored, watching from here.
watch:
	for {
		select {
		case err := <-exited:
			t.Logf("engram embed exited by itself: %v", err)
			break watch
		case <-time.After(5 * time.Millisecond):
		}
		model, err := s.Setting(ctx, "embed.corpus.active")
		if err != nil || model == "" {
			continue
		}
		if vs, err := s.VectorStats(ctx, model); err == nil && vs.Embedded > 0 {
			// It may have finished since: then there is nothing to kill.
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Fatal(err)
			}
			if err := <-exited; err == nil {
				t.Log("engram embed finished before the kill")
			}
			break
		}
	}

	checkStore(t, e)
	status := func() engine.EmbedStatus {
		var st engine.EmbedStatus
		out, err := e.command(t.Context(), "embed", "status", "--json").Output()
		if err != nil {
			t.Fatalf("embed status: %v", err)
		}
		if err := jsonUnmarshal(string(out), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	before := status()
	if before.Embedded >= before.Chunks {
		t.Logf("engram embed finished before the kill: %+v", before)
	} else {
		t.Logf("killed with %d of %d chunks embedded", before.Embedded, before.Chunks)
	}
	// The next run continues: only the queue is embedded, with the same
	// model.
	out, err := e.command(t.Context(), "embed", "--json").Output()
	if err != nil {
		t.Fatalf("embed after the kill: %v", err)
	}
	var rep engine.EmbedReport
	if err := jsonUnmarshal(string(out), &rep); err != nil {
		t.Fatal(err)
	}
	after := status()
	if after.Pending != 0 || after.Embedded != after.Chunks {
		t.Fatalf("after the second run: %+v", after)
	}
	if before.Model != "" && (rep.Model != before.Model || rep.Trained || rep.Embedded != before.Chunks-before.Embedded) {
		t.Errorf("second run %+v: want the same model (%s) and only the %d pending chunks", rep, before.Model, before.Chunks-before.Embedded)
	}
	var res searchJSON
	out, err = e.command(t.Context(), "search", words[3], words[17], "--mode", "vector", "--json").Output()
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	if err := jsonUnmarshal(string(out), &res); err != nil || !res.Vector || len(res.Hits) == 0 {
		t.Errorf("vector search after resuming: %+v, %v", res, err)
	}
}
