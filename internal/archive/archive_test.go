package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

func newArchive(t *testing.T, opts Options) (*Archive, *sqlite.Store) {
	t.Helper()
	st := sqlitetest.Open(t, sqlite.Options{})
	a, err := New(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a, st
}

// ok returns a function that fails the test if a write fails.
func ok(t *testing.T) func(WriteResult, error) WriteResult {
	return func(wr WriteResult, err error) WriteResult {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return wr
	}
}

func register(t *testing.T, a *Archive, spec AgentSpec) *Handle {
	t.Helper()
	h, err := a.Register(context.Background(), spec)
	if err != nil {
		t.Fatalf("register %+v: %v", spec, err)
	}
	return h
}

func TestRegisterHierarchy(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	o1 := register(t, a, AgentSpec{SessionID: "s1", Model: "claude-opus-4-5"})
	if o1.Agent().ID != "o1" {
		t.Errorf("short id = %q, want o1", o1.Agent().ID)
	}
	sub := register(t, a, AgentSpec{ParentID: "o1", Model: "claude-opus-4-5"})
	if sub.Agent().ID != "o2" || sub.Session() != "s1" {
		t.Errorf("sub-agent = %+v, want o2 in s1", sub.Agent())
	}
	if _, err := a.Register(ctx, AgentSpec{ParentID: "o1", SessionID: "s2"}); err == nil {
		t.Error("sub-agent in another session than its parent was accepted")
	}
	if _, err := a.Register(ctx, AgentSpec{ParentID: "zz"}); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("unknown parent: %v, want ErrUnknownAgent", err)
	}
	if _, err := a.Register(ctx, AgentSpec{ID: "o1", SessionID: "s3"}); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate id: %v", err)
	}
	if _, err := a.Handle(ctx, "nobody"); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("unknown agent: %v", err)
	}
	// A session named to read as another (a right-to-left override) is
	// refused: the event log would show it so.
	var ve *store.ValidationError
	if _, err := a.Register(ctx, AgentSpec{SessionID: "bidi\u202eabc"}); !errors.As(err, &ve) {
		t.Errorf("a session with a right-to-left override: %v, want a validation error", err)
	}
	// A name, model or role is one line a list prints: an escape
	// sequence in one drove the terminal that listed the agents.
	for _, spec := range []AgentSpec{{SessionID: "s4", Name: "x\x1b[31mred"}, {SessionID: "s4", Model: "m\x1b[2J"}, {SessionID: "s4", Role: "r\nole"}} {
		if _, err := a.Register(ctx, spec); !errors.As(err, &ve) {
			t.Errorf("agent %+v: %v, want a validation error", spec, err)
		}
	}
	// A session named so before the check is still read.
	for _, read := range []func() error{
		func() error { _, err := a.ReadSession(ctx, "soft\u00adhyphen", 0); return err },
		func() error { _, err := a.SessionDecisions(ctx, "soft\u00adhyphen", 5); return err },
	} {
		if err := read(); errors.As(err, &ve) {
			t.Errorf("reading a session named with a soft hyphen: %v", err)
		}
	}
}

func TestIsolation(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	register(t, a, AgentSpec{ID: "b1", SessionID: "s2"})
	before, _ := a.Versions(ctx, "s2")
	_, err := a.HandleIn(ctx, "s2", "a1")
	var ie *IsolationError
	if !errors.As(err, &ie) {
		t.Fatalf("cross-session handle: %v, want *IsolationError", err)
	}
	after, _ := a.Versions(ctx, "s2")
	if before != after {
		t.Errorf("session s2 versions moved on a refused write: %v -> %v", before, after)
	}
	evs, err := a.Events(ctx, -1, 1)
	if err != nil || len(evs) != 1 || evs[0].Type != "isolation_violation" || !strings.Contains(evs[0].Detail, "s2") {
		t.Errorf("audit event = %+v, %v", evs, err)
	}
	if _, err := a.HandleIn(ctx, "s1", "a1"); err != nil {
		t.Errorf("own session: %v", err)
	}
}

