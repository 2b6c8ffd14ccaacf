package store

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// WindowKey names a context window: each agent of a session has one.
type WindowKey struct {
	SessionID, AgentID string
}

func (k WindowKey) String() string { return k.SessionID + "/" + k.AgentID }

// Validate checks that a key names both a session and an agent, each at
// most MaxIdentifierBytes of UTF-8 without control characters (a window
// is addressed by them in URLs and listed by them a line each).
func (k WindowKey) Validate() error {
	if k.SessionID == "" || k.AgentID == "" {
		return &ValidationError{Field: "window", Msg: fmt.Sprintf("a window needs a session and an agent, got %q and %q", k.SessionID, k.AgentID)}
	}
	for _, f := range []struct{ name, id string }{{"session", k.SessionID}, {"agent", k.AgentID}} {
		switch {
		case len(f.id) > MaxIdentifierBytes:
			return &ValidationError{Field: f.name, Msg: fmt.Sprintf("is %d bytes; at most %d", len(f.id), MaxIdentifierBytes)}
		case !utf8.ValidString(f.id):
			return &ValidationError{Field: f.name, Msg: fmt.Sprintf("%q is not valid UTF-8", f.id)}
		case strings.IndexFunc(f.id, unicode.IsControl) >= 0:
			return &ValidationError{Field: f.name, Msg: fmt.Sprintf("%q holds a control character", f.id)}
		}
	}
	return nil
}

// Window is the head of a window's ledger. The store keeps its settings
// opaque: the window package encodes them (role, model, limits, policy).
type Window struct {
	WindowKey
	Settings []byte
	// Version increases with every change to the window: its settings,
	// an append, an eviction.
	Version              int64
	CreatedAt, UpdatedAt time.Time
	// Next is one past the greatest place the window ever gave. An
	// append takes the place after its last item; when Next is past that,
	// the messages there were forgotten (engram forget), and the append
	// takes their places again (a harness that still has them sends them
	// again, in their places).
	Next int
}

// WindowItem is one message of a window's ledger, in the window or
// evicted from it.
type WindowItem struct {
	// Pos is the message's place in the ledger, from 0, in append order.
	Pos int
	// Append is the version of the window that the message's append
	// made: the messages of one append are one turn, never interleaved
	// with another's.
	Append int64
	// Form is the message without its content (role, block types, tool
	// ids), as the window package encodes it; EntryIDs are the stored
	// content of its blocks, in order.
	Form     []byte
	EntryIDs []string
	Tokens   int
	Pinned   bool
	// RefID is the reference the message was evicted under; empty while
	// the message is in the window.
	RefID string
	// Time is when the message was appended (AppendWindow sets it when
	// zero); zero for a message appended before engram kept it.
	Time time.Time
}

// WindowReadmit is a re-admission in a window's ledger: the items with
// From <= Pos < To came back into the window when the next item appended
// would have taken place At. An append that takes a lower place (its
// window's last items were forgotten since) lowers At to it: the
// re-admission came before the appended items.
type WindowReadmit struct {
	At, From, To int
}

// WindowAppend is what AppendWindow writes: the content of the messages'
// blocks, stored as PutEntries stores entries, and one item per message,
// whose EntryIDs name entries of Entries or entries stored before. Pos,
// Append and RefID of the items are set by the store.
type WindowAppend struct {
	Entries []Entry
	Items   []WindowItem
	// Key, when set, makes the append idempotent: the window keeps it
	// (for AppendKeyTTL), with Digest (what the append's items are, as
	// the caller hashes them), and an append under a key the window holds
	// writes nothing.
	// With the same digest it fails with an *AppendedError saying where
	// the first went; with another, with a *ConflictError. A client
	// that retries an append it never heard back from gives the retry
	// the first one's key, and the window gets the messages once.
	Key    string
	Digest string
}

// Misleads reports the characters that make a name read as another: the
// invisible formatting characters (Unicode's Cf: bidirectional controls,
// zero-width space, soft hyphen, tags, ...), but for the joiners that
// scripts and emoji need (U+200C, U+200D). A session or agent named with
// one would show as another on the dashboard and in every listing.
func Misleads(r rune) bool {
	return unicode.Is(unicode.Cf, r) && r != 0x200C && r != 0x200D
}

// CheckName checks an identifier people read (a session, an agent):
// UTF-8, at most MaxIdentifierBytes, without control characters or any
// that Misleads. An empty one is left to the caller.
func CheckName(field, id string) error {
	switch {
	case len(id) > MaxIdentifierBytes:
		return &ValidationError{Field: field, Msg: fmt.Sprintf("is %d bytes; at most %d", len(id), MaxIdentifierBytes)}
	case !utf8.ValidString(id):
		return &ValidationError{Field: field, Msg: fmt.Sprintf("%q is not valid UTF-8", id)}
	case strings.ContainsFunc(id, unicode.IsControl):
		return &ValidationError{Field: field, Msg: fmt.Sprintf("%q holds a control character", id)}
	case strings.ContainsFunc(id, Misleads):
		return &ValidationError{Field: field, Msg: fmt.Sprintf("%q holds a character that reorders or hides text (such as a right-to-left override)", id)}
	}
	return nil
}

// MaxAppendKey is the longest append key a window takes, in bytes.
const MaxAppendKey = 255

// AppendKeyTTL is how long a window keeps an append's key: a retry comes
// within seconds or minutes; after a day, the same key is a new append.
// The keys of a window older than this go at its next keyed append.
const AppendKeyTTL = 24 * time.Hour

