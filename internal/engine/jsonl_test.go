package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

func TestReadJSONL(t *testing.T) {
	e := newEngine(t, engine.Options{})
	in := strings.Join([]string{
		`{"session":"s1","agent":"claude","role":"user","content":"fix the flaky test"}`,
		``,
		`   `,
		`{"session":"s1","agent":"claude","type":"tool_call","msg_id":"t1","content":{"cmd":"go test ./...", "timeout": 60}}`,
		`{"session":"s1","agent":"claude","type":"tool_result","parent":"t1","content":"ok\u0000done","turn":2,"time":"2026-11-21T10:00:00Z","files":["a.go"],"metadata":{"exit":0}}` + "\r",
		`{"role":"assistant","content":"defaults fill session and agent"}`,
	}, "\n")
	lines, err := e.ReadJSONL(strings.NewReader(in), engine.Record{Session: "dflt", Agent: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range lines {
		got = append(got, strings.Join([]string{l.Session, l.Agent, string(l.Type), string(l.Content)}, "|"))
	}
	want := []string{
		"s1|claude|user_prompt|fix the flaky test",
		`s1|claude|tool_call|{"cmd":"go test ./...","timeout":60}`,
		"s1|claude|tool_result|ok\x00done",
		"dflt|bot|agent_response|defaults fill session and agent",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if n := []int{lines[0].N, lines[1].N, lines[2].N, lines[3].N}; !cmp.Equal(n, []int{1, 4, 5, 6}) {
		t.Errorf("line numbers %v, want [1 4 5 6]", n)
	}
	if l := lines[2]; l.Turn != 2 || l.Time.IsZero() || l.Parent != "t1" || l.Files[0] != "a.go" || l.Metadata["exit"] != float64(0) {
		t.Errorf("record 3 = %+v", l.Record)
	}
}

func TestReadJSONL_Errors(t *testing.T) {
	e := newEngine(t, engine.Options{MaxContentBytes: 64})
	ok := `{"session":"s","type":"note","content":"fine"}`
	for _, tc := range []struct {
		name, line string
		want       string // substring of the error, which must also name line 2
	}{
		{"syntax", `{"session":"s",`, "invalid JSON"},
		{"not an object", `["a"]`, "want a JSON object"},
		{"unknown field", `{"session":"s","type":"note","content":"x","sesion":"t"}`, "field sesion: unknown field"},
		{"wrong type", `{"session":"s","type":"note","content":"x","turn":"3"}`, "field turn: want an integer"},
		{"fractional turn", `{"session":"s","type":"note","content":"x","turn":1.5}`, "field turn"},
		{"files not list", `{"session":"s","type":"note","content":"x","files":"a.go"}`, "field files: want an array of strings"},
		{"missing content", `{"session":"s","type":"note"}`, "field content: is missing"},
		{"null content", `{"session":"s","type":"note","content":null}`, "field content: is missing"},
		{"empty content", `{"session":"s","type":"note","content":""}`, "field content: is empty"},
		{"too big", `{"session":"s","type":"note","content":"` + strings.Repeat("x", 65) + `"}`, "field content: is 65 bytes, over the limit"},
		{"missing type", `{"session":"s","content":"x"}`, "field type: is missing"},
		{"unknown type", `{"session":"s","type":"gossip","content":"x"}`, `field type: unknown content type "gossip"`},
		{"unknown role", `{"session":"s","role":"narrator","content":"x"}`, "field role: unknown role"},
		{"bad time", `{"session":"s","type":"note","content":"x","time":"yesterday"}`, "field time"},
		{"invalid utf8", "{\"session\":\"s\",\"type\":\"note\",\"content\":\"bad \xff byte\"}", "field content: invalid UTF-8"},
		{"lone surrogate", `{"session":"s","type":"note","content":"half \ud83d of an emoji"}`, "field content: unpaired UTF-16 surrogate"},
		{"two values", `{"session":"s","type":"note","content":"x"} {"a":1}`, "more than one JSON value"},
		{"negative turn", `{"session":"s","type":"note","content":"x","turn":-2}`, "field turn: is negative"},
	} {
		_, err := e.ReadJSONL(strings.NewReader(ok+"\n"+tc.line+"\n"+ok), engine.Record{})
		var le *engine.LineError
		if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want line 2 and %q", tc.name, err, tc.want)
		}
	}
	// Bytes that are not text travel as content_base64 and are kept as is.
	lines, err := e.ReadJSONL(strings.NewReader(`{"session":"s","type":"tool_result","content_base64":"/wBiaW4="}`), engine.Record{})
	if err != nil || string(lines[0].Content) != "\xff\x00bin" {
		t.Errorf("content_base64: %v, %+v", err, lines)
	}
	for line, want := range map[string]string{
		`{"session":"s","type":"note","content_base64":"***"}`:                "field content_base64: not standard base64",
		`{"session":"s","type":"note","content_base64":""}`:                   "field content_base64: is empty",
		`{"session":"s","type":"note","content":"x","content_base64":"eA=="}`: "field content_base64: given with content",
	} {
		if _, err := e.ReadJSONL(strings.NewReader(line), engine.Record{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", line, err, want)
		}
	}
	// A valid surrogate pair and escaped backslashes are fine.
	lines, err = e.ReadJSONL(strings.NewReader(`{"session":"s","type":"note","content":"\ud83d\ude00 \\ud800"}`), engine.Record{})
	if err != nil || string(lines[0].Content) != "😀 \\ud800" {
		t.Errorf("surrogate pair: %v, %+v", err, lines)
	}
	// Every bad line is reported, not only the first.
	_, err = e.ReadJSONL(strings.NewReader("{\n"+ok+"\n{\"content\":\"\"}\n"), engine.Record{})
	if err == nil || !strings.Contains(err.Error(), "line 1:") || !strings.Contains(err.Error(), "line 3:") {
		t.Errorf("several bad lines: %v", err)
	}
	// A line far over the limit is refused without reading it into memory.
	huge := `{"session":"s","type":"note","content":"` + strings.Repeat("y", 2<<20) + `"}`
	_, err = e.ReadJSONL(strings.NewReader(ok+"\n"+huge+"\n"+ok+"\n"), engine.Record{})
	if err == nil || !strings.Contains(err.Error(), "line 2: longer than") {
		t.Errorf("huge line: %v", err)
	}
}

func TestReadJSONL_Add(t *testing.T) {
	e := newEngine(t, engine.Options{})
	in := `{"session":"s","type":"tool_call","msg_id":"c1","content":{"cmd":"make"}}
{"session":"s","type":"tool_result","parent":"c1","content":"built"}`
	lines, err := e.ReadJSONL(strings.NewReader(in), engine.Record{})
	if err != nil {
		t.Fatal(err)
	}
	recs := []engine.Record{lines[0].Record, lines[1].Record}
	res, err := e.Add(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	links, err := e.Store().Links(t.Context(), res[0].ID)
	if err != nil || len(links) != 1 || links[0].Kind != store.LinkParent || links[0].ToID != res[1].ID {
		t.Errorf("links = %+v, %v", links, err)
	}
}
