package window

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/store/storetest"
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

// A ledger written before secrets in JSON were redacted in its strings
// can hold a tool call's input cut short (a private key's header with no
// end took the rest of the content): the window is still read, the input
// shown as the JSON string of what is stored.
func TestManager_CutJSONIsRead(t *testing.T) {
	st := sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "e.db"), sqlite.Options{})
	eng, err := engine.New(st, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(eng, cat)
	ctx := t.Context()
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := m.Open(ctx, key, OpenOptions{Limit: 4000}); err != nil {
		t.Fatal(err)
	}
	cut := []byte(`{"command": "grep -rl -- '[REDACTED:private_key]`)
	e := storetest.Entry("s", "a", store.ToolCall, string(cut))
	f, err := json.Marshal(form{Role: RoleAssistant, Blocks: []formBlock{{Type: BlockToolUse, ID: "t1", Name: "Bash", Entry: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.AppendWindow(ctx, key, store.WindowAppend{Entries: []store.Entry{e},
		Items: []store.WindowItem{{Form: f, EntryIDs: []string{store.ID(cut)}, Tokens: 20}}}, nil); err != nil {
		t.Fatal(err)
	}
	m2 := NewManager(eng, cat) // reads the ledger afresh
	items, err := m2.Context(ctx, key)
	if err != nil {
		t.Fatalf("a window holding cut JSON: %v", err)
	}
	var got string
	if len(items) != 1 || items[0].Message == nil || json.Unmarshal(items[0].Message.Blocks[0].Input, &got) != nil || got != string(cut) {
		t.Fatalf("the cut input: %+v", items)
	}
	if _, err := ToAnthropic(*items[0].Message); err != nil {
		t.Errorf("in Anthropic's shape: %v", err)
	}
}
