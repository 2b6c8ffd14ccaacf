package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/store"
)

// postTo sends body to path with an OpenAI client's headers, and those of
// header ("" deletes one).
func (f *fixture) postTo(t *testing.T, path, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.front.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A Chat Completions conversation with tool calls, streamed and not,
// over the window's threshold: every request the upstream validates, the
// tool messages stay with their calls, older runs reach the model as
// markers, and every answer is stored as the model sent it.
func TestProxy_ChatCompletions(t *testing.T) {
	var steps []modelserver.Step
	for i := range 24 {
		if i%2 == 0 {
			steps = append(steps, modelserver.Reply(modelserver.Text(fmt.Sprintf("Looking at part %d.", i)),
				modelserver.ToolUse("read_part", map[string]any{"part": i})))
		} else {
			steps = append(steps, modelserver.Say(fmt.Sprintf("Part %d says: %s", i, strings.Repeat("the lighthouse keeper logs the ships. ", 12))))
		}
	}
	f := newFixture(t, proxy.Options{Limit: 5000}, steps...)
	history := []any{map[string]any{"role": "system", "content": "You read parts."}}
	for i := range 24 {
		if i%2 == 0 {
			history = append(history, map[string]any{"role": "user", "content": fmt.Sprintf("Read part %d and tell me what it says. %s", i, strings.Repeat("Please be careful. ", 10))})
		}
		stream := i%4 < 2
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": history, "stream": stream})
		resp := f.postTo(t, "/v1/chat/completions", string(body), map[string]string{"X-Engram-Session": "parts"})
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("turn %d: %d %s", i, resp.StatusCode, b)
		}
		msg := chatAnswer(t, resp, stream)
		history = append(history, msg)
		if calls, _ := msg["tool_calls"].([]any); len(calls) > 0 {
			id := calls[0].(map[string]any)["id"]
			history = append(history, map[string]any{"role": "tool", "tool_call_id": id, "content": fmt.Sprintf("part %d: %s", i, strings.Repeat("waves and wind and gulls. ", 30))})
		}
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
	f.p.Wait()
	reqs := f.up.Requests(modelserver.KindMain)
	last := reqs[len(reqs)-1]
	if n := len(last.Chat.Messages); n >= len(history)-1 {
		t.Fatalf("the last request upstream has %d messages of %d: nothing was evicted", n, len(history)-1)
	}
	if last.InputTokens > 5000 {
		t.Errorf("the last request upstream counts %d tokens, over the window's 5,000", last.InputTokens)
	}
	var raw struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(last.Body, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Messages[0].Role != "system" || raw.Messages[1].Role != "user" {
		t.Fatalf("the last request starts %s, %s; want the system prompt and the markers", raw.Messages[0].Role, raw.Messages[1].Role)
	}
	text, _ := raw.Messages[1].Content.(string)
	refs := ctxref.Find(text)
	if len(refs) == 0 || !strings.Contains(text, "retrieve_context") {
		t.Fatalf("the second message upstream is not the markers: %.400s", text)
	}
	f.p.Wait()
	got, err := f.windows.Expand(t.Context(), refs[0].Marker.ID)
	if err != nil || len(got) == 0 || !strings.HasPrefix(got[0].Blocks[0].Text, "Read part 0") {
		t.Fatalf("the first marker expands to %d messages (%v), want the first prompt first", len(got), err)
	}
	// Every answer is stored, in the shape the model sent it (the last
	// once the proxy's handler is done: the client may read a whole
	// answer before).
	answers := 0
	for try := 0; try < 100 && answers < 24; try++ {
		time.Sleep(time.Duration(try) * time.Millisecond)
		f.p.Wait()
		hits, err := f.eng.Store().TurnRange(t.Context(), "parts", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		answers = 0
		for _, e := range hits {
			if e.Type == store.AgentResponse && strings.Contains(string(e.Content), `"role":"assistant"`) {
				answers++
			}
		}
	}
	if answers != 24 {
		t.Errorf("%d answers stored, want 24", answers)
	}
	f.p.Wait()
	if s := f.p.Stats(); s.Requests["chat"] != 24 || s.Virtualized == 0 || s.Answers != 24 {
		t.Errorf("stats: %+v", s)
	}
}

// chatAnswer reads a Chat Completions answer's message, streamed or not.
func chatAnswer(t *testing.T, resp *http.Response, stream bool) map[string]any {
	t.Helper()
	if !stream {
		var out struct {
			Choices []struct {
				Message map[string]any `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
			t.Fatalf("answer: %v", err)
		}
		return out.Choices[0].Message
	}
	msg := map[string]any{"role": "assistant"}
	var content strings.Builder
	var calls []any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						ID       string `json:"id"`
						Function struct {
							Name, Arguments string
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
			for _, tc := range ch.Delta.ToolCalls {
				if tc.ID != "" {
					calls = append(calls, map[string]any{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Function.Name, "arguments": ""}})
				}
				fn := calls[len(calls)-1].(map[string]any)["function"].(map[string]any)
				fn["arguments"] = fn["arguments"].(string) + tc.Function.Arguments
			}
		}
	}
	msg["content"] = content.String()
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return msg
}

// A history the harness edits in place (Claude Code clears old tool
// results) is followed: the window keeps the original bytes, the edit goes
// upstream; a conversation started over under the same session gets a
// window of its own, and the first one is still followed.
func TestProxy_FollowsEdits(t *testing.T) {
	var steps []modelserver.Step
	for range 8 {
		steps = append(steps, modelserver.Say("ok"))
	}
	f := newFixture(t, proxy.Options{}, steps...)
	ctx := t.Context()
	h := map[string]string{"X-Engram-Session": "edits"}
	result := strings.Repeat("line of a long output\n", 40)
	conv := []any{
		map[string]any{"role": "user", "content": "run it"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": map[string]any{"command": "make"}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}}},
	}
	send := func(msgs []any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": msgs})
		resp := f.post(t, string(body), h)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	send(conv)
	conv = append(conv, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "ok"}}},
		map[string]any{"role": "user", "content": "and now?"})
	// The harness clears the old result in place.
	conv[2] = map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "[Old tool result content cleared]"}}}
	send(conv)
	f.p.Wait()
	reqs := f.up.Requests(modelserver.KindMain)
	if up := string(reqs[1].Body); !strings.Contains(up, "[Old tool result content cleared]") || strings.Contains(up, "line of a long output") {
		t.Errorf("the edit did not go upstream as the harness sent it: %.300s", up)
	}
	key := store.WindowKey{SessionID: "edits", AgentID: "proxy"}
	f.p.Wait()
	_, held, _, err := f.windows.Messages(ctx, key)
	if err != nil || len(held) != 5 {
		t.Fatalf("the window holds %d messages (%v), want 5: the edit followed, the tail appended", len(held), err)
	}
	if got := held[2].Blocks[0].Text; got != result {
		t.Errorf("the window's tool result is %q, want the original bytes", got)
	}
	// Another conversation under the same session: a window of its own.
	send([]any{map[string]any{"role": "user", "content": "a question on the side"}})
	side := store.WindowKey{SessionID: "edits", AgentID: "proxy-2"}
	f.p.Wait()
	if _, held, _, err := f.windows.Messages(ctx, side); err != nil || len(held) != 1 {
		t.Fatalf("the side conversation's window holds %d messages (%v), want 1", len(held), err)
	}
	// The first goes on in its own window.
	conv = append(conv, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "ok"}}},
		map[string]any{"role": "user", "content": "go on"})
	send(conv)
	f.p.Wait()
	if _, held, _, err := f.windows.Messages(ctx, key); err != nil || len(held) != 7 {
		t.Fatalf("the first window holds %d messages (%v), want 7", len(held), err)
	}
	f.p.Wait()
	if s := f.p.Stats(); s.Edits != 1 || s.Restarts != 1 {
		t.Errorf("stats: %d edits, %d restarts; want 1 and 1", s.Edits, s.Restarts)
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
}

// A client that leaves mid-stream: the upstream request is cancelled and
// what arrived is stored, marked partial.
func TestProxy_ClientLeavesMidStream(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_cut\",\"role\":\"assistant\",\"content\":[]}}\n\n")
		fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"The first half\"}}\n\n")
		w.(http.Flusher).Flush()
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	}))
	defer func() { up.CloseClientConnections(); up.Close() }()
	f := newFixture(t, proxy.Options{Anthropic: up.URL})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.front.URL+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"tell me"}]}`))
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("X-Engram-Session", "cut")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	buf := make([]byte, 64)
	_, _ = resp.Body.Read(buf)
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled when the client left")
	}
	var stored string
	for range 100 {
		f.p.Wait()
		hits, err := f.eng.Store().TurnRange(t.Context(), "cut", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hits {
			if e.Type == store.AgentResponse {
				stored = string(e.Content) + " " + e.MsgID
			}
		}
		if stored != "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stored, "The first half") || !strings.Contains(stored, "msg_cut/partial") {
		t.Errorf("stored %q; want the half that arrived, marked partial", stored)
	}
}

// A model engram does not know is sized as a 200k-token model, and goes
// through; count_tokens of a conversation the proxy holds is counted as
// the proxy would send it.
func TestProxy_UnknownModelAndCountTokens(t *testing.T) {
	var steps []modelserver.Step
	for i := range 20 {
		steps = append(steps, modelserver.Say(fmt.Sprintf("Answer %d: %s", i, strings.Repeat("the quartermaster counts the crates again. ", 20))))
	}
	f := newFixture(t, proxy.Options{Limit: 5000}, steps...)
	var history []json.RawMessage
	for i := range 20 {
		prompt, _ := json.Marshal(map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: %s", i, strings.Repeat("how many crates? ", 30))})
		history = append(history, prompt)
		body, _ := json.Marshal(map[string]any{"model": "a-model-nobody-knows", "max_tokens": 100, "messages": history})
		resp := f.post(t, string(body), map[string]string{"X-Engram-Session": "count"})
		history = append(history, anthropicAnswer(t, resp, i))
	}
	next, _ := json.Marshal(map[string]any{"role": "user", "content": "one more?"})
	body, _ := json.Marshal(map[string]any{"model": "a-model-nobody-knows", "messages": append(history, next)})
	req, _ := http.NewRequest(http.MethodPost, f.front.URL+"/v1/messages/count_tokens", strings.NewReader(string(body)))
	req.Header.Set("X-Api-Key", "k")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Engram-Session", "count")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("count_tokens: %d %v", resp.StatusCode, err)
	}
	if n.InputTokens == 0 || n.InputTokens > 5000 {
		t.Errorf("count_tokens says %d; want the laid-out request's count, under the window's 5,000", n.InputTokens)
	}
	f.p.Wait()
	reqs := f.up.Requests(modelserver.KindCountTokens)
	if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), "one more?") {
		t.Fatalf("count_tokens upstream: %d requests", len(reqs))
	}
	// Nothing of a count is stored.
	f.p.Wait()
	if s := f.p.Stats(); s.Requests["count_tokens"] != 1 || s.Answers != 20 {
		t.Errorf("stats: %+v", s)
	}
	f.p.Wait()
	hits, _ := f.eng.Store().TurnRange(t.Context(), "count", 0, 0)
	for _, e := range hits {
		if strings.Contains(string(e.Content), "one more?") {
			t.Errorf("count_tokens stored its message")
		}
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
}

// A model engram does not know gets a 200,000-token window; a switch to
// another model mid-conversation keeps the window, sized anew.
func TestProxy_ModelSwitch(t *testing.T) {
	f := newFixture(t, proxy.Options{}, modelserver.Say("one"), modelserver.Say("two"))
	h := map[string]string{"X-Engram-Session": "switch"}
	send := func(model string, msgs []any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 100, "messages": msgs})
		resp := f.post(t, string(body), h)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, b)
		}
		f.p.Wait()
	}
	conv := []any{map[string]any{"role": "user", "content": "hi"}}
	send("a-model-nobody-knows", conv)
	key := store.WindowKey{SessionID: "switch", AgentID: "proxy"}
	st, err := f.windows.Status(t.Context(), key)
	if err != nil || st.Settings.Limits.Context != 200_000 {
		t.Fatalf("the window of an unknown model: %+v, %v; want a 200,000-token context", st.Settings.Limits, err)
	}
	conv = append(conv, map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "one"}}},
		map[string]any{"role": "user", "content": "again"})
	send("gpt-4o", conv)
	st, err = f.windows.Status(t.Context(), key)
	if err != nil || st.Messages != 3 || st.Settings.Model != "gpt-4o" || st.Settings.Limits.Context != 128_000 {
		t.Errorf("after the switch: %d messages, model %q, %+v, %v; want the 3 in one window sized for gpt-4o", st.Messages, st.Settings.Model, st.Settings.Limits, err)
	}
}

