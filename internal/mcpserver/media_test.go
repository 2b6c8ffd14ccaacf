package mcpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/pictest"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// TestRetrieveContext_Image: a screenshot a tool read, evicted from its
// window and read back through its marker, reaches the model as a
// placeholder (its type, size in pixels and bytes, how to read it whole)
// beside the tool result's text, not as its base64, and as a picture
// too, though its base64 is larger than a result's text may be; a cut
// after it reads on from the right byte; raw true reads
// the base64; get_turn_range and search_history show the placeholder too.
func TestRetrieveContext_Image(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "claude", Structured: true})
	data := pictest.NoisePNGBase64(200, 150)
	after := strings.Repeat("the form has a user name field and a password field. ", 60)
	result := `{"type":"tool_result","tool_use_id":"call-0","content":[{"type":"text","text":"the quokka login page, as rendered"},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + data + `"}},{"type":"text","text":"` + after + `"}]}`
	refs := evictResult(t, eng, result)
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
		!strings.Contains(shot.Content, "; picture 1, sent below]") ||
		shot.EndByte != len(result) || shot.Truncated {
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

// evictResult opens the window of claude in session s1 (3,000 tokens),
// appends the tool result result (a raw block) and nine calls after it,
// and returns the references to what the window evicted, the result's
// first.
func evictResult(t *testing.T, eng *engine.Engine, result string) []window.Ref {
	t.Helper()
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
	filler := strings.Repeat("the form has a user name field and a password field. ", 60)
	var refs []window.Ref
	for i := range 10 {
		msgs := []window.Message{
			{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: fmt.Sprintf("call-%d", i), Name: "screenshot",
				Input: []byte(`{"url": "http://localhost:8080/login"}`)}}},
			{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: fmt.Sprintf("call-%d", i),
				Text: fmt.Sprintf("step %d: %s", i, filler)}}},
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
	return refs
}

// imageBlock is a tool result's image block of the base64 data.
func imageBlock(data string) string {
	return `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + data + `"}}`
}

// pictures are the pictures of a tool result, in order.
func pictures(t *testing.T, res *mcp.CallToolResult) []*mcp.ImageContent {
	t.Helper()
	var out []*mcp.ImageContent
	for i, c := range res.Content {
		switch c := c.(type) {
		case *mcp.ImageContent:
			out = append(out, c)
		case *mcp.TextContent:
			if i != 0 {
				t.Errorf("content %d is text, after the first", i)
			}
		default:
			t.Errorf("content %d is a %T", i, c)
		}
	}
	return out
}

