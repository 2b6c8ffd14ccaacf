package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/storetest"
)

// forgetterEnv names the store a re-executed test binary forgets a session
// of while it writes; with redactEnv set, it redacts crashSecret instead.
const (
	forgetterEnv = "ENGRAM_FORGET_CRASH"
	redactEnv    = "ENGRAM_REDACT_CRASH"
	crashSecret  = "kakapo-secret-7731"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(forgetterEnv); path != "" {
		forgetWhileWriting(path)
		return
	}
	os.Exit(m.Run())
}

// liveEntry is the i-th entry the writer of the crash test stores.
func liveEntry(i int) store.Entry {
	return storetest.Entry("live", "w", store.Note, fmt.Sprintf("live write number %d of the crash test", i))
}

// forgetWhileWriting writes batches to session live, printing "ack N"
// once the first N entries are committed, while it forgets session big
// (printing "forget" when it starts), until it is killed.
func forgetWhileWriting(path string) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := make(chan string, 64)
	go func() {
		for n := 0; ; n += 10 {
			batch := make([]store.Entry, 10)
			for i := range batch {
				batch[i] = liveEntry(n + i)
			}
			if _, err := st.PutEntries(ctx, batch); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			out <- fmt.Sprintf("ack %d", n+10)
		}
	}()
	go func() {
		out <- "forget"
		var err error
		if os.Getenv(redactEnv) != "" {
			_, err = st.Redact(ctx, store.RedactRequest{Text: []byte(crashSecret), Actor: "op", Rechunk: storetest.Rechunk, Compact: true})
		} else {
			_, err = st.Forget(ctx, store.ForgetRequest{Sessions: []string{"big"}, Actor: "op", Compact: true})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		out <- "forgotten"
	}()
	w := bufio.NewWriter(os.Stdout)
	for line := range out {
		fmt.Fprintln(w, line)
		if err := w.Flush(); err != nil {
			os.Exit(2)
		}
	}
}

// TestForget_Crash kills a process with SIGKILL at points during the
// forgetting of a large session while it also writes, and checks that the
// store opens, is sound, holds every acknowledged write, and holds the
// session either whole or not at all, with its counters true.
func TestForget_Crash(t *testing.T) { crashTest(t, false) }

// TestRedact_Crash is TestForget_Crash for a redaction of a string that
// a tenth of the session's entries hold: after the crash they all hold it
// or none does.
func TestRedact_Crash(t *testing.T) { crashTest(t, true) }