// ValidAppendKey reports what is wrong with an append key, or nil: it
// must be 1 to MaxAppendKey bytes of printable ASCII (the header
// Idempotency-Key carries it over HTTP).
func ValidAppendKey(k string) error {
	if k == "" || len(k) > MaxAppendKey {
		return &ValidationError{Field: "key", Msg: fmt.Sprintf("must be 1 to %d bytes, not %d", MaxAppendKey, len(k))}
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return &ValidationError{Field: "key", Msg: fmt.Sprintf("must be printable ASCII; byte %d is %#x", i, k[i])}
		}
	}
	return nil
}

// ValidKey checks the append's key and digest, if it has a key.
func (a *WindowAppend) ValidKey() error {
	if a.Key == "" {
		return nil
	}
	if err := ValidAppendKey(a.Key); err != nil {
		return err
	}
	if a.Digest == "" || len(a.Digest) > 128 {
		return &ValidationError{Field: "digest", Msg: "an append with a key needs a digest of 1 to 128 bytes"}
	}
	return nil
}

// Replayed is the error of an append whose key the window holds with
// digest: an *AppendedError when it is this append's, a *ConflictError
// when it is not.
func (a *WindowAppend) Replayed(digest string, from, count int) error {
	if digest != a.Digest {
		return &ConflictError{What: fmt.Sprintf("append key %q", a.Key), Msg: "was used before for other messages; a retry must send the same messages, and a new append needs a new key"}
	}
	return &AppendedError{Key: a.Key, From: from, Count: count}
}

// AppendedError is AppendWindow's answer to an append whose key the
// window holds, with the same digest: the append was made before, and
// nothing is written again. Its items took the places From to
// From+Count-1.
type AppendedError struct {
	Key         string
	From, Count int
}

func (e *AppendedError) Error() string {
	return fmt.Sprintf("append key %q: appended before, at %d (%d items)", e.Key, e.From, e.Count)
}

// Eviction is a reference an Evictor decided to write, and the run of
// items it stands for: those with From <= Pos < To, each in the window or
// under one of the references it absorbs.
type Eviction struct {
	Ref      Reference
	From, To int
	// Absorb are references of the window whose items the new one takes
	// over (its ContentIDs hold theirs): a run evicted next to an earlier
	// one joins it, so that markers do not pile up. The absorbed
	// references stay, and their markers still expand.
	Absorb []string
}

// WindowState is what an Evictor sees of a window inside a write: its
// head, the items in it, and what stands for the items it evicted.
type WindowState struct {
	Window
	// Live are the items in the window, in order.
	Live []WindowItem
	// Evicted counts the items out of it, under Refs, in order of the
	// first place each stands for.
	Evicted int
	Refs    []WindowRef
	// Ref reads a reference within the transaction, for an evictor that
	// joins a run to one (its content IDs are not read until then).
	Ref func(id string) (Reference, error)
}

// WindowRef is a reference of a window, and the items under it.
type WindowRef struct {
	ID string
	// From and To are the places of its first item and one past its last.
	From, To int
	Items    int
	Tokens   int
}

// An Evictor decides, inside AppendWindow's or ReadmitWindow's
// transaction, what leaves a window once the change is in. It may be
// called more than once for one change (a busy store retries the
// transaction), so it must not keep state between calls.
type Evictor func(st WindowState) ([]Eviction, error)

// WindowSummary is a rolling summary of a run of a window's ledger: the
// items with From <= Pos < To, at a level (1: summarized from the
// messages; higher: from the summaries of the level below).
type WindowSummary struct {
	Level    int
	From, To int
	// Digest names the content summarized (the items' entries): a
	// summary whose run no longer holds it (a forget) is not its
	// summary.
	Digest string
	Text   string
	Tokens int
	// By is what made it: "extractive", or a model.
	By        string
	Epoch     int64
	CreatedAt time.Time
}

// Validate checks a summary before it is written.
func (s WindowSummary) Validate() error {
	switch {
	case s.Level < 1:
		return &ValidationError{Field: "level", Msg: fmt.Sprintf("a summary's level is 1 or more, got %d", s.Level)}
	case s.From < 0 || s.To <= s.From:
		return &ValidationError{Field: "places", Msg: fmt.Sprintf("a summary stands for items [%d, %d)", s.From, s.To)}
	case s.Digest == "" || s.Text == "" || s.By == "":
		return &ValidationError{Field: "summary", Msg: "a summary needs its digest, text and maker"}
	}
	return nil
}

// WindowSnapshot is a turn's assembled context, kept: the exact messages
// sent (Body, stored once by its hash however many turns share it) and
// the assembly's report, both JSON the store keeps opaque.
type WindowSnapshot struct {
	WindowKey
	// Seq numbers a window's snapshots from 1, in the order they were
	// taken.
	Seq int64
	// Hash is the SHA-256 of Body, in hex; PutSnapshot sets it.
	Hash string
	// Version is the window's version the turn was assembled at.
	Version   int64
	CreatedAt time.Time
	// Report is how the assembly went (budget, tokens, layers), JSON.
	Report []byte
	// Body is the messages sent, JSON; lists leave it out.
	Body []byte
	// Size is Body's length in bytes, in lists too.
	Size int
}

// MinSnapshotPrefix is the shortest hash prefix Snapshot accepts.
const MinSnapshotPrefix = 8

// ParseSnapshotHash checks a snapshot hash or prefix (MinSnapshotPrefix
// to 64 hex digits) and returns it in lower case.
func ParseSnapshotHash(s string) (string, error) {
	h := strings.ToLower(s)
	if len(h) < MinSnapshotPrefix || len(h) > 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", &ValidationError{Field: "hash", Msg: fmt.Sprintf("%q is not a snapshot hash: want %d to 64 hex digits", s, MinSnapshotPrefix)}
	}
	return h, nil
}
