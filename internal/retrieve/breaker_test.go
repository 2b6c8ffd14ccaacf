package retrieve

import (
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBreaker(2, time.Minute)
	b.now = func() time.Time { return now }
	if !b.Allow() {
		t.Fatal("a new breaker is open")
	}
	b.Failure()
	if !b.Allow() {
		t.Fatal("open after one failure of two")
	}
	b.Failure()
	if b.Allow() || !b.State().Open || b.State().Trips != 1 {
		t.Fatalf("not open after two failures: %+v", b.State())
	}
	now = now.Add(time.Minute)
	if !b.Allow() {
		t.Fatal("no probe after the cooldown")
	}
	if b.Allow() {
		t.Fatal("a second probe while the first is out")
	}
	b.Failure() // the probe failed: open for another cooldown
	if b.Allow() || b.State().Trips != 2 {
		t.Fatalf("after a failed probe: %+v", b.State())
	}
	now = now.Add(time.Minute)
	if !b.Allow() {
		t.Fatal("no probe after the second cooldown")
	}
	b.Success()
	first, second := b.Allow(), b.Allow() // closed: no probe limit
	if !first || !second || b.State().Open {
		t.Fatalf("not closed after a good probe: %+v", b.State())
	}
}
