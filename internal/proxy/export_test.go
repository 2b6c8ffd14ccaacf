package proxy

import "testing"

// SetMaxWindows bounds the windows the proxy keeps in memory to n for
// the rest of the test.
func SetMaxWindows(t *testing.T, n int) {
	old := maxWindows
	maxWindows = n
	t.Cleanup(func() { maxWindows = old })
}
