package api_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// noSnapshots is a store whose snapshot writes fail.
type noSnapshots struct{ store.Store }

func (noSnapshots) PutSnapshot(context.Context, store.WindowSnapshot, int) (store.WindowSnapshot, error) {
	return store.WindowSnapshot{}, errors.New("disk full")
}

var _ store.Store = noSnapshots{}

// TestWindowAssemble_SnapshotFails: a turn whose snapshot cannot be kept
// is not given: the assembly fails, saying why.
func TestWindowAssemble_SnapshotFails(t *testing.T) {
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		var st store.Store = sqlitetest.Open(t, sqlite.Options{})
		if fail {
			st = noSnapshots{st}
		}
		eng, err := engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		o := &api.Ops{Eng: eng, Agent: "a1", Session: func() string { return "s1" }}
		if _, _, err := o.WindowOpen(ctx, api.WindowOpenIn{Limit: 4000}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := o.WindowAppend(ctx, api.WindowAppendIn{Messages: raws(`{"role":"user","content":"why is the build slow?"}`)}); err != nil {
			t.Fatal(err)
		}
		out, text, err := o.WindowAssemble(ctx, api.WindowAssembleIn{NoRetrieval: true})
		switch {
		case fail && (err == nil || !strings.Contains(err.Error(), "keep the turn's snapshot: ") || !strings.Contains(err.Error(), "disk full")):
			t.Errorf("a snapshot that cannot be written: %v", err)
		case fail && out.Snapshot != "":
			t.Errorf("a failed assembly gave snapshot %s", out.Snapshot)
		case !fail && (err != nil || len(out.Snapshot) != 64 || !strings.HasSuffix(text, "\nsnapshot "+out.Snapshot)):
			t.Errorf("assembly: %q, %v", out.Snapshot, err)
		}
	}
}
