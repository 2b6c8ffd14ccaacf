package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/engramhq/engram/internal/store"
)

// The MCP server a harness starts is not told the harness's session, but
// it is the harness's child, as the hooks' shell is: a hook records its
// session under the harness's process (SessionStart, as the session's id
// changes only there), and the MCP server looks up its parent. A process
// is named by its id and its start time, so that a reused id never
// inherits a session. Where there is no /proc, the harness's latest
// session in the project stands in.

// Proc names a process: its id and its start time (clock ticks after
// boot).
type Proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// ProcOf reads a process's start time and parent from /proc; false where
// it cannot.
func ProcOf(pid int) (p Proc, parent int, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Proc{}, 0, false
	}
	// pid (comm) state ppid … starttime is the 22nd field; comm may hold
	// spaces and parentheses, so count after its last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Proc{}, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return Proc{}, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return Proc{}, 0, false
	}
	return Proc{PID: pid, Start: start}, ppid, true
}

// Ancestors are the process's parent and its ancestors, n at most,
// nearest first; none where /proc cannot be read.
func Ancestors(n int) []Proc {
	var out []Proc
	pid := os.Getppid()
	for len(out) < n && pid > 1 {
		p, parent, ok := ProcOf(pid)
		if !ok {
			break
		}
		out = append(out, p)
		pid = parent
	}
	return out
}

func procKey(p Proc) string           { return "hook.proc." + strconv.Itoa(p.PID) }
func latestKey(harness string) string { return "hook.latest." + harness }

type procSession struct {
	Proc
	Session string `json:"session"`
	Harness string `json:"harness"`
}

// recordSession keeps a session under the processes that started the
// hook (its shell and the harness), and as the harness's latest.
func (r *Runner) recordSession(ctx context.Context, session string, procs []Proc) error {
	for _, p := range procs {
		b, _ := json.Marshal(procSession{Proc: p, Session: session, Harness: r.Harness})
		if err := r.Eng.Store().PutSetting(ctx, procKey(p), string(b)); err != nil {
			return err
		}
	}
	return r.Eng.Store().PutSetting(ctx, latestKey(r.Harness), session)
}

// FollowSession is the session a harness's hooks last registered under
// this process's parent (the harness that started an MCP server), else the
// harness's latest session in the store; false when the hooks have
// registered none.
func FollowSession(ctx context.Context, st store.Store, harness string) (string, bool, error) {
	if parent, _, ok := ProcOf(os.Getppid()); ok {
		v, err := st.Setting(ctx, procKey(parent))
		switch {
		case err == nil:
			var ps procSession
			if err := json.Unmarshal([]byte(v), &ps); err == nil && ps.Start == parent.Start && ps.Harness == harness && ps.Session != "" {
				return ps.Session, true, nil
			}
		case !errors.Is(err, store.ErrNotFound):
			return "", false, err
		}
	}
	v, err := st.Setting(ctx, latestKey(harness))
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return v, v != "", nil
}

// AgentOf is the agent a harness's hooks record a session's content as
// (a sub-agent's, with the harness's id for it): the MCP server that
// follows the hooks writes as the same agent.
func AgentOf(harness, session, subAgent string) string {
	return (&Runner{Harness: harness}).agentOf(session, subAgent, "").id
}
