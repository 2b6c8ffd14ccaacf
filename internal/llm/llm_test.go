package llm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var tool = Tool{Name: "pick", Description: "pick one", Parameters: map[string]any{"type": "object"}}

func server(t *testing.T, handler func(n int64, w http.ResponseWriter)) (*Client, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler(n.Add(1), w)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Options{URL: srv.URL + "/v1/", Model: "m", Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c, &n
}

const toolAnswer = `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"pick","arguments":"{\"x\": 1}"}}]}}]}`

func TestCall(t *testing.T) {
	ctx := context.Background()
	c, n := server(t, func(n int64, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte(toolAnswer))
	})
	args, err := c.Call(ctx, []Message{{Role: "user", Content: "hi"}}, tool)
	if err != nil || string(args) != `{"x": 1}` || n.Load() != 2 {
		t.Fatalf("Call = %s, %v after %d requests", args, err, n.Load())
	}

	c, n = server(t, func(_ int64, w http.ResponseWriter) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"message":"unknown model m"}}`))
	})
	_, err = c.Call(ctx, nil, tool)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 400 || !strings.Contains(err.Error(), "unknown model m") || n.Load() != 1 {
		t.Errorf("400: %v after %d requests (a 400 is not retried)", err, n.Load())
	}

	c, _ = server(t, func(_ int64, w http.ResponseWriter) {
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"I think x is 1"}}]}`))
	})
	if _, err := c.Call(ctx, nil, tool); !errors.Is(err, ErrBadAnswer) {
		t.Errorf("no tool call: %v", err)
	}
	if _, err := New(Options{Model: "m"}); err == nil {
		t.Error("no URL: accepted")
	}
}
