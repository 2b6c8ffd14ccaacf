package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/store"
)

// retrieveFile is a Go file whose head (a licence and imports) matches
// nothing a test asks for, and whose one function about checksums sits
// in the middle.
func retrieveFile() string {
	var b strings.Builder
	b.WriteString("// Copyright 2026 The Upload Authors. All rights reserved.\n// Use of this source code is governed by a BSD-style\n// license that can be found in the LICENSE file.\n\n")
	b.WriteString("package upload\n\nimport (\n\t\"errors\"\n\t\"fmt\"\n\t\"io\"\n)\n\n")
	for i := range 12 {
		fmt.Fprintf(&b, "// copyBlock%d copies block %d of the upload to w.\nfunc copyBlock%d(w io.Writer, p []byte) error {\n\tif len(p) == 0 {\n\t\treturn errors.New(\"empty block\")\n\t}\n\t_, err := w.Write(p)\n\treturn fmt.Errorf(\"block %d: %%w\", err)\n}\n\n", i, i, i, i)
		if i == 6 {
			b.WriteString("// verifyQuokkaChecksum compares the quokka checksum of a block with\n// the one the server sent, and fails the upload when they differ.\nfunc verifyQuokkaChecksum(got, want uint32) error {\n\tif got != want {\n\t\treturn fmt.Errorf(\"quokka checksum %x, want %x\", got, want)\n\t}\n\treturn nil\n}\n\n")
		}
	}
	return b.String()
}

// retrieve calls retrieve_context and decodes its structured content.
func retrieve(t *testing.T, cs *mcp.ClientSession, args map[string]any) (api.RetrieveOut, string) {
	t.Helper()
	text := ok(t, cs, "retrieve_context", args)
	_, res := call(t, cs, "retrieve_context", args)
	raw, _ := json.Marshal(res.StructuredContent)
	var out api.RetrieveOut
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	return out, text
}

