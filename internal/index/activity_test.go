package index

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestActivity keeps the queue, the last update and the last 20 errors,
// newest first: each file an update could not index, and each update that
// failed. A nil Activity records nothing and reads empty.
func TestActivity(t *testing.T) {
	var none *Activity
	none.Pending(3)
	none.Updated(Summary{New: 1}, errors.New("x"))
	if diff := cmp.Diff(ActivityState{Errors: []ActivityError{}}, none.Snapshot()); diff != "" {
		t.Errorf("nil activity (-want +got):\n%s", diff)
	}

	a := NewActivity()
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a.now = func() time.Time { return clock }
	if diff := cmp.Diff(ActivityState{Errors: []ActivityError{}}, a.Snapshot()); diff != "" {
		t.Errorf("new activity (-want +got):\n%s", diff)
	}
	a.Pending(7)
	a.Updated(Summary{New: 2, Changed: 1, Deleted: 1, Elapsed: 1500 * time.Millisecond}, nil)
	st := a.Snapshot()
	want := &ActivityUpdate{At: clock, New: 2, Changed: 1, Deleted: 1, TookMS: 1500}
	if diff := cmp.Diff(want, st.Last); diff != "" || st.Pending != 7 || st.Updates != 1 || len(st.Errors) != 0 {
		t.Errorf("after an update: %+v (-want +got last):\n%s", st, diff)
	}

	// 25 errors: 12 updates of two files each, and a failed update.
	for i := range 12 {
		a.Updated(Summary{Errors: []FileError{{Path: fmt.Sprintf("f%d-a.go", i), Err: "denied"}, {Path: fmt.Sprintf("f%d-b.go", i), Err: "denied"}}}, nil)
	}
	a.Updated(Summary{}, errors.New("walk: too many open files"))
	st = a.Snapshot()
	if len(st.Errors) != MaxActivityErrors || st.Updates != 14 || st.Last.Error != "walk: too many open files" {
		t.Fatalf("after 25 errors: %d kept, %d updates, last %+v", len(st.Errors), st.Updates, st.Last)
	}
	var got []string
	for _, e := range st.Errors {
		got = append(got, e.Path)
	}
	wantPaths := []string{""}
	for i := 11; len(wantPaths) < MaxActivityErrors; i-- {
		wantPaths = append(wantPaths, fmt.Sprintf("f%d-b.go", i), fmt.Sprintf("f%d-a.go", i))
	}
	wantPaths = wantPaths[:MaxActivityErrors]
	if diff := cmp.Diff(wantPaths, got); diff != "" {
		t.Errorf("errors, newest first (-want +got):\n%s", diff)
	}
	// A snapshot is a copy.
	st.Errors[0].Message = "changed"
	st.Last.New = 99
	if again := a.Snapshot(); again.Errors[0].Message == "changed" || again.Last.New == 99 {
		t.Error("a snapshot shares the activity's state")
	}
}

// TestActivityConcurrent records and reads from several goroutines at
// once (run with -race).
func TestActivityConcurrent(t *testing.T) {
	a := NewActivity()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 100 {
				a.Pending(j)
				a.Updated(Summary{Errors: []FileError{{Path: fmt.Sprint(i, j), Err: "x"}}}, nil)
				_ = a.Snapshot()
			}
		})
	}
	wg.Wait()
	if st := a.Snapshot(); st.Updates != 400 || len(st.Errors) != MaxActivityErrors {
		t.Errorf("after 400 updates: %d updates, %d errors", st.Updates, len(st.Errors))
	}
}