// TestRetrieveContext_Pictures: two screenshots a tool read, evicted and
// read back through the marker, come back as pictures beside the text,
// the same bytes, in the order of their placeholders, which say which
// picture is which; raw true gives the base64 in the text and no
// picture; a picture whose tokens pass max_tokens is not sent, and its
// placeholder says why and where to read it.
func TestRetrieveContext_Pictures(t *testing.T) {
	for _, structured := range []bool{false, true} {
		t.Run(fmt.Sprintf("Structured=%v", structured), func(t *testing.T) {
			cs, eng := newClient(t, Options{Session: "s1", Agent: "claude", Structured: structured})
			// A small screenshot, and a large one of few bytes (a blank
			// page): 255 tokens (OpenAI's, dearer than Anthropic's 2)
			// and 1,334 (Anthropic's).
			var blank bytes.Buffer
			if err := png.Encode(&blank, image.NewGray(image.Rect(0, 0, 1000, 1000))); err != nil {
				t.Fatal(err)
			}
			shots := []string{pictest.NoisePNGBase64(40, 30), base64.StdEncoding.EncodeToString(blank.Bytes())}
			result := `{"type":"tool_result","tool_use_id":"call-0","content":[{"type":"text","text":"the quokka login page, before and after"},` +
				imageBlock(shots[0]) + `,` + imageBlock(shots[1]) + `]}`
			refs := evictResult(t, eng, result)

			text, res := call(t, cs, "retrieve_context", map[string]any{"ref_id": refs[0].Marker})
			if res.IsError {
				t.Fatalf("retrieve_context: %s", text)
			}
			pics := pictures(t, res)
			if len(pics) != len(shots) {
				t.Fatalf("%d pictures, want %d; the text:\n%.3000s", len(pics), len(shots), text)
			}
			for i, p := range pics {
				want, err := base64.StdEncoding.DecodeString(shots[i])
				if err != nil {
					t.Fatal(err)
				}
				if p.MIMEType != "image/png" || !bytes.Equal(p.Data, want) {
					t.Errorf("picture %d: %s, %d bytes, want image/png, the %d bytes stored", i+1, p.MIMEType, len(p.Data), len(want))
				}
				sum := sha256.Sum256([]byte(shots[i]))
				say := fmt.Sprintf("sha256 %x; picture %d, sent below]", sum[:4], i+1)
				if !strings.Contains(text, say) {
					t.Errorf("the text does not say %q:\n%.3000s", say, text)
				}
			}
			if strings.Contains(text, shots[0][100:200]) || !strings.Contains(text, "the quokka login page, before and after") {
				t.Errorf("the text: %.3000s", text)
			}

			// raw true: the stored bytes in the text, no picture.
			text, res = call(t, cs, "retrieve_context", map[string]any{"ref_id": refs[0].Marker, "raw": true})
			if pics := pictures(t, res); len(pics) != 0 || !strings.Contains(text, shots[0][:1000]) {
				t.Errorf("raw true: %d pictures, the text: %.1000s", len(pics), text)
			}

			// max_tokens 1000: the text fits, and the first picture, not
			// the second.
			text, res = call(t, cs, "retrieve_context", map[string]any{"ref_id": refs[0].Marker, "max_tokens": 1000})
			note := regexp.MustCompile(`; not sent: its 1334 tokens are over the 745 left of max_tokens for pictures; raise max_tokens, or its base64: engram show ([0-9a-f]{12})\]`)
			m := note.FindStringSubmatch(text)
			if pics := pictures(t, res); len(pics) != 1 || m == nil || !strings.Contains(text, "--- "+m[1]+" ") || !strings.Contains(text, "; picture 1, sent below]") {
				t.Errorf("max_tokens 1000: %d pictures, the text, without %q under its entry: %s", len(pics), note, text)
			}
		})
	}
}

// TestRetrieveContext_PicturesCap: pictures that would take the result's
// pictures over their cap (Options.MaxPictureBytes) are not sent: the
// result is no error, the pictures that fit are sent, the same bytes,
// and the placeholders of the others say why not and where to read them.
func TestRetrieveContext_PicturesCap(t *testing.T) {
	for _, structured := range []bool{false, true} {
		t.Run(fmt.Sprintf("Structured=%v", structured), func(t *testing.T) {
			cs, eng := newClient(t, Options{Session: "s1", Agent: "claude", Structured: structured, MaxPictureBytes: 64 << 10})
			// Four pictures of about 29 KB of base64 each, and text
			// between them: 64 KB hold two of them.
			var shots []string
			result := `{"type":"tool_result","tool_use_id":"call-0","content":[`
			for i := range 4 {
				shots = append(shots, pictest.NoisePNGBase64(70, 75+i))
				result += fmt.Sprintf(`{"type":"text","text":"step %d of the quokka login: %s"},`, i, strings.Repeat("the form is filled in. ", 200)) + imageBlock(shots[i]) + ","
			}
			result = strings.TrimSuffix(result, ",") + `]}`
			refs := evictResult(t, eng, result)

			text, res := call(t, cs, "retrieve_context", map[string]any{"ref_id": refs[0].Marker, "max_tokens": 8000})
			if res.IsError {
				t.Fatalf("retrieve_context: %s", text)
			}
			if n := pictureBytes(res); n > 64<<10 {
				t.Errorf("the result's pictures take %d bytes, over %d", n, 64<<10)
			}
			pics := pictures(t, res)
			if len(pics) != 2 {
				t.Fatalf("%d pictures of %d sent, want the 2 that fit", len(pics), len(shots))
			}
			for i, p := range pics {
				want, _ := base64.StdEncoding.DecodeString(shots[i])
				if !bytes.Equal(p.Data, want) || !strings.Contains(text, fmt.Sprintf("; picture %d, sent below]", i+1)) {
					t.Errorf("picture %d: %d bytes, want the %d stored, and said in the text", i+1, len(p.Data), len(want))
				}
			}
			id := regexp.MustCompile(`--- ([0-9a-f]{12}) [^\n]*\n\{"type":"tool_result"`).FindStringSubmatch(text)
			if id == nil {
				t.Fatalf("no tool result in %s", text)
			}
			if n := strings.Count(text, "a result has left for pictures; its base64: engram show "+id[1]+"]"); n != len(shots)-len(pics) {
				t.Errorf("%d placeholders say why their picture was not sent, want %d:\n%s", n, len(shots)-len(pics), text)
			}
		})
	}
}

