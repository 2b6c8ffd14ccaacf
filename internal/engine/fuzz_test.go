package engine_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// FuzzAdd writes whatever a front end could hand over, in a real store:
// a batch is either refused whole with a record's field error, writing
// nothing, or stored so that each entry reads back byte for byte and its
// text can be searched without error.
func FuzzAdd(f *testing.F) {
	f.Add([]byte("hello world"), "s1", "tool_result", "main.go", 0, []byte("second\n\nparagraph"))
	f.Add([]byte("NUL \x00 and \xc3\x28, quokka"), "s\xff", "note", "", 2, []byte("x"))
	f.Add([]byte(""), "", "user_prompt", "a/b\x00c", -1, []byte("\r\n\r\n"))
	f.Add([]byte("```go\nfunc F() {}\n```\n\"NEAR\" *( -x"), "s", "assistant_response", "*", 3, []byte("\xef\xbb\xbfBOM"))
	st := sqlitetest.Open(f, sqlite.Options{})
	e, err := engine.New(st, engine.Options{MaxContentBytes: 1 << 16})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content []byte, session, typ, file string, turn int, second []byte) {
		ctx := t.Context()
		recs := []engine.Record{
			{Session: session, Agent: "fuzz", Type: store.ContentType(typ), Content: content, Turn: turn},
			{Session: session, Agent: "fuzz", Type: store.Note, Content: second},
		}
		if file != "" {
			recs[0].Files = []string{file}
		}
		before, err := e.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Add(ctx, recs)
		if err != nil {
			var re *engine.RecordError
			var fe *engine.FieldError
			if !errors.As(err, &re) || !errors.As(err, &fe) {
				t.Fatalf("Add: %v, want a record's field error", err)
			}
			after, serr := e.Stats(ctx)
			if serr != nil || after.Entries != before.Entries {
				t.Fatalf("a refused batch changed the entries from %d to %d (%v)", before.Entries, after.Entries, serr)
			}
			return
		}
		for i, r := range res {
			ent, err := e.Entry(ctx, r.ID)
			if err != nil {
				t.Fatalf("Entry %d: %v", i, err)
			}
			if !bytes.Equal(ent.Content, recs[i].Content) {
				t.Fatalf("record %d reads back as %q, stored %q", i, ent.Content, recs[i].Content)
			}
			if _, err := e.Search(ctx, store.Query{Text: string(recs[i].Content), Limit: 5}); err != nil {
				t.Fatalf("searching record %d's text: %v", i, err)
			}
		}
	})
}

// FuzzReadJSONL reads any input as `engram add` does: it is refused with
// errors that each name their line, or every record it returns passes
// Check; and a line holding a string of valid UTF-8 as its content gives
// back exactly that string.
func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte(`{"session":"s1","role":"user","content":"fix the flaky test"}`+"\n\n"+`{"type":"tool_call","content":{"cmd":"go"}}`), "plain")
	f.Add([]byte(`{"content":"\ud800 lone","type":"note"}`+"\r\n"+`{"bogus":1}`), "tab\there \u2028 \x00")
	f.Add([]byte("\xff\xfe{\n}{\n[1,2]\nnull\n\"s\""), "")
	e := newEngine(f, engine.Options{MaxContentBytes: 1 << 12})
	f.Fuzz(func(t *testing.T, input []byte, content string) {
		lines, err := e.ReadJSONL(bytes.NewReader(input), engine.Record{Session: "dflt"})
		if err != nil {
			for _, one := range unwrapJoin(err) {
				var le *engine.LineError
				if !errors.As(one, &le) && !strings.HasPrefix(one.Error(), "stopped after") {
					t.Fatalf("an error that names no line: %v", one)
				}
			}
		}
		for _, l := range lines {
			if cerr := e.Check(l.Record); cerr != nil {
				t.Fatalf("line %d passed but fails Check: %v", l.N, cerr)
			}
		}
		if !utf8.ValidString(content) || content == "" || len(content) > 1<<12 {
			return
		}
		raw, _ := json.Marshal(map[string]string{"type": "note", "content": content})
		lines, err = e.ReadJSONL(bytes.NewReader(raw), engine.Record{Session: "dflt"})
		if err != nil || len(lines) != 1 || string(lines[0].Content) != content {
			t.Fatalf("content %q read back as %+v, %v", content, lines, err)
		}
	})
}

func unwrapJoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
