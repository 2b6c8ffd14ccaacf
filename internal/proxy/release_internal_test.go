package proxy

import (
	"testing"
	"time"
)

// The memory is released once, after the proxy has been idle for the
// time given, not while it is busy, and never with a negative time.
func TestIdleRelease(t *testing.T) {
	var b idleRelease
	b.enter()
	b.enter()
	b.leave(10 * time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if got := b.count(); got != 0 {
		t.Fatalf("released %d times with a request in flight", got)
	}
	b.leave(10 * time.Millisecond)
	for i := 0; i < 200 && b.count() == 0; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if got := b.count(); got != 1 {
		t.Fatalf("released %d times once idle, want 1", got)
	}
	b.enter()
	b.leave(-1)
	time.Sleep(30 * time.Millisecond)
	if got := b.count(); got != 1 {
		t.Errorf("released %d times with release off, want still 1", got)
	}
}

func (b *idleRelease) count() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.released
}