// TestRetrieveContext_LargePicture: a screenshot whose base64 is larger
// than the cap on a result's text (MaxResultBytes) comes back whole: a
// picture costs the model its pixels, not its bytes.
func TestRetrieveContext_LargePicture(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "claude"})
	shot := pictest.NoisePNGBase64(300, 200) // about 240 KB of base64
	if len(shot) <= MaxResultBytes {
		t.Fatalf("the picture is %d bytes of base64, not over %d", len(shot), MaxResultBytes)
	}
	refs := evictResult(t, eng, `{"type":"tool_result","tool_use_id":"call-0","content":[{"type":"text","text":"the dashboard after sign-in"},`+imageBlock(shot)+`]}`)
	text, res := call(t, cs, "retrieve_context", map[string]any{"ref_id": refs[0].Marker, "max_tokens": 4000})
	if res.IsError {
		t.Fatalf("retrieve_context: %s", text)
	}
	pics := pictures(t, res)
	want, _ := base64.StdEncoding.DecodeString(shot)
	if len(pics) != 1 || !bytes.Equal(pics[0].Data, want) {
		t.Fatalf("%d pictures sent, want the screenshot's %d bytes:\n%s", len(pics), len(want), text)
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

// TestRetrieveContext_BrokenPicture: a picture whose header reads but
// which is cut short (a tool's output clipped mid-file) is not sent: its
// placeholder says it does not decode and where its bytes are, and the
// pictures that decode and the text go as ever. Sent, it made Claude Code
// 2.1.121 replace the whole tool result, engram's text and all, with its
// own error (it could not resize it), and a vendor would refuse the turn.
func TestRetrieveContext_BrokenPicture(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "claude"})
	whole := pictest.NoisePNG(400, 300)
	cut := base64.StdEncoding.EncodeToString(whole[:len(whole)/2])
	good := pictest.NoisePNGBase64(40, 30)
	result := `{"type":"tool_result","tool_use_id":"call-0","content":[{"type":"text","text":"the quokka login page, cut and whole"},` +
		imageBlock(cut) + `,` + imageBlock(good) + `]}`
	refs := evictResult(t, eng, result)

	text, res := call(t, cs, "retrieve_context", map[string]any{"ref_id": refs[0].Marker, "max_tokens": 8000})
	if res.IsError {
		t.Fatalf("retrieve_context: %s", text)
	}
	pics := pictures(t, res)
	want, err := base64.StdEncoding.DecodeString(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(pics) != 1 || !bytes.Equal(pics[0].Data, want) {
		t.Fatalf("%d pictures, want the one that decodes; the text:\n%.3000s", len(pics), text)
	}
	note := regexp.MustCompile(`\[image: image/png, 400×300, [^\]]*; not sent: the picture does not decode \([^)]*\); its base64: engram show [0-9a-f]{12}\]`)
	if !note.MatchString(text) || !strings.Contains(text, "; picture 1, sent below]") || !strings.Contains(text, "the quokka login page, cut and whole") {
		t.Errorf("the text, without %q:\n%.3000s", note, text)
	}
}
