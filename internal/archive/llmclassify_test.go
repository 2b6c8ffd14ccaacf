package archive

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/llm"
)

// chatServer speaks OpenAI's /chat/completions: it checks the request and
// answers with a call of the classification tool whose arguments answer()
// gives, or with the status fail() gives.
func chatServer(t *testing.T, answer func(question string) string, fail func(n int64) int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("request %s with auth %q", r.URL.Path, r.Header.Get("Authorization"))
		}
		var req struct {
			Model    string        `json:"model"`
			Messages []llm.Message `json:"messages"`
			Tools    []struct {
				Type     string `json:"type"`
				Function struct {
					Name       string         `json:"name"`
					Parameters map[string]any `json:"parameters"`
				} `json:"function"`
			} `json:"tools"`
			ToolChoice struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tool_choice"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("request body: %v", err)
		}
		if req.Model != "test-model" || len(req.Messages) != 2 || req.Messages[0].Role != "system" || len(req.Tools) != 1 ||
			req.Tools[0].Type != "function" || req.Tools[0].Function.Name != "classify_archivalist_query" ||
			req.ToolChoice.Function.Name != "classify_archivalist_query" || req.Tools[0].Function.Parameters["type"] != "object" {
			t.Errorf("request = %+v", req)
		}
		if fail != nil {
			if code := fail(n); code != 0 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(code)
				_, _ = w.Write([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`))
				return
			}
		}
		args := answer(req.Messages[1].Content)
		resp := map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
				"role": "assistant", "content": nil,
				"tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
					"function": map[string]any{"name": "classify_archivalist_query", "arguments": args}}},
			}}},
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func llmArchive(t *testing.T, url string) *Archive {
	t.Helper()
	c, err := llm.New(llm.Options{URL: url + "/v1", Model: "test-model", APIKey: "sk-test", Backoff: time.Millisecond, Retries: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newArchive(t, Options{Classifier: NewLLMClassifier(c)})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1"})
	ok(t)(h.RecordDecision(context.Background(), Decision{Category: "api.versioning", Decision: "version the API in the URL path"}))
	return a
}

func TestLLMClassifier(t *testing.T) {
	ctx := context.Background()
	srv, _ := chatServer(t, func(q string) string {
		if strings.Contains(q, "should") {
			return `{"is_retrospective": false, "rejection_reason": "asks for a recommendation", "confidence": 0.95}`
		}
		// Words the rules would not read as about the past.
		return `{"is_retrospective": true, "intent": "recall", "domain": "decisions", "entities": {"scope": "api"}, "confidence": 0.93}`
	}, nil)
	a := llmArchive(t, srv.URL)
	ans, err := a.Ask(ctx, nil, "API versioning choice", AskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ans[0].Classification
	if c.By != "llm:test-model" || c.Domain != Decisions || c.Action != ActionExecute || ans[0].Status != StatusOK || len(ans[0].Records) != 1 {
		t.Fatalf("answer = %+v, classification %+v", ans[0], c)
	}
	ans, _ = a.Ask(ctx, nil, "which framework should we pick?", AskOptions{})
	if ans[0].Status != StatusRefused || ans[0].Reason != "asks for a recommendation" {
		t.Errorf("refused: %+v", ans[0])
	}
}

func TestLLMClassifierFaults(t *testing.T) {
	ctx := context.Background()
	// A passing failure is retried.
	srv, calls := chatServer(t, func(string) string {
		return `{"is_retrospective": true, "intent": "recall", "domain": "decisions", "confidence": 0.91}`
	}, func(n int64) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	a := llmArchive(t, srv.URL)
	ans, err := a.Ask(ctx, nil, "what did we decide about versioning?", AskOptions{})
	if err != nil || ans[0].Classification.By != "llm:test-model" || calls.Load() != 2 {
		t.Fatalf("after a 503: %+v, %v, %d calls", ans, err, calls.Load())
	}
	// A model that keeps failing, or answers nonsense: the rules answer.
	for name, srv := range map[string]*httptest.Server{
		"500": func() *httptest.Server {
			s, _ := chatServer(t, nil, func(int64) int { return http.StatusInternalServerError })
			return s
		}(),
		"bad arguments": func() *httptest.Server {
			s, _ := chatServer(t, func(string) string { return `{"intent": "recall"}` }, nil)
			return s
		}(),
		"not JSON": func() *httptest.Server {
			s, _ := chatServer(t, func(string) string { return `{"is_retrospective": tru` }, nil)
			return s
		}(),
		"unknown domain": func() *httptest.Server {
			s, _ := chatServer(t, func(string) string {
				return `{"is_retrospective": true, "intent": "recall", "domain": "vibes", "confidence": 0.9}`
			}, nil)
			return s
		}(),
	} {
		a := llmArchive(t, srv.URL)
		ans, err := a.Ask(ctx, nil, "what did we decide about API versioning?", AskOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := ans[0].Classification
		if !strings.HasPrefix(c.By, "rules (the model failed") || ans[0].Status != StatusOK || len(ans[0].Records) != 1 {
			t.Errorf("%s: %+v (by %s)", name, ans[0], c.By)
		}
	}
}
