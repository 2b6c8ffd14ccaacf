package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// RunsFile is the name of the run record in a project's data directory.
const RunsFile = "hook-runs.json"

// maxErrorBytes bounds the last error kept, so that one long message
// cannot grow the file every hook reads and writes.
const maxErrorBytes = 1000

// Run is what the hooks of one harness and event have done in a project.
type Run struct {
	Harness string `json:"harness"`
	Event   string `json:"event"`
	// Runs and Errors count every run recorded, and those that failed.
	Runs   int64 `json:"runs"`
	Errors int64 `json:"errors"`
	// LastRun is when the last run ended; LastTook how long it took.
	LastRun  time.Time     `json:"last_run"`
	LastTook time.Duration `json:"last_took_ns"`
	// LastSuccess is when the last run without an error ended; zero if
	// none did.
	LastSuccess time.Time `json:"last_success,omitzero"`
	// LastError is the last failed run's error, and LastErrorAt when it
	// ended.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// runsFile is the file's content: runs by "harness/event".
type runsFile struct {
	Runs map[string]*Run `json:"runs"`
}

// RecordRun adds one hook run to the record in dir, the project's data
// directory (created if missing): the harness and event it ran for, how
// long it took, and its error, nil for a success. It is safe to call from
// several processes at once: the record is updated under an exclusive
// lock on a file beside it and replaced atomically. It takes well under a
// millisecond on a local disk; it does not sync, so a crash may lose the
// last counts, never the file.
func RecordRun(dir, harness, event string, took time.Duration, runErr error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, RunsFile)
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	defer unlock()
	rf := readRuns(path)
	key := harness + "/" + event
	r := rf.Runs[key]
	if r == nil {
		r = &Run{Harness: harness, Event: event}
		rf.Runs[key] = r
	}
	now := time.Now().UTC()
	r.Runs++
	r.LastRun, r.LastTook = now, took
	if runErr != nil {
		r.Errors++
		msg := runErr.Error()
		if len(msg) > maxErrorBytes {
			msg = strings.ToValidUTF8(msg[:maxErrorBytes], "") + "…"
		}
		r.LastError, r.LastErrorAt = msg, now
	} else {
		r.LastSuccess = now
	}
	data, err := json.MarshalIndent(rf, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+RunsFile+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("record hook run in %s: %w", path, err), removeIfExists(f.Name()))
	}
	return nil
}

// Runs returns the record in dir, ordered by harness and event; none if
// no hook has run. It does not lock: the file is only ever replaced
// whole.
func Runs(dir string) ([]Run, error) {
	path := filepath.Join(dir, RunsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rf runsFile
	if err := json.Unmarshal(data, &rf); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	runs := make([]Run, 0, len(rf.Runs))
	for _, r := range rf.Runs {
		runs = append(runs, *r)
	}
	sort.Slice(runs, func(i, j int) bool {
		if runs[i].Harness != runs[j].Harness {
			return runs[i].Harness < runs[j].Harness
		}
		return eventOrder(runs[i].Event) < eventOrder(runs[j].Event)
	})
	return runs, nil
}

// readRuns reads the record at path; a missing or damaged one is empty,
// so that recording goes on.
func readRuns(path string) runsFile {
	rf := runsFile{}
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, &rf) // damaged: start again
	}
	if rf.Runs == nil {
		rf.Runs = map[string]*Run{}
	}
	return rf
}

// eventOrder sorts events as a session meets them, others after by name.
func eventOrder(event string) string {
	for i, e := range Events {
		if e == event {
			return fmt.Sprintf("%02d", i)
		}
	}
	return "99" + event
}
