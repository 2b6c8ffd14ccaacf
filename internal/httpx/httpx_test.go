package httpx

import (
	"net/http"
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
		"  upstream timed out\n":                                                 "upstream timed out",
	} {
		if got := ErrorMessage([]byte(body)); got != want {
			t.Errorf("ErrorMessage(%s) = %q, want %q", body, got, want)
		}
	}
}
