//go:build !unix

package harness

import "os"

// lockFile is a no-op where flock is missing: engram supports Linux and
// macOS, and elsewhere concurrent hooks may lose a count, never the file,
// which is replaced atomically.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}