// TestRetrieveContext_Exact: retrieve_context returns the chunks that
// match, byte for byte with their lines and bytes, not the file's head;
// with an entry and a query, that entry's matching chunks; with a line
// range, those lines; and paging by its next ranges reads a file whole.
func TestRetrieveContext_Exact(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1", Structured: true})
	ctx := context.Background()
	dir := t.TempDir()
	file := retrieveFile()
	if err := os.WriteFile(filepath.Join(dir, "upload.go"), []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := index.Run(ctx, eng.Store(), dir, index.Options{}); err != nil {
		t.Fatal(err)
	}
	// A conversation that also speaks of the checksum, and an entry that
	// does not.
	res, err := eng.Add(ctx, []engine.Record{
		{Session: "s0", Agent: "x", Type: "tool_result", Content: []byte("FAIL TestUpload: quokka checksum 1f, want 2e\n")},
		{Session: "s0", Agent: "x", Type: "user_prompt", Content: []byte("rename the upload package\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	fileID, err := eng.Resolve(ctx, "upload.go", 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(file, "\n")
	exact := func(it api.SpanOut, content string) {
		t.Helper()
		if it.Content != content[it.StartByte:it.EndByte] {
			t.Errorf("item %s bytes %d-%d: %q is not the content's", it.ID, it.StartByte, it.EndByte, it.Content)
		}
		if r, _ := engine.LineRange([]byte(content), it.StartLine, it.EndLine); string(r) != it.Content {
			t.Errorf("item %s lines %d-%d: %q, the content's lines are %q", it.ID, it.StartLine, it.EndLine, it.Content, r)
		}
	}

	t.Run("Query", func(t *testing.T) {
		out, text := retrieve(t, cs, map[string]any{"query": "verify the quokka checksum"})
		if len(out.Items) == 0 {
			t.Fatalf("no items: %s", text)
		}
		best := out.Items[0]
		if best.Where != "upload.go" || !strings.Contains(best.Content, "func verifyQuokkaChecksum") || strings.Contains(best.Content, "Copyright") {
			t.Fatalf("best item %+v", best)
		}
		exact(best, file)
		if !strings.Contains(text, fmt.Sprintf("--- %s upload.go lines %d-%d", fileID[:12], best.StartLine, best.EndLine)) {
			t.Errorf("text header: %s", text)
		}
		found := false
		for _, it := range out.Items {
			found = found || it.ID == res[0].ID[:12]
		}
		if !found {
			t.Errorf("the tool result that names the checksum is missing: %+v", out.Items)
		}
	})

	t.Run("EntryAndQuery", func(t *testing.T) {
		out, _ := retrieve(t, cs, map[string]any{"content_ids": []string{fileID[:8]}, "query": "quokka checksum"})
		if len(out.Items) != 1 || !strings.Contains(out.Items[0].Content, "func verifyQuokkaChecksum") {
			t.Fatalf("items %+v", out.Items)
		}
		exact(out.Items[0], file)
		out, text := retrieve(t, cs, map[string]any{"content_ids": []string{fileID[:8]}, "query": "zanzibar"})
		if len(out.Items) != 0 || !strings.Contains(out.Message, "read them by lines") || text != out.Message {
			t.Errorf("no match: %+v, %q", out, text)
		}
	})

	t.Run("LineRange", func(t *testing.T) {
		out, text := retrieve(t, cs, map[string]any{"content_ids": []string{fileID}, "start_line": 5, "end_line": 9})
		if len(out.Items) != 1 {
			t.Fatalf("items %+v", out.Items)
		}
		it := out.Items[0]
		if want := strings.Join(lines[4:9], ""); it.Content != want || it.StartLine != 5 || it.EndLine != 9 {
			t.Errorf("lines 5-9: %+v, want %q", it, want)
		}
		exact(it, file)
		if it.Next == nil || it.Next.StartLine != 10 || it.Next.EndLine != 14 || it.Next.ContentIDs[0] != fileID[:12] {
			t.Errorf("next of lines 5-9: %+v", it.Next)
		}
		if !strings.Contains(text, "(read on: content_ids "+fileID[:12]+", start_line 10, end_line 14)") {
			t.Errorf("text: %s", text)
		}
		// The last lines: no next; a range past the end is clipped.
		n := engine.CountLines([]byte(file))
		out, _ = retrieve(t, cs, map[string]any{"content_ids": []string{fileID}, "start_line": n - 2, "end_line": n + 50})
		if it := out.Items[0]; it.EndLine != n || it.Next != nil || it.Content != strings.Join(lines[n-3:], "") {
			t.Errorf("the last lines: %+v", it)
		}
		// A start alone reads a page.
		out, _ = retrieve(t, cs, map[string]any{"content_ids": []string{fileID}, "start_line": 3})
		if it := out.Items[0]; it.StartLine != 3 || it.EndLine != min(n, 202) {
			t.Errorf("start_line 3 alone: lines %d-%d", it.StartLine, it.EndLine)
		}
	})

	t.Run("Paging", func(t *testing.T) {
		// Small budgets cut the file; following next reads it whole, byte
		// for byte.
		var got strings.Builder
		args := map[string]any{"content_ids": []string{fileID}, "max_tokens": 150}
		for calls := 0; ; calls++ {
			if calls > 100 {
				t.Fatal("paging does not end")
			}
			out, text := retrieve(t, cs, args)
			if len(out.Items) != 1 {
				t.Fatalf("items %+v (%s)", out.Items, text)
			}
			it := out.Items[0]
			if n := eng.Encoding().Count(text); n > 150 {
				t.Errorf("%d tokens of text over max_tokens 150", n)
			}
			exact(it, file)
			got.WriteString(it.Content)
			if it.Next == nil {
				break
			}
			if !it.Truncated {
				t.Errorf("item %+v has a next but was not cut", it)
			}
			args = map[string]any{"content_ids": it.Next.ContentIDs, "start_line": it.Next.StartLine, "end_line": it.Next.EndLine, "max_tokens": 150}
		}
		if got.String() != file {
			t.Errorf("paged content differs from the file")
		}
	})

	t.Run("Whole", func(t *testing.T) {
		out, _ := retrieve(t, cs, map[string]any{"content_ids": []string{res[1].ID}})
		if len(out.Items) != 1 || out.Items[0].Content != "rename the upload package\n" || out.Items[0].EndLine != 1 ||
			out.Items[0].Where != "session s0 turn 2" || out.Items[0].Next != nil {
			t.Errorf("a whole entry: %+v", out.Items)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		for _, c := range []struct {
			args map[string]any
			want string
		}{
			{map[string]any{"start_line": 3}, "name it with content_ids"},
			{map[string]any{"content_ids": []string{fileID}, "start_line": 3, "query": "x"}, "not both"},
			{map[string]any{"content_ids": []string{fileID, res[0].ID}, "start_line": 3}, "a line range reads one entry, and 2 are named"},
			{map[string]any{"content_ids": []string{fileID}, "start_line": 9, "end_line": 3}, "end_line 3 is before start_line 9"},
			{map[string]any{"content_ids": []string{fileID}, "start_line": 5000}, "the range starts at 5000"},
			{map[string]any{"content_ids": []string{fileID}, "end_line": -1}, "end_line is -1"},
			{map[string]any{"content_ids": []string{fileID}, "ref_id": "r1"}, "ref_id or content_ids, not both"},
		} {
			text, r := call(t, cs, "retrieve_context", c.args)
			if !r.IsError || !strings.Contains(text, c.want) {
				t.Errorf("retrieve_context(%v) = %q (error %v), want an error with %q", c.args, text, r.IsError, c.want)
			}
		}
	})
}

// TestRetrieveContext_Reference: a reference's marker expands to its
// entries byte for byte whether the agent passes it whole, in its short
// form or as the bare id; with a query, to its chunks that match; and a
// ref_id that is no marker gets an error that says what is wrong.
func TestRetrieveContext_Reference(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1", Structured: true})
	ctx := context.Background()
	contents := []string{"why does the quokka token refresh fail?\n", "the refresh races the expiry check:\nlock it | and retry\n"}
	res, err := eng.Add(ctx, []engine.Record{
		{Session: "s1", Agent: "a1", Type: "user_prompt", Content: []byte(contents[0])},
		{Session: "s1", Agent: "a1", Type: "agent_response", Content: []byte(contents[1])},
		{Session: "s1", Agent: "a1", Type: "user_prompt", Content: []byte("an unrelated quokka turn\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ref := store.Reference{ID: "ref_7f3a", Type: store.RefConversation, SessionID: "s1", AgentID: "a1",
		ContentIDs: []string{res[0].ID, res[1].ID}, TokensSaved: 24, TurnFrom: 1, TurnTo: 1,
		CreatedAt: time.Date(2026, 11, 25, 14, 23, 0, 0, time.UTC), Topics: []string{"token refresh", "expiry"},
		Entities: []string{"refreshToken"}, QueryHints: []string{"why does the token refresh fail"}}
	if err := eng.Store().PutReference(ctx, ref); err != nil {
		t.Fatal(err)
	}
	marker := ctxref.Render(ctxref.FromReference(ref))
	for _, refID := range []string{marker, "\n  " + marker + "\n", "[CTX-REF:ref_7f3a]", "ref_7f3a"} {
		out, text := retrieve(t, cs, map[string]any{"ref_id": refID})
		if len(out.Items) != 2 {
			t.Fatalf("ref_id %q: items %+v (%s)", refID, out.Items, text)
		}
		for i, it := range out.Items {
			if it.ID != res[i].ID[:12] || it.Content != contents[i] || it.StartByte != 0 || it.EndByte != len(contents[i]) {
				t.Errorf("ref_id %q: item %d %+v, want entry %s whole", refID, i, it, res[i].ID[:12])
			}
		}
	}
	out, _ := retrieve(t, cs, map[string]any{"ref_id": marker, "query": "expiry check"})
	if len(out.Items) != 1 || out.Items[0].Content != contents[1] {
		t.Errorf("the marker with a query: %+v", out.Items)
	}

	for _, c := range []struct{ refID, want string }{
		{"[CTX-REF:ref_none]", "no reference ref_none"},
		{"ref 7f3a", `ref_id: "ref 7f3a" is neither a [CTX-REF] marker nor a ref id`},
		{strings.Replace(marker, "Topics: ", "topics: ", 1), `field "topics: token refresh, expiry" is not "Label: text"`},
		{strings.Replace(marker, "Topics: ", "topics: ", 1), `its ref id is "ref_7f3a"`},
		{strings.TrimSuffix(marker, "]"), "the marker has no closing ]"},
	} {
		text, r := call(t, cs, "retrieve_context", map[string]any{"ref_id": c.refID})
		if !r.IsError || !strings.Contains(text, c.want) {
			t.Errorf("retrieve_context(ref_id %q) = %q (error %v), want an error with %q", c.refID, text, r.IsError, c.want)
		}
	}
}

// TestRetrieveContext_LongLine: a tool result of one line longer than
// max_tokens (minified JSON) is cut within the line, and following next,
// which names the byte to read on from, reads it whole, byte for byte;
// get_turn_range shows its start rather than nothing.
func TestRetrieveContext_LongLine(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1", Structured: true})
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range 3000 {
		fmt.Fprintf(&b, `{"id":%d,"name":"wïdget-%d","tags":["a","b"]},`, i, i)
	}
	line := strings.TrimSuffix(b.String(), ",") + "]}"
	content := line + "\nsecond line\n"
	rec := ok(t, cs, "record", map[string]any{"type": "tool_result", "content": content})
	id := strings.Fields(rec)[1]
	var got strings.Builder
	args := map[string]any{"content_ids": []string{id}, "max_tokens": 8000}
	calls := 0
	for ; ; calls++ {
		if calls > 100 {
			t.Fatal("paging does not end")
		}
		out, text := retrieve(t, cs, args)
		if len(out.Items) != 1 {
			t.Fatalf("call %d: items %+v (%.300s)", calls, out.Items, text)
		}
		it := out.Items[0]
		if n := eng.Encoding().Count(text); n > 8000 {
			t.Errorf("%d tokens of text over max_tokens 8000", n)
		}
		if it.Content == "" || it.Content != content[it.StartByte:it.EndByte] {
			t.Fatalf("call %d: bytes %d-%d are not the content's", calls, it.StartByte, it.EndByte)
		}
		got.WriteString(it.Content)
		if it.Next == nil {
			break
		}
		args = map[string]any{"content_ids": it.Next.ContentIDs, "start_byte": it.Next.StartByte, "start_line": it.Next.StartLine,
			"end_line": it.Next.EndLine, "max_tokens": 8000}
	}
	if got.String() != content || calls < 2 {
		t.Errorf("paged %d bytes in %d calls, the content is %d", got.Len(), calls+1, len(content))
	}
	if text := ok(t, cs, "get_turn_range", map[string]any{"from": 1, "to": 1, "max_tokens": 8000}); !strings.Contains(text, `{"items":[{"id":0,`) {
		t.Errorf("get_turn_range of the long line: %.300s", text)
	}
	// An entry named twice, by its ID and a prefix of it, is read once.
	small := strings.Fields(ok(t, cs, "record", map[string]any{"type": "note", "content": "a short note"}))[1]
	if out, _ := retrieve(t, cs, map[string]any{"content_ids": []string{small, small[:6]}}); len(out.Items) != 1 || out.More != 0 {
		t.Errorf("an entry named twice: %+v", out)
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"content_ids": []string{id}, "start_byte": 12, "start_line": 1}, "start_line or start_byte, not both"},
		{map[string]any{"content_ids": []string{id}, "start_byte": len(content)}, "bytes"},
		{map[string]any{"content_ids": []string{id}, "start_byte": strings.Index(content, "ï") + 1}, "inside a character"},
		{map[string]any{"content_ids": []string{id}, "start_byte": -1}, "start_byte is -1"},
		{map[string]any{"content_ids": []string{id}, "max_tokens": 60}, "max_tokens is 60; it must be from 100"},
	} {
		if text, res := call(t, cs, "retrieve_context", c.args); !res.IsError || !strings.Contains(text, c.want) {
			t.Errorf("%v: %q, want an error with %q", c.args, text, c.want)
		}
	}
}
