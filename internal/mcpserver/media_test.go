package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/pictest"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// TestRetrieveContext_Image: a screenshot a tool read, evicted from its
// window and read back through its marker, reaches the model as a
// placeholder (its type, size in pixels and bytes, how to read it whole)
// beside the tool result's text, not as its base64; a cut after it reads
// on from the right byte; raw true reads the base64; get_turn_range and
// search_history show the placeholder too.
func TestRetrieveContext_Image(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "claude", Structured: true})
	ctx := context.Background()
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := window.NewManager(eng, cat)
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 3000, Output: 200, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	data := pictest.NoisePNGBase64(200, 150)
	after := strings.Repeat("the form has a user name field and a password field. ", 60)
	result := `{"type":"tool_result","tool_use_id":"call-0","content":[{"type":"text","text":"the quokka login page, as rendered"},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + data + `"}},{"type":"text","text":"` + after + `"}]}`
	var refs []window.Ref
	for i := range 10 {
		msgs := []window.Message{
			{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: fmt.Sprintf("call-%d", i), Name: "screenshot",
				Input: []byte(`{"url": "http://localhost:8080/login"}`)}}},
			{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: fmt.Sprintf("call-%d", i),
				Text: fmt.Sprintf("step %d: %s", i, after)}}},
		}
		if i == 0 {
			msgs[1].Blocks[0] = window.Block{Type: window.BlockToolResult, ToolUseID: "call-0", Raw: []byte(result)}
		}
		res, err := m.Append(ctx, key, msgs)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, res.Evicted...)
	}
	if len(refs) == 0 {
		t.Fatal("nothing was evicted")
	}
	noise := data[len(data)/2 : len(data)/2+40]
	placeholder := fmt.Sprintf("[image: image/png, 200×150, %d KB of base64, sha256 ", (len(data)+500)/1000)

	out, text := retrieve(t, cs, map[string]any{"ref_id": refs[0].Marker, "max_tokens": 8000})
	if strings.Contains(text, noise) {
		t.Errorf("retrieve_context gives the model the image's base64:\n%.3000s", text)
	}
	var shot api.SpanOut
	for _, it := range out.Items {
		if strings.Contains(it.Content, "quokka login page") {
			shot = it
		}
	}
	want := strings.Replace(result, data, placeholder, 1)
	if cut := strings.Index(want, "sha256 "); !strings.HasPrefix(shot.Content, want[:cut]) || !strings.HasSuffix(shot.Content, want[strings.Index(want, `"}},`):]) ||
		!strings.Contains(shot.Content, "; whole: retrieve_context content_ids "+shot.ID+" raw true]") || shot.EndByte != len(result) || shot.Truncated {
		t.Errorf("the tool result: %+v, want its text and the image as a placeholder", shot)
	}
	if !strings.Contains(text, placeholder) || !strings.Contains(text, "the quokka login page, as rendered") || !strings.Contains(text, after) {
		t.Errorf("retrieve_context: no placeholder, or not the tool result's text, in\n%.3000s", text)
	}

	// Cut after the image: what was shown holds the placeholder, and
	// reading on from next gives the rest of the stored bytes.
	out, _ = retrieve(t, cs, map[string]any{"content_ids": []string{shot.ID}, "max_tokens": 200})
	it := out.Items[0]
	end := strings.Index(result, data) + len(data)
	if !it.Truncated || it.EndByte <= end || it.EndByte >= len(result) || it.Next == nil || it.Next.StartByte != it.EndByte ||
		!strings.HasSuffix(it.Content, result[end:it.EndByte]) || !strings.Contains(it.Content, placeholder) {
		t.Fatalf("cut to 200 tokens: %+v", it)
	}
	rest, _ := retrieve(t, cs, map[string]any{"content_ids": []string{shot.ID}, "start_byte": it.EndByte, "max_tokens": 8000})
	if len(rest.Items) != 1 || rest.Items[0].Content != result[it.EndByte:] {
		t.Errorf("read on from byte %d: %+v", it.EndByte, rest.Items)
	}

	// raw true: the stored bytes, base64 and all.
	out, text = retrieve(t, cs, map[string]any{"content_ids": []string{shot.ID}, "raw": true, "max_tokens": 8000})
	if !strings.HasPrefix(out.Items[0].Content, result[:strings.Index(result, data)+1000]) || strings.Contains(text, placeholder) {
		t.Errorf("raw true: %.2000s", text)
	}
	// and reads on raw.
	if n := out.Items[0].Next; n == nil || !n.Raw || !strings.Contains(text, ", raw true)") {
		t.Errorf("raw true reads on with %+v, in the text %q", n, text[max(0, len(text)-200):])
	}

	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"get_turn_range", map[string]any{"session": "s1", "from": 1, "to": 1, "max_tokens": 8000}},
		{"search_history", map[string]any{"query": "quokka login page", "session": "s1"}},
	} {
		text := ok(t, cs, c.tool, c.args)
		if strings.Contains(text, noise) || strings.Contains(text, data[:200]) || !strings.Contains(text, "quokka login page") || !strings.Contains(text, "[image: image/png, 200×150") {
			t.Errorf("%s: %.3000s", c.tool, text)
		}
	}
}

// TestRetrieveContext_FileMedia: an indexed file is read back as it is,
// though it is JSON holding a picture (a test's fixture).
func TestRetrieveContext_FileMedia(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "claude", Structured: true})
	ctx := context.Background()
	dir := t.TempDir()
	fixture := `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pictest.NoisePNGBase64(20, 10) + `"}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "shot.json"), []byte(fixture), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := index.Run(ctx, eng.Store(), dir, index.Options{}); err != nil {
		t.Fatal(err)
	}
	id, err := eng.Resolve(ctx, "shot.json", 0)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := retrieve(t, cs, map[string]any{"content_ids": []string{id}})
	if len(out.Items) != 1 || out.Items[0].Content != fixture {
		t.Errorf("the file read back: %+v", out.Items)
	}
}
