// Package httpx holds what engram's HTTP clients of remote providers
// (embedders, chat models) share: reading their error bodies and their
// Retry-After headers.
package httpx

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrorMessage pulls the message out of an error body: OpenAI's
// {"error": {"message": …}}, Ollama's {"error": "…"}, or the text.
func ErrorMessage(body []byte) string {
	var ans struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &ans) == nil && len(ans.Error) > 0 {
		var s string
		if json.Unmarshal(ans.Error, &s) == nil {
			return s
		}
		var o struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(ans.Error, &o) == nil && o.Message != "" {
			return o.Message
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// RetryAfter parses a Retry-After header: seconds or an HTTP date.
func RetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}
