package eval

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyLME is a LongMemEval oracle file of one question.
const tinyLME = `[{"question_id":"q1","question_type":"single-session-user","question":"What breed is my dog?",
  "haystack_dates":["2023/05/20 (Sat) 10:00"],"haystack_session_ids":["s1"],
  "haystack_sessions":[[{"role":"user","content":"My dog is a beagle.","has_answer":true},{"role":"assistant","content":"Lovely."}]],
  "answer_session_ids":["s1"]}]`

// mixedBench writes a bench folder with a ripgrep set (queries and an
// archive of its tree) and a LongMemEval set.
func mixedBench(t *testing.T, lme string) string {
	t.Helper()
	archive := writeTarGz(t, []tarEntry{
		{name: "ripgrep/"},
		{name: "ripgrep/crates/core/main.rs", body: "fn main() { search() }\n"},
		{name: "ripgrep/CHANGELOG.md", body: "# search\n"},
	})
	bench := t.TempDir()
	for p, body := range map[string]string{
		"ripgrep/queries.jsonl":               `{"id":"r1","query":"search from main","relevant":["crates/core/main.rs"]}` + "\n",
		"longmemeval/longmemeval_oracle.json": lme,
	} {
		full := filepath.Join(bench, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bench, "ripgrep", "ripgrep.tar.gz"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return bench
}

// TestLoad_Mixed: the mixed set is ripgrep's tree and LongMemEval's turns
// in one corpus, both sets' questions asked of it, scored in two parts;
// Close removes the extracted tree.
func TestLoad_Mixed(t *testing.T) {
	set, err := Load(Mixed, mixedBench(t, tinyLME), "")
	if err != nil {
		t.Fatal(err)
	}
	if !set.Code || !set.Mixed() || len(set.Corpora) != 1 || len(set.Corpora[Repo]) != 2 {
		t.Fatalf("set %+v: want a code set whose repository holds the two turns", set)
	}
	if _, err := os.Stat(filepath.Join(set.Dir, "crates", "core", "main.rs")); err != nil {
		t.Fatal(err)
	}
	if len(set.Questions) != 2 {
		t.Fatalf("questions %+v", set.Questions)
	}
	for _, q := range set.Questions {
		if q.Corpus != Repo {
			t.Errorf("question %s is asked of %q, want the one store", q.ID, q.Corpus)
		}
	}
	parts := set.Parts()
	if len(parts) != 2 {
		t.Fatalf("parts %+v", parts)
	}
	for i, want := range []struct {
		name string
		code bool
		q    string
	}{{"mixed/longmemeval", false, "q1"}, {"mixed/ripgrep", true, "r1"}} {
		p := parts[i]
		if p.Name != want.name || p.Code != want.code || !p.Mixed() || len(p.Questions) != 1 || p.Questions[0].ID != want.q ||
			p.Dir != set.Dir || len(p.Corpora[Repo]) != 2 {
			t.Errorf("part %d: %s code %v mixed %v questions %+v; want %s code %v asking %s over the whole corpus",
				i, p.Name, p.Code, p.Mixed(), p.Questions, want.name, want.code, want.q)
		}
	}
	dir := set.Dir
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the extracted tree is still there after Close: %v", err)
	}

	// A set that is not mixed is its own one part.
	plain := &Set{Name: "p", Questions: []Question{{ID: "a"}}}
	if ps := plain.Parts(); len(ps) != 1 || ps[0] != plain || plain.Mixed() {
		t.Errorf("parts of a plain set: %+v", ps)
	}
}

// TestMix_BadInput: what cannot be told apart once mixed is refused,
// and so is a set that is not one pool of sessions.
func TestMix_BadInput(t *testing.T) {
	code := func() *Set {
		return &Set{Name: "rg", Code: true, Dir: "/x", Questions: []Question{{ID: "q1", Corpus: Repo, Relevant: []string{"a.rs"}}}}
	}
	conv := func(turn, question string) *Set {
		return &Set{Name: "lme", Corpora: map[string][]Item{"pool": {{ID: turn, Text: "t"}}},
			Questions: []Question{{ID: question, Corpus: "pool", Relevant: []string{turn}}}}
	}
	two := conv("s:1", "q2")
	two.Corpora["other"] = []Item{{ID: "o:1"}}
	for _, c := range []struct {
		name       string
		code, conv *Set
		want       string
	}{
		{"TurnIsAFile", code(), conv("a.rs", "q2"), `turn "a.rs" of lme is also a relevant file of rg`},
		{"QuestionInBoth", code(), conv("s:1", "q1"), `question "q1" is in both rg and lme`},
		{"Corpora", code(), two, "lme has 2 corpora"},
		{"Swapped", conv("s:1", "q2"), code(), "want a code set and a conversation set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Mix("m", c.code, c.conv); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Mix = %v, want %q", err, c.want)
			}
		})
	}
	// A part missing from the bench folder is the error Load gives for a
	// missing set, which engram eval skips.
	bench := mixedBench(t, tinyLME)
	if err := os.Remove(filepath.Join(bench, "longmemeval", "longmemeval_oracle.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(Mixed, bench, ""); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(mixed) without LongMemEval = %v, want fs.ErrNotExist", err)
	}
}