func TestPatternsDedupAndSupersession(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	first, err := h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "Wrap errors with context using fmt.Errorf and %w so that callers can still match them with errors.Is"})
	if err != nil || first.Status != "created" || first.ID != fmt.Sprintf("pat-%d", first.GV) {
		t.Fatalf("first pattern: %+v, %v", first, err)
	}
	// The same text with other case and spacing merges by hash.
	dup, err := h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "  wrap errors with context using fmt.Errorf and %w so that callers can still match them with errors.Is."})
	if err != nil || dup.Status != "merged" || dup.Merged.Method != "hash" || dup.ID != first.ID || dup.GV != first.GV {
		t.Fatalf("hash duplicate: %+v, %v", dup, err)
	}
	// A near-duplicate merges by trigrams.
	near, err := h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "Wrap errors with context using fmt.Errorf and %w so that calers can still match them with errors.Is"})
	if err != nil || near.Status != "merged" || near.Merged.Method != "trigram" || near.Merged.Similarity <= 0.9 {
		t.Fatalf("trigram duplicate: %+v, %v", near, err)
	}
	uses, _ := a.Usage(ctx, []string{first.ID})
	if uses[first.ID] != 2 {
		t.Errorf("uses = %d, want 2", uses[first.ID])
	}
	// A contradiction is refused with the conflicting id.
	gv0, _ := a.Versions(ctx, "")
	_, err = h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "Never wrap errors with fmt.Errorf; return them as they are"})
	var ce *ConflictError
	if !errors.As(err, &ce) || len(ce.Records) != 1 || ce.Records[0] != first.ID {
		t.Fatalf("contradiction: %v, want a conflict naming %s", err, first.ID)
	}
	if gv1, _ := a.Versions(ctx, ""); gv1 != gv0 {
		t.Errorf("refused write moved the global version %d -> %d", gv0.GV, gv1.GV)
	}
	// Naming it in supersedes needs a reason, then succeeds.
	if _, err := h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "Never wrap errors with fmt.Errorf; return them as they are",
		Supersedes: []string{first.ID}}); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("supersession without reason: %v", err)
	}
	sup, err := h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "Never wrap errors with fmt.Errorf; return them as they are",
		Supersedes: []string{first.ID}, Reason: "callers match sentinel errors with =="})
	if err != nil || sup.Status != "created" || len(sup.Superseded) != 1 {
		t.Fatalf("supersession: %+v, %v", sup, err)
	}
	// Superseding a superseded or unknown pattern is refused.
	if _, err := h.RecordPattern(ctx, Pattern{Category: "error.logging", Pattern: "log at the edge", Supersedes: []string{first.ID}, Reason: "x"}); err == nil {
		t.Error("superseding an already superseded pattern was accepted")
	}
	if _, err := h.RecordPattern(ctx, Pattern{Category: "error.logging", Pattern: "log at the edge", Supersedes: []string{"pat-999"}, Reason: "x"}); err == nil ||
		!strings.Contains(err.Error(), "pat-999") {
		t.Errorf("unknown supersedes: %v", err)
	}
	// Reads and briefings show only the active pattern.
	res, err := a.ReadGlobal(ctx, GlobalRead{Kind: store.KindPattern})
	if err != nil || len(res.Records) != 1 || res.Records[0].ID != sup.ID {
		t.Fatalf("active patterns: %+v, %v", res, err)
	}
	all, _ := a.ReadGlobal(ctx, GlobalRead{Kind: store.KindPattern, All: true})
	if len(all.Records) != 2 || all.Records[1].SupersededBy != sup.ID {
		t.Errorf("all patterns: %+v", all.Records)
	}
	b, err := a.Briefing(ctx, "s1", Full, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.Text, first.ID+" ") || !strings.Contains(b.Text, sup.ID) {
		t.Errorf("briefing shows superseded or misses active pattern:\n%s", b.Text)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	ctx := context.Background()
	a, st := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	before, _ := st.ArchiveEvents(ctx, 0, 1000)
	cases := []struct {
		name string
		err  error
		want string
	}{}
	try := func(name, want string, err error) {
		cases = append(cases, struct {
			name string
			err  error
			want string
		}{name, err, want})
	}
	_, err := h.RecordPattern(ctx, Pattern{Category: "errors", Pattern: "x"})
	try("flat category", "hierarchical", err)
	_, err = h.RecordPattern(ctx, Pattern{Category: "cooking.pasta", Pattern: "x"})
	try("unknown L1", "unknown first level", err)
	_, err = h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: strings.Repeat("x", MaxTextBytes+1)})
	try("oversized", "at most", err)
	_, err = h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "  "})
	try("empty", "required", err)
	_, err = h.RecordFailure(ctx, Failure{Approach: "a", Reason: "b", Resolution: &Resolution{Approach: "c"}})
	try("resolution without outcome", "outcome", err)
	_, err = h.RecordResolution(ctx, "fail-77", Resolution{Approach: "c", Outcome: Success})
	try("resolution of unknown failure", "fail-77", err)
	_, err = h.UpdateFile(ctx, FileState{Path: "a.go", Status: "touched"})
	try("bad file status", "touched", err)
	_, err = h.DeclareIntent(ctx, Intent{Description: "rename"})
	try("intent without scope", "paths or categories", err)
	_, err = h.CompleteIntent(ctx, "int-5")
	try("unknown intent", "int-5", err)
	_, err = a.Briefing(ctx, "nosuch", Standard, nil)
	try("unknown session", "nosuch", err)
	_, err = a.Briefing(ctx, "s1", "huge", nil)
	try("bad tier", "huge", err)
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, c.err, c.want)
		}
	}
	after, _ := st.ArchiveEvents(ctx, 0, 1000)
	if len(after) != len(before) {
		t.Errorf("bad input wrote %d events", len(after)-len(before))
	}
	if v, _ := a.Versions(ctx, ""); v.GV != 0 {
		t.Errorf("global version %d after only bad input", v.GV)
	}
}

