package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// Run references. A reference that stands for a run of a window's ledger
// (the messages a window or a view of it shows under one marker) is named
// by the run itself: the window, the places of its first and last
// messages, and a digest of its content. Such an ID needs no row: a
// store's Reference reads it back from the ledger (RunRefs), so a
// marker costs no write when it is made, and expands for as long as the
// window holds its messages. The messages a window holds are appended
// once and never change, so a run's ID always names the same content;
// the digest tells a window forgotten and opened again under the same
// key (or a run some of whose messages were purged) from the one the
// marker was made of, and a reference of it is then not found.
//
// An ID is "c" (a conversation) or "t" (tool calls and results only),
// seven hex digits of the window's key, the first and last places from 1
// as TurnFrom and TurnTo, and five hex digits of the content:
// "c1f0a9c3.12.26.8e41b". A row of the refs table under the same ID (a
// window's own evictions are written with their append) takes precedence.

// RunRefID names the reference of the run of key's ledger made of items
// (in the ledger's order, their places from items[0].Pos to the last's):
// a conversation, or tool results with tools set.
func RunRefID(key WindowKey, tools bool, items []WindowItem) string {
	first, last := items[0].Pos, items[len(items)-1].Pos
	n := len(key.SessionID) + len(key.AgentID) + 24
	for _, it := range items {
		for _, id := range it.EntryIDs {
			n += len(id)
		}
	}
	b := runHead(make([]byte, 0, n), key)
	k := sha256.Sum256(b)
	b = runPlaces(b, first, last)
	for _, it := range items {
		for _, id := range it.EntryIDs {
			b = append(b, id...)
		}
	}
	c := sha256.Sum256(b)
	var out [64]byte
	id := append(out[:0], 'c')
	if tools {
		id[0] = 't'
	}
	id = hex.AppendEncode(id, k[:4])[:1+7]
	id = strconv.AppendInt(append(id, '.'), int64(first+1), 10)
	id = strconv.AppendInt(append(id, '.'), int64(last+1), 10)
	id = hex.AppendEncode(append(id, '.'), c[:3])
	return string(id[:len(id)-1])
}

// runHead and runPlaces write what a run reference's digests are of: the
// window's key (the key digest), then the places of the run's first and
// last messages (the content digest goes on with its entries' IDs).
func runHead(b []byte, key WindowKey) []byte {
	return append(append(append(b, key.SessionID...), 0), key.AgentID...)
}

func runPlaces(b []byte, first, last int) []byte {
	b = strconv.AppendInt(append(b, 0), int64(first), 10)
	return strconv.AppendInt(append(b, 0), int64(last), 10)
}

// keyDigest is the part of a run reference's ID that names its window.
func keyDigest(key WindowKey) string {
	k := sha256.Sum256(runHead(nil, key))
	return hex.EncodeToString(k[:4])[:7]
}

// runDigest is the part of a run reference's ID that names its content:
// the window, the first and last places, and the entries in order.
func runDigest(key WindowKey, items []WindowItem) string {
	b := runPlaces(runHead(nil, key), items[0].Pos, items[len(items)-1].Pos)
	for _, it := range items {
		for _, id := range it.EntryIDs {
			b = append(b, id...)
		}
	}
	c := sha256.Sum256(b)
	return hex.EncodeToString(c[:3])[:5]
}

// runRef is a run reference's ID, parsed.
type runRef struct {
	tools            bool
	key, digest      string
	turnFrom, turnTo int
}

