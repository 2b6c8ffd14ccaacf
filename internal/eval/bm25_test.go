package eval

import (
	"math"
	"reflect"
	"testing"
)

func TestBM25_Score(t *testing.T) {
	// Scores by hand: three documents of lengths 2, 4 and 2 (average
	// 8/3); "apple" is in two of them.
	docs := []Doc{{ID: "a", Text: "apple pie"}, {ID: "b", Text: "apple apple cider vinegar"}, {ID: "c", Text: "cherry tart"}}
	ix := NewBM25(docs, BM25Options{})
	if got := ix.Search("apple", 10); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Fatalf("Search(apple) = %v", got)
	}
	idf := math.Log(1 + (3-2+0.5)/(2+0.5))
	score := func(tf, dl float64) float64 {
		return idf * tf * (DefaultK1 + 1) / (tf + DefaultK1*(1-DefaultB+DefaultB*dl/(8.0/3)))
	}
	got := ix.rank("apple")
	if len(got) != 2 || !near(got[0].score, score(2, 4)) || !near(got[1].score, score(1, 2)) {
		t.Errorf("scores %+v, want b %v and a %v", got, score(2, 4), score(1, 2))
	}
	// k = 1 keeps the best only; an unknown word finds nothing.
	if got := ix.Search("apple", 1); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("Search(apple, 1) = %v", got)
	}
	if got := ix.Search("durian", 10); len(got) != 0 {
		t.Errorf("Search(durian) = %v", got)
	}
	if ix.Len() != 3 {
		t.Errorf("Len %d", ix.Len())
	}
}

func TestBM25_Identifiers(t *testing.T) {
	docs := []Doc{
		{ID: "x.go", Path: "x.go", Text: "func parseHTTPRequest(r io.Reader) {}"},
		{ID: "y.go", Path: "y.go", Text: "func writeResponse(w io.Writer) {}"},
	}
	ix := NewBM25(docs, BM25Options{})
	// The words of an identifier find it, and so does another spelling
	// of it; stems match ("parsing" and "parse").
	for _, q := range []string{"parsing the http request", "parse_http_request", "ParseHTTPRequest"} {
		if got := ix.Search(q, 10); len(got) == 0 || got[0] != "x.go" {
			t.Errorf("Search(%q) = %v, want x.go first", q, got)
		}
	}
}

func TestBM25_PathWords(t *testing.T) {
	// Both mention cookies once in text; the one whose path says cookie
	// ranks first, unless paths are left out (then the shorter wins).
	docs := []Doc{
		{ID: "net/http/server.go", Path: "net/http/server.go", Text: "a cookie is set here"},
		{ID: "net/http/cookie.go", Path: "net/http/cookie.go", Text: "a cookie is set here, and it is read there too"},
	}
	if got := NewBM25(docs, BM25Options{}).Search("cookie", 10); got[0] != "net/http/cookie.go" {
		t.Errorf("path words boosted: %v", got)
	}
	if got := NewBM25(docs, BM25Options{PathWeight: -1}).Search("cookie", 10); got[0] != "net/http/server.go" {
		t.Errorf("paths left out: %v", got)
	}
}

func TestBM25_StopWords(t *testing.T) {
	// "the" and "was" are in every turn with stop words kept, and they
	// tip the ranking to the turn that repeats them; without them the
	// question's content word decides.
	docs := []Doc{
		{ID: "1", Text: "the dog was the best and the walk was the longest"},
		{ID: "2", Text: "Rex is a beagle dog"},
		{ID: "3", Text: "the cat was here"},
	}
	q := "what was the name of the dog"
	if got := NewBM25(docs, BM25Options{StopWords: true}).Search(q, 10); !reflect.DeepEqual(got, []string{"2", "1"}) {
		t.Errorf("stop words dropped: %v", got)
	}
	if got := NewBM25(docs, BM25Options{}).Search(q, 10); got[0] != "1" {
		t.Errorf("stop words kept: %v", got)
	}
}
