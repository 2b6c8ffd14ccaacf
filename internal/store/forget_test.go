package store_test

import (
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

// TestKeysError: the refusal of a string in a file's path says how to be
// rid of a file's current version, which engram forget refuses.
func TestKeysError(t *testing.T) {
	msg := store.KeysError([]string{"a file path"}).Error()
	if !strings.Contains(msg, "run engram index, then forget its old versions") {
		t.Errorf("%s", msg)
	}
	if msg := store.KeysError([]string{"a session id"}).Error(); strings.Contains(msg, "for a file") {
		t.Errorf("%s", msg)
	}
}
