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
		wantNothingEvicted(t, f, "pictures", "two pictures of 320")
	})
	t.Run("responses", func(t *testing.T) {
		f := newFixture(t, proxy.Options{Limit: 20000}, modelserver.Say("A login form."), modelserver.Say("Blue."), modelserver.Say("Yes."))
		header := map[string]string{"User-Agent": "codex_exec/0.171.0", "Session-Id": "01a217e5-a3ec-7613-957d-3f824116f401"}
		input := []any{map[string]any{"type": "message", "role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "What is on this screen?"},
			map[string]any{"type": "input_image", "image_url": "data:image/png;base64," + img}}}}
		postResponsesTurns(t, f, header, input, 3, "and the colour?")
		for i, r := range f.up.Requests(modelserver.KindMain) {
			if !strings.Contains(string(r.Body), img[:200]) {
				t.Errorf("request %d upstream has lost the picture: %.300s", i, r.Body)
			}
		}
	})
	// A computer-use agent's screenshot, a computer call's output, the
	// picture of its screen at every step.
	t.Run("responses computer screenshot", func(t *testing.T) {
		f := newFixture(t, proxy.Options{Limit: 20000}, modelserver.Say("The settings are open."), modelserver.Say("Dark mode is on."), modelserver.Say("Yes."))
		header := map[string]string{"Session-Id": "01a217e5-a3ec-7613-957d-3f824116f402"}
		input := []any{
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Open the settings."}}},
			map[string]any{"type": "computer_call", "id": "cu_1", "call_id": "call_shot", "action": map[string]any{"type": "screenshot"}, "pending_safety_checks": []any{}, "status": "completed"},
			map[string]any{"type": "computer_call_output", "call_id": "call_shot", "output": map[string]any{"type": "computer_screenshot", "image_url": "data:image/png;base64," + img}},
		}
		postResponsesTurns(t, f, header, input, 3, "is dark mode on?")
		for i, r := range f.up.Requests(modelserver.KindMain) {
			if !strings.Contains(string(r.Body), img[:200]) {
				t.Errorf("request %d upstream has lost the screenshot: %.300s", i, r.Body)
			}
		}
		wantNothingEvicted(t, f, "01a217e5-a3ec-7613-957d-3f824116f402", "a picture of 425")
	})
	// A user's recording, asked about over several turns: 30 seconds of
	// WAV, 300 tokens to OpenAI, its 1.8 MB of base64 over a million tokens as text.
	t.Run("chat audio", func(t *testing.T) {
		wav := pictest.NoiseWAVBase64(30, 22050, 16)
		f := newFixture(t, proxy.Options{Limit: 20000}, modelserver.Say("A dog barks."), modelserver.Say("Twice."), modelserver.Say("Yes."))
		history := []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "What is in this recording?"},
			map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": wav, "format": "wav"}}}}}
		for i := range 3 {
			body, _ := json.Marshal(map[string]any{"model": "gpt-4o-audio-preview", "modalities": []string{"text"}, "messages": history})
			resp := f.postTo(t, "/v1/chat/completions", string(body), map[string]string{"X-Engram-Session": "recording"})
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("turn %d: %d %s", i, resp.StatusCode, b)
			}
			history = append(history, chatAnswer(t, resp, false), map[string]any{"role": "user", "content": fmt.Sprintf("how many times? (%d)", i)})
		}
		f.p.Wait()
		for i, r := range f.up.Requests(modelserver.KindMain) {
			if !strings.Contains(string(r.Body), wav[:200]) {
				t.Errorf("request %d upstream has lost the recording: %.300s", i, r.Body)
			}
		}
		wantNothingEvicted(t, f, "recording", "a recording of 300")
	})
}

// postResponsesTurns sends input to the proxy's Responses API turns
// times, each time with the answer and a new prompt (ask and the turn's
// number) added, as a stateless client does, and waits for the proxy to
// store them.
func postResponsesTurns(t *testing.T, f *fixture, header map[string]string, input []any, turns int, ask string) {
	t.Helper()
	for i := range turns {
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
		input = append(input, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": fmt.Sprintf("%s (%d)", ask, i)}}})
	}
	f.p.Wait()
}

// wantNothingEvicted checks that the proxy's window of session counts
// what (the media it holds, at the vendor's rates) and a few prompts, and
// has evicted nothing.
func wantNothingEvicted(t *testing.T, f *fixture, session, what string) {
	t.Helper()
	st, err := f.windows.Status(t.Context(), store.WindowKey{SessionID: session, AgentID: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Used > 2000 || st.Evicted > 0 {
		t.Errorf("the window counts %d tokens, %d evicted; want %s and a few prompts, nothing evicted", st.Used, st.Evicted, what)
	}
}
