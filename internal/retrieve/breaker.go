package retrieve

import (
	"sync"
	"time"
)

// Defaults for a Breaker.
const (
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = 30 * time.Second
)

// Breaker is a circuit breaker for one backend: after Failures failures in
// a row it opens, and the backend is skipped until Cooldown has passed;
// then one call is let through as a probe, and its outcome closes the
// circuit or opens it for another cooldown. It is safe for concurrent use.
type Breaker struct {
	Failures int
	Cooldown time.Duration
	now      func() time.Time

	mu       sync.Mutex
	failed   int       // failures in a row
	openedAt time.Time // when the circuit last opened
	probing  bool      // a probe is out
	trips    int64     // times the circuit opened
}

// NewBreaker returns a closed breaker; zero arguments take the defaults.
func NewBreaker(failures int, cooldown time.Duration) *Breaker {
	if failures <= 0 {
		failures = DefaultBreakerFailures
	}
	if cooldown <= 0 {
		cooldown = DefaultBreakerCooldown
	}
	return &Breaker{Failures: failures, Cooldown: cooldown, now: time.Now}
}

// Allow reports whether the backend may be called now.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed < b.Failures {
		return true
	}
	if b.probing || b.now().Sub(b.openedAt) < b.Cooldown {
		return false
	}
	b.probing = true
	return true
}

// Success records a call that worked: the circuit closes.
func (b *Breaker) Success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed, b.probing = 0, false
}

// Cancel records a call that ended without an outcome, because its
// caller gave up: if it was the probe, another may go.
func (b *Breaker) Cancel() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// Failure records a call that failed.
func (b *Breaker) Failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed++
	if b.failed == b.Failures || b.probing {
		b.openedAt = b.now()
		b.trips++
	}
	b.probing = false
}

// BreakerState describes a breaker.
type BreakerState struct {
	Open  bool  `json:"open"`
	Trips int64 `json:"trips"`
}

// State returns whether the circuit is open and how often it opened.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BreakerState{Open: b.failed >= b.Failures, Trips: b.trips}
}
