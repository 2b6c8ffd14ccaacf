package lsa

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// topicCorpus makes documents on a few topics: each topic has its own
// words, and no document holds all of a topic's words, so only
// co-occurrence tells that two words belong together.
func topicCorpus(n int) [][]string {
	topics := [][]string{
		{"goroutine", "channel", "mutex", "deadlock", "select", "waitgroup"},
		{"index", "query", "posting", "ranking", "token", "stem"},
		{"deploy", "cluster", "container", "rollout", "replica", "ingress"},
	}
	r := rand.New(rand.NewPCG(3, 4))
	var docs [][]string
	for i := range n {
		t := topics[i%len(topics)]
		var d []string
		for range 4 {
			d = append(d, t[r.IntN(len(t))])
		}
		d = append(d, fmt.Sprintf("noise%d", r.IntN(50)))
		docs = append(docs, d)
	}
	return docs
}

func cos(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestTrain_Topics(t *testing.T) {
	m, err := Train(topicCorpus(600), Options{Dim: 3})
	if err != nil {
		t.Fatal(err)
	}
	same := cos(m.Embed([]string{"goroutine"}), m.Embed([]string{"deadlock"}))
	other := cos(m.Embed([]string{"goroutine"}), m.Embed([]string{"ingress"}))
	if same < 0.8 || other > 0.2 {
		t.Errorf("cos(goroutine, deadlock) = %.2f, cos(goroutine, ingress) = %.2f: topics not learned", same, other)
	}
	if v := m.Embed([]string{"unknown"}); cos(v, v) != 0 {
		t.Errorf("unknown terms: non-zero vector")
	}
	if n := cos(m.Embed([]string{"query", "ranking"}), m.Embed([]string{"query", "ranking"})); math.Abs(n-1) > 1e-5 {
		t.Errorf("vectors not normalised: %v", n)
	}
}

func TestModel_Roundtrip(t *testing.T) {
	m, err := Train(topicCorpus(100), Options{Dim: 4})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var m2 Model
	if err := m2.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	q := []string{"channel", "mutex", "stem"}
	if a, b := m.Embed(q), m2.Embed(q); fmt.Sprint(a) != fmt.Sprint(b) || m2.Dim() != m.Dim() || m2.Docs != m.Docs {
		t.Errorf("round trip changed the model")
	}
	for _, bad := range [][]byte{nil, {1}, {2, 4}, b[:len(b)-1]} {
		if err := new(Model).UnmarshalBinary(bad); err == nil {
			t.Errorf("UnmarshalBinary(%d bytes) accepted a bad model", len(bad))
		}
	}
}

func TestTrain_TooSmall(t *testing.T) {
	if _, err := Train([][]string{{"a"}}, Options{}); err == nil {
		t.Error("trained on one document")
	}
	docs := make([][]string, 30)
	for i := range docs {
		docs[i] = []string{"same"}
	}
	if _, err := Train(docs, Options{}); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Errorf("one distinct term: %v", err)
	}
}

// TestOrthonormalize checks CholeskyQR2 on a tall random matrix whose
// columns are far from orthogonal, and that a dependent column is zeroed.
func TestOrthonormalize(t *testing.T) {
	n, l := 2000, 12
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float64, n*l)
	for i := range n {
		base := r.NormFloat64()
		for c := range l {
			x[i*l+c] = base + 0.1*r.NormFloat64() // columns nearly alike
		}
	}
	orthonormalize(x, n, l, 2)
	for a := range l {
		for b := range l {
			var d float64
			for i := range n {
				d += x[i*l+a] * x[i*l+b]
			}
			want := 0.0
			if a == b {
				want = 1
			}
			if math.Abs(d-want) > 1e-9 {
				t.Fatalf("column %d · column %d = %v", a, b, d)
			}
		}
	}
}

func TestOrthonormalize_Dependent(t *testing.T) {
	n, l := 300, 4
	r := rand.New(rand.NewPCG(2, 2))
	x := make([]float64, n*l)
	for i := range n {
		a, b := r.NormFloat64(), r.NormFloat64()
		x[i*l], x[i*l+1], x[i*l+2], x[i*l+3] = a, b, a+b, r.NormFloat64() // column 2 = 0 + 1
	}
	orthonormalize(x, n, l, 2)
	var norm2 float64
	for i := range n {
		norm2 += x[i*l+2] * x[i*l+2]
	}
	if norm2 > 1e-12 {
		t.Errorf("dependent column not zeroed: |c2|² = %v", norm2)
	}
	for _, c := range []int{0, 1, 3} {
		var d float64
		for i := range n {
			d += x[i*l+c] * x[i*l+c]
		}
		if math.Abs(d-1) > 1e-9 {
			t.Errorf("column %d has |c|² = %v", c, d)
		}
	}
}
