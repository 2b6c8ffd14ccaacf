package backend

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestReplacer(t *testing.T) {
	var places int64
	r := NewReplacer([]byte("<secret>"), []byte("[R]"), true, &places)
	if got, ok := r.ReplaceString("a <secret> b <secret>"); !ok || got != "a [R] b [R]" {
		t.Errorf("ReplaceString = %q, %v", got, ok)
	}
	// In JSON the string's < and > may be escaped; keys are replaced too.
	got, ok, err := r.ReplaceJSON(`{"k\u003csecret\u003e":["x <secret>",1.50]}`)
	if err != nil || !ok || got != `{"k[R]":["x [R]",1.50]}` {
		t.Errorf("ReplaceJSON = %s, %v, %v", got, ok, err)
	}
	if got, ok, err := r.ReplaceJSON(`{"a":"none"}`); err != nil || ok || got != `{"a":"none"}` {
		t.Errorf("ReplaceJSON unchanged = %s, %v, %v", got, ok, err)
	}
	if got, ok := r.ReplaceCut("tail <sec" + CutMark); !ok || got != "tail [R]"+CutMark {
		t.Errorf("ReplaceCut = %q, %v", got, ok)
	}
	if places != 5 {
		t.Errorf("places = %d, want 5", places)
	}
	noJSON := NewReplacer([]byte("x"), []byte("y"), false, &places)
	if got, ok, err := noJSON.ReplaceJSON(`["x"]`); err != nil || ok || got != `["x"]` || noJSON.JSONNeedles() != nil {
		t.Errorf("ReplaceJSON without JSON forms = %s, %v, %v", got, ok, err)
	}
}

func TestContextFrom(t *testing.T) {
	content := map[int64][]byte{1: []byte("first words"), 2: []byte("\x80second\x00 part")}
	tail := func(from, pk int64) ([]byte, error) { return content[pk][from-1:], nil }
	prevs := []PrevEntry{{2, int64(len(content[2]))}, {1, int64(len(content[1]))}}
	got, err := ContextFrom(3, 10, prevs, tail, nil)
	if err != nil || got != "first words\nsecond\x00 part" {
		t.Errorf("ContextFrom = %q, %v", got, err)
	}
	got, _ = ContextFrom(3, 10, prevs, tail, func(s string) string { return strings.ReplaceAll(s, "\x00", "") })
	if got != "first words\nsecond part" {
		t.Errorf("ContextFrom with text = %q", got)
	}
	if got, _ := ContextFrom(1, 10, prevs[1:], tail, nil); got != "" {
		t.Errorf("an entry is no context of itself: %q", got)
	}
	if got, _ := ContextFrom(3, ContextBytes, prevs, tail, nil); got != "" {
		t.Errorf("a long entry gets none: %q", got)
	}
	boom := errors.New("boom")
	if _, err := ContextFrom(3, 10, prevs, func(int64, int64) ([]byte, error) { return nil, boom }, nil); !errors.Is(err, boom) {
		t.Errorf("error = %v", err)
	}
}

func TestRecentBefore(t *testing.T) {
	size := func(pk int64) int64 { return pk * 10 }
	occs := []RecentOcc{{1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 5}}
	prevs, ok := RecentBefore(occs, 0, 3, size)
	if !ok || len(prevs) != 3 || prevs[0] != (PrevEntry{4, 40}) || prevs[1] != (PrevEntry{3, 30}) || prevs[2] != (PrevEntry{2, 20}) {
		t.Errorf("RecentBefore = %v, %v", prevs, ok)
	}
	// A stored occurrence at turn 3 would rank above the batch's at turn 2.
	if _, ok := RecentBefore(occs, 3, 3, size); ok {
		t.Error("RecentBefore knew the answer though a stored turn may rank above the batch's")
	}
	// One at turn 2 was written before the batch's at turn 2: it ranks below.
	if _, ok := RecentBefore(occs, 2, 3, size); !ok {
		t.Error("RecentBefore did not know the answer though no stored turn ranks above the batch's")
	}
}

// TestReplaceContent: the string is found as JSON encoders write it, only
// where an escape can start, and the text stays JSON; a number is
// replaced only when it is the string.
func TestReplaceContent(t *testing.T) {
	for _, c := range []struct{ needle, content, want string }{
		{"Tr0ub4dor&3Horse", `{"p":"Tr0ub4dor\u00263Horse"}`, `{"p":"[REDACTED]"}`}, // Go
		{"café-s3cr3t", `{"p":"caf\u00e9-s3cr3t"}`, `{"p":"[REDACTED]"}`},           // Python
		{"café-s3cr3t", `{"p":"caf\u00E9-s3cr3t"}`, `{"p":"[REDACTED]"}`},           // upper-case hex
		{"a/b/T0K3N", `{"u":"a\/b\/T0K3N"}`, `{"u":"[REDACTED]"}`},                  // PHP
		{"k=v'T0K3N", `{"q":"k\u003dv\u0027T0K3N"}`, `{"q":"[REDACTED]"}`},          // Gson
		{"s3cr3t\x7fX", `{"p":"s3cr3t\u007fX"}`, `{"p":"[REDACTED]"}`},              // Python's DEL
		{"😀-s3cr3t", `{"p":"\ud83d\ude00-s3cr3t"}`, `{"p":"[REDACTED]"}`},           // a surrogate pair
		{"&3Horse", `{"path":"C:\\u00263Horse"}`, `{"path":"C:\\u00263Horse"}`},     // an escaped backslash: no "&" there
		{"&3Horse", `{"path":"C:\\\u00263Horse"}`, `{"path":"C:\\[REDACTED]"}`},     // after it, an escape
	} {
		var places int64
		r := NewReplacer([]byte(c.needle), []byte("[REDACTED]"), true, &places)
		got, _ := r.ReplaceContent([]byte(c.content))
		if string(got) != c.want {
			t.Errorf("%q in %s: got %s, want %s", c.needle, c.content, got, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("%q in %s: %s is not JSON", c.needle, c.content, got)
		}
	}
	var places int64
	r := NewReplacer([]byte("4821"), []byte("[REDACTED]"), true, &places)
	got, ok, err := r.ReplaceJSON(`{"pin":4821,"at":1764821000}`)
	if err != nil || !ok || got != `{"at":1764821000,"pin":"[REDACTED]"}` {
		t.Errorf("numbers: %s, %v, %v", got, ok, err)
	}
	// A string that is not UTF-8 has no JSON form: nothing of another
	// string's is replaced for it.
	r = NewReplacer([]byte("ab\xffcd"), []byte("[REDACTED]"), true, &places)
	if got, _ := r.ReplaceContent([]byte(`{"x":"ab\ufffdcd"}`)); string(got) != `{"x":"ab\ufffdcd"}` {
		t.Errorf("a string that is not UTF-8 replaced %s", got)
	}
}
