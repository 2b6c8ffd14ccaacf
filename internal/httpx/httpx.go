// Package httpx holds what engram's HTTP clients of remote providers
// (embedders, re-rankers, chat models) share: posting JSON, reading their
// error bodies and their Retry-After headers, and retrying.
package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrorMessage pulls the message out of an error body: OpenAI's
// {"error": {"message": …}}, Ollama's and text-embeddings-inference's
// {"error": "…"}, Cohere's {"message": "…"}, FastAPI's {"detail": "…"}, or
// the text.
func ErrorMessage(body []byte) string {
	var ans struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &ans) == nil && ans.Message != "" && len(ans.Error) == 0 {
		return ans.Message
	}
	var detail string
	if len(ans.Detail) > 0 && json.Unmarshal(ans.Detail, &detail) == nil && detail != "" {
		return detail
	}
	if len(ans.Error) > 0 {
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

// StatusError is an HTTP error answer from a provider.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d", e.Code)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Code, e.Message)
}

// Temporary reports whether trying again may succeed: 408, 429 and 5xx.
func (e *StatusError) Temporary() bool {
	return e.Code == http.StatusTooManyRequests || e.Code == http.StatusRequestTimeout || e.Code >= 500
}

// PostJSON sends one JSON request within timeout, with a bearer token if
// apiKey is set, and returns the answer's body, at most maxBytes of it. An
// answer other than 200 is a *StatusError, with the server's Retry-After.
func PostJSON(ctx context.Context, client *http.Client, url, apiKey string, payload []byte, timeout time.Duration, maxBytes int64) ([]byte, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes))
	if err != nil {
		return nil, 0, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, RetryAfter(resp.Header.Get("Retry-After")), &StatusError{Code: resp.StatusCode, Message: ErrorMessage(body)}
	}
	return body, 0, nil
}

// InBatches calls fn on the ranges [lo, hi) of n items, at most size
// items each, in parallel but never more at once than sem holds (a client
// shares one sem among all its calls). The first error cancels the calls
// still running and is returned; ctx's error if it ends first.
func InBatches(ctx context.Context, n, size int, sem chan struct{}, fn func(ctx context.Context, lo, hi int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
send:
	for lo := 0; lo < n; lo += size {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break send
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, lo, min(lo+size, n)); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
