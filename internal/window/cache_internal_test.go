package window

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/tokens"
)

// A Manager keeps at most maxLayouts layouts in memory, and views of
// those windows only, whatever the windows it sees; one dropped is rebuilt from its ledger when its window
// comes back, the same.
func TestManager_LayoutCacheBounded(t *testing.T) {
	eng, err := engine.New(sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "e.db"), sqlite.Options{}), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(eng, cat)
	ctx := t.Context()
	key := func(i int) store.WindowKey { return store.WindowKey{SessionID: fmt.Sprintf("s%d", i), AgentID: "a"} }
	for i := range maxLayouts + 10 {
		if _, err := m.Open(ctx, key(i), OpenOptions{Limit: 8000}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Append(ctx, key(i), []Message{{Role: RoleUser, Blocks: []Block{{Type: BlockText, Text: fmt.Sprintf("prompt %d", i)}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.LaidOut(ctx, key(i), 0, 1, MinBudget); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	n, views := len(m.layouts), len(m.views)
	m.mu.Unlock()
	if n > maxLayouts {
		t.Errorf("%d layouts cached, want at most %d", n, maxLayouts)
	}
	if views > maxLayouts {
		t.Errorf("views of %d windows cached, want at most %d (a view holds its layout)", views, maxLayouts)
	}
	_, msgs, _, err := m.Messages(ctx, key(0))
	if err != nil || len(msgs) != 1 || msgs[0].Blocks[0].Text != "prompt 0" {
		t.Errorf("the first window, its layout dropped: %d messages, %v", len(msgs), err)
	}
}

// A reference's ID names the run of the ledger it stands for, as
// store.RunRefID says, written out here: a type letter, the window's key,
// the first and last places from 1, and the content. Markers shown to
// agents hold these IDs, and the store reads them back from the ledger by
// this formula.
func TestRefID_Stable(t *testing.T) {
	key := store.WindowKey{SessionID: "sess-1", AgentID: "claude"}
	lo := &laidOut{items: []store.WindowItem{
		{Pos: 7, EntryIDs: []string{"e1", "e2"}}, {Pos: 8}, {Pos: 9, EntryIDs: []string{"e3"}},
	}}
	msgs := []Message{{Role: RoleUser, Blocks: []Block{{Type: BlockText, Text: "a"}}}, {Role: RoleAssistant}, {Role: RoleUser}}
	k := sha256.Sum256([]byte(key.SessionID + "\x00" + key.AgentID))
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d", key.SessionID, key.AgentID, 7, 9)
	for _, id := range []string{"e1", "e2", "e3"} {
		h.Write([]byte(id))
	}
	want := "c" + hex.EncodeToString(k[:])[:7] + ".8.10." + hex.EncodeToString(h.Sum(nil))[:5]
	if got := lo.refID(key, msgs, 0, 3); got != want {
		t.Errorf("refID = %s, want %s", got, want)
	}
}

// A Manager past maxSpans forgets the markers it made, and keeps making
// them.
func TestRemember_Bounded(t *testing.T) {
	m := &Manager{spans: map[string]string{}}
	for i := range maxSpans + 10 {
		m.remember(fmt.Sprintf("r%d", i), "marker")
	}
	if len(m.spans) > maxSpans || m.spans[fmt.Sprintf("r%d", maxSpans+9)] != "marker" {
		t.Errorf("%d markers kept (at most %d), the last one %q", len(m.spans), maxSpans, m.spans[fmt.Sprintf("r%d", maxSpans+9)])
	}
}