// turns is a Messages request of a conversation of plain texts, the
// user's and the assistant's in turn.
func turns(msgs ...string) string {
	var conv []any
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		conv = append(conv, map[string]any{"role": role, "content": m})
	}
	b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": conv})
	return string(b)
}

// A prompt asked again in other words (Claude Code's rewind, an edited
// prompt) is a conversation of its own: the window that held the first
// wording keeps it with its answer, the new wording and its answer go to
// a window of their own, which the conversation then follows.
func TestProxy_PromptAskedAgain(t *testing.T) {
	var steps []modelserver.Step
	for _, s := range []string{"hello", "dropping the database", "listing the tables", "you're welcome"} {
		steps = append(steps, modelserver.Say(s))
	}
	f := newFixture(t, proxy.Options{}, steps...)
	ctx := t.Context()
	h := map[string]string{"X-Engram-Session": "again"}
	send := func(msgs ...string) {
		t.Helper()
		resp := f.post(t, turns(msgs...), h)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		f.p.Wait()
	}
	send("first prompt")
	send("first prompt", "hello", "delete the prod database")
	send("first prompt", "hello", "actually, only list the tables")
	send("first prompt", "hello", "actually, only list the tables", "listing the tables", "thanks")
	texts := func(key store.WindowKey) []string {
		_, held, _, err := f.windows.Messages(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range held {
			var b strings.Builder
			for _, bl := range m.Blocks {
				b.WriteString(bl.Text)
			}
			out = append(out, b.String())
		}
		return out
	}
	// A window holds what the harness sent; an answer joins it when the
	// harness sends it back, and is stored as it comes.
	if got, want := strings.Join(texts(store.WindowKey{SessionID: "again", AgentID: "proxy"}), " / "),
		"first prompt / hello / delete the prod database"; got != want {
		t.Errorf("the first window: %s\nwant %s", got, want)
	}
	if got, want := strings.Join(texts(store.WindowKey{SessionID: "again", AgentID: "proxy-2"}), " / "),
		"first prompt / hello / actually, only list the tables / listing the tables / thanks"; got != want {
		t.Errorf("the second window: %s\nwant %s", got, want)
	}
}

// A conversation whose prompt held a secret is followed after a restart:
// the window stores the prompt redacted, the harness resends it whole, and
// both name the same message.
func TestProxy_SecretAcrossRestart(t *testing.T) {
	f := newFixture(t, proxy.Options{}, modelserver.Say("noted"), modelserver.Say("done"))
	ctx := t.Context()
	key := "sk-ant-" + "api03-" + strings.Repeat("Z", 40)
	h := map[string]string{"X-Engram-Session": "secret"}
	resp := f.post(t, turns("my key is "+key+", keep it out of the logs"), h)
	_, _ = io.ReadAll(resp.Body)
	f.p.Wait()
	// A new proxy over the same store: what it knows of the window, it
	// reads back.
	again := f.restart(t)
	resp = f.post(t, turns("my key is "+key+", keep it out of the logs", "noted", "now rotate it"), h)
	_, _ = io.ReadAll(resp.Body)
	again.Wait()
	_, held, _, err := f.windows.Messages(ctx, store.WindowKey{SessionID: "secret", AgentID: "proxy"})
	if err != nil || len(held) != 3 {
		t.Fatalf("the window after the restart holds %d messages (%v), want 3", len(held), err)
	}
	if strings.Contains(held[0].Blocks[0].Text, key) || !strings.Contains(held[0].Blocks[0].Text, "[REDACTED") {
		t.Errorf("the window's first prompt: %q", held[0].Blocks[0].Text)
	}
	if _, _, _, err := f.windows.Messages(ctx, store.WindowKey{SessionID: "secret", AgentID: "proxy-2"}); err == nil {
		t.Error("the restarted proxy took the conversation for a new one")
	}
}

// A tool call whose input redaction leaves no JSON object (a private key's
// header, redacted to the end of the input) is still stored, and followed
// after a restart.
func TestProxy_RedactionBreaksInput(t *testing.T) {
	f := newFixture(t, proxy.Options{}, modelserver.Say("found one"), modelserver.Say("ok"))
	ctx := t.Context()
	h := map[string]string{"X-Engram-Session": "pem"}
	conv := []any{
		map[string]any{"role": "user", "content": "find private keys"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Bash",
			"input": map[string]any{"command": `grep -rl -- "-----BEGIN RSA PRIVATE KEY-----" .`}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.pem"}}},
	}
	send := func(p *proxy.Proxy, msgs []any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": msgs})
		resp := f.post(t, string(body), h)
		_, _ = io.ReadAll(resp.Body)
		p.Wait()
	}
	send(f.p, conv)
	if s := f.p.Stats(); s.FailedOpen != 0 {
		t.Fatalf("failed open %d times", s.FailedOpen)
	}
	again := f.restart(t)
	conv = append(conv, map[string]any{"role": "assistant", "content": "found one"}, map[string]any{"role": "user", "content": "delete it"})
	send(again, conv)
	if s := again.Stats(); s.FailedOpen != 0 || s.Restarts != 0 {
		t.Errorf("after a restart: failed open %d, restarts %d", s.FailedOpen, s.Restarts)
	}
	if _, held, _, err := f.windows.Messages(ctx, store.WindowKey{SessionID: "pem", AgentID: "proxy"}); err != nil || len(held) != 5 {
		t.Errorf("the window holds %d messages (%v), want 5", len(held), err)
	}
}

// TestProxy_IncompleteAnswers: answers that end cleanly for the
// connection but not as answers (an Anthropic error event after some
// text, an Anthropic stream without message_stop mid tool input, a
// Responses stream that failed or came out incomplete, a Chat stream
// without [DONE], a Responses JSON answer whose status is incomplete)
// are stored as what arrived, marked partial; the same streams ended
// properly are stored whole.
func TestProxy_IncompleteAnswers(t *testing.T) {
	const (
		msgStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_%s\",\"role\":\"assistant\",\"content\":[]}}\n\n"
		textOpen = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"half an answer\"}}\n\n"
		toolOpen = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"bash\",\"input\":{}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"cmd\\\": \\\"ls\"}}\n\n"
		overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
		msgStop    = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
		respStart = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_%s\",\"status\":\"in_progress\"}}\n\n" +
			"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"half an answer\"}\n\n"
		chatStart = "data: {\"id\":\"chatcmpl-%s\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"half an answer\"}}]}\n\n"
	)
	streams := map[string]struct{ contentType, body string }{
		"anthropic-error":    {"text/event-stream", msgStart + textOpen + overloaded},
		"anthropic-no-stop":  {"text/event-stream", msgStart + toolOpen},
		"anthropic-whole":    {"text/event-stream", msgStart + textOpen + msgStop},
		"responses-failed":   {"text/event-stream", respStart + "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\"}}\n\n"},
		"responses-cut-off":  {"text/event-stream", respStart + "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\"}}\n\n"},
		"responses-whole":    {"text/event-stream", respStart + "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n"},
		"responses-json-cut": {"application/json", `{"id":"resp_%s","status":"incomplete","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"half an answer"}]}]}`},
		"chat-no-done":       {"text/event-stream", chatStart},
		"chat-whole":         {"text/event-stream", chatStart + "data: [DONE]\n\n"},
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mode := r.URL.Query().Get("mode")
		s := streams[mode]
		w.Header().Set("Content-Type", s.contentType)
		_, _ = io.WriteString(w, strings.ReplaceAll(s.body, "%s", mode))
	}))
	defer up.Close()
	f := newFixture(t, proxy.Options{Anthropic: up.URL, OpenAI: up.URL})
	for mode := range streams {
		path, body := "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"tell me"}]}`
		switch {
		case strings.HasPrefix(mode, "responses"):
			path, body = "/v1/responses", `{"model":"gpt-5-codex","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"tell me"}]}]}`
		case strings.HasPrefix(mode, "chat"):
			path, body = "/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"tell me"}]}`
		}
		resp := f.postTo(t, path+"?mode="+mode, body, map[string]string{"X-Engram-Session": mode, "X-Api-Key": "k", "Authorization": "Bearer k"})
		_, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", mode, resp.StatusCode)
		}
	}
	f.p.Wait()
	for mode := range streams {
		hits, err := f.eng.Store().TurnRange(t.Context(), mode, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		stored := ""
		for _, e := range hits {
			if e.Type == store.AgentResponse {
				stored = e.MsgID
			}
		}
		wantPartial := !strings.HasSuffix(mode, "-whole")
		if stored == "" || strings.HasSuffix(stored, "/partial") != wantPartial {
			t.Errorf("%s: the answer is stored as %q; partial %v wanted", mode, stored, wantPartial)
		}
	}
	if s := f.p.Stats(); s.Answers != int64(len(streams)) || s.Partial != int64(len(streams)-3) {
		t.Errorf("stats: %d answers, %d partial; want %d and %d", s.Answers, s.Partial, len(streams), len(streams)-3)
	}
}

