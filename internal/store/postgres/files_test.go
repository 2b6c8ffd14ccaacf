package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/storetest"
)

// Two servers indexing one repository at once, each recording new
// versions of the same paths (in opposite orders), make one history per
// path: versions 1 to n with no gap or duplicate, and one current.
func TestPutFiles_TwoServers(t *testing.T) {
	ctx := context.Background()
	url := database(t)
	var servers [2]*postgres.Store
	for i := range servers {
		s, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		servers[i] = s
	}
	paths := []string{"a.go", "b.go", "c.go"}
	const rounds = 8
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			for r := range rounds {
				var changes []store.FileChange
				for k := range paths {
					p := paths[k]
					if i == 1 {
						p = paths[len(paths)-1-k]
					}
					changes = append(changes, storetest.Version(p, fmt.Sprintf("package x // %s from server %d, round %d\n", p, i, r)))
				}
				if err := s.PutFiles(ctx, changes); err != nil {
					t.Errorf("server %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, p := range paths {
		versions, err := servers[0].FileVersions(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(versions) != 2*rounds {
			t.Errorf("%s: %d versions, want %d", p, len(versions), 2*rounds)
		}
		for i, v := range versions {
			if v.Version != i+1 {
				t.Errorf("%s: version %d at %d", p, v.Version, i)
			}
		}
		f, err := servers[1].File(ctx, p)
		if err != nil || f.State != store.FileCurrent || f.Version != len(versions) || f.EntryID != versions[len(versions)-1].EntryID {
			t.Errorf("File(%s) = %+v, %v", p, f, err)
		}
	}
	current, err := servers[0].Files(ctx, store.FileFilter{States: []store.FileState{store.FileCurrent}})
	if err != nil || len(current) != len(paths) {
		t.Errorf("current files = %+v, %v", current, err)
	}
	// Only the current versions are pending for an embedder: the others
	// left default search.
	pending, err := servers[0].PendingChunks(ctx, "m", 0, 1000)
	if err != nil || len(pending) != len(paths) {
		t.Errorf("%d chunks pending, want %d (%v)", len(pending), len(paths), err)
	}
}

func TestFilterChunks(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if _, err := s.PutEntries(ctx, []store.Entry{storetest.Entry("s1", "a", store.Note, "a note")}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFiles(ctx, []store.FileChange{storetest.Version("x.go", "package x\n")}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutFiles(ctx, []store.FileChange{storetest.Version("x.go", "package x // 2\n")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    store.Filter
		want int
	}{
		{store.Filter{}, 2},
		{store.Filter{History: true}, 3},
		{store.Filter{SessionID: "s1"}, 1},
		{store.Filter{Paths: []string{"x.go"}, History: true}, 2},
		{store.Filter{Types: []store.ContentType{store.CodeFile}}, 1},
	} {
		ids, err := s.FilterChunks(ctx, tc.f, 10)
		if err != nil || len(ids) != tc.want {
			t.Errorf("FilterChunks(%+v) = %v, %v; want %d", tc.f, ids, err, tc.want)
		}
	}
	if ids, _ := s.FilterChunks(ctx, store.Filter{History: true}, 1); len(ids) != 2 {
		t.Errorf("limit 1: %d IDs, want 2 (one more than the limit)", len(ids))
	}
}