func crashTest(t *testing.T, redact bool) {
	if testing.Short() {
		t.Skip("slow: builds a large session and kills a process repeatedly")
	}
	ctx := context.Background()
	base := filepath.Join(t.TempDir(), "base.db")
	s, err := sqlite.Open(ctx, base, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 600 entries and 8 kills: with 3,000 and 16 the two tests took 10
	// minutes under the race detector, and every kill still lands before,
	// during or after the commit, as the delays follow the purge's own
	// measured duration.
	const big = 600
	var entries []store.Entry
	for i := range big {
		text := fmt.Sprintf("big session turn %d about the kakapo migration, step %d of many; %s", i, i,
			strings.Repeat("more words to make chunks ", i%40))
		if i%10 == 0 {
			text += "\n\nthe key is " + crashSecret
		}
		entries = append(entries, storetest.Entry("big", "a", store.Note, text))
		if i%50 == 0 {
			entries = append(entries, storetest.Entry("other", "b", store.Note, text))
		}
	}
	if _, err := s.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// How long the purge takes here, with its compaction: the kills are
	// spread over half as long again, so that they fall before, during and
	// after its commit.
	calib := filepath.Join(t.TempDir(), "calib.db")
	copyFile(t, base, calib)
	cs, err := sqlite.Open(ctx, calib, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if redact {
		_, err = cs.Redact(ctx, store.RedactRequest{Text: []byte(crashSecret), Actor: "op", Rechunk: storetest.Rechunk, Compact: true})
	} else {
		_, err = cs.Forget(ctx, store.ForgetRequest{Sessions: []string{"big"}, Actor: "op", Compact: true})
	}
	took := time.Since(start)
	if err := errors.Join(err, cs.Close()); err != nil {
		t.Fatal(err)
	}
	forgotten := 0
	var delays []time.Duration
	for i := range 8 {
		delays = append(delays, took*3/2*time.Duration(i)/7)
	}
	for _, d := range delays {
		path := filepath.Join(t.TempDir(), "engram.db")
		copyFile(t, base, path)
		acked, done := crashForget(t, path, d, redact)
		bigLeft, holding := checkAfterCrash(t, path, acked, big)
		if redact {
			if holding != 0 && holding != big/10 {
				t.Errorf("after %v: %d of the %d entries that held the string still do: a redaction is all or nothing", d, holding, big/10)
			}
			if bigLeft != big {
				t.Errorf("after %v: a redaction removed occurrences (%d left)", d, bigLeft)
			}
			bigLeft = holding
		}
		if bigLeft == 0 {
			forgotten++
		}
		if done && bigLeft != 0 {
			t.Errorf("after %v: the purge was acknowledged but %d are left", d, bigLeft)
		}
		t.Logf("killed %v after the purge began (it takes %v): %d writes acknowledged, purge done %v, left %d", d.Round(time.Millisecond), took.Round(time.Millisecond), acked, done, bigLeft)
	}
	if forgotten == 0 || forgotten == len(delays) {
		t.Logf("every kill landed on the same side of the commit (%d of %d forgotten): the timing proves less", forgotten, len(delays))
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		in, err := os.Open(from + suffix)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(to + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// crashForget runs forgetWhileWriting on path and kills it delay after
// the forget began; it returns how many live entries were acknowledged and
// whether the forget was.
func crashForget(t *testing.T, path string, delay time.Duration, redact bool) (acked int, done bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), forgetterEnv+"="+path)
	if redact {
		cmd.Env = append(cmd.Env, redactEnv+"=1")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	sc := bufio.NewScanner(stdout)
	var kill *time.Timer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "forget":
			kill = time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		case line == "forgotten":
			done = true
		case strings.HasPrefix(line, "ack "):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "ack "))
			if err != nil {
				t.Fatal(line)
			}
			acked = max(acked, n)
		}
	}
	err = cmd.Wait()
	if kill == nil {
		t.Fatalf("the writer never began to forget: %v\n%s", err, stderr.String())
	}
	kill.Stop()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the writer ended on its own: %v\n%s", err, stderr.String())
	}
	return acked, done
}

// checkAfterCrash opens the store after a crash and checks it; it returns
// how many occurrences of session big are left, and how many of its
// entries hold crashSecret.
func checkAfterCrash(t *testing.T, path string, acked, big int) (left, holding int) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatalf("the store does not open after the crash: %v", err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	live, err := s.TurnRange(ctx, "live", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range live {
		have[string(e.Content)] = true
	}
	for i := range acked {
		if !have[string(liveEntry(i).Content)] {
			t.Fatalf("acknowledged write %d of %d is lost", i, acked)
		}
	}
	bigLeft, err := s.TurnRange(ctx, "big", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range bigLeft {
		if strings.Contains(string(e.Content), crashSecret) {
			holding++
		}
	}
	if n := len(bigLeft); n != 0 && n != big {
		t.Errorf("%d of the session's %d occurrences are left: a forget is all or nothing", n, big)
	}
	hits, err := s.Search(ctx, store.Query{Text: "kakapo migration", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		if h.Occurrence.SessionID == "big" && len(bigLeft) == 0 {
			t.Errorf("the forgotten session is still found: %+v", h.Occurrence)
		}
	}
	// The counters are what the tables hold.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for counter, q := range map[string]string{
		"entries":       `SELECT count(*) FROM entries`,
		"content_bytes": `SELECT coalesce(sum(size), 0) FROM entries`,
		"tokens":        `SELECT coalesce(sum(token_count), 0) FROM entries`,
		"chunks":        `SELECT count(*) FROM chunks`,
		"occurrences":   `SELECT count(*) FROM occurrences`,
	} {
		var want, got int64
		if err := db.QueryRow(q).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`SELECT value FROM counters WHERE name = ?`, counter).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("counter %s = %d, the tables hold %d", counter, got, want)
		}
	}
	return len(bigLeft), holding
}