// parseRunRef parses a run reference's ID; false if id is not one.
func parseRunRef(id string) (runRef, bool) {
	var r runRef
	if len(id) < 1+7+2+2+6 || (id[0] != 'c' && id[0] != 't') {
		return r, false
	}
	r.tools = id[0] == 't'
	rest := id[1:]
	r.key, rest = rest[:7], rest[7:]
	if !isHex(r.key) {
		return r, false
	}
	num := func() (int, bool) {
		if len(rest) < 2 || rest[0] != '.' {
			return 0, false
		}
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 1 || i > 10 || rest[1] == '0' {
			return 0, false
		}
		n, err := strconv.Atoi(rest[1:i])
		rest = rest[i:]
		return n, err == nil
	}
	var ok bool
	if r.turnFrom, ok = num(); !ok {
		return r, false
	}
	if r.turnTo, ok = num(); !ok || r.turnTo < r.turnFrom {
		return r, false
	}
	if len(rest) != 6 || rest[0] != '.' || !isHex(rest[1:]) {
		return r, false
	}
	r.digest = rest[1:]
	return r, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IsRunRef reports whether id is a run reference's ID (see RunRefID).
func IsRunRef(id string) bool {
	_, ok := parseRunRef(id)
	return ok
}

// WindowReader is what RunRefs reads a window's ledger with.
type WindowReader interface {
	Windows(ctx context.Context, sessionID string) ([]Window, error)
	WindowItems(ctx context.Context, key WindowKey, from, to int) ([]WindowItem, error)
}

// RunRefs reads run references back from a store's ledgers: the
// reference a run reference's ID names, with its window's session and
// agent, places, content (every entry of the run's messages, in order),
// the tokens the messages take, and when the last was appended; or
// ErrNotFound if no window holds that run with that content any more
// (forgotten, or opened again under the same key). It keeps the windows'
// keys by their digest between calls, so that a marker
// expanded again, or another of the same window, reads its window's items
// only; a digest it does not know, or a window it knew that no longer
// holds the run, makes it read the windows again. The zero value is ready
// to use, and it is safe for concurrent use.
type RunRefs struct {
	mu   sync.Mutex
	keys map[string][]WindowKey // by keyDigest
}

// Resolve reads back the reference of run reference id.
func (c *RunRefs) Resolve(ctx context.Context, s WindowReader, id string) (Reference, error) {
	r, ok := parseRunRef(id)
	if !ok {
		return Reference{}, fmt.Errorf("reference %s: %w", id, ErrNotFound)
	}
	c.mu.Lock()
	known := c.keys[r.key]
	c.mu.Unlock()
	if ref, ok, err := resolveIn(ctx, s, id, r, known); ok || err != nil {
		return ref, err
	}
	windows, err := s.Windows(ctx, "")
	if err != nil {
		return Reference{}, fmt.Errorf("reference %s: %w", id, err)
	}
	keys := make(map[string][]WindowKey, len(windows))
	for _, w := range windows {
		k := WindowKey{SessionID: w.SessionID, AgentID: w.AgentID}
		d := keyDigest(k)
		keys[d] = append(keys[d], k)
	}
	c.mu.Lock()
	c.keys = keys
	c.mu.Unlock()
	if ref, ok, err := resolveIn(ctx, s, id, r, keys[r.key]); ok || err != nil {
		return ref, err
	}
	return Reference{}, fmt.Errorf("reference %s: %w", id, ErrNotFound)
}

// resolveIn looks for run r among the windows of keys; false if none
// holds it.
func resolveIn(ctx context.Context, s WindowReader, id string, r runRef, keys []WindowKey) (Reference, bool, error) {
	for _, key := range keys {
		items, err := s.WindowItems(ctx, key, r.turnFrom-1, r.turnTo)
		if errors.Is(err, ErrNotFound) {
			continue // forgotten since its key was read
		}
		if err != nil {
			return Reference{}, false, fmt.Errorf("reference %s: %w", id, err)
		}
		run := items
		if len(run) == 0 || run[0].Pos != r.turnFrom-1 || run[len(run)-1].Pos != r.turnTo-1 || runDigest(key, run) != r.digest {
			continue
		}
		ref := Reference{ID: id, Type: RefConversation, SessionID: key.SessionID, AgentID: key.AgentID,
			TurnFrom: r.turnFrom, TurnTo: r.turnTo, CreatedAt: run[len(run)-1].Time}
		if r.tools {
			ref.Type = RefToolResults
		}
		for _, it := range run {
			ref.ContentIDs = append(ref.ContentIDs, it.EntryIDs...)
			ref.TokensSaved += it.Tokens
		}
		if len(ref.ContentIDs) == 0 {
			continue
		}
		return ref, true, nil
	}
	return Reference{}, false, nil
}
