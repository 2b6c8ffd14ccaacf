package window

import (
	"time"

	"github.com/engramhq/engram/internal/store"
)

// ViewStarts returns the starts of the views m keeps of a window, the
// latest first.
func (m *Manager) ViewStarts(key store.WindowKey) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, vc := range m.views[key] {
		out = append(out, vc.from)
	}
	return out
}

// SetMaxAttempts sets how many times a change to a laid-out window is
// tried while other servers change it, until the test ends.
func SetMaxAttempts(t interface{ Cleanup(func()) }, n int) {
	old := maxAttempts
	maxAttempts = n
	t.Cleanup(func() { maxAttempts = old })
}

// BeforeWrite runs f between reading a window's layout and each append's
// write.
func (m *Manager) BeforeWrite(f func()) { m.beforeWrite = f }

// SetNow makes now m's clock: when messages were appended, as their
// markers show it.
func (m *Manager) SetNow(now func() time.Time) { m.now = now }
