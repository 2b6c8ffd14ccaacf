package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/store"
)

// windowMessage makes the entry and item of one message of a window.
func windowMessage(key store.WindowKey, typ store.ContentType, text string) (store.Entry, store.WindowItem) {
	e := Entry(key.SessionID, key.AgentID, typ, text)
	id := store.ID(e.Content)
	return e, store.WindowItem{Form: []byte(`{"role":"` + string(typ) + `"}`), EntryIDs: []string{id}, Tokens: e.TokenCount}
}

func appendMessages(t testing.TB, s store.Store, key store.WindowKey, evict store.Evictor, texts ...string) ([]store.WindowItem, []store.Eviction) {
	t.Helper()
	var a store.WindowAppend
	for _, text := range texts {
		e, it := windowMessage(key, store.UserPrompt, text)
		a.Entries, a.Items = append(a.Entries, e), append(a.Items, it)
	}
	_, items, evs, err := s.AppendWindow(context.Background(), key, a, evict)
	if err != nil {
		t.Fatalf("AppendWindow: %v", err)
	}
	return items, evs
}

// testWindows: a window is made, its settings replaced without losing
// its items, appended to in order with versions that grow, evicted from
// under references that expand to the evicted entries, and refused what
// would break it, all or nothing.
func testWindows(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	if _, err := s.Window(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Window before PutWindow: %v, want ErrNotFound", err)
	}
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AppendWindow to no window: %v, want ErrNotFound", err)
	}
	if _, err := s.PutWindow(ctx, store.WindowKey{SessionID: "s1"}, []byte("{}")); err == nil {
		t.Fatal("a window without an agent should be refused")
	}
	w, err := s.PutWindow(ctx, key, []byte(`{"model":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	items, _ := appendMessages(t, s, key, nil, "first message about the parser", "second message about the lexer")
	if len(items) != 2 || items[0].Pos != 0 || items[1].Pos != 1 || items[0].Append != w.Version+1 {
		t.Fatalf("appended items %+v after version %d", items, w.Version)
	}
	// A model switch keeps the items.
	w2, err := s.PutWindow(ctx, key, []byte(`{"model":"b"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(w2.Settings) != `{"model":"b"}` || w2.Version <= items[0].Append {
		t.Errorf("after a settings change: %+v", w2)
	}
	got, err := s.WindowItems(ctx, key, 0, -1)
	if err != nil || len(got) != 2 {
		t.Fatalf("WindowItems after a model switch: %v, %v", got, err)
	}
	// Each item keeps when it was appended, as the append reported it.
	if got[0].Time.IsZero() || !got[0].Time.Equal(items[0].Time) || time.Since(got[0].Time) > time.Hour {
		t.Errorf("item time %v, appended at %v", got[0].Time, items[0].Time)
	}
	// Evict the first two under one reference, in the append of a third.
	var seen []store.WindowItem
	evict := func(st store.WindowState) ([]store.Eviction, error) {
		live := st.Live
		seen = live
		var ids []string
		for _, it := range live[:2] {
			ids = append(ids, it.EntryIDs...)
		}
		return []store.Eviction{{From: live[0].Pos, To: live[1].Pos + 1, Ref: store.Reference{ID: "ref-1", Type: store.RefConversation,
			SessionID: key.SessionID, AgentID: key.AgentID, ContentIDs: ids, TurnFrom: 1, TurnTo: 2}}}, nil
	}
	_, evs := appendMessages(t, s, key, evict, "third message")
	if len(seen) != 3 || len(evs) != 1 {
		t.Fatalf("the evictor saw %d items, made %d evictions", len(seen), len(evs))
	}
	var (
		state   store.WindowState
		content []string
	)
	appendMessages(t, s, key, func(st store.WindowState) ([]store.Eviction, error) {
		state = st
		r, err := st.Ref("ref-1")
		content = r.ContentIDs
		return nil, err
	}, "a message the evictor sees")
	if len(state.Live) != 2 || state.Evicted != 2 || len(state.Refs) != 1 || state.Refs[0].ID != "ref-1" ||
		state.Refs[0].From != 0 || state.Refs[0].To != 2 || state.Refs[0].Items != 2 || len(content) != 2 {
		t.Errorf("the evictor's state after one eviction: %d live, %d evicted, refs %+v", len(state.Live), state.Evicted, state.Refs)
	}
	got, err = s.WindowItems(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if refs := []string{got[0].RefID, got[1].RefID, got[2].RefID}; !slices.Equal(refs, []string{"ref-1", "ref-1", ""}) {
		t.Errorf("refs after eviction: %q", refs)
	}
	ref, err := s.Reference(ctx, "ref-1")
	if err != nil || !slices.Equal(ref.ContentIDs, append(slices.Clone(got[0].EntryIDs), got[1].EntryIDs...)) {
		t.Errorf("reference: %+v, %v", ref, err)
	}
	if from2, err := s.WindowItems(ctx, key, 2, -1); err != nil || len(from2) != 2 || from2[0].Pos != 2 {
		t.Errorf("WindowItems from 2: %+v, %v", from2, err)
	}
	if mid, err := s.WindowItems(ctx, key, 1, 3); err != nil || len(mid) != 2 || mid[0].Pos != 1 || mid[1].Pos != 2 {
		t.Errorf("WindowItems from 1 to 3: %+v, %v", mid, err)
	}
	if none, err := s.WindowItems(ctx, key, 2, 2); err != nil || len(none) != 0 {
		t.Errorf("WindowItems from 2 to 2: %+v, %v", none, err)
	}
	// Re-admitted, the run is back in its place; evicted again, it goes
	// back under the same reference.
	if _, _, err := s.ReadmitWindow(ctx, key, "no-such-ref", nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("readmitting an unknown reference: %v, want ErrNotFound", err)
	}
	if _, _, err := s.ReadmitWindow(ctx, key, "ref-1", nil); err != nil {
		t.Fatal(err)
	}
	if back, _ := s.WindowItems(ctx, key, 0, -1); back[0].RefID != "" || back[1].RefID != "" {
		t.Errorf("after readmission: %+v", back)
	}
	if _, evs, err := s.ReadmitWindow(ctx, key, "ref-1", nil); !errors.Is(err, store.ErrNotFound) || evs != nil {
		t.Errorf("readmitting twice: %v", err)
	}
	// The ledger keeps the re-admission: which places came back, and
	// where the next item would have gone.
	if _, items, rs, err := s.WindowLedger(ctx, key); err != nil || len(items) != 4 || !slices.Equal(rs, []store.WindowReadmit{{At: 4, From: 0, To: 2}}) {
		t.Errorf("ledger after a re-admission: %d items, %+v, %v", len(items), rs, err)
	}
	e, it := windowMessage(key, store.UserPrompt, "fourth message")
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{Entries: []store.Entry{e}, Items: []store.WindowItem{it}}, evict); err != nil {
		t.Fatalf("evicting a run again under its reference: %v", err)
	}
	got, err = s.WindowItems(ctx, key, 0, -1)
	if err != nil || got[0].RefID != "ref-1" || got[1].RefID != "ref-1" || len(got) != 5 {
		t.Fatalf("after evicting again: %+v, %v", got, err)
	}
	// Laid out anew: every item back in the window, then the evictor's
	// evictions; the reference stays.
	w0, _ := s.Window(ctx, key)
	w1, evs, err := s.RelayWindow(ctx, key, func(st store.WindowState) ([]store.Eviction, error) {
		if len(st.Live) != 5 || len(st.Refs) != 0 {
			return nil, fmt.Errorf("relay sees %d items in the window and %d references", len(st.Live), len(st.Refs))
		}
		return nil, nil
	})
	if err != nil || len(evs) != 0 || w1.Version != w0.Version+1 {
		t.Fatalf("relay: %+v, %v", evs, err)
	}
	if _, err := s.Reference(ctx, "ref-1"); err != nil {
		t.Errorf("the reference after a relay: %v", err)
	}
	if _, _, err := s.RelayWindow(ctx, key, evict); err != nil {
		t.Fatal(err)
	}
	if got, err = s.WindowItems(ctx, key, 0, -1); err != nil || got[0].RefID != "ref-1" || got[1].RefID != "ref-1" {
		t.Fatalf("after a relay evicting the run again: %+v, %v", got, err)
	}
	if _, _, err := s.RelayWindow(ctx, store.WindowKey{SessionID: "s1", AgentID: "nobody"}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("relaying an unknown window: %v, want ErrNotFound", err)
	}
	// Refused, all or nothing: an evictor's error, an eviction of items
	// no longer in the window, an item naming content that is not stored.
	before := stats(t, s)
	head, _ := s.Window(ctx, key)
	for name, ev := range map[string]store.Evictor{
		"evictor error": func(store.WindowState) ([]store.Eviction, error) { return nil, errors.New("no") },
		"evicted twice": func(store.WindowState) ([]store.Eviction, error) {
			return []store.Eviction{{From: 0, To: 2, Ref: store.Reference{ID: "ref-2", Type: store.RefConversation,
				SessionID: key.SessionID, AgentID: key.AgentID, ContentIDs: got[0].EntryIDs}}}, nil
		},
		"another window's ref": func(st store.WindowState) ([]store.Eviction, error) {
			last := st.Live[len(st.Live)-1]
			return []store.Eviction{{From: last.Pos, To: last.Pos + 1, Ref: store.Reference{ID: "ref-3", Type: store.RefConversation,
				SessionID: "other", AgentID: key.AgentID, ContentIDs: last.EntryIDs}}}, nil
		},
	} {
		e, it := windowMessage(key, store.UserPrompt, "a message that must not stay: "+name)
		if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{Entries: []store.Entry{e}, Items: []store.WindowItem{it}}, ev); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	_, it = windowMessage(key, store.UserPrompt, "content never stored")
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{Items: []store.WindowItem{it}}, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an item naming unstored content: %v, want ErrNotFound", err)
	}
	after := stats(t, s)
	head2, _ := s.Window(ctx, key)
	if after.Entries != before.Entries || head2.Version != head.Version {
		t.Errorf("refused appends wrote something: entries %d -> %d, version %d -> %d", before.Entries, after.Entries, head.Version, head2.Version)
	}
	if ws, err := s.Windows(ctx, ""); err != nil || len(ws) != 1 || ws[0].WindowKey != key {
		t.Errorf("Windows: %+v, %v", ws, err)
	}
	// Forgetting a message's content takes it out of the ledger; forgetting
	// content under a reference takes it out of the reference, which
	// keeps the rest of its run (before, the whole run went with it, and
	// the window lost its way back to messages that were still stored).
	forget(t, s, store.ForgetRequest{Entries: got[2].EntryIDs})
	if left, err := s.WindowItems(ctx, key, 0, -1); err != nil || len(left) != 4 {
		t.Errorf("after forgetting the third message: %+v, %v", left, err)
	}
	forget(t, s, store.ForgetRequest{Entries: got[0].EntryIDs})
	if left, err := s.WindowItems(ctx, key, 0, -1); err != nil || len(left) != 3 || left[0].Pos != 1 || left[0].RefID != "ref-1" {
		t.Errorf("after forgetting content under ref-1: %+v, %v", left, err)
	}
	if ref, err := s.Reference(ctx, "ref-1"); err != nil || !slices.Equal(ref.ContentIDs, got[1].EntryIDs) || len(ref.Entities) != 0 {
		t.Errorf("ref-1 after forgetting one of its messages: %+v, %v", ref, err)
	}
	// Forgetting the rest of its run takes the reference.
	forget(t, s, store.ForgetRequest{Entries: got[1].EntryIDs})
	if _, err := s.Reference(ctx, "ref-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ref-1 after forgetting all of its run: %v", err)
	}
	if left, err := s.WindowItems(ctx, key, 0, -1); err != nil || len(left) != 2 || left[0].Pos != 3 {
		t.Errorf("after forgetting all of ref-1's run: %+v, %v", left, err)
	}
	if head3, _ := s.Window(ctx, key); head3.Version <= head2.Version {
		t.Errorf("forgetting did not advance the window's version: %d", head3.Version)
	}
	// Forgetting the session removes its windows.
	forget(t, s, store.ForgetRequest{Sessions: []string{"s1"}})
	if _, err := s.Window(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the window outlived its session: %v", err)
	}
}

