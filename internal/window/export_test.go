package window

import "github.com/engramhq/engram/internal/store"

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
