package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// smallTrajectory is one run in the trajectories' format: turns at
// messages 4 and 6, of contexts of 65 and 110 tokens in full; the needles
// src/parser.py at 4, parse_tokens and src/lexer.py at 6.
const (
	smallTrajectory = `{"instance_id": "small", "messages": [` +
		`{"role": "system", "content": "You are a helpful agent."}, {"role": "user", "content": "Fix the parser bug."}, ` +
		`{"role": "assistant", "content": "ls src"}, {"role": "user", "content": "src/parser.py\nsrc/lexer.py"}, ` +
		`{"role": "assistant", "content": "cat src/parser.py"}, {"role": "user", "content": "def parse_tokens(stream):"}, ` +
		`{"role": "assistant", "content": "parse_tokens in src/lexer.py"}]}` + "\n"
	smallCounts = `{"id": "small", "counts": [10, 20, 5, 30, 5, 40, 8]}` + "\n"
)

func writeTrajectory(t *testing.T, runs, counts string) (file, countsFile string) {
	t.Helper()
	dir := t.TempDir()
	file, countsFile = filepath.Join(dir, "runs.jsonl"), filepath.Join(dir, "counts.jsonl")
	if err := os.WriteFile(file, []byte(runs), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(countsFile, []byte(counts), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, countsFile
}

func TestCLI_BenchTrajectories(t *testing.T) {
	e := newEnv(t)
	file, counts := writeTrajectory(t, smallTrajectory, smallCounts)
	out := e.ok("", "bench", "trajectories", "--file", file, "--counts", counts, "--budget", "70,1000")
	var lines []string
	for l := range strings.SplitSeq(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		"1 runs, 2 turns, 3 needles; full history: 175 tokens sent, 116 effective with a prompt cache",
		// At 70 tokens: 0, 1, 2, 3 (65 tokens), then 0, 1, 5 (70, of
		// which 30 repeat the first context), 5 without its action 4.
		// Its needles: src/parser.py found in 3, parse_tokens in 5,
		// src/lexer.py missed. Tokens 135 / 175, effective 108 / 116.5.
		"recency truncation 70 0.667 0.667 0.667 0.771 0.927 0 1",
		"recency truncation 1,000 1.000 1.000 1.000 1.000 1.000 0 0",
		"observation masking (last 5 whole) 70 0.667",
		// The window takes no budget under 256 tokens; at 1,000 it
		// holds everything.
		"engram window 1,000 1.000 1.000 1.000 1.000 1.000 0 0",
		"full history - 1.000 1.000 1.000 1.000 1.000 0 0",
		"read 1 runs in",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	var rep trajectoryReport
	if err := json.Unmarshal([]byte(e.ok("", "bench", "trajectories", "--file", file, "--counts", counts, "--budget", "70", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep.Rows {
		got = append(got, r.Strategy)
	}
	if want := "recency truncation, observation masking (last 5 whole), full history"; strings.Join(got, ", ") != want {
		t.Fatalf("rows %q, want %s", got, want)
	}
	if full := rep.Rows[2]; full.Sums.TokensSent != 175 || full.EffectiveTokens != 116.5 || full.TokensVsFull != 1 {
		t.Errorf("full history: %+v", full)
	}
	if r := rep.Rows[0]; r.Sums.TokensSent != 135 || r.Sums.CachedTokens != 30 || r.Sums.Unpaired != 1 || r.Sums.OverBudget != 0 || r.Budget != 70 {
		t.Errorf("recency truncation: %+v", r)
	}
}

// TestCLI_BenchTrajectoriesAssembly: --assembly adds engram's assembly,
// with and without the pre-fetch, beside the other rows of the same run.
func TestCLI_BenchTrajectoriesAssembly(t *testing.T) {
	e := newEnv(t)
	file, counts := writeTrajectory(t, smallTrajectory, smallCounts)
	dir := t.TempDir()
	out := e.ok("", "bench", "trajectories", "--file", file, "--counts", counts, "--budget", "70,1000", "--assembly", "--dir", dir)
	var lines []string
	for l := range strings.SplitSeq(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		"recency truncation 70 0.667 0.667 0.667 0.771 0.927 0 1 0",
		"engram window 1,000 1.000 1.000 1.000 1.000 1.000 0 0 0",
		// At 1,000 tokens the assembly shows the run whole: nothing is
		// left to retrieve, and no arc.
		"engram assembly 1,000 1.000 1.000 1.000 1.000 1.000 0 0 0",
		"engram assembly, no pre-fetch 1,000 1.000 1.000 1.000 1.000 1.000 0 0 0",
		"over budget, unpaired, refused: contexts, of 2 in each row",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Under a window's least budget there is no assembly.
	if strings.Contains(text, "engram assembly 70") {
		t.Errorf("an assembly at 70 tokens:\n%s", out)
	}
	// Each run's store is made in --dir and removed when its run is done,
	// so the same directory serves again; the mark that the directory is
	// a benchmark's stays.
	if left, err := os.ReadDir(dir); err != nil || len(left) != 1 || left[0].Name() != scratchMark {
		t.Errorf("--dir after the replay: %v, %v; want the runs' stores removed", left, err)
	}
	again := e.ok("", "bench", "trajectories", "--file", file, "--counts", counts, "--budget", "70,1000", "--assembly", "--dir", dir)
	rows := func(s string) string { // all but the line of the times taken
		return regexp.MustCompile(`(?m)^read .*$`).ReplaceAllString(s, "")
	}
	if rows(again) != rows(out) {
		t.Errorf("a second replay gives other rows:\n%s\nthen\n%s", out, again)
	}
}

func TestCLI_BenchTrajectoriesBadInput(t *testing.T) {
	e := newEnv(t)
	file, counts := writeTrajectory(t, smallTrajectory+"{oops\n", smallCounts)
	code, _, errOut := e.run("", "bench", "trajectories", "--file", file, "--counts", counts)
	if code != 1 || !strings.Contains(errOut, file+":2: not JSON") {
		t.Errorf("exit %d, %q: want 1 and an error naming the line", code, errOut)
	}
	code, _, errOut = e.run("", "bench", "trajectories", "--file", file+".none", "--counts", counts)
	if code != 1 || !strings.Contains(errOut, "runs.jsonl.none") || !strings.Contains(errOut, "--bench-dir") {
		t.Errorf("exit %d, %q: want 1 and an error naming the missing file", code, errOut)
	}
	code, _, errOut = e.run("", "bench", "trajectories", "--budget", "0")
	if code != 2 || !strings.Contains(errOut, "--budget 0") {
		t.Errorf("exit %d, %q: want 2 and a usage error", code, errOut)
	}
	code, _, errOut = e.run("", "bench", "trajectories", "--runs", "-1")
	if code != 2 || !strings.Contains(errOut, "--runs -1") {
		t.Errorf("exit %d, %q: want 2 and a usage error", code, errOut)
	}
	code, _, errOut = e.run("", "bench", "trajectories", "--split", "third")
	if code != 2 || !strings.Contains(errOut, `--split "third"`) {
		t.Errorf("exit %d, %q: want 2 and a usage error", code, errOut)
	}
	// One run: the odd half is empty.
	file, counts = writeTrajectory(t, smallTrajectory, smallCounts)
	code, _, errOut = e.run("", "bench", "trajectories", "--file", file, "--counts", counts, "--split", "odd")
	if code != 1 || !strings.Contains(errOut, "no runs") {
		t.Errorf("exit %d, %q: want 1 and no runs", code, errOut)
	}
}