// testWindowKeys: keys that could not be addressed or listed are
// refused, writing nothing; a slash, a space or another script is a name
// like any other.
func testWindowKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, bad := range []store.WindowKey{{SessionID: "s1", AgentID: "a\nb"}, {SessionID: "s\x00", AgentID: "a"},
		{SessionID: "s\xff", AgentID: "a"}, {SessionID: "s1", AgentID: strings.Repeat("a", store.MaxIdentifierBytes+1)}} {
		var verr *store.ValidationError
		if _, err := s.PutWindow(ctx, bad, []byte("{}")); !errors.As(err, &verr) {
			t.Errorf("window %q: %v, want a validation error", bad, err)
		}
	}
	good := store.WindowKey{SessionID: "s1", AgentID: "team/ünï code"}
	if _, err := s.PutWindow(ctx, good, []byte("{}")); err != nil {
		t.Errorf("a slash, a space and another script: %v", err)
	}
	if ws, err := s.Windows(ctx, ""); err != nil || len(ws) != 1 || ws[0].WindowKey != good {
		t.Errorf("Windows after refused keys: %+v, %v", ws, err)
	}
}

// testWindowNext: a window's head knows the greatest place it gave.
// The last message forgotten, Next stays past it, and the next append
// takes the forgotten place again (a harness that still has the message
// sends it again, in its place); Next grows once appends pass it.
func testWindowNext(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "places", AgentID: "claude"}
	if _, err := s.PutWindow(ctx, key, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	next := func(when string, want int) {
		t.Helper()
		if w, err := s.Window(ctx, key); err != nil || w.Next != want {
			t.Fatalf("%s: Next is %d, %v; want %d", when, w.Next, err, want)
		}
	}
	next("a new window", 0)
	items, _ := appendMessages(t, s, key, nil, "the first of the places", "the second of the places", "the third of the places")
	next("three messages appended", 3)
	if _, err := s.Forget(ctx, store.ForgetRequest{Entries: items[2].EntryIDs, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	next("the last message forgotten", 3)
	again, _ := appendMessages(t, s, key, nil, "the third of the places, again")
	if len(again) != 1 || again[0].Pos != 2 {
		t.Fatalf("the append after the forget: %+v, want it at place 2", again)
	}
	next("the forgotten place given again", 3)
	more, _ := appendMessages(t, s, key, nil, "a fourth of the places", "a fifth of the places")
	if len(more) != 2 || more[0].Pos != 3 {
		t.Fatalf("the next append: %+v, want it at place 3", more)
	}
	next("past it", 5)
}

// testWindowAppendKeys: an append under a key the window holds writes
// nothing: with the same digest it says where the first went, with
// another it is a conflict; another window, or the session forgotten,
// does not hold the key. Writers racing with one key append once.
func testWindowAppendKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "s1", AgentID: "a"}
	if _, err := s.PutWindow(ctx, key, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	keyed := func(k, digest string, texts ...string) store.WindowAppend {
		a := store.WindowAppend{Key: k, Digest: digest}
		for _, text := range texts {
			e, it := windowMessage(key, store.UserPrompt, text)
			a.Entries, a.Items = append(a.Entries, e), append(a.Items, it)
		}
		return a
	}
	appendMessages(t, s, key, nil, "an append without a key")
	if _, items, _, err := s.AppendWindow(ctx, key, keyed("turn-1", "d1", "first of turn one", "second of turn one"), nil); err != nil || len(items) != 2 || items[0].Pos != 1 {
		t.Fatalf("keyed append: %+v, %v", items, err)
	}
	before, err := s.Window(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var ae *store.AppendedError
	_, items, _, err := s.AppendWindow(ctx, key, keyed("turn-1", "d1", "first of turn one", "second of turn one"), nil)
	if !errors.As(err, &ae) || ae.Key != "turn-1" || ae.From != 1 || ae.Count != 2 || items != nil {
		t.Fatalf("the same append again: %+v, %v; want an *AppendedError from 1, 2 items", items, err)
	}
	var ce *store.ConflictError
	if _, _, _, err := s.AppendWindow(ctx, key, keyed("turn-1", "d2", "something else"), nil); !errors.As(err, &ce) {
		t.Fatalf("another append under the key: %v, want a *ConflictError", err)
	}
	after, err := s.Window(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if all, err := s.WindowItems(ctx, key, 0, -1); err != nil || len(all) != 3 || after.Version != before.Version {
		t.Fatalf("after the refused appends: %d items, version %d (was %d), %v", len(all), after.Version, before.Version, err)
	}
	for _, bad := range []store.WindowAppend{keyed("k\n", "d"), keyed(strings.Repeat("k", store.MaxAppendKey+1), "d"), keyed("k", "")} {
		var ve *store.ValidationError
		if _, _, _, err := s.AppendWindow(ctx, key, bad, nil); !errors.As(err, &ve) {
			t.Errorf("append key %q, digest %q: %v, want a validation error", bad.Key, bad.Digest, err)
		}
	}
	// Keys are a window's own.
	other := store.WindowKey{SessionID: "s1", AgentID: "b"}
	if _, err := s.PutWindow(ctx, other, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	a := keyed("turn-1", "d1", "first of turn one")
	if _, _, _, err := s.AppendWindow(ctx, other, a, nil); err != nil {
		t.Fatalf("another window, the same key: %v", err)
	}
	// Writers racing with one key: one appends, the others are told.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		appended int
	)
	for range 4 {
		wg.Go(func() {
			_, _, _, err := s.AppendWindow(ctx, key, keyed("race", "dr", "racing message"), nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				appended++
			case !errors.As(err, new(*store.AppendedError)):
				t.Errorf("a racing append: %v", err)
			}
		})
	}
	wg.Wait()
	if all, err := s.WindowItems(ctx, key, 0, -1); err != nil || appended != 1 || len(all) != 4 {
		t.Fatalf("racing appends under one key: %d appended, %d items, %v", appended, len(all), err)
	}
	// A forgotten session's keys go with it.
	forget(t, s, store.ForgetRequest{Sessions: []string{"s1"}})
	if _, err := s.PutWindow(ctx, key, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, items, _, err := s.AppendWindow(ctx, key, keyed("turn-1", "d1", "first of turn one"), nil); err != nil || len(items) != 1 || items[0].Pos != 0 {
		t.Fatalf("the key after the session was forgotten: %+v, %v", items, err)
	}
}

// testWindowConcurrentAppends: writers appending to one window at once
// lose nothing, and the messages of each append stay together, in order.
func testWindowConcurrentAppends(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := s.PutWindow(ctx, key, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	const writers, appends, per = 4, 10, 3
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for a := range appends {
				var texts []string
				for i := range per {
					texts = append(texts, fmt.Sprintf("writer %d append %d message %d", w, a, i))
				}
				appendMessages(t, s, key, nil, texts...)
			}
		})
	}
	wg.Wait()
	items, err := s.WindowItems(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != writers*appends*per {
		t.Fatalf("%d items, want %d", len(items), writers*appends*per)
	}
	for i := 0; i < len(items); i += per {
		for j := range per {
			if items[i+j].Pos != i+j || items[i+j].Append != items[i].Append {
				t.Fatalf("item %d: pos %d, append %d: an append was interleaved (its first: %d)", i+j, items[i+j].Pos, items[i+j].Append, items[i].Append)
			}
		}
	}
}

// testWindowAbsorb: a run evicted next to an earlier reference can take
// it over, so that one marker stands for both; the earlier reference
// still expands; a reference to absorb outside the run is refused.
func testWindowAbsorb(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := s.PutWindow(ctx, key, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	ref := func(id string, ids ...string) store.Reference {
		return store.Reference{ID: id, Type: store.RefConversation, SessionID: key.SessionID, AgentID: key.AgentID, ContentIDs: ids}
	}
	items, _ := appendMessages(t, s, key, nil, "one", "two", "three", "four")
	first := func(st store.WindowState) ([]store.Eviction, error) {
		return []store.Eviction{{From: 0, To: 2, Ref: ref("r1", append(slices.Clone(items[0].EntryIDs), items[1].EntryIDs...)...)}}, nil
	}
	appendMessages(t, s, key, first, "five")
	bad := func(st store.WindowState) ([]store.Eviction, error) {
		return []store.Eviction{{From: 2, To: 3, Absorb: []string{"r1"}, Ref: ref("r2", items[2].EntryIDs...)}}, nil
	}
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{}, bad); err == nil {
		t.Error("absorbing a reference outside the run should be refused")
	}
	var all []string
	for _, it := range items[:3] {
		all = append(all, it.EntryIDs...)
	}
	merge := func(st store.WindowState) ([]store.Eviction, error) {
		return []store.Eviction{{From: 0, To: 3, Absorb: []string{st.Refs[0].ID}, Ref: ref("r2", all...)}}, nil
	}
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{}, merge); err != nil {
		t.Fatal(err)
	}
	got, err := s.WindowItems(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if refs := []string{got[0].RefID, got[1].RefID, got[2].RefID, got[3].RefID}; !slices.Equal(refs, []string{"r2", "r2", "r2", ""}) {
		t.Errorf("after absorbing: %q", refs)
	}
	if r1, err := s.Reference(ctx, "r1"); err != nil || len(r1.ContentIDs) != 2 {
		t.Errorf("the absorbed reference: %+v, %v", r1, err)
	}
	// A run of references only, joined: none of its items is in the
	// window.
	evict2 := func(st store.WindowState) ([]store.Eviction, error) {
		return []store.Eviction{{From: 3, To: 4, Ref: ref("r3", items[3].EntryIDs...)}}, nil
	}
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{}, evict2); err != nil {
		t.Fatal(err)
	}
	joined := func(st store.WindowState) ([]store.Eviction, error) {
		return []store.Eviction{{From: 0, To: 4, Absorb: []string{"r2", "r3"}, Ref: ref("r4", append(slices.Clone(all), items[3].EntryIDs...)...)}}, nil
	}
	if _, _, _, err := s.AppendWindow(ctx, key, store.WindowAppend{}, joined); err != nil {
		t.Fatalf("joining two references: %v", err)
	}
	if got, _ := s.WindowItems(ctx, key, 0, -1); got[0].RefID != "r4" || got[3].RefID != "r4" {
		t.Errorf("after joining: %+v", got)
	}
}

// testWindowSummaries: rolling summaries are written by compare-and-swap
// on the window's epoch, replace those of their level and place, and go
// with a forgotten message (which they may quote) or session.
func testWindowSummaries(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	if _, _, err := s.WindowSummaries(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("summaries of no window: %v", err)
	}
	if _, err := s.PutWindow(ctx, key, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	items, _ := appendMessages(t, s, key, nil, "the parser drops comments", "the lexer keeps them", "we decided to keep them")
	// A re-admission, which the session's forget must take too.
	appendMessages(t, s, key, func(st store.WindowState) ([]store.Eviction, error) {
		return []store.Eviction{{From: 1, To: 2, Ref: store.Reference{ID: "ref-s", Type: store.RefConversation,
			SessionID: key.SessionID, AgentID: key.AgentID, ContentIDs: st.Live[1].EntryIDs, TurnFrom: 2, TurnTo: 2}}}, nil
	}, "a fourth")
	if _, _, err := s.ReadmitWindow(ctx, key, "ref-s", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, rs, err := s.WindowLedger(ctx, key); err != nil || len(rs) != 1 {
		t.Fatalf("re-admissions: %+v, %v", rs, err)
	}
	sum := func(level, from, to int, text string) store.WindowSummary {
		return store.WindowSummary{Level: level, From: from, To: to, Digest: "d", Text: text, Tokens: 3, By: "extractive"}
	}
	epoch, err := s.PutWindowSummaries(ctx, key, 0, []store.WindowSummary{sum(1, 0, 2, "comments: parser and lexer"), sum(1, 2, 3, "kept")})
	if err != nil || epoch != 1 {
		t.Fatalf("first write: epoch %d, %v", epoch, err)
	}
	if _, err := s.PutWindowSummaries(ctx, key, 0, []store.WindowSummary{sum(1, 0, 2, "stale")}); !errors.Is(err, store.ErrStaleEpoch) {
		t.Fatalf("a write at an old epoch: %v", err)
	}
	if epoch, err = s.PutWindowSummaries(ctx, key, 1, []store.WindowSummary{sum(1, 0, 2, "newer"), sum(2, 0, 3, "all")}); err != nil || epoch != 2 {
		t.Fatalf("second write: epoch %d, %v", epoch, err)
	}
	epoch, got, err := s.WindowSummaries(ctx, key)
	if err != nil || epoch != 2 || len(got) != 3 || got[0].Text != "newer" || got[0].Epoch != 2 || got[1].Text != "kept" || got[1].Epoch != 1 ||
		got[2].Level != 2 || got[0].CreatedAt.IsZero() {
		t.Fatalf("epoch %d, %+v, %v", epoch, got, err)
	}
	// Forgetting the first message drops the summaries that cover it.
	if _, err := s.Forget(ctx, store.ForgetRequest{Entries: items[0].EntryIDs, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, got, err = s.WindowSummaries(ctx, key); err != nil || len(got) != 1 || got[0].Text != "kept" {
		t.Fatalf("after forgetting message 0: %+v, %v", got, err)
	}
	if _, err := s.Forget(ctx, store.ForgetRequest{Sessions: []string{"s1"}, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutWindow(ctx, key, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if epoch, got, err := s.WindowSummaries(ctx, key); err != nil || epoch != 0 || len(got) != 0 {
		t.Fatalf("a window opened again after its session was forgotten: epoch %d, %+v, %v", epoch, got, err)
	}
	if _, _, rs, err := s.WindowLedger(ctx, key); err != nil || len(rs) != 0 {
		t.Fatalf("re-admissions of a forgotten session: %+v, %v", rs, err)
	}
}

// testRunRefs: a run reference's ID, which no row holds, reads back from
// its window's ledger (the run's places, content and tokens); an ID whose
// content, places or window do not match is not found, and neither is
// one of a window forgotten and opened again under the same key.
func testRunRefs(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "runs", AgentID: "claude"}
	other := store.WindowKey{SessionID: "runs", AgentID: "codex"}
	for _, k := range []store.WindowKey{key, other} {
		if _, err := s.PutWindow(ctx, k, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	none := func(store.WindowState) ([]store.Eviction, error) { return nil, nil }
	items, _ := appendMessages(t, s, key, none, "run one: the build fails", "run two: a flaky test", "run three: fixed", "run four")
	appendMessages(t, s, other, none, "run one: the build fails", "run two: a flaky test", "run three: fixed", "run four")
	id := store.RunRefID(key, false, items[1:3])
	if !store.ValidRefID(id) || !store.IsRunRef(id) {
		t.Fatalf("RunRefID = %q: want a valid run reference ID", id)
	}
	got, err := s.Reference(ctx, id)
	if err != nil {
		t.Fatalf("Reference(%s) = %v", id, err)
	}
	want := store.Reference{ID: id, Type: store.RefConversation, SessionID: key.SessionID, AgentID: key.AgentID,
		ContentIDs: append(slices.Clone(items[1].EntryIDs), items[2].EntryIDs...), TokensSaved: items[1].Tokens + items[2].Tokens,
		TurnFrom: 2, TurnTo: 3}
	got.CreatedAt = time.Time{}
	if !reflectEqualRef(got, want) {
		t.Errorf("Reference(%s) =\n%+v\nwant\n%+v", id, got, want)
	}
	tools := store.RunRefID(other, true, items[3:4])
	if got, err := s.Reference(ctx, tools); err != nil || got.Type != store.RefToolResults || got.AgentID != "codex" || got.TurnFrom != 4 || got.TurnTo != 4 {
		t.Errorf("Reference(%s) = %+v, %v: want the tool results of place 4 of %s", tools, got, err, other)
	}
	// The same places of another window, other places, another digest,
	// an unknown window: not found.
	flip := []byte(id)
	if flip[len(flip)-1] == '0' {
		flip[len(flip)-1] = '1'
	} else {
		flip[len(flip)-1] = '0'
	}
	for _, bad := range []string{
		string(flip),
		store.RunRefID(store.WindowKey{SessionID: "runs", AgentID: "nobody"}, false, items[1:3]),
		strings.Replace(id, ".2.3.", ".2.4.", 1),
		strings.Replace(id, ".2.3.", ".1.3.", 1),
		"c0000000.2.3.00000",
	} {
		if _, err := s.Reference(ctx, bad); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Reference(%s) = %v, want ErrNotFound", bad, err)
		}
	}
	// Forgotten, then opened again with other messages: the old ID names
	// content the window no longer holds.
	forget(t, s, store.ForgetRequest{Sessions: []string{"runs"}})
	if _, err := s.PutWindow(ctx, key, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	appendMessages(t, s, key, none, "another one", "another two", "another three")
	if _, err := s.Reference(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Reference(%s) after the window was forgotten and opened again = %v, want ErrNotFound", id, err)
	}
}

// reflectEqualRef compares references as RunRefs makes them.
func reflectEqualRef(a, b store.Reference) bool {
	return a.ID == b.ID && a.Type == b.Type && a.SessionID == b.SessionID && a.AgentID == b.AgentID &&
		slices.Equal(a.ContentIDs, b.ContentIDs) && a.TokensSaved == b.TokensSaved && a.TurnFrom == b.TurnFrom && a.TurnTo == b.TurnTo &&
		a.Summary == b.Summary && len(a.Topics)+len(a.Entities)+len(a.QueryHints) == 0
}

// testRedactWindows: a redaction reaches windows' ledgers: the string in
// an item's form is replaced, and the rolling summaries that quote it, or
// that summarise a redacted message, go, so that the next turn makes them
// again from what is left; the windows' versions advance. Before, the
// summaries kept the string and the next turn sent it to the model again.
func testRedactWindows(t *testing.T, s store.Store) {
	ctx := context.Background()
	key := store.WindowKey{SessionID: "s1", AgentID: "claude"}
	other := store.WindowKey{SessionID: "s2", AgentID: "claude"}
	for _, k := range []store.WindowKey{key, other} {
		if _, err := s.PutWindow(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	var a store.WindowAppend
	for i, text := range []string{"the password is hunter2Zq9 for prod", "the lexer keeps comments", "we decided to keep them"} {
		e, it := windowMessage(key, store.UserPrompt, text)
		if i == 1 {
			// The entities named, such as a credential seen in it.
			it.Form = []byte(`{"role":"user","entities":["credential","hunter2Zq9"]}`)
		}
		a.Entries, a.Items = append(a.Entries, e), append(a.Items, it)
	}
	if _, _, _, err := s.AppendWindow(ctx, key, a, nil); err != nil {
		t.Fatal(err)
	}
	appendMessages(t, s, other, nil, "nothing secret here", "nor here")
	sum := func(level, from, to int, text string) store.WindowSummary {
		return store.WindowSummary{Level: level, From: from, To: to, Digest: "d", Text: text, Tokens: 3, By: "extractive"}
	}
	if _, err := s.PutWindowSummaries(ctx, key, 0, []store.WindowSummary{
		sum(1, 0, 1, "the password is set"), // over the redacted message
		sum(1, 1, 2, "lexer: comments"),     // over the item whose form names it
		sum(1, 2, 3, "kept"),
		sum(2, 0, 3, "all of it"),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutWindowSummaries(ctx, other, 0, []store.WindowSummary{
		sum(1, 0, 1, "a model's summary: hunter2Zq9"), // holds it, its items do not
		sum(1, 1, 2, "nor here"),
	}); err != nil {
		t.Fatal(err)
	}
	v0, err := s.Window(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Redact(ctx, store.RedactRequest{Text: []byte("hunter2Zq9"), Actor: actor, Rechunk: Rechunk})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Summaries != 4 {
		t.Errorf("dropped %d summaries, want 4", rep.Counts.Summaries)
	}
	if _, got, err := s.WindowSummaries(ctx, key); err != nil || len(got) != 1 || got[0].Text != "kept" {
		t.Errorf("summaries left: %+v, %v; want only the one over no redacted message", got, err)
	}
	if _, got, err := s.WindowSummaries(ctx, other); err != nil || len(got) != 1 || got[0].Text != "nor here" {
		t.Errorf("the other window's summaries left: %+v, %v", got, err)
	}
	_, items, _, err := s.WindowLedger(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if strings.Contains(string(it.Form), "hunter2Zq9") {
			t.Errorf("item %d's form still holds the string: %s", it.Pos, it.Form)
		}
	}
	if len(items) != 3 || !strings.Contains(string(items[1].Form), `"credential"`) {
		t.Errorf("items after the redaction: %+v", items)
	}
	if v1, err := s.Window(ctx, key); err != nil || v1.Version <= v0.Version {
		t.Errorf("version %d after the redaction, was %d (%v)", v1.Version, v0.Version, err)
	}
}
