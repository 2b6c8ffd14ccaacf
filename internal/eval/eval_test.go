package eval

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestRun_Metrics(t *testing.T) {
	set := &Set{Name: "t", Questions: []Question{
		{ID: "q1", Relevant: []string{"a", "b"}, Kind: "x"},
		{ID: "q2", Relevant: []string{"z"}, Kind: "y"},
	}}
	answers := map[string][]string{
		// a at rank 1, b at rank 6: the repeat of a is dropped, as a
		// file's second chunk is
		"q1": {"a", "c", "a", "d", "e", "f", "b"},
		// z at rank 12: in @20 only
		"q2": {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "z"},
	}
	m, err := Run(context.Background(), set, func(_ context.Context, q Question, k int) ([]string, error) {
		if k != Depth {
			t.Errorf("asked for %d items, want %d", k, Depth)
		}
		return answers[q.ID], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Questions != 2 {
		t.Fatalf("questions %d", m.Questions)
	}
	want := map[int]float64{5: (0.5 + 0) / 2, 10: (1.0 + 0) / 2, 20: (1.0 + 1) / 2}
	for k, w := range want {
		if !near(m.Recall[k], w) {
			t.Errorf("recall@%d = %v, want %v", k, m.Recall[k], w)
		}
	}
	if w := (1 + 1.0/12) / 2; !near(m.MRR, w) {
		t.Errorf("MRR = %v, want %v", m.MRR, w)
	}
	// q1: DCG = 1/log2(2) + 1/log2(7); ideal = 1 + 1/log2(3). q2: 0 in @10.
	q1 := (1 + 1/math.Log2(7)) / (1 + 1/math.Log2(3))
	if w := q1 / 2; !near(m.NDCG10, w) {
		t.Errorf("nDCG@10 = %v, want %v", m.NDCG10, w)
	}
	if !near(m.ByKind["x"], 1) || !near(m.ByKind["y"], 0) {
		t.Errorf("by kind %v", m.ByKind)
	}
}

func TestRun_DistinctFilesAndDistractors(t *testing.T) {
	// Chunks of one file count as the file, once, where it first ranks:
	// x.go's second chunk does not push y.go down. The first result is a
	// test for q1 and a changelog for q3, code for q2.
	set := &Set{Code: true, Questions: []Question{
		{ID: "q1", Relevant: []string{"y.go"}},
		{ID: "q2", Relevant: []string{"y.go"}},
		{ID: "q3", Relevant: []string{"y.go"}},
	}}
	answers := map[string][]string{
		"q1": {"x_test.go", "x_test.go", "x_test.go", "x.go", "x.go", "y.go"},
		"q2": {"x.go", "x.go", "y.go"},
		"q3": {"CHANGELOG.md", "y.go"},
	}
	m, err := Run(context.Background(), set, func(_ context.Context, q Question, _ int) ([]string, error) {
		return answers[q.ID], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := (1.0/3 + 1.0/2 + 1.0/2) / 3; !near(m.MRR, w) {
		t.Errorf("MRR = %v, want %v (ranks of distinct files 3, 2, 2)", m.MRR, w)
	}
	if !near(m.DistractorFirst, 2.0/3) {
		t.Errorf("distractor first = %v, want 2/3", m.DistractorFirst)
	}
}

func TestDistinct(t *testing.T) {
	ids := []string{"a", "a", "b", "a", "c", "b", "d"}
	for k, want := range map[int][]string{1: {"a"}, 3: {"a", "b", "c"}, 10: {"a", "b", "c", "d"}} {
		if got := Distinct(ids, k); !reflect.DeepEqual(got, want) {
			t.Errorf("Distinct(%v, %d) = %v, want %v", ids, k, got, want)
		}
	}
	if got := Distinct(nil, 10); len(got) != 0 {
		t.Errorf("Distinct(nil) = %v", got)
	}
}

func TestSameRanking(t *testing.T) {
	for _, c := range []struct {
		a, b []string
		want bool
	}{
		{[]string{"a", "b", "c"}, []string{"a", "b", "c"}, true},
		{[]string{"a", "b", "c"}, []string{"a", "b"}, true},       // fewer, same order
		{[]string{"a", "b", "c"}, []string{"a", "c", "b"}, false}, // order changed
		{[]string{"a", "b", "c", "x"}, []string{"a", "b", "c", "y"}, false},
		{[]string{"a", "b", "c", "x"}, []string{"a", "b", "c", "y"}[:3], true},
		{nil, []string{"a"}, true},
	} {
		if got := SameRanking(c.a, c.b, 10); got != c.want {
			t.Errorf("SameRanking(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if !SameRanking([]string{"a", "b", "x"}, []string{"a", "b", "y"}, 2) {
		t.Error("rankings that differ past k are the same ranking at k")
	}
}

func TestRun_CancelledAndErrors(t *testing.T) {
	set := &Set{Questions: []Question{{ID: "q", Relevant: []string{"a"}}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, set, func(context.Context, Question, int) ([]string, error) { return nil, nil }); err == nil {
		t.Error("cancelled run: no error")
	}
	boom := os.ErrClosed
	if _, err := Run(context.Background(), set, func(context.Context, Question, int) ([]string, error) { return nil, boom }); err != boom {
		t.Errorf("retriever error: %v", err)
	}
}

func write(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadLoCoMo(t *testing.T) {
	p := write(t, "locomo10.json", `[{"sample_id":"conv-1",
	 "conversation":{"speaker_a":"Ann","session_1_date_time":"1:56 pm on 8 May, 2023",
	  "session_1":[{"speaker":"Ann","dia_id":"D1:1","text":"I adopted a dog."},
	               {"speaker":"Bo","dia_id":"D1:2","text":"Look!","blip_caption":"a photo of a puppy"}],
	  "session_2":[{"speaker":"Ann","dia_id":"D2:1","text":"The dog is named Rex."}]},
	 "qa":[{"question":"What is the dog called?","evidence":["D2:1; D1:1"],"category":4},
	       {"question":"adversarial","evidence":["D1:1"],"category":5},
	       {"question":"unknown evidence","evidence":["D9:9"],"category":1}]}]`)
	set, err := LoadLoCoMo(p)
	if err != nil {
		t.Fatal(err)
	}
	// Stored as an agent's session: the first speaker is the user, the
	// second the assistant, and no turn starts with a name.
	items := set.Corpora["conv-1"]
	if len(items) != 3 || items[1].Text != "Look! [shares a photo: a photo of a puppy]" || items[2].Session != "session_2" {
		t.Fatalf("items %+v", items)
	}
	if roles := []string{items[0].Role, items[1].Role, items[2].Role}; !reflect.DeepEqual(roles, []string{"user", "assistant", "user"}) {
		t.Errorf("roles %v", roles)
	}
	if items[0].Text != "I adopted a dog." {
		t.Errorf("text %q", items[0].Text)
	}
	if items[0].Time.IsZero() || items[0].Time.Day() != 8 {
		t.Errorf("time %v", items[0].Time)
	}
	if len(set.Questions) != 1 {
		t.Fatalf("questions %+v (category 5 and unknown evidence must go)", set.Questions)
	}
	q := set.Questions[0]
	if q.Corpus != "conv-1" || q.Kind != "single-hop" || !reflect.DeepEqual(q.Relevant, []string{"D1:1", "D2:1"}) {
		t.Errorf("question %+v", q)
	}
}

func TestLoadLongMemEval(t *testing.T) {
	p := write(t, "longmemeval_oracle.json", `[
	 {"question_id":"q1","question_type":"single-session-user","question":"Where do I work?",
	  "haystack_dates":["2023/05/20 (Sat) 02:21"],"haystack_session_ids":["s1"],
	  "haystack_sessions":[[{"role":"user","content":"I work at Acme.","has_answer":true},{"role":"assistant","content":"Nice."}]],
	  "answer_session_ids":["s1"]},
	 {"question_id":"q2","question_type":"multi-session","question":"What did we discuss?",
	  "haystack_dates":["2023/05/20 (Sat) 02:21","2023/05/21 (Sun) 10:00"],"haystack_session_ids":["s1","s2"],
	  "haystack_sessions":[[{"role":"user","content":"I work at Acme."},{"role":"assistant","content":"Nice."}],
	                       [{"role":"user","content":"Tell me a joke."}]],
	  "answer_session_ids":["s2"]},
	 {"question_id":"q3_abs","question_type":"single-session-user","question":"abstain",
	  "haystack_dates":[],"haystack_session_ids":["s3"],
	  "haystack_sessions":[[{"role":"user","content":"x","has_answer":true}]],"answer_session_ids":["s3"]}]`)
	set, err := LoadLongMemEval(p)
	if err != nil {
		t.Fatal(err)
	}
	items := set.Corpora[LongMemEval]
	if len(items) != 4 { // s1 twice is pooled once; the abstention's session stays as a distractor
		t.Fatalf("items %+v", items)
	}
	if it := items[1]; it.Text != "Nice." || it.Role != "assistant" || it.Session != "s1" {
		t.Errorf("turn stored as %+v, want what the assistant said", it)
	}
	if len(set.Questions) != 2 {
		t.Fatalf("questions %+v", set.Questions)
	}
	if r := set.Questions[0].Relevant; !reflect.DeepEqual(r, []string{"s1:1"}) {
		t.Errorf("q1 relevant %v", r)
	}
	if r := set.Questions[1].Relevant; !reflect.DeepEqual(r, []string{"s2:1"}) {
		t.Errorf("q2 relevant (no has_answer: the answer session's turns) %v", r)
	}
}

// TestLoadChat_BadInput: a conversation set's file that is empty or not
// JSON is an error naming the file, and the line where it can.
func TestLoadChat_BadInput(t *testing.T) {
	for _, load := range []struct {
		name string
		fn   func(string) (*Set, error)
	}{{"locomo", LoadLoCoMo}, {"longmemeval", LoadLongMemEval}} {
		t.Run(load.name, func(t *testing.T) {
			for _, c := range []struct {
				data string
				line int
				want string
			}{
				{"", 0, "empty"},
				{"[\n  {\"x\": 1},\n  {oops}\n]", 3, "invalid character"},
				{"[\n {\"sample_id\": 7, \"question_id\": 7}]", 2, "cannot unmarshal"},
				{"[]", 0, "no questions"},
			} {
				p := write(t, load.name+".json", c.data)
				_, err := load.fn(p)
				if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%q: %v; want the file and %q", c.data, err, c.want)
					continue
				}
				var le *LineError
				if c.line > 0 && (!errors.As(err, &le) || le.Line != c.line) {
					t.Errorf("%q: %v; want line %d", c.data, err, c.line)
				}
			}
			if _, err := load.fn(filepath.Join(t.TempDir(), "none.json")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("missing file: %v", err)
			}
		})
	}
}
