// Package httpx holds what engram's HTTP clients of remote providers
// (embedders, chat models) share: reading their error bodies and their
// Retry-After headers.
package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
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

// Retry calls once until it succeeds, fails with an error passing does
// not accept, or has been retried retries times. Between attempts it
// waits the server's Retry-After (once's second result) or else backoff,
// doubled after each attempt, with jitter; never more than maxWait.
func Retry[T any](ctx context.Context, retries int, backoff, maxWait time.Duration, passing func(error) bool,
	once func() (T, time.Duration, error)) (T, error) {
	wait := backoff
	for attempt := 0; ; attempt++ {
		v, after, err := once()
		if err == nil {
			return v, nil
		}
		if !passing(err) || ctx.Err() != nil || attempt >= retries {
			return v, err
		}
		d := wait/2 + rand.N(wait/2+1) // jitter in [wait/2, wait]
		if after > 0 {
			d = after
		}
		select {
		case <-time.After(min(d, maxWait)):
		case <-ctx.Done():
			return v, errors.Join(err, ctx.Err())
		}
		wait *= 2
	}
}
