package trajectory_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/trajectory"
)

// benchFiles returns the shared trajectories and their counts, skipping
// the test when they are not here. The bench folder is ENGRAM_BENCH_DIR,
// else ../shared/bench beside the project.
func benchFiles(t testing.TB) (traj, counts string) {
	t.Helper()
	bench := os.Getenv("ENGRAM_BENCH_DIR")
	if bench == "" {
		bench = filepath.Join("..", "..", "..", "shared", "bench")
	}
	dir := filepath.Join(bench, "trajectories")
	traj, counts = filepath.Join(dir, "trajectories.jsonl.gz"), filepath.Join(dir, "counts.o200k.jsonl")
	for _, f := range []string{traj, counts} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("the trajectories are not here (%v): set ENGRAM_BENCH_DIR to the shared bench folder", err)
		}
	}
	return traj, counts
}

// TestReplay_Reference replays the 401 shared runs through both baselines
// at 4,000, 8,000 and 16,000 tokens and checks the figures baselines.py
// prints (python3 baselines.py trajectories.jsonl.gz counts.o200k.jsonl
// 4000 8000 16000), digit for digit, and the exact sums behind them.
func TestReplay_Reference(t *testing.T) {
	traj, counts := benchFiles(t)
	start := time.Now()
	runs, err := trajectory.Load(traj, counts)
	if err != nil {
		t.Fatal(err)
	}
	read := time.Since(start)
	rep, err := trajectory.ReplayAll(t.Context(), runs, trajectory.Baselines(4000, 8000, 16000), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read %d runs in %v, replayed in %v", len(runs), read.Round(time.Millisecond), (time.Since(start) - read).Round(time.Millisecond))

	// baselines.py's output.
	wantHead := "runs 401; full history: 228,719,328 tokens sent, 30,430,304 effective with a prompt cache"
	head := fmt.Sprintf("runs %d; full history: %s tokens sent, %s effective with a prompt cache",
		rep.Runs, commas(rep.Full.TokensSent), commas(int64(math.RoundToEven(rep.Full.EffectiveTokens()))))
	if head != wantHead {
		t.Errorf("got  %s\nwant %s", head, wantHead)
	}
	want := []string{
		"recency 4000 0.564 0.698 0.235 0.673",
		"recency 8000 0.815 0.908 0.458 1.396",
		"recency 16000 0.948 0.982 0.754 1.775",
		"mask 4000 0.548 0.694 0.235 0.821",
		"mask 8000 0.713 0.868 0.423 1.611",
		"mask 16000 0.743 0.898 0.570 1.763",
	}
	var got []string
	for i, row := range rep.Rows {
		name := "recency"
		if i >= 3 {
			name = "mask"
		}
		got = append(got, fmt.Sprintf("%s %d %.3f %.3f %.3f %.3f", name, row.Budget, row.LineRecall(), row.StringRecall(),
			rep.TokensVsFull(row), rep.EffectiveVsFull(row)))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures differ from baselines.py's (-want +got):\n%s", diff)
	}

	// The sums behind them, from baselines.py with its totals printed:
	// line hits, string hits, needles, tokens sent, and effective tokens
	// (Python's float sum, which is the exact sum to within 1e-6).
	type sums struct {
		Line, String, Needles int
		Tokens                int64
		Effective             string
	}
	of := func(s trajectory.Score) sums {
		return sums{s.LineHits, s.StringHits, s.Needles, s.TokensSent, fmt.Sprintf("%.1f", s.EffectiveTokens())}
	}
	wantSums := []sums{
		{65121, 65121, 65121, 228719328, "30430303.8"},
		{36704, 45467, 65121, 53689384, "20468590.3"},
		{53082, 59146, 65121, 104689737, "42475499.1"},
		{61764, 63919, 65121, 172444925, "54013232.9"},
		{35687, 45197, 65121, 53691057, "24987370.5"},
		{46429, 56514, 65121, 96654862, "49017877.3"},
		{48388, 58487, 65121, 130361522, "53634783.2"},
	}
	gotSums := []sums{of(rep.Full)}
	for _, row := range rep.Rows {
		gotSums = append(gotSums, of(row.Score))
	}
	if diff := cmp.Diff(wantSums, gotSums); diff != "" {
		t.Errorf("sums differ from baselines.py's (-want +got):\n%s", diff)
	}
	for _, row := range rep.Rows {
		if row.ExpansionHits != row.LineHits {
			t.Errorf("%s at %d: %d hits within one expansion, %d by line: a baseline makes no markers", row.Name, row.Budget, row.ExpansionHits, row.LineHits)
		}
		t.Logf("%s at %d: %d of %d contexts over budget, %d with an action or observation alone", row.Name, row.Budget, row.OverBudget, row.Turns, row.Unpaired)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	out := ""
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out += ","
		}
		out += string(c)
	}
	return out
}

// BenchmarkLoad reads the 401 shared runs and their counts.
func BenchmarkLoad(b *testing.B) {
	traj, counts := benchFiles(b)
	for b.Loop() {
		if _, err := trajectory.Load(traj, counts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplayAll replays the 401 shared runs through both baselines at
// three budgets and the full history.
func BenchmarkReplayAll(b *testing.B) {
	traj, counts := benchFiles(b)
	runs, err := trajectory.Load(traj, counts)
	if err != nil {
		b.Fatal(err)
	}
	specs := trajectory.Baselines(4000, 8000, 16000)
	for b.Loop() {
		if _, err := trajectory.ReplayAll(b.Context(), runs, specs, nil); err != nil {
			b.Fatal(err)
		}
	}
}
