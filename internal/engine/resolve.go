package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// Resolve returns the entry ID that target names: an indexed file (its
// current version, or the given version), else an entry ID or a prefix of
// one (at least store.MinPrefix hex digits). A target that names nothing
// with content (no such file, version or entry; a file the indexer
// skipped) is store.ErrNotFound; a deleted file a DeletedError.
func (e *Engine) Resolve(ctx context.Context, target string, version int) (string, error) {
	st := e.st
	path := strings.TrimPrefix(target, "./")
	f, err := st.File(ctx, path)
	switch {
	case err == nil:
	case !errors.Is(err, store.ErrNotFound):
		return "", err
	case version > 0:
		return "", fmt.Errorf("%s is not an indexed file: a version needs one: %w", target, store.ErrNotFound)
	default:
		id, err := st.ResolveID(ctx, target)
		var ve *store.ValidationError
		if errors.As(err, &ve) || errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("%s is neither an indexed file nor a stored entry: %w", target, store.ErrNotFound)
		}
		return id, err
	}
	if version > 0 {
		vs, err := st.FileVersions(ctx, path)
		if err != nil {
			return "", err
		}
		for _, v := range vs {
			if v.Version == version {
				return v.EntryID, nil
			}
		}
		return "", fmt.Errorf("%s has versions 1 to %d, not %d: %w", path, len(vs), version, store.ErrNotFound)
	}
	switch f.State {
	case store.FileCurrent:
		return f.EntryID, nil
	case store.FileDeleted:
		return "", &DeletedError{Path: path, Reason: f.Reason, LastVersion: f.Version}
	}
	// Skipped by the indexer (binary, generated, too large): known, but
	// with no content to give.
	return "", fmt.Errorf("%s is not indexed: %s: %w", path, f.Reason, store.ErrNotFound)
}

// LineRange returns lines from to to (1-based, inclusive) of content.
func LineRange(content []byte, from, to int) ([]byte, error) {
	sp, err := LineSpan(content, from, to)
	if err != nil {
		return nil, err
	}
	return content[sp.Start:sp.End], nil
}

// DeletedError says a file is no longer in the tree, and which version was
// its last.
type DeletedError struct {
	Path        string
	Reason      string // what became of it, such as "renamed to x.go"
	LastVersion int
}

func (e *DeletedError) Error() string {
	note := ""
	if e.Reason != "" {
		note = " (" + e.Reason + ")"
	}
	return fmt.Sprintf("%s was deleted%s; its last version is %d", e.Path, note, e.LastVersion)
}
