package window_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// appenderEnv names the store a re-executed test binary appends turns to
// until it is killed, and fromEnv the turn it starts at.
const (
	appenderEnv = "ENGRAM_WINDOW_CRASH"
	fromEnv     = "ENGRAM_WINDOW_CRASH_FROM"
	// dieEnv makes the appender kill itself once turn N is appended,
	// before it says so: a commit its caller never hears of.
	dieEnv = "ENGRAM_WINDOW_CRASH_DIE"
)

var crashKey = store.WindowKey{SessionID: "crash", AgentID: "claude"}

func TestMain(m *testing.M) {
	if path := os.Getenv(appenderEnv); path != "" {
		from, err := strconv.Atoi(os.Getenv(fromEnv))
		die := -1
		if err == nil && os.Getenv(dieEnv) != "" {
			die, err = strconv.Atoi(os.Getenv(dieEnv))
		}
		if err == nil {
			err = appendUntilKilled(path, from, die)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// appendUntilKilled appends exchange(i) to the crash window under the key
// "turn-i", for i from from on, printing "ack N" once the first N turns
// are acknowledged, or "replayed N" when turn N-1 was in the window
// already (the append before the last crash committed, unacknowledged).
// Every seventh turn it also brings the window's first marker back.
func appendUntilKilled(path string, from, die int) error {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return err
	}
	eng, err := engine.New(st, engine.Options{})
	if err != nil {
		return err
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		return err
	}
	m := window.NewManager(eng, cat)
	if from == 0 {
		if _, err := m.Open(ctx, crashKey, window.OpenOptions{Limit: 6000, Output: 500, Safety: 100}); err != nil {
			return err
		}
	}
	for i := from; ; i++ {
		res, err := m.AppendOnce(ctx, crashKey, fmt.Sprintf("turn-%d", i), exchange(i))
		if err != nil {
			return fmt.Errorf("turn %d: %w", i, err)
		}
		if i == die {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		if res.Replayed {
			fmt.Println("replayed", i+1)
		}
		fmt.Println("ack", i+1)
		if i%7 != 3 {
			continue
		}
		items, err := m.Context(ctx, crashKey)
		if err != nil {
			return err
		}
		if j := slices.IndexFunc(items, func(it window.Item) bool { return it.RefID != "" }); j >= 0 {
			if _, err := m.Readmit(ctx, items[j].RefID); err != nil && !errors.Is(err, window.ErrNoRoom) {
				return fmt.Errorf("readmit after turn %d: %w", i, err)
			}
		}
	}
}

// TestWindow_Crash: a process appending turns to a window (evicting, and
// now and then bringing a reference back) is killed at points spread over
// its appends, six times, each time starting again at the first turn not
// acknowledged, under its key. After every kill the store opens, holds
// every acknowledged turn exactly once and in order, whole (an append is
// all or nothing), and the context with its markers expanded is exactly
// the turns appended; an append the crash left unacknowledged but
// committed is not made twice.
func TestWindow_Crash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engram.db")
	acked, replays, pending := 0, 0, false
	for round := range 6 {
		// Kill after 10 more acknowledgements, then a delay that moves
		// the kill across an append (one takes a few milliseconds). In
		// round 3 the appender kills itself once an append committed,
		// before it says so: the next round's retry must be replayed.
		delay := time.Duration(round) * 1500 * time.Microsecond
		die := -1
		if round == 3 {
			die = acked + 10
		}
		n, r := crashAppend(t, path, acked, acked+10, delay, die)
		if die >= 0 && n != die {
			t.Fatalf("round %d: the appender died after %d turns were acknowledged, want %d", round, n, die)
		} else if die < 0 && n < acked+10 {
			t.Fatalf("round %d: the appender was killed after %d turns, before %d", round, n, acked+10)
		}
		if pending && r == 0 {
			t.Errorf("round %d: turn %d was in the window unacknowledged, and its retry was appended again", round, acked)
		}
		replays += r
		turns := checkWindowAfterCrash(t, path, n)
		how := fmt.Sprintf("killed %v after turn %d was acknowledged", delay, acked+10)
		if die >= 0 {
			how = fmt.Sprintf("killed itself once turn %d was appended", die+1)
		}
		t.Logf("round %d: %s; %d acknowledged, %d in the window, %d retries replayed", round, how, n, turns, r)
		acked, pending = n, turns > n
	}
	if replays == 0 {
		t.Errorf("no retry was replayed, though round 3 left a turn committed and not acknowledged")
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(st.IntegrityCheck(ctx), st.Close()); err != nil {
		t.Fatal(err)
	}
}

// crashAppend runs appendUntilKilled on path from turn from, and kills it
// delay after turn killAt is acknowledged, or lets it kill itself once
// turn die (if not negative) is appended; it returns how many turns were
// acknowledged and how many appends were replays.
func crashAppend(t *testing.T, path string, from, killAt int, delay time.Duration, die int) (acked, replays int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), appenderEnv+"="+path, fromEnv+"="+strconv.Itoa(from), dieEnv+"="+strconv.Itoa(die))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The appender never outlives the test, whatever fails.
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	deadline := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	var kill *time.Timer
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		word, num, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(num)
		if err != nil {
			t.Fatalf("the appender printed %q", sc.Text())
		}
		switch word {
		case "replayed":
			replays++
		case "ack":
			acked = max(acked, n)
			if n == killAt && die < 0 {
				kill = time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
			}
		}
	}
	err = cmd.Wait()
	if kill == nil && die < 0 {
		t.Fatalf("the appender stopped at turn %d: %v\n%s", acked, err, stderr.String())
	}
	if kill != nil {
		kill.Stop()
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("the appender ended on its own: %v\n%s", err, stderr.String())
	}
	return acked, replays
}

// checkWindowAfterCrash opens the store as a new process would and
// checks the crash window: it holds turns 0 to T-1, each once and whole,
// in order, with T at least acked and at most one more (the append the
// kill interrupted, committed or not); the context, its markers
// expanded, is exactly those turns. It returns T.
func checkWindowAfterCrash(t *testing.T, path string, acked int) int {
	t.Helper()
	ctx := context.Background()
	m := manager(t, path)
	items, err := m.Context(ctx, crashKey)
	if err != nil {
		t.Fatalf("the window after the crash: %v", err)
	}
	var got []window.Message
	for _, it := range items {
		if it.Message != nil {
			got = append(got, *it.Message)
			continue
		}
		back, err := m.Expand(ctx, it.RefID)
		if err != nil {
			t.Fatalf("marker %s after the crash: %v", it.RefID, err)
		}
		got = append(got, back...)
	}
	per := len(exchange(0))
	if len(got)%per != 0 || len(got)/per < acked || len(got)/per > acked+1 {
		t.Fatalf("the window holds %d messages after %d turns of %d were acknowledged", len(got), acked, per)
	}
	var want []window.Message
	for i := range len(got) / per {
		want = append(want, exchange(i)...)
	}
	if diff := cmp.Diff(stripped(want), stripped(got)); diff != "" {
		t.Fatalf("the window after the crash is not the turns appended (-want +got):\n%s", diff)
	}
	return len(got) / per
}
