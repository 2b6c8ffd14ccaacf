package archive

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// writerEnv names the store a re-executed test binary storms with writes.
const writerEnv = "ENGRAM_ARCHIVE_WRITER"

func TestMain(m *testing.M) {
	if path := os.Getenv(writerEnv); path != "" {
		writeStorm(path)
		return
	}
	os.Exit(m.Run())
}

// writeStorm writes from 8 goroutines until killed, printing each write
// only once it is acknowledged: "g ID GV" for a global write, "s SESSION
// SV" for a session write. Each round also asks for two insights in one
// request, whose texts begin with the same pair tag: they are written
// together or not at all.
func writeStorm(path string) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	a, err := New(st, Options{Limits: Limits{WritesPerMinute: 1_000_000}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	ack := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		if err := out.Flush(); err != nil { // out before the next write starts
			os.Exit(2)
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range 8 {
		h, err := a.Register(ctx, AgentSpec{ID: fmt.Sprintf("w%d-%d", w, os.Getpid()), SessionID: fmt.Sprintf("s%d", w%3)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				text := fmt.Sprintf("insight %x", sha256.Sum256(fmt.Appendf(nil, "%d/%d/%d", os.Getpid(), w, i)))
				wr, err := h.RecordInsight(ctx, Insight{Insight: text})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				ack("g %s %d", wr.ID, wr.GV)
				wr, err = h.UpdateFile(ctx, FileState{Path: fmt.Sprintf("f%d.go", i%7), Status: Modified, Summary: text})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				ack("s %s %d", h.Session(), wr.SV)
				tag := fmt.Sprintf("pair%x", sha256.Sum256(fmt.Appendf(nil, "pair/%d/%d/%d", os.Getpid(), w, i)))[:16]
				ans, err := a.Ask(ctx, h, fmt.Sprintf(`@arch:store:learnings{"insight":"%s %x"}; @arch:store:learnings{"insight":"%s %x"}`,
					tag, sha256.Sum256([]byte(tag+"a")), tag, sha256.Sum256([]byte(tag+"b"))), AskOptions{})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				for _, an := range ans {
					ack("g %s %d", an.Write.ID, an.Write.GV)
				}
			}
		}()
	}
	wg.Wait()
}

// runStorm starts a writer process on the store at path, reads its
// acknowledgements, and SIGKILLs it after acks of them; it returns the
// acknowledged global writes (ID to version) and the highest acknowledged
// version of each session.
func runStorm(path string, acks int) (globals, sessions map[string]uint64, err error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	globals, sessions = map[string]uint64{}, map[string]uint64{}
	sc := bufio.NewScanner(stdout)
	n := 0
	killed := false
	deadline := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			_ = cmd.Process.Kill()
			return nil, nil, fmt.Errorf("writer printed %q", sc.Text())
		}
		v, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			_ = cmd.Process.Kill()
			return nil, nil, err
		}
		if f[0] == "g" {
			globals[f[1]] = v
		} else {
			sessions[f[1]] = max(sessions[f[1]], v)
		}
		if n++; n == acks && !killed {
			killed = true
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return nil, nil, err
			}
		}
	}
	err = cmd.Wait()
	if !killed {
		return nil, nil, fmt.Errorf("writer ended before %d acknowledgements: %v\n%s", acks, err, stderr.String())
	}
	return globals, sessions, nil
}

// checkStore opens the store after the writers died and checks that every
// acknowledged write is there and that versions were neither skipped nor
// repeated. It returns the global version.
func checkStore(t *testing.T, path string, globals, sessions map[string]uint64) uint64 {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatalf("store does not open after SIGKILL: %v", err)
	}
	defer func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := st.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := st.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindInsight}})
	if err != nil {
		t.Fatal(err)
	}
	gvs := map[uint64]string{}
	have := map[string]bool{}
	pairs := map[string]int{} // the insights of each two-store request
	for _, r := range recs {
		if f := strings.Fields(r.Text); len(f) > 0 && strings.HasPrefix(f[0], "pair") {
			pairs[f[0]]++
		}
		if other, dup := gvs[r.GV]; dup {
			t.Errorf("global version %d given to %s and %s", r.GV, other, r.ID)
		}
		gvs[r.GV] = r.ID
		have[r.ID] = true
	}
	lost := 0
	for id := range globals {
		if !have[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged global writes lost", lost, len(globals))
	}
	for tag, n := range pairs {
		if n != 2 {
			t.Errorf("request %s wrote %d of its 2 stores", tag, n)
		}
	}
	if len(pairs) == 0 {
		t.Error("no two-store request was written")
	}
	gv, _, err := st.ArchiveVersions(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if int(gv) != len(recs) {
		t.Errorf("global version %d but %d records: versions skipped or repeated", gv, len(recs))
	}
	for s, acked := range sessions {
		_, sv, err := st.ArchiveVersions(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if sv < acked {
			t.Errorf("session %s at version %d, but %d was acknowledged", s, sv, acked)
		}
		files, err := st.ArchiveRecords(ctx, store.RecordQuery{SessionID: s, Kinds: []store.RecordKind{store.KindFile}})
		if err != nil {
			t.Fatal(err)
		}
		svs := map[uint64]bool{}
		for _, f := range files {
			if svs[f.SV] {
				t.Errorf("session %s version %d given twice", s, f.SV)
			}
			svs[f.SV] = true
		}
	}
	return gv
}

// TestCrashDuringWriteStorm kills a writer process with SIGKILL in the
// middle of a write storm and checks that every acknowledged write is in
// the store, and that versions never repeat or go backwards.
func TestCrashDuringWriteStorm(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engram.db")
	g1, s1, err := runStorm(path, 300)
	if err != nil {
		t.Fatal(err)
	}
	if len(g1) < 100 {
		t.Fatalf("only %d global writes acknowledged", len(g1))
	}
	gv1 := checkStore(t, path, g1, s1)
	// A second storm on the recovered store continues the versions.
	g2, s2, err := runStorm(path, 150)
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range g2 {
		if v <= gv1 {
			t.Errorf("after restart %s got version %d, not above %d", id, v, gv1)
		}
	}
	merge(g2, s2, g1, s1)
	checkStore(t, path, g2, s2)
}

// TestProcessesShareVersions runs two writer processes on one store at
// once: versions live in the store, so they never hand out the same one.
func TestProcessesShareVersions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engram.db")
	type result struct {
		g, s map[string]uint64
		err  error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			g, s, err := runStorm(path, 150)
			results <- result{g, s, err}
		}()
	}
	a, b := <-results, <-results
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	merge(a.g, a.s, b.g, b.s)
	checkStore(t, path, a.g, a.s)
}

// merge adds the acknowledgements of (g2, s2) to (g1, s1).
func merge(g1, s1, g2, s2 map[string]uint64) {
	for id, v := range g2 {
		g1[id] = v
	}
	for s, v := range s2 {
		s1[s] = max(s1[s], v)
	}
}
