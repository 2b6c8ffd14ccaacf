package trajectory

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPyDumps(t *testing.T) {
	// Expected: Python 3.11's json.dumps(json.loads(in)).
	tests := []struct{ in, want string }{
		{`{"b": 1, "a": [1, 2.5, -0, 1e16, 1e15, 0.0001, 1e-05, 1.5e-7, 123456789012345678901234567890, -0.0, 1E400, true, false, null]}`,
			`{"b": 1, "a": [1, 2.5, 0, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 1.5e-07, 123456789012345678901234567890, -0.0, Infinity, true, false, null]}`},
		{`["é", "😀", "a\u0000b\u007f", "tab\tnl\ncr\rbs\bff\f", "q\"s\\/"]`,
			`["\u00e9", "\ud83d\ude00", "a\u0000b\u007f", "tab\tnl\ncr\rbs\bff\f", "q\"s\\/"]`},
		{`{"a": 1, "b": 2, "a": 3}`, `{"a": 3, "b": 2}`},
		{`{}`, `{}`},
		{`[]`, `[]`},
		{`[{}, [], ""]`, `[{}, [], ""]`},
		{`3`, `3`},
		{`2.0`, `2.0`},
		{`0.1`, `0.1`},
		{`100.0`, `100.0`},
		{`1e2`, `100.0`},
		{`1.7976931348623157e308`, `1.7976931348623157e+308`},
		{`5e-324`, `5e-324`},
		{`-1.25e-10`, `-1.25e-10`},
		{`12345678901234567.0`, `1.2345678901234568e+16`},
		{`1234567890123456.7`, `1234567890123456.8`},
		{`null`, `null`},
	}
	for _, tt := range tests {
		got, err := pyDumps([]byte(tt.in))
		if err != nil {
			t.Errorf("pyDumps(%s): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("pyDumps(%s)\n got %s\nwant %s", tt.in, got, tt.want)
		}
	}
	if _, err := pyDumps([]byte("[" + strings.Repeat("7", 4301) + "]")); err == nil {
		t.Error("pyDumps took an integer of 4,301 digits, which Python refuses")
	}
}

const (
	goodRuns = `{"instance_id": "a__a-1", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "task", "extra": {}}], "info": {}}

{"instance_id": "b__b-2", "messages": [{"role": "system", "content": ["x", 1.0]}, {"role": "assistant", "content": null}]}
`
	goodCounts = `{"id": "a__a-1", "counts": [3, 4]}
{"id": "b__b-2", "counts": [5, 0]}
{"id": "unused", "counts": []}
`
)

func TestReadRuns(t *testing.T) {
	want := []Run{
		{ID: "a__a-1", Messages: []Message{{System, "sys"}, {User, "task"}}, Tokens: []int{3, 4}},
		{ID: "b__b-2", Messages: []Message{{System, `["x", 1.0]`}, {Assistant, "null"}}, Tokens: []int{5, 0}},
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write([]byte(goodRuns)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"plain": []byte(goodRuns), "gzip": gz.Bytes(), "crlf": []byte(strings.ReplaceAll(goodRuns, "\n", "\r\n"))} {
		counts, err := ReadCounts(strings.NewReader(goodCounts), "counts.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		if counts.Len() != 3 {
			t.Errorf("%d runs counted, want 3", counts.Len())
		}
		got, err := ReadRuns(bytes.NewReader(data), "runs.jsonl", counts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: ReadRuns mismatch (-want +got):\n%s", name, diff)
		}
	}
	// Without counts: the same runs, with no Tokens.
	got, err := ReadRuns(strings.NewReader(goodRuns), "runs.jsonl", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i].Tokens = nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadRuns without counts mismatch (-want +got):\n%s", diff)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	runs, counts := filepath.Join(dir, "runs.jsonl"), filepath.Join(dir, "counts.jsonl")
	if err := os.WriteFile(runs, []byte(goodRuns), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(counts, []byte(goodCounts), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(runs, counts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Errorf("%d runs, want 2", len(got))
	}
	for _, missing := range [][2]string{{filepath.Join(dir, "none.jsonl"), counts}, {runs, filepath.Join(dir, "none.jsonl")}} {
		_, err := Load(missing[0], missing[1])
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "none.jsonl") {
			t.Errorf("Load(%s, %s) = %v, want an error naming the missing file", missing[0], missing[1], err)
		}
	}
}

func TestReadRuns_BadInput(t *testing.T) {
	msgs := `[{"role": "system", "content": "s"}, {"role": "user", "content": "t"}]`
	tests := []struct {
		name, runs, counts string
		want               string // in the error
	}{
		{"NotJSON", "{oops\n", goodCounts, "runs.jsonl:1: not JSON"},
		{"NotObject", "\n[1]\n", goodCounts, "runs.jsonl:2: a JSON array where an object belongs"},
		{"Null", "null", goodCounts, "runs.jsonl:1: null where an object belongs"},
		{"TextAfter", `{"instance_id": "a__a-1", "messages": ` + msgs + `} x`, goodCounts, "runs.jsonl:1: not JSON"},
		{"NoID", `{"messages": []}`, goodCounts, `runs.jsonl:1: no "instance_id"`},
		{"IDCase", `{"Instance_ID": "a__a-1", "messages": []}`, goodCounts, `runs.jsonl:1: no "instance_id"`},
		{"IDNumber", `{"instance_id": 7, "messages": []}`, goodCounts, `runs.jsonl:1: "instance_id" holds a JSON number where a string belongs`},
		{"NoMessages", `{"instance_id": "a__a-1"}`, goodCounts, `runs.jsonl:1: run "a__a-1": no "messages" list`},
		{"MessagesObject", `{"instance_id": "a__a-1", "messages": {}}`, goodCounts, `"messages" holds a JSON object where a list belongs`},
		{"MessageNotObject", `{"instance_id": "a__a-1", "messages": ["hi"]}`, goodCounts, `run "a__a-1": message 0: a JSON string where an object belongs`},
		{"NoRole", `{"instance_id": "a__a-1", "messages": [{"content": "x"}]}`, goodCounts, `message 0: no "role"`},
		{"BadRole", `{"instance_id": "a__a-1", "messages": [{"role": "tool", "content": "x"}]}`, goodCounts, `message 0: role "tool": want system, user or assistant`},
		{"NoContent", `{"instance_id": "a__a-1", "messages": [{"role": "user"}]}`, goodCounts, `message 0: no "content"`},
		{"NotUTF8", "{\"instance_id\": \"a\xff\", \"messages\": []}", goodCounts, "runs.jsonl:1: not UTF-8"},
		{"NoCounts", `{"instance_id": "zz", "messages": []}`, goodCounts, `runs.jsonl:1: run "zz": no token counts in counts.jsonl`},
		{"CountsLength", "\n\n" + `{"instance_id": "b__b-2", "messages": [{"role": "system", "content": "s"}]}`, goodCounts,
			`runs.jsonl:3: run "b__b-2": 1 messages, but counts.jsonl:2 counts 2`},
		{"CountsNotJSON", "", "{\"id\": \"a\", \"counts\": [1]}\n{\"id\"", "counts.jsonl:2: not JSON"},
		{"CountsNoID", "", `{"counts": [1]}`, `counts.jsonl:1: no "id"`},
		{"CountsNone", "", `{"id": "a"}`, `counts.jsonl:1: run "a": no "counts"`},
		{"CountsNegative", "", `{"id": "a", "counts": [1, -2]}`, `counts.jsonl:1: run "a": count 1 is -2, not a whole number of tokens`},
		{"CountsFraction", "", `{"id": "a", "counts": [1.5]}`, `count 0 is 1.5, not a whole number`},
		{"CountsString", "", `{"id": "a", "counts": ["1"]}`, `count 0 is "1", not a whole number`},
		{"CountsNotList", "", `{"id": "a", "counts": 3}`, `counts.jsonl:1: run "a": "counts" holds a JSON number where a list belongs`},
		{"CountsTwice", "", "{\"id\": \"a\", \"counts\": [1]}\n\n{\"id\": \"a\", \"counts\": [1]}", `counts.jsonl:3: run "a": counted already at line 1`},
		{"Gzip", "\x1f\x8bnot gzip", goodCounts, "runs.jsonl:1: read gzip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts, err := ReadCounts(strings.NewReader(tt.counts), "counts.jsonl")
			if err == nil {
				_, err = ReadRuns(strings.NewReader(tt.runs), "runs.jsonl", counts)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one holding %q", err, tt.want)
			}
			var le *LineError
			if !errors.As(err, &le) {
				t.Errorf("%v is not a *LineError", err)
			}
		})
	}
}

// TestReadRuns_TruncatedGzip checks that a gzip file cut short is an error
// at the line it stopped in.
func TestReadRuns_TruncatedGzip(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write([]byte(goodRuns + goodRuns)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	counts, err := ReadCounts(strings.NewReader(goodCounts), "counts.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ReadRuns(bytes.NewReader(gz.Bytes()[:gz.Len()-10]), "runs.jsonl.gz", counts)
	if err == nil || !strings.Contains(err.Error(), "runs.jsonl.gz:") {
		t.Fatalf("got error %v, want one naming the file and line", err)
	}
}

// FuzzReadRuns reads arbitrary trajectories and counts: no panic, and runs
// read are well formed and read back the same once written out again.
func FuzzReadRuns(f *testing.F) {
	f.Add([]byte(goodRuns), []byte(goodCounts))
	f.Add([]byte(`{"instance_id": "a__a-1", "messages": [{"role": "user", "content": {"k": [1e400, -0, "\ud83d\ude00"]}}, {"role": "user", "content": 5}]}`), []byte(goodCounts))
	f.Add([]byte("{\"instance_id\": \"a__a-1\", \"messages\": []}\n"), []byte("{\"id\": \"a__a-1\", \"counts\": [1, 2]}\n"))
	f.Fuzz(func(t *testing.T, runs, countsData []byte) {
		counts, err := ReadCounts(bytes.NewReader(countsData), "counts")
		if err != nil {
			return
		}
		got, err := ReadRuns(bytes.NewReader(runs), "runs", counts)
		if err != nil {
			return
		}
		var again bytes.Buffer
		for _, r := range got {
			if r.ID == "" || len(r.Tokens) != len(r.Messages) {
				t.Fatalf("run %q: %d messages, %d counts", r.ID, len(r.Messages), len(r.Tokens))
			}
			type msg struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			}
			line := struct {
				ID       string `json:"instance_id"`
				Messages []msg  `json:"messages"`
			}{ID: r.ID, Messages: []msg{}}
			for _, m := range r.Messages {
				if m.Role != System && m.Role != User && m.Role != Assistant {
					t.Fatalf("run %q: role %q", r.ID, m.Role)
				}
				line.Messages = append(line.Messages, msg(m))
			}
			b, err := json.Marshal(line)
			if err != nil {
				t.Fatal(err)
			}
			again.Write(b)
			again.WriteByte('\n')
		}
		back, err := ReadRuns(&again, "again", counts)
		if err != nil {
			t.Fatalf("runs written out again do not read: %v", err)
		}
		if diff := cmp.Diff(got, back); diff != "" {
			t.Fatalf("runs read back differ (-first +again):\n%s", diff)
		}
	})
}

// FuzzPyDumps checks that content printed as Python prints it is JSON of
// the same value.
func FuzzPyDumps(f *testing.F) {
	f.Add(`{"b": 1, "a": [1, 2.5, -0, 1e16, 0.0001, 1e-05, "é😀\u0000", {"a": 1, "a": 2}]}`)
	f.Add(`[true, false, null, "\ud800"]`)
	f.Fuzz(func(t *testing.T, in string) {
		if !json.Valid([]byte(in)) {
			return
		}
		out, err := pyDumps([]byte(in))
		if err != nil || strings.Contains(out, "Infinity") {
			return // an integer too long for Python; a float too large for JSON
		}
		var want, got any
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("pyDumps(%q) = %q, not JSON: %v", in, out, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("pyDumps(%q) = %q, another value (-in +out):\n%s", in, out, diff)
		}
	})
}
