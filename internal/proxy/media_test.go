package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/pictest"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
)

// A picture the user pasted, or one a tool read, stays in the requests
// that follow: the window counts it as the vendor does (a 600 × 400
// picture is 320 tokens to Anthropic), not as the text of its base64
// (about half a million tokens), which filled the window with it and
// had the next request send a marker in its place.
func TestProxy_KeepsImages(t *testing.T) {
	img := pictest.NoisePNGBase64(600, 400)
	t.Run("anthropic", func(t *testing.T) {
		f := newFixture(t, proxy.Options{Limit: 20000},
			modelserver.Reply(modelserver.Text("Reading the other one."), modelserver.ToolUse("Read", map[string]any{"file_path": "/p/after.png"})),
			modelserver.Say("The button moved."), modelserver.Say("Yes."), modelserver.Say("Done."))
		history := []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": img}},
			map[string]any{"type": "text", "text": "What changed between this screenshot and /p/after.png?"}}}}
		for i := range 4 {
			body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You compare screenshots.", "messages": history})
			resp := f.post(t, string(body), map[string]string{"X-Engram-Session": "pictures"})
			history = append(history, anthropicAnswer(t, resp, i))
			if i == 0 {
				var call struct {
					Content []struct{ ID, Type string }
				}
				_ = json.Unmarshal(history[len(history)-1].(json.RawMessage), &call)
				history = append(history, map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": call.Content[1].ID,
					"content": []any{map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": img[:len(img)-8] + "AAAAAAA="}}}}}})
				continue
			}
			history = append(history, map[string]any{"role": "user", "content": fmt.Sprintf("and then? (%d)", i)})
		}
		f.p.Wait()
		reqs := f.up.Requests(modelserver.KindMain)
		for i, r := range reqs {
			if n := strings.Count(string(r.Body), img[:200]); n != min(i+1, 2) {
				t.Errorf("request %d upstream holds %d of the pictures, want %d; its first message: %.200s", i, n, min(i+1, 2), r.Params.Messages[0].Text())
			}
		}
		st, err := f.windows.Status(t.Context(), store.WindowKey{SessionID: "pictures", AgentID: "proxy"})
		if err != nil {
			t.Fatal(err)
		}
		if st.Used > 2000 || st.Evicted > 0 {
			t.Errorf("the window counts %d tokens, %d evicted; want two pictures of 320 and a few prompts, nothing evicted", st.Used, st.Evicted)
		}
	})
	t.Run("responses", func(t *testing.T) {
		f := newFixture(t, proxy.Options{Limit: 20000}, modelserver.Say("A login form."), modelserver.Say("Blue."), modelserver.Say("Yes."))
		header := map[string]string{"User-Agent": "codex_exec/0.171.0", "Session-Id": "01a217e5-a3ec-7613-957d-3f824116f401"}
		input := []any{map[string]any{"type": "message", "role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "What is on this screen?"},
			map[string]any{"type": "input_image", "image_url": "data:image/png;base64," + img}}}}
		for i := range 3 {
			body, _ := json.Marshal(map[string]any{"model": "gpt-5-codex", "store": false, "input": input})
			resp := f.postTo(t, "/v1/responses", string(body), header)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("turn %d: %d %s", i, resp.StatusCode, b)
			}
			var out struct{ Output []json.RawMessage }
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			for _, it := range out.Output {
				input = append(input, it)
			}
			input = append(input, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": fmt.Sprintf("and the colour? (%d)", i)}}})
		}
		f.p.Wait()
		for i, r := range f.up.Requests(modelserver.KindMain) {
			if !strings.Contains(string(r.Body), img[:200]) {
				t.Errorf("request %d upstream has lost the picture: %.300s", i, r.Body)
			}
		}
	})
}