// Claude Code's count_tokens requests carry no metadata, but name the
// session in X-Claude-Code-Session-Id (as 2.1.121 does on every request):
// a count of the session's conversation is laid out as its window would
// send it, not counted whole.
func TestProxy_ClaudeCodeCountTokens(t *testing.T) {
	var steps []modelserver.Step
	for i := range 20 {
		steps = append(steps, modelserver.Say(fmt.Sprintf("Answer %d: %s", i, strings.Repeat("the quartermaster counts the crates again. ", 20))))
	}
	f := newFixture(t, proxy.Options{Limit: 5000}, steps...)
	const session = "6f6fe473-07c4-42c5-8087-ddd2ffb878a6"
	h := map[string]string{"User-Agent": "claude-cli/2.1.121 (external, cli)", "X-Claude-Code-Session-Id": session}
	var history []json.RawMessage
	for i := range 20 {
		prompt, _ := json.Marshal(map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: %s", i, strings.Repeat("how many crates? ", 30))})
		history = append(history, prompt)
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": history,
			"metadata": map[string]string{"user_id": `{"device_id":"d1","account_uuid":"","session_id":"` + session + `"}`}})
		resp := f.post(t, string(body), h)
		history = append(history, anthropicAnswer(t, resp, i))
	}
	f.p.Wait()
	next, _ := json.Marshal(map[string]any{"role": "user", "content": "one more?"})
	body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "messages": append(history, next)})
	resp := f.postTo(t, "/v1/messages/count_tokens", string(body), map[string]string{"X-Api-Key": "k", "Anthropic-Version": "2023-06-01",
		"Authorization": "", "User-Agent": h["User-Agent"], "X-Claude-Code-Session-Id": session})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
	}
	f.p.Wait()
	reqs := f.up.Requests(modelserver.KindCountTokens)
	if len(reqs) != 1 {
		t.Fatalf("%d count_tokens requests upstream, want 1", len(reqs))
	}
	var sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(reqs[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if n := len(sent.Messages); n >= len(history)+1 || !strings.Contains(string(sent.Messages[0]), "retrieve_context") {
		t.Errorf("count_tokens went upstream with %d messages of %d, first %.200s; want the window's layout, markers first", n, len(history)+1, sent.Messages[0])
	}
	if err := f.up.Err(); err != nil {
		t.Fatal(err)
	}
}
