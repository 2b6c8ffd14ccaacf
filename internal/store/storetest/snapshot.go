package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/store"
)

func putSnapshot(t testing.TB, s store.Store, key store.WindowKey, body, report string, version int64, keep int) store.WindowSnapshot {
	t.Helper()
	snap, err := s.PutSnapshot(context.Background(), store.WindowSnapshot{WindowKey: key, Body: []byte(body), Report: []byte(report), Version: version}, keep)
	if err != nil {
		t.Fatalf("PutSnapshot: %v", err)
	}
	return snap
}

// collidingBodies returns two JSON bodies whose hashes share their first
// store.MinSnapshotPrefix hex digits: 32 bits, so some 65,000 tries.
func collidingBodies() (string, string) {
	seen := map[string]string{}
	for i := 0; ; i++ {
		b := fmt.Sprintf(`[{"n":%d}]`, i)
		p := store.ID([]byte(b))[:store.MinSnapshotPrefix]
		if o, ok := seen[p]; ok {
			return o, b
		}
		seen[p] = b
	}
}

// testSnapshots: a window's turn snapshots are numbered in order, share a
// body when their messages are the same, list newest first, are found by
// number, hash or a prefix of one (refused when malformed or ambiguous),
// are refused all or nothing, and keep only the newest when told to.
func testSnapshots(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	other := store.WindowKey{SessionID: "s1", AgentID: "gpt"}
	if _, err := s.PutSnapshot(ctx, store.WindowSnapshot{WindowKey: key, Body: []byte("[]"), Report: []byte("{}")}, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("PutSnapshot of no window: %v, want ErrNotFound", err)
	}
	if _, err := s.Snapshots(ctx, key, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Snapshots of no window: %v, want ErrNotFound", err)
	}
	for _, k := range []store.WindowKey{key, other} {
		if _, err := s.PutWindow(ctx, k, []byte(`{"model":"a"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Snapshots(ctx, key, 0); err != nil || len(got) != 0 {
		t.Fatalf("Snapshots of a new window: %+v, %v", got, err)
	}
	bodyA := `[{"role":"system","blocks":[{"type":"text","text":"You are careful."}]}]`
	bodyB := `[{"role":"system","blocks":[{"type":"text","text":"You are careful."}]},{"role":"user","blocks":[{"type":"text","text":"hi"}]}]`
	a1 := putSnapshot(t, s, key, bodyA, `{"budget":1000,"tokens":10}`, 3, 0)
	a2 := putSnapshot(t, s, key, bodyA, `{"budget":1000,"tokens":10}`, 3, 0)
	b3 := putSnapshot(t, s, key, bodyB, `{"budget":1000,"tokens":14,"extra":{"x":1}}`, 4, 0)
	putSnapshot(t, s, other, bodyA, `{}`, 1, 0)
	if a1.Seq != 1 || a2.Seq != 2 || b3.Seq != 3 || a1.Hash != store.ID([]byte(bodyA)) || a2.Hash != a1.Hash || b3.Hash == a1.Hash {
		t.Fatalf("snapshots put: %+v, %+v, %+v", a1, a2, b3)
	}
	if a1.Size != len(bodyA) || a1.Body != nil || a1.Version != 3 || a1.CreatedAt.IsZero() {
		t.Errorf("a snapshot as put: %+v", a1)
	}
	list, err := s.Snapshots(ctx, key, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Seq != 3 || list[1].Seq != 2 || list[0].Body != nil || list[0].Size != len(bodyB) ||
		string(list[0].Report) != `{"budget":1000,"tokens":14,"extra":{"x":1}}` || !list[0].CreatedAt.Equal(b3.CreatedAt) || list[0].Version != 4 {
		t.Errorf("Snapshots(2): %+v", list)
	}
	if all, err := s.Snapshots(ctx, key, 0); err != nil || len(all) != 3 {
		t.Errorf("Snapshots(0): %d, %v", len(all), err)
	}
	// By number, by hash, by a prefix in either case: the body too.
	if got, err := s.SnapshotAt(ctx, key, 1); err != nil || string(got.Body) != bodyA || got.Seq != 1 || got.Size != len(bodyA) {
		t.Errorf("SnapshotAt(1): %+v, %v", got, err)
	}
	if _, err := s.SnapshotAt(ctx, key, 9); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SnapshotAt(9): %v, want ErrNotFound", err)
	}
	for _, h := range []string{b3.Hash, b3.Hash[:store.MinSnapshotPrefix], strings.ToUpper(b3.Hash[:12])} {
		if got, err := s.Snapshot(ctx, key, h); err != nil || string(got.Body) != bodyB || got.Seq != 3 {
			t.Errorf("Snapshot(%s): %+v, %v", h, got, err)
		}
	}
	// A body shared by several turns: the newest of them.
	if got, err := s.Snapshot(ctx, key, a1.Hash); err != nil || got.Seq != 2 {
		t.Errorf("Snapshot of a shared hash: %+v, %v", got, err)
	}
	// Another window's snapshots are not this one's.
	if got, err := s.Snapshot(ctx, other, b3.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another window's snapshot: %+v, %v", got, err)
	}
	for _, h := range []string{"", "abc", "0123456", "xyz12345678", b3.Hash + "0"} {
		var ve *store.ValidationError
		if _, err := s.Snapshot(ctx, key, h); !errors.As(err, &ve) {
			t.Errorf("Snapshot(%q): %v, want a *ValidationError", h, err)
		}
	}
	// Two hashes with the same first digits: the prefix is ambiguous,
	// a longer one is not.
	c1, c2 := collidingBodies()
	s1, s2 := putSnapshot(t, s, key, c1, `{}`, 5, 0), putSnapshot(t, s, key, c2, `{}`, 5, 0)
	var ae *store.AmbiguousError
	if _, err := s.Snapshot(ctx, key, s1.Hash[:store.MinSnapshotPrefix]); !errors.As(err, &ae) || len(ae.Matches) != 2 {
		t.Errorf("an ambiguous prefix: %v, want an *AmbiguousError of both", err)
	}
	if got, err := s.Snapshot(ctx, key, s2.Hash[:20]); err != nil || got.Seq != s2.Seq {
		t.Errorf("a longer prefix: %+v, %v", got, err)
	}
	// Refused, all or nothing.
	for name, snap := range map[string]store.WindowSnapshot{
		"body not JSON":   {WindowKey: key, Body: []byte("[{"), Report: []byte("{}")},
		"report not JSON": {WindowKey: key, Body: []byte("[]"), Report: []byte("nope")},
		"wrong hash":      {WindowKey: key, Body: []byte("[]"), Report: []byte("{}"), Hash: a1.Hash},
		"no agent":        {WindowKey: store.WindowKey{SessionID: "s1"}, Body: []byte("[]"), Report: []byte("{}")},
	} {
		if _, err := s.PutSnapshot(ctx, snap, 0); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if all, _ := s.Snapshots(ctx, key, 0); len(all) != 5 {
		t.Errorf("after refusals: %d snapshots, want 5", len(all))
	}
	// Keep 2: the older go, and with them the bodies no snapshot left
	// shares (bodyA stays: the other window's snapshot has it).
	kept := putSnapshot(t, s, key, `[{"n":"last"}]`, `{}`, 6, 2)
	all, err := s.Snapshots(ctx, key, 0)
	if err != nil || len(all) != 2 || all[0].Seq != kept.Seq || all[1].Seq != s2.Seq {
		t.Fatalf("after keeping 2: %+v, %v", all, err)
	}
	for _, h := range []string{a1.Hash, b3.Hash, s1.Hash} {
		if _, err := s.Snapshot(ctx, key, h); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Snapshot(%s) after keeping 2: %v, want ErrNotFound", h[:8], err)
		}
	}
	if got, err := s.Snapshot(ctx, other, a1.Hash); err != nil || string(got.Body) != bodyA {
		t.Errorf("the other window's snapshot of a shared body: %+v, %v", got, err)
	}
	// Numbers go on after the last.
	if next := putSnapshot(t, s, key, bodyA, `{}`, 7, 0); next.Seq != kept.Seq+1 {
		t.Errorf("the snapshot after: %d, want %d", next.Seq, kept.Seq+1)
	}
}

// testForgetSnapshots: forgetting a session removes its windows'
// snapshots, and leaves another session's, whose body it shared.
func testForgetSnapshots(t *testing.T, s store.Store) {
	ctx := context.Background()
	k1 := store.WindowKey{SessionID: "s1", AgentID: "a1"}
	k2 := store.WindowKey{SessionID: "s2", AgentID: "b1"}
	for _, k := range []store.WindowKey{k1, k2} {
		if _, err := s.PutWindow(ctx, k, []byte(`{"model":"a"}`)); err != nil {
			t.Fatal(err)
		}
		appendMessages(t, s, k, nil, "a message of "+k.SessionID)
	}
	shared := `[{"role":"user","blocks":[{"type":"text","text":"shared"}]}]`
	only := `[{"role":"user","blocks":[{"type":"text","text":"the wombat plan of session one"}]}]`
	putSnapshot(t, s, k1, shared, `{}`, 2, 0)
	putSnapshot(t, s, k1, only, `{}`, 2, 0)
	kept := putSnapshot(t, s, k2, shared, `{}`, 2, 0)
	rep, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"s1"}, Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Snapshots != 2 {
		t.Errorf("forgot %d snapshots, want 2", rep.Counts.Snapshots)
	}
	if _, err := s.Snapshots(ctx, k1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the forgotten window's snapshots: %v, want ErrNotFound", err)
	}
	if got, err := s.Snapshot(ctx, k2, kept.Hash); err != nil || string(got.Body) != shared {
		t.Errorf("the other session's snapshot: %+v, %v", got, err)
	}
	// The same window, opened again, numbers its snapshots from 1.
	if _, err := s.PutWindow(ctx, k1, []byte(`{"model":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if again := putSnapshot(t, s, k1, only, `{}`, 1, 0); again.Seq != 1 {
		t.Errorf("a snapshot of the window opened again: %+v", again)
	}
	// A redaction takes the snapshots that held the string: they cannot
	// be rewritten.
	rep, err = s.Redact(ctx, store.RedactRequest{Text: []byte("wombat plan"), Actor: actor, Rechunk: Rechunk})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Snapshots != 1 {
		t.Errorf("redaction dropped %d snapshots, want 1", rep.Counts.Snapshots)
	}
	if got, err := s.Snapshots(ctx, k1, 0); err != nil || len(got) != 0 {
		t.Errorf("snapshots after the redaction: %+v, %v", got, err)
	}
	if _, err := s.Snapshot(ctx, k2, kept.Hash); err != nil {
		t.Errorf("a snapshot without the string: %v", err)
	}
}

// testForgetSnapshotsElsewhere: forgetting drops the turn snapshots that
// may show what was forgotten, wherever they are: another window's turn
// whose pre-fetch quoted it (its report's sources name it), and a
// window's turns since a forgotten message came. Before, both kept it.
func testForgetSnapshotsElsewhere(t *testing.T, s store.Store) {
	ctx := context.Background()
	leaky := store.WindowKey{SessionID: "leaky", AgentID: "a1"}
	other := store.WindowKey{SessionID: "other", AgentID: "b1"}
	for _, k := range []store.WindowKey{leaky, other} {
		if _, err := s.PutWindow(ctx, k, []byte(`{"model":"a"}`)); err != nil {
			t.Fatal(err)
		}
	}
	leaked, _ := appendMessages(t, s, leaky, nil, "the ZEBRA-ORCHID plan")
	id := leaked[0].EntryIDs[0]
	before, _ := appendMessages(t, s, other, nil, "what is the plan?")
	w, err := s.Window(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	quoted := putSnapshot(t, s, other, `[{"n":"quoted"}]`, `{"retrieval":"on","sources":["`+id+`"]}`, w.Version, 0)
	kept := putSnapshot(t, s, other, `[{"n":"kept"}]`, `{"retrieval":"on","sources":["`+before[0].EntryIDs[0]+`"]}`, w.Version, 0)
	rep, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"leaky"}, Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, other, quoted.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the snapshot whose pre-fetch quoted the forgotten entry: %v, want it gone", err)
	}
	if _, err := s.Snapshot(ctx, other, kept.Hash); err != nil {
		t.Errorf("a snapshot that quoted something else: %v", err)
	}
	if rep.Counts.Snapshots != 1 {
		t.Errorf("forgot %d snapshots, want 1", rep.Counts.Snapshots)
	}

	// A message forgotten from a window: the turns since it came go, the
	// turns before it stay.
	w, err = s.Window(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	earlier := putSnapshot(t, s, other, `[{"n":"earlier"}]`, `{}`, w.Version, 0)
	later, _ := appendMessages(t, s, other, nil, "a message to forget")
	w, err = s.Window(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	since := putSnapshot(t, s, other, `[{"n":"since"}]`, `{}`, w.Version, 0)
	rep, err = s.Forget(ctx, store.ForgetRequest{Entries: later[0].EntryIDs, Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, other, since.Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the snapshot taken since the forgotten message came: %v, want it gone", err)
	}
	for _, sn := range []store.WindowSnapshot{earlier, kept} {
		if _, err := s.Snapshot(ctx, other, sn.Hash); err != nil {
			t.Errorf("snapshot %d, from before the forgotten message: %v", sn.Seq, err)
		}
	}
	if rep.Counts.Snapshots != 1 {
		t.Errorf("forgot %d snapshots, want 1", rep.Counts.Snapshots)
	}
}