func TestRateLimits(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{Limits: Limits{PatternsPerMinute: 3, ActivePerCategory: 4}})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	for _, p := range []string{"table-driven tests with subtests", "t.TempDir for scratch files", "t.Setenv for environment"} {
		if _, err := h.RecordPattern(ctx, Pattern{Category: "testing.unit", Pattern: p}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.RecordPattern(ctx, Pattern{Category: "testing.unit", Pattern: "golden files under testdata"})
	var rl *RateLimitError
	if !errors.As(err, &rl) || rl.RetryAfter <= 0 || rl.RetryAfter > time.Minute {
		t.Fatalf("over the rate: %v, want a rate limit with retry-after", err)
	}
	// Another credential has its own budget, and its own share of the
	// category: a1's three patterns do not count against it.
	h2 := register(t, a, AgentSpec{ID: "b1", SessionID: "s2"})
	for _, p := range []string{"golden files under testdata", "fuzz every parser", "race detector in CI"} {
		if _, err := h2.RecordPattern(ctx, Pattern{Category: "testing.unit", Pattern: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Register(ctx, AgentSpec{ID: "c1", SessionID: "s3"}); err != nil {
		t.Fatal(err)
	}
}

// TestRateLimitsPerCredential: agents a key holder registers share its
// credential, so registering more of them, in any session name, does not
// buy more writes; and one credential that fills a category's cap does
// not lock another out of it.
func TestRateLimitsPerCredential(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{Limits: Limits{PatternsPerMinute: 2, ActivePerCategory: 3}})
	holder, _, err := a.RegisterWithKey(ctx, AgentSpec{ID: "k1", SessionID: "s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	subs := []*Handle{holder}
	for i := range 3 {
		sub, _, err := a.RegisterWithKey(ctx, AgentSpec{ID: fmt.Sprintf("k1-sub%d", i)}, holder)
		if err != nil {
			t.Fatal(err)
		}
		if sub.Agent().Credential != "k1" || sub.Session() != "s1" || sub.Agent().ParentID != "k1" {
			t.Fatalf("sub-agent %+v: want credential k1, session s1, parent k1", sub.Agent())
		}
		subs = append(subs, sub)
	}
	if _, _, err := a.RegisterWithKey(ctx, AgentSpec{ID: "k1-elsewhere", SessionID: "s9"}, holder); err == nil {
		t.Error("a key holder registered an agent in another session")
	}
	written := 0
	var rl *RateLimitError
	distinct := []string{"receivers are one letter", "acronyms keep their case", "packages are short nouns", "errors end in Error"}
	for i, h := range subs {
		_, err := h.RecordPattern(ctx, Pattern{Category: "style.naming", Pattern: distinct[i]})
		switch {
		case err == nil:
			written++
		case errors.As(err, &rl):
		default:
			t.Fatal(err)
		}
	}
	if written != 2 {
		t.Errorf("the key holder and its sub-agents wrote %d patterns in a minute, want the credential's 2", written)
	}
	// Fill k1's share of a category over time, then another credential
	// still writes there.
	clock := time.Now()
	b, _ := newArchive(t, Options{Limits: Limits{PatternsPerMinute: 2, ActivePerCategory: 3}, Now: func() time.Time { return clock }})
	junk := register(t, b, AgentSpec{ID: "junk", SessionID: "j1"})
	for i := range 4 {
		clock = clock.Add(time.Minute)
		_, err := junk.RecordPattern(ctx, Pattern{Category: "style.naming", Pattern: distinct[i]})
		if i < 3 && err != nil {
			t.Fatal(err)
		}
		if i == 3 && (!errors.As(err, &rl) || !strings.Contains(err.Error(), "active patterns")) {
			t.Fatalf("over its share of the category: %v", err)
		}
	}
	legit := register(t, b, AgentSpec{ID: "o1", SessionID: "real"})
	if _, err := legit.RecordPattern(ctx, Pattern{Category: "style.naming", Pattern: "exported names say what, not how"}); err != nil {
		t.Errorf("a legitimate writer is locked out of a category another filled: %v", err)
	}
}

func TestFailuresAndResolutions(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	f, err := h.RecordFailure(ctx, Failure{Category: "database.sql", Approach: "raw SQL strings in handlers", Reason: "injection and no reuse",
		Resolution: &Resolution{Approach: "parameterized queries", Outcome: Partial}})
	if err != nil || f.Status != "created" {
		t.Fatal(f, err)
	}
	// The same failure from another agent merges and adds its resolution.
	h2 := register(t, a, AgentSpec{ID: "a2", SessionID: "s2"})
	m, err := h2.RecordFailure(ctx, Failure{Category: "database.sql", Approach: "raw SQL strings in handlers", Reason: "injection and no reuse",
		Resolution: &Resolution{Approach: "use the query builder", Outcome: Success}})
	if err != nil || m.Status != "merged" || m.ID != f.ID {
		t.Fatalf("duplicate failure: %+v, %v", m, err)
	}
	for range 2 {
		if _, err := h2.RecordResolution(ctx, f.ID, Resolution{Approach: "Use the query builder.", Outcome: Success}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := a.ReadGlobal(ctx, GlobalRead{Kind: store.KindFailure})
	if err != nil || len(res.Records) != 1 {
		t.Fatal(res, err)
	}
	rs := res.Records[0].Resolutions
	if len(rs) != 2 || rs[0].Approach != "use the query builder" || rs[0].Successes != 3 || rs[1].Partials != 1 {
		t.Fatalf("ranked resolutions = %+v", rs)
	}
}

func TestSessionHierarchy(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	parent := register(t, a, AgentSpec{ID: "p", SessionID: "s1"})
	child := register(t, a, AgentSpec{ID: "c", ParentID: "p"})
	sib := register(t, a, AgentSpec{ID: "d", ParentID: "p"})

	if _, err := child.UpdateResume(ctx, Resume{Task: "child task"}); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.UpdateResume(ctx, Resume{Task: "parent task", Next: []string{"a", "b"}}); err != nil {
		t.Fatalf("parent overriding child: %v", err)
	}
	_, err := child.UpdateResume(ctx, Resume{Task: "child again"})
	var ce *ConflictError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "ancestor") {
		t.Fatalf("child overriding parent: %v", err)
	}
	// Siblings: last write wins for resume.
	s1 := register(t, a, AgentSpec{ID: "x", SessionID: "s9"})
	s2 := register(t, a, AgentSpec{ID: "y", SessionID: "s9"})
	ok(t)(s1.UpdateResume(ctx, Resume{Task: "one"}))
	if _, err := s2.UpdateResume(ctx, Resume{Task: "two"}); err != nil {
		t.Fatal(err)
	}
	r, _ := a.ReadSession(ctx, "s9", 0)
	if r.Resume.Task != "two" || r.Resume.Agent != "y" {
		t.Errorf("sibling resume = %+v", r.Resume)
	}
	// Files: siblings merge (stronger status, both agents).
	if _, err := child.UpdateFile(ctx, FileState{Path: "auth/service.go", Status: Modified, Summary: "refresh tokens"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sib.UpdateFile(ctx, FileState{Path: "./auth/service.go", Status: Read}); err != nil {
		t.Fatal(err)
	}
	sr, err := a.ReadSession(ctx, "s1", 0)
	if err != nil || len(sr.Files) != 1 {
		t.Fatal(sr, err)
	}
	if f := sr.Files[0]; f.Status != Modified || f.Summary != "refresh tokens" || len(f.Agents) != 2 {
		t.Errorf("merged file = %+v", f)
	}
	// The parent's write replaces; then a child cannot override it.
	if _, err := parent.UpdateFile(ctx, FileState{Path: "auth/service.go", Status: Read, Summary: "reverted"}); err != nil {
		t.Fatal(err)
	}
	if _, err := child.UpdateFile(ctx, FileState{Path: "auth/service.go", Status: Modified}); !errors.As(err, &ce) {
		t.Errorf("child overriding parent's file: %v", err)
	}
	// Conditional session read.
	nm, _ := a.ReadSession(ctx, "s1", sr.SV+1)
	if nm.Status != StatusNotModified {
		t.Errorf("read with current sv: %s", nm.Status)
	}
}

func TestVersionedReads(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{DeltaLimit: 3})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	for i, text := range []string{"prefer small interfaces", "errors are values", "accept interfaces return structs", "no init side effects", "keep main small"} {
		wr, err := h.RecordInsight(ctx, Insight{Insight: text, Category: "structure.modules"})
		if err != nil || wr.GV != uint64(i+1) {
			t.Fatalf("insight %d: %+v, %v", i, wr, err)
		}
	}
	full, _ := a.ReadGlobal(ctx, GlobalRead{})
	if full.Status != StatusOK || full.GV != 5 || len(full.Records) != 5 {
		t.Fatalf("full read: %+v", full)
	}
	nm, _ := a.ReadGlobal(ctx, GlobalRead{IfGV: 5})
	if nm.Status != StatusNotModified || nm.Records != nil {
		t.Errorf("conditional read: %+v", nm)
	}
	// What the reader did not read again: the tokens of the full read's
	// records, or of those a delta leaves out.
	fullTokens := 0
	for i := range full.Records {
		b, _ := json.Marshal(&full.Records[i])
		fullTokens += a.enc.Count(string(b))
	}
	if nm.SavedTokens != fullTokens || fullTokens == 0 {
		t.Errorf("not modified saved %d tokens, want the full read's %d", nm.SavedTokens, fullTokens)
	}
	delta, _ := a.ReadGlobal(ctx, GlobalRead{Since: 3})
	if delta.Status != StatusOK || len(delta.Records) != 2 || delta.Records[0].GV != 5 {
		t.Errorf("delta: %+v", delta)
	}
	deltaTokens := 0
	for i := range delta.Records {
		b, _ := json.Marshal(&delta.Records[i])
		deltaTokens += a.enc.Count(string(b))
	}
	if delta.SavedTokens != fullTokens-deltaTokens || deltaTokens == 0 {
		t.Errorf("delta saved %d tokens, want %d - %d", delta.SavedTokens, fullTokens, deltaTokens)
	}
	if full.SavedTokens != 0 || full.More {
		t.Errorf("full read: saved %d, more %v", full.SavedTokens, full.More)
	}
	if two, _ := a.ReadGlobal(ctx, GlobalRead{Limit: 2}); len(two.Records) != 2 || !two.More {
		t.Errorf("limited read: %d records, more %v", len(two.Records), two.More)
	}
	if five, _ := a.ReadGlobal(ctx, GlobalRead{Limit: 5}); len(five.Records) != 5 || five.More {
		t.Errorf("read limited to exactly all: %d records, more %v", len(five.Records), five.More)
	}
	big, _ := a.ReadGlobal(ctx, GlobalRead{Since: 1})
	if big.Status != StatusTooLarge {
		t.Errorf("large delta: %+v", big)
	}
	if _, err := a.ReadGlobal(ctx, GlobalRead{Since: 9}); err == nil {
		t.Error("since ahead of the archive was accepted")
	}
}

func TestBriefings(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "o1", SessionID: "s1", Model: "claude-opus-4-5"})
	ok(t)(h.UpdateResume(ctx, Resume{Task: "auth rewrite", Objective: "JWT everywhere", Done: []string{"a", "b"}, Current: "middleware",
		Next: []string{"tests", "docs"}, FilesToRead: []string{"internal/auth/jwt.go"}}))
	ok(t)(h.UpdateFile(ctx, FileState{Path: "internal/auth/service.go", Status: Modified, Summary: "refresh"}))
	ok(t)(h.UpdateFile(ctx, FileState{Path: "internal/auth/types.go", Status: Created}))
	ok(t)(h.AddPreference(ctx, Preference{Text: "keep the public API stable"}))
	ok(t)(h.AddPreference(ctx, Preference{Text: "global state", Reject: true}))
	other := register(t, a, AgentSpec{ID: "c1", SessionID: "s2"})
	ok(t)(other.RecordPattern(ctx, Pattern{Category: "auth.tokens", Pattern: "validate JWT expiry on every request"}))
	ok(t)(other.RecordPattern(ctx, Pattern{Category: "ui.forms", Pattern: "debounce inputs"}))
	fail, _ := other.RecordFailure(ctx, Failure{Category: "auth.tokens", Approach: "storing tokens in localStorage", Reason: "XSS exposure",
		Resolution: &Resolution{Approach: "httpOnly cookies", Outcome: Success}})
	in, err := other.DeclareIntent(ctx, Intent{Description: "rename auth.Token to auth.Credential", Paths: []string{"internal/auth"}})
	if err != nil {
		t.Fatal(err)
	}

	micro, err := a.Briefing(ctx, "s1", Micro, nil)
	if err != nil {
		t.Fatal(err)
	}
	if micro.Text != "auth-rewrite:3/5:service.go(m),types.go(c):block=none" || micro.Tokens > Micro.Budget() {
		t.Errorf("micro = %q (%d tokens)", micro.Text, micro.Tokens)
	}
	std, err := a.Briefing(ctx, "s1", Standard, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"task: auth rewrite", "step 3/5: middleware", "internal/auth/service.go", "user wants: keep the public API stable",
		"user rejects: global state", "validate JWT expiry", fail.ID, "httpOnly cookies", in.ID} {
		if !strings.Contains(std.Text, want) {
			t.Errorf("standard briefing lacks %q:\n%s", want, std.Text)
		}
	}
	// A pattern of another area comes after the session's own area's.
	if i, j := strings.Index(std.Text, "validate JWT expiry"), strings.Index(std.Text, "debounce"); j >= 0 && j < i {
		t.Errorf("standard briefing shows an irrelevant pattern before a relevant one:\n%s", std.Text)
	}
	if std.Tokens > Standard.Budget() || std.Tokens != a.enc.Count(std.Text) {
		t.Errorf("standard tokens = %d", std.Tokens)
	}
	// Conditional: the same versions get NOT_MODIFIED; a write elsewhere
	// in the global history changes gv and the answer.
	nm, _ := a.Briefing(ctx, "s1", Standard, &Versions{GV: std.GV, SV: std.SV})
	if nm.Status != StatusNotModified || nm.Text != "" {
		t.Errorf("conditional briefing: %+v", nm)
	}
	if _, err := other.CompleteIntent(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	std2, _ := a.Briefing(ctx, "s1", Standard, &Versions{GV: std.GV, SV: std.SV})
	if std2.Status != StatusOK || std2.GV != std.GV+1 || strings.Contains(std2.Text, in.ID) {
		t.Errorf("after completing the intent: %+v", std2)
	}
	// The full tier stays within its budget even with a large history.
	for i := range 120 {
		ok(t)(other.RecordInsight(ctx, Insight{Insight: fmt.Sprintf("insight number %d about the %dth subsystem's quirks", i, i*31)}))
	}
	full, err := a.Briefing(ctx, "s1", Full, nil)
	if err != nil {
		t.Fatal(err)
	}
	if full.Tokens > Full.Budget() || full.Omitted == 0 {
		t.Errorf("full briefing: %d tokens, %d omitted", full.Tokens, full.Omitted)
	}
}

// TestConcurrentWriters checks group commit: many goroutines writing at
// once each get a distinct version, and all of them are stored.
func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	a, st := newArchive(t, Options{Limits: Limits{WritesPerMinute: 100_000}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[uint64]bool{}
	errs := make(chan error, 64)
	for w := range 8 {
		h := register(t, a, AgentSpec{ID: fmt.Sprintf("w%d", w), SessionID: fmt.Sprintf("s%d", w%4)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				// Hex digests share few trigrams, so none is a duplicate.
				text := fmt.Sprintf("insight %x", sha256.Sum256(fmt.Appendf(nil, "%d/%d", w, i)))
				wr, err := h.RecordInsight(ctx, Insight{Insight: text})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if wr.Status != "created" {
					errs <- fmt.Errorf("insight %q: %+v", text, wr)
				}
				if seen[wr.GV] {
					errs <- fmt.Errorf("version %d given twice", wr.GV)
				}
				seen[wr.GV] = true
				mu.Unlock()
				if _, err := h.UpdateFile(ctx, FileState{Path: fmt.Sprintf("f%d.go", i%5), Status: Modified}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	gv, _, _ := st.ArchiveVersions(ctx, "")
	recs, _ := st.ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindInsight}})
	if gv != 320 || len(recs) != 320 || len(seen) != 320 {
		t.Errorf("gv %d, %d insights stored, %d versions acknowledged; want 320", gv, len(recs), len(seen))
	}
}

// TestAgentKeys: a key authenticates its agent only; a new key replaces
// the old; the store keeps no key, only its hash.
func TestAgentKeys(t *testing.T) {
	ctx := context.Background()
	a, st := newArchive(t, Options{})
	h, key, err := a.RegisterWithKey(ctx, AgentSpec{ID: "o1", SessionID: "s1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !IsKey(key) || !h.Agent().HasKey {
		t.Fatalf("key %q, agent %+v", key, h.Agent())
	}
	got, err := a.Authenticate(ctx, key)
	if err != nil || got.Agent().ID != "o1" || got.Session() != "s1" {
		t.Fatalf("authenticate: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "o1", key + "x", KeyPrefix + "AAAA", strings.TrimPrefix(key, KeyPrefix)} {
		if _, err := a.Authenticate(ctx, bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("authenticate %q: %v, want ErrBadKey", bad, err)
		}
	}
	key2, err := a.IssueKey(ctx, "o1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, key); !errors.Is(err, ErrBadKey) {
		t.Errorf("the replaced key still authenticates: %v", err)
	}
	if got, err := a.Authenticate(ctx, key2); err != nil || got.Agent().ID != "o1" {
		t.Errorf("new key: %+v, %v", got, err)
	}
	if _, err := a.IssueKey(ctx, "nobody"); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("key for an unknown agent: %v", err)
	}
	evs, err := st.ArchiveEvents(ctx, -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(e.Detail, key) || strings.Contains(e.Detail, key2) {
			t.Errorf("event %+v holds the key", e)
		}
	}
}

// TestAgentIDFor: a session that makes a valid ID keeps it; one that
// does not becomes a valid ID that two sessions reading alike do not
// share.
func TestAgentIDFor(t *testing.T) {
	if got := AgentIDFor("mcp", "s1"); got != "mcp@s1" {
		t.Errorf("s1: %q", got)
	}
	seen := map[string]string{}
	for _, s := range []string{"a b", "a_b", "a\tb", "ünï", "üni", strings.Repeat("x", 200), strings.Repeat("x", 201)} {
		id := AgentIDFor("mcp", s)
		if !strings.HasPrefix(id, "mcp@") || len(id) > MaxIDBytes || !idPattern.MatchString(id) {
			t.Errorf("session %q: ID %q", s, id)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("sessions %q and %q share the ID %q", other, s, id)
		}
		seen[id] = s
	}
}

// TestClipID: a valid ID is kept; a valid one only too long keeps the
// form the hooks have always given it; anything else becomes a valid ID
// that two strings reading alike do not share.
func TestClipID(t *testing.T) {
	if got := ClipID("claude-code@9f1c/a1b2"); got != "claude-code@9f1c/a1b2" {
		t.Errorf("valid: %q", got)
	}
	long := "claude-code@" + strings.Repeat("s", 60)
	sum := sha256.Sum256([]byte(long))
	if got, want := ClipID(long), long[:47]+"-"+hex.EncodeToString(sum[:8]); got != want {
		t.Errorf("long: %q, want %q", got, want)
	}
	seen := map[string]string{}
	for _, s := range []string{"", " ", "a b", "a_b", "a\tb", "ünï", "üni", "-x", "_x", "codex@a b/ü", long + "x"} {
		id := ClipID(s)
		if checkID("agent", id) != nil {
			t.Errorf("%q: ID %q is not valid", s, id)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%q and %q share the ID %q", other, s, id)
		}
		seen[id] = s
	}
}

// TestWriteSession_Unchanged: a session's state written again as it is
// writes nothing and keeps its version, so that a reader holding it gets
// NOT_MODIFIED; a change writes a new version.
func TestWriteSession_Unchanged(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "p", SessionID: "s1"})
	first, err := h.UpdateResume(ctx, Resume{Task: "fix the upload", Next: []string{"patch"}})
	if err != nil || first.Status != "created" {
		t.Fatalf("first: %+v, %v", first, err)
	}
	for _, r := range []Resume{{Task: "fix the upload", Next: []string{"patch"}}, {}} {
		again, err := h.UpdateResume(ctx, r)
		if err != nil || again.Status != "unchanged" || again.SV != first.SV {
			t.Errorf("again as it is (%+v): %+v, %v; want unchanged at sv %d", r, again, err, first.SV)
		}
	}
	f1, err := h.UpdateFile(ctx, FileState{Path: "internal/upload/retry.go", Status: "modified", Summary: "jitter"})
	if err != nil {
		t.Fatal(err)
	}
	if f2, err := h.UpdateFile(ctx, FileState{Path: "internal/upload/retry.go", Status: "modified", Summary: "jitter"}); err != nil || f2.Status != "unchanged" || f2.SV != f1.SV {
		t.Errorf("a file written again as it is: %+v, %v", f2, err)
	}
	next, err := h.UpdateResume(ctx, Resume{Current: "running the tests"})
	if err != nil || next.Status != "updated" || next.SV <= f1.SV {
		t.Errorf("a change: %+v, %v", next, err)
	}
}

// TestConnectOnWrite: an agent connected on its first write is
// registered by that write, in its transaction: a refused write leaves
// no agent, a read none, and a second handle for the same agent, made
// before the first wrote, writes as the agent the first registered.
func TestConnectOnWrite(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	spec := AgentSpec{ID: "http@s1", SessionID: "s1", Role: "http"}
	h1, err := a.ConnectOnWrite(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := a.ConnectOnWrite(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h1.RecordPattern(ctx, Pattern{Category: "bogus", Pattern: "x"}); err == nil {
		t.Fatal("a pattern of an unknown category was taken")
	}
	if _, err := h1.RecordResolution(ctx, "fail-404", Resolution{Approach: "y", Outcome: Success}); err == nil {
		t.Fatal("a resolution of an unknown failure was taken")
	}
	if _, err := a.ReadSession(ctx, "s1", 0); err != nil && !errors.Is(err, ErrUnknownAgent) && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	if ags, err := a.Agents(ctx, "s1"); err != nil || len(ags) != 0 {
		t.Fatalf("after refused writes and a read: agents %+v, %v", ags, err)
	}
	ok(t)(h1.RecordInsight(ctx, Insight{Insight: "the first write registers"}))
	ok(t)(h2.RecordInsight(ctx, Insight{Insight: "a second handle writes as the same agent"}))
	ags, err := a.Agents(ctx, "s1")
	if err != nil || len(ags) != 1 || ags[0].ID != "http@s1" || ags[0].Role != "http" {
		t.Fatalf("agents %+v, %v: want http@s1 once", ags, err)
	}
	// The same name in another session is refused, as Connect refuses it.
	other, err := a.ConnectOnWrite(ctx, AgentSpec{ID: "http@s1", SessionID: "s2"})
	var ie *IsolationError
	if err == nil {
		_, err = other.RecordInsight(ctx, Insight{Insight: "from s2"})
	}
	if !errors.As(err, &ie) {
		t.Errorf("agent http@s1 in session s2: %v, want an isolation error", err)
	}
}

// TestReadGlobalUsesAreCurrent: a record's uses (how often a duplicate was
// merged into it) are the store's count when a read answers, not the count
// the process's mirror of the history held when it first read the record:
// a merge after that, by this archive or by another process on the same
// store, shows in the next read, in a full read, a delta and a recall.
func TestReadGlobalUsesAreCurrent(t *testing.T) {
	ctx := context.Background()
	a, st := newArchive(t, Options{})
	other, err := New(st, Options{}) // another process on the same store
	if err != nil {
		t.Fatal(err)
	}
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	h2 := register(t, other, AgentSpec{ID: "b1", SessionID: "s2"})
	text := "Wrap errors with context using fmt.Errorf and %w so that callers can still match them"
	first := ok(t)(h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: text}))
	uses := func(what string, want int64) {
		t.Helper()
		res, err := a.ReadGlobal(ctx, GlobalRead{Kind: store.KindPattern})
		if err != nil || len(res.Records) != 1 || res.Records[0].Uses != want {
			t.Errorf("%s: read %+v, %v; want %s with uses %d", what, res.Records, err, first.ID, want)
		}
		delta, err := a.ReadGlobal(ctx, GlobalRead{Since: first.GV - 1})
		if err != nil || len(delta.Records) != 1 || delta.Records[0].Uses != want {
			t.Errorf("%s: delta %+v, %v; want %s with uses %d", what, delta.Records, err, first.ID, want)
		}
		ans, err := a.Ask(ctx, nil, "@arch:recall:patterns?category=error.handling", AskOptions{})
		if err != nil || len(ans) != 1 || len(ans[0].Records) != 1 || ans[0].Records[0].Uses != want {
			t.Errorf("%s: recall %+v, %v; want %s with uses %d", what, ans, err, first.ID, want)
		}
	}
	uses("before any merge", 0)
	if wr := ok(t)(h.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: text + "."})); wr.Status != "merged" {
		t.Fatalf("duplicate: %+v", wr)
	}
	uses("after a merge by this archive", 1)
	if wr := ok(t)(h2.RecordPattern(ctx, Pattern{Category: "error.handling", Pattern: "  " + text})); wr.Status != "merged" {
		t.Fatalf("duplicate from another process: %+v", wr)
	}
	uses("after a merge by another process", 2)
}

// TestCompletedIntentsListed: a read that includes completed intents (All)
// shows each as completed, by whom and when; an open one carries neither.
// Active reads leave completed intents out, as before.
func TestCompletedIntentsListed(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	sub := register(t, a, AgentSpec{ID: "a2", ParentID: "a1"})
	done := ok(t)(h.DeclareIntent(ctx, Intent{Description: "rename db.Conn to db.Pool", Paths: []string{"internal/db"}, TTL: time.Hour}))
	open := ok(t)(h.DeclareIntent(ctx, Intent{Description: "move the config loader", Paths: []string{"internal/config"}, TTL: time.Hour}))
	ok(t)(sub.CompleteIntent(ctx, done.ID))

	res, err := a.ReadGlobal(ctx, GlobalRead{Kind: store.KindIntent})
	if err != nil || len(res.Records) != 1 || res.Records[0].ID != open.ID {
		t.Fatalf("active intents: %+v, %v; want %s alone", res.Records, err, open.ID)
	}
	res, err = a.ReadGlobal(ctx, GlobalRead{Kind: store.KindIntent, All: true})
	if err != nil || len(res.Records) != 2 {
		t.Fatalf("all intents: %+v, %v", res.Records, err)
	}
	for _, r := range res.Records {
		switch r.ID {
		case done.ID:
			if r.CompletedBy != "a2" || r.CompletedAt.IsZero() {
				t.Errorf("completed intent %s: completed by %q at %v; want a2, and when", r.ID, r.CompletedBy, r.CompletedAt)
			}
			b, _ := json.Marshal(r)
			if !strings.Contains(string(b), `"completed_by":"a2"`) {
				t.Errorf("completed intent's JSON: %s", b)
			}
		case open.ID:
			if r.CompletedBy != "" || !r.CompletedAt.IsZero() {
				t.Errorf("open intent %s shown completed by %q at %v", r.ID, r.CompletedBy, r.CompletedAt)
			}
			b, _ := json.Marshal(r)
			if strings.Contains(string(b), "completed") {
				t.Errorf("open intent's JSON: %s", b)
			}
		}
	}
	ans, err := a.Ask(ctx, nil, "@arch:recall:learnings?all=true&q=rename db.Conn", AskOptions{})
	if err != nil || len(ans) != 1 {
		t.Fatalf("recall: %+v, %v", ans, err)
	}
	found := false
	for _, r := range ans[0].Records {
		if r.ID == done.ID {
			found = true
			if r.CompletedBy != "a2" {
				t.Errorf("recalled completed intent: completed by %q, want a2", r.CompletedBy)
			}
		}
	}
	if !found {
		t.Errorf("recall with all=true lacks %s: %+v", done.ID, ans[0].Records)
	}
}

// TestIntentDeltaCarriesCompletions: a delta read of intents alone holds
// the completions since its version, as a delta of every kind does, so a
// client holding the list learns that one ended.
func TestIntentDeltaCarriesCompletions(t *testing.T) {
	ctx := context.Background()
	a, _ := newArchive(t, Options{})
	h := register(t, a, AgentSpec{ID: "a1", SessionID: "s1"})
	in := ok(t)(h.DeclareIntent(ctx, Intent{Description: "rename db.Conn to db.Pool", Paths: []string{"internal/db"}, TTL: time.Hour}))
	full, err := a.ReadGlobal(ctx, GlobalRead{Kind: store.KindIntent})
	if err != nil || len(full.Records) != 1 {
		t.Fatalf("intents: %+v, %v", full.Records, err)
	}
	ok(t)(h.CompleteIntent(ctx, in.ID))
	for _, kind := range []store.RecordKind{"", store.KindIntent} {
		delta, err := a.ReadGlobal(ctx, GlobalRead{Kind: kind, Since: full.GV})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range delta.Records {
			got = append(got, string(r.Kind)+" "+r.Ref)
		}
		if len(delta.Records) != 1 || delta.Records[0].Kind != store.KindIntentDone || delta.Records[0].Ref != in.ID {
			t.Errorf("delta of kind %q since %d: %v; want the completion of %s", kind, full.GV, got, in.ID)
		}
	}
	// A delta of another kind does not carry it.
	if delta, err := a.ReadGlobal(ctx, GlobalRead{Kind: store.KindPattern, Since: full.GV}); err != nil || len(delta.Records) != 0 {
		t.Errorf("a delta of patterns: %+v, %v", delta.Records, err)
	}
}
