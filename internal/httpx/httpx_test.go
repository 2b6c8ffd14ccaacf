package httpx

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	if d := RetryAfter("120"); d != 2*time.Minute {
		t.Errorf("RetryAfter(120) = %v", d)
	}
	if d := RetryAfter("soon"); d != 0 {
		t.Errorf("RetryAfter(soon) = %v", d)
	}
	if d := RetryAfter(time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)); d < 59*time.Minute || d > time.Hour {
		t.Errorf("RetryAfter(date) = %v", d)
	}
}

func TestErrorMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"model not found","type":"invalid_request_error"}}`: "model not found",
		`{"error":"model \"x\" not found"}`:                                      `model "x" not found`,
		`{"error":"Input validation error","error_type":"Validation"}`:           "Input validation error",
		`{"message":"invalid request: model is required"}`:                       "invalid request: model is required",
		`{"detail":"Not authenticated"}`:                                         "Not authenticated",
		`{"detail":[{"loc":["body"],"msg":"field required"}]}`:                   `{"detail":[{"loc":["body"],"msg":"field required"}]}`,
		"  upstream timed out\n":                                                 "upstream timed out",
	} {
		if got := ErrorMessage([]byte(body)); got != want {
			t.Errorf("ErrorMessage(%s) = %q, want %q", body, got, want)
		}
	}
}

func TestPostJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) == `"busy"` {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"overloaded"}}`))
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	ctx := context.Background()
	body, _, err := PostJSON(ctx, srv.Client(), srv.URL, "k", []byte(`"hi"`), time.Second, 1<<10)
	if err != nil || string(body) != `"hi"` {
		t.Fatalf("echo: %q, %v", body, err)
	}
	_, after, err := PostJSON(ctx, srv.Client(), srv.URL, "k", []byte(`"busy"`), time.Second, 1<<10)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 503 || se.Message != "overloaded" || !se.Temporary() || after != 2*time.Second {
		t.Fatalf("busy: %v, after %v", err, after)
	}
	_, _, err = PostJSON(ctx, srv.Client(), srv.URL, "", []byte(`"hi"`), time.Second, 1<<10)
	if !errors.As(err, &se) || se.Code != 401 || se.Temporary() || err.Error() != "HTTP 401" {
		t.Fatalf("no key: %v", err)
	}
}

func TestInBatches(t *testing.T) {
	sem := make(chan struct{}, 2)
	var mu sync.Mutex
	var inFlight, most int
	seen := make([]int, 10)
	err := InBatches(context.Background(), 10, 3, sem, func(ctx context.Context, lo, hi int) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		for i := lo; i < hi; i++ {
			seen[i]++
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})
	if err != nil || most > 2 || !slices.Equal(seen, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {
		t.Fatalf("err %v, %d at once, items seen %v", err, most, seen)
	}
	// The first error cancels the batches still running.
	boom := errors.New("boom")
	err = InBatches(context.Background(), 9, 3, sem, func(ctx context.Context, lo, hi int) error {
		if lo == 0 {
			return boom
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}
