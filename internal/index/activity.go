package index

import (
	"sync"
	"time"
)

// MaxActivityErrors is how many of the last errors an Activity keeps.
const MaxActivityErrors = 20

// Activity is the live state of a process that keeps the index up to date
// (engram serve's watcher): the paths waiting for its next update, its
// last update and its last errors, for the status API. It is kept in
// memory, for this process only. A nil *Activity records nothing, and
// all its methods are safe for concurrent use.
type Activity struct {
	now func() time.Time

	// mu guards the state below.
	mu      sync.Mutex
	pending int
	last    *ActivityUpdate
	// errors is a ring of the last MaxActivityErrors errors; next is
	// where the next one goes, and n how many it holds.
	errors  [MaxActivityErrors]ActivityError
	next, n int
	updates int64
}

// NewActivity returns an Activity with nothing recorded.
func NewActivity() *Activity { return &Activity{now: time.Now} }

// ActivityUpdate is an update of the index: when it ended, what it
// changed (files), how long it took (milliseconds), and its error, if it
// failed.
type ActivityUpdate struct {
	At      time.Time `json:"at"`
	New     int       `json:"new"`
	Changed int       `json:"changed"`
	Deleted int       `json:"deleted"`
	TookMS  int64     `json:"took_ms"`
	Error   string    `json:"error,omitempty"`
}

// ActivityError is an error of an update: of one file (Path set) or of
// the whole update.
type ActivityError struct {
	At      time.Time `json:"at"`
	Path    string    `json:"path,omitempty"`
	Message string    `json:"message"`
}

// ActivityState is a copy of an Activity's state.
type ActivityState struct {
	// Pending are the paths changed and not indexed yet.
	Pending int `json:"pending"`
	// Updates counts the updates recorded; Last is the last one (nil
	// before the first).
	Updates int64           `json:"updates"`
	Last    *ActivityUpdate `json:"last,omitempty"`
	// Errors are the last errors, newest first: those of each file an
	// update could not index, and of updates that failed.
	Errors []ActivityError `json:"errors"`
}

// Pending records how many changed paths wait for the next update.
func (a *Activity) Pending(n int) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending = n
}

// Updated records an update that ended: its summary, and err if it
// failed. The files it could not index (s.Errors) and err are kept among
// the last errors.
func (a *Activity) Updated(s Summary, err error) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	u := &ActivityUpdate{At: now, New: s.New, Changed: s.Changed, Deleted: s.Deleted, TookMS: s.Elapsed.Milliseconds()}
	for _, fe := range s.Errors {
		a.add(ActivityError{At: now, Path: fe.Path, Message: fe.Err})
	}
	if err != nil {
		u.Error = err.Error()
		a.add(ActivityError{At: now, Message: err.Error()})
	}
	a.last = u
	a.updates++
}

// add keeps e among the last errors; the caller holds a.mu.
func (a *Activity) add(e ActivityError) {
	a.errors[a.next] = e
	a.next = (a.next + 1) % len(a.errors)
	a.n = min(a.n+1, len(a.errors))
}

// Snapshot returns a copy of the state: the zero state, with no errors,
// for a nil Activity.
func (a *Activity) Snapshot() ActivityState {
	st := ActivityState{Errors: []ActivityError{}}
	if a == nil {
		return st
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st.Pending, st.Updates = a.pending, a.updates
	if a.last != nil {
		u := *a.last
		st.Last = &u
	}
	for i := 1; i <= a.n; i++ {
		st.Errors = append(st.Errors, a.errors[(a.next-i+len(a.errors))%len(a.errors)])
	}
	return st
}
