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
// SV" for a session write.
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
			}
		}()
	}
	wg.Wait()
}

// TestCrashDuringWriteStorm kills a writer process with SIGKILL in the
// middle of a write storm and checks that every acknowledged write is in
// the store, and that versions never repeat or go backwards.
func TestCrashDuringWriteStorm(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engram.db")
	storm := func(acks int) (globals map[string]uint64, sessions map[string]uint64) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), writerEnv+"="+path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
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
				t.Fatalf("writer printed %q", sc.Text())
			}
			v, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if f[0] == "g" {
				globals[f[1]] = v
			} else {
				sessions[f[1]] = max(sessions[f[1]], v)
			}
			if n++; n == acks && !killed {
				killed = true
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		err = cmd.Wait()
		if !killed {
			t.Fatalf("writer ended before %d acknowledgements: %v\n%s", acks, err, stderr.String())
		}
		return globals, sessions
	}
	g1, s1 := storm(600)
	check := func(globals, sessions map[string]uint64) (gv uint64) {
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
		for _, r := range recs {
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
		gv, _, err = st.ArchiveVersions(ctx, "")
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
		}
		return gv
	}
	gv1 := check(g1, s1)
	if len(g1) < 200 {
		t.Fatalf("only %d global writes acknowledged", len(g1))
	}
	// A second storm on the recovered store continues the versions.
	g2, s2 := storm(300)
	for id, v := range g2 {
		if v <= gv1 {
			t.Errorf("after restart %s got version %d, not above %d", id, v, gv1)
		}
	}
	for id, v := range g1 {
		g2[id] = v
	}
	for s, v := range s1 {
		s2[s] = max(s2[s], v)
	}
	check(g2, s2)
}
