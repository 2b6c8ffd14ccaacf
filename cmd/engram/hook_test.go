package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/harness"
)

// A hook never breaks the harness's session: whatever it is given, it
// exits 0, prints nothing for the harness, says why on standard error and
// counts the failure; what it could do, it did.
func TestHook_NeverBreaksTheSession(t *testing.T) {
	e := newEnv(t)
	prompt := `{"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "hello", "cwd": "` + e.project + `"}`
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"empty payload", "", []string{"hook", "claude-code", "UserPromptSubmit"}, "empty"},
		{"truncated payload", prompt[:40], []string{"hook", "claude-code", "UserPromptSubmit"}, "truncated JSON"},
		{"another event's payload", prompt, []string{"hook", "claude-code", "Stop"}, "is for UserPromptSubmit, not Stop"},
		{"unknown harness", prompt, []string{"hook", "cursor", "UserPromptSubmit"}, `unknown harness "cursor"`},
		{"unknown event", prompt, []string{"hook", "claude-code", "Notification"}, `unknown event "Notification"`},
		{"missing arguments", prompt, []string{"hook", "claude-code"}, "want HARNESS EVENT"},
		{"unknown flag", prompt, []string{"hook", "claude-code", "UserPromptSubmit", "--from-the-future"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := e.run(tc.stdin, tc.args...)
			if code != 0 || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("engram %s: exit %d, stdout %q, stderr %q; want 0, nothing, and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
			}
		})
	}

	// A payload from a newer harness, with fields engram does not know,
	// works; a transcript that is not there is said, not an error.
	newer := `{"session_id": "s1", "hook_event_name": "Stop", "transcript_path": "/nowhere/s1.jsonl", "cwd": "` + e.project + `", "a_new_field": {"x": 1}}`
	if code, out, errOut := e.run(newer, "hook", "claude-code", "Stop"); code != 0 || out != "" || strings.Contains(errOut, "engram hook") {
		t.Errorf("a newer harness's Stop: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := e.run(prompt, "hook", "claude-code", "UserPromptSubmit"); code != 0 || strings.Contains(errOut, "engram hook") {
		t.Fatalf("a good prompt: exit %d: %s", code, errOut)
	}

	// A configuration engram cannot read: the hook says so and goes.
	if err := os.WriteFile(filepath.Join(e.project, ".engram.toml"), []byte("[hooks\nbriefing = 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := e.run(prompt, "hook", "claude-code", "UserPromptSubmit")
	if code != 0 || out != "" || !strings.Contains(errOut, ".engram.toml") {
		t.Errorf("a broken config: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := os.Remove(filepath.Join(e.project, ".engram.toml")); err != nil {
		t.Fatal(err)
	}

	// The failures that reached the project are counted.
	var status struct {
		Runs []harness.Run `json:"runs"`
	}
	if err := json.Unmarshal([]byte(e.ok("", "hooks", "status", "--json")), &status); err != nil {
		t.Fatal(err)
	}
	got := map[string]harness.Run{}
	for _, r := range status.Runs {
		got[r.Event] = r
	}
	if r := got["UserPromptSubmit"]; r.Runs < 3 || r.Errors < 2 || r.LastSuccess.IsZero() {
		t.Errorf("UserPromptSubmit's record = %+v; want the good run, and the empty and truncated payloads counted as errors", r)
	}
	if r := got["Stop"]; r.Runs != 2 || r.Errors != 1 || !strings.Contains(r.LastError, "is for UserPromptSubmit") || r.LastSuccess.Before(r.LastErrorAt) {
		t.Errorf("Stop's record = %+v; want the other event's payload as an error, then the newer harness's run without one", r)
	}
}

// The first hook of a project starts the daemon, later ones go through
// it, and a changed configuration replaces it: the next hooks run with
// the setting in force.
func TestHook_DaemonFollowsTheConfiguration(t *testing.T) {
	bin := binary(t)
	root := t.TempDir()
	project := filepath.Join(root, "project")
	dataDir := filepath.Join(root, "data")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemons(dataDir) })
	env := []string{"HOME=" + filepath.Join(root, "home"), "PATH=" + os.Getenv("PATH"), "ENGRAM_DATA_DIR=" + dataDir}
	conf := filepath.Join(project, ".engram.toml")
	if err := os.WriteFile(conf, []byte("[hooks]\nbriefing = \"none\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	engramCLI(t, env, project, "pattern", "add", "--category", "testing.flaky", "retry the upload with the caller's context")
	start := func() string {
		t.Helper()
		cmd := exec.Command(bin, "hook", "claude-code", "SessionStart")
		cmd.Env, cmd.Dir = env, project
		cmd.Stdin = strings.NewReader(`{"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup", "cwd": "` + project + `"}`)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hook: %v: %s", err, out)
		}
		return string(out)
	}
	if out := start(); strings.Contains(out, "retry the upload") {
		t.Fatalf("briefing = none, yet the hook injected one: %s", out)
	}
	waitDaemon(t, dataDir) // the first hook started one
	if out := start(); strings.Contains(out, "retry the upload") {
		t.Fatalf("through the daemon, briefing = none, yet the hook injected one: %s", out)
	}
	// The setting changes (and the file's time with it).
	if err := os.WriteFile(conf, []byte("[hooks]\nbriefing = \"standard\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(conf, later, later); err != nil {
		t.Fatal(err)
	}
	// The daemon of the old configuration answers once more, and stops.
	start()
	for i := 0; ; i++ {
		if strings.Contains(start(), "retry the upload") {
			break
		}
		if i == 20 {
			t.Fatal("after the configuration changed, the hooks still inject no briefing")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A harness started in a subdirectory of the project (or whose shell
// moved into one) stores into the project's store, which its MCP server
// reads, not into a store of the subdirectory.
func TestHook_SubdirectoryIsTheProject(t *testing.T) {
	e := newEnv(t)
	sub := filepath.Join(e.project, "internal", "upload")
	for _, d := range []string{filepath.Join(e.project, ".git"), sub} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.vars["ENGRAM_HOOK_DAEMON"] = "off"
	prompt := `{"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "why does the zebra parser time out", "cwd": "` + sub + `"}`
	if code, _, errOut := e.run(prompt, "hook", "claude-code", "UserPromptSubmit"); code != 0 || strings.Contains(errOut, "engram hook") {
		t.Fatalf("the prompt: exit %d: %s", code, errOut)
	}
	if got := e.ok("", "search", "zebra parser", "--session", "s1"); !strings.Contains(got, "zebra parser") {
		t.Errorf("the project's store lacks the prompt sent from %s:\n%s", sub, got)
	}
	stores, err := os.ReadDir(filepath.Join(e.vars["ENGRAM_DATA_DIR"], "projects"))
	if err != nil || len(stores) != 1 {
		t.Errorf("stores made: %v, %v; want the project's alone", stores, err)
	}
}

// The first hook of a new project (no store yet) starts the daemon; a
// hook that fails in the daemon leaves it serving (its answer used to
// lack the version, which the hook took for another engram's daemon and
// stopped it); and a daemon that takes an event and drops the connection
// is not run around: the hook says so rather than store the event again.
func TestHook_DaemonFailures(t *testing.T) {
	bin := binary(t)
	project, dataDir, env := daemonProject(t)
	hookRun := func(event, payload string) (string, string) {
		t.Helper()
		cmd := exec.Command(bin, "hook", "claude-code", event)
		cmd.Env, cmd.Dir = env, project
		cmd.Stdin = strings.NewReader(payload)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("hook %s: %v: %s", event, err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	hookRun("SessionStart", `{"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup", "cwd": "`+project+`"}`)
	waitDaemon(t, dataDir) // the first hook of a new project starts one
	listening := func() bool { return daemonListening(dataDir) }
	// A prompt over the store's limit fails in the daemon.
	big, err := json.Marshal(strings.Repeat("a long pasted log line\n", 33<<20/23+1))
	if err != nil {
		t.Fatal(err)
	}
	_, errOut := hookRun("UserPromptSubmit", `{"session_id": "s1", "hook_event_name": "UserPromptSubmit", "cwd": "`+project+`", "prompt": `+string(big)+`}`)
	if !strings.Contains(errOut, "the engram daemon") {
		t.Fatalf("an oversized prompt: %q; want the daemon's refusal", errOut)
	}
	for range 20 {
		if !listening() {
			t.Fatal("a hook that failed in the daemon stopped it")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A daemon that drops the connection once it has the event. The real
	// one is gone once its lock is free (it removes its socket before);
	// the test holds the lock, as a daemon would, so that none starts.
	stopDaemons(dataDir)
	holdDaemonLock(t, dataDir)
	l, err := net.Listen("unix", daemonSockets(dataDir)[0])
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096))
			_ = c.Close()
		}
	}()
	_, errOut = hookRun("UserPromptSubmit", `{"session_id": "s1", "hook_event_name": "UserPromptSubmit", "cwd": "`+project+`", "prompt": "why does the zebra parser time out"}`)
	if !strings.Contains(errOut, "the engram daemon") {
		t.Errorf("a daemon that dropped the connection: %q; want it said, not the hook run again in-process", errOut)
	}
	if out := engramCLI(t, env, project, "search", "zebra parser", "--session", "s1"); strings.Contains(out, "zebra parser") {
		t.Errorf("the hook ran again in-process after the daemon took the event:\n%s", out)
	}
}

// A daemon told to stop while it runs a hook (another engram's hook
// replacing it, a SIGTERM) finishes the hook first: its answer comes,
// and what it stored is stored once.
func TestHook_DaemonStopLetsHooksFinish(t *testing.T) {
	bin := binary(t)
	project, dataDir, env := daemonProject(t)
	hookCmd := func(event, payload string) *exec.Cmd {
		cmd := exec.Command(bin, "hook", "claude-code", event)
		cmd.Env, cmd.Dir = env, project
		cmd.Stdin = strings.NewReader(payload)
		return cmd
	}
	if out, err := hookCmd("SessionStart", `{"session_id": "s1", "hook_event_name": "SessionStart", "source": "startup", "cwd": "`+project+`"}`).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	waitDaemon(t, dataDir)
	// A prompt of some megabytes takes the daemon a while to store.
	big, err := json.Marshal("the zebra parser log follows\n" + strings.Repeat("a long pasted log line of the parser\n", 8<<20/37))
	if err != nil {
		t.Fatal(err)
	}
	slow := hookCmd("UserPromptSubmit", `{"session_id": "s1", "hook_event_name": "UserPromptSubmit", "cwd": "`+project+`", "prompt": `+string(big)+`}`)
	var stderr strings.Builder
	slow.Stderr = &stderr
	start := time.Now()
	if err := slow.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stopDaemons(dataDir)
	if err := slow.Wait(); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Logf("the hook was done before the daemon was told to stop: the stop did not meet it in flight")
	}
	if strings.Contains(stderr.String(), "engram hook") {
		t.Errorf("a hook in flight when the daemon stopped failed: %s", stderr.String())
	}
	if out := engramCLI(t, env, project, "search", "zebra parser log", "--session", "s1"); !strings.Contains(out, "zebra parser") {
		t.Errorf("the prompt of the hook in flight was not stored:\n%s", out)
	}
}

// daemonProject is a project (a git work tree) and a data directory for
// tests of the hook daemon, which the built binary starts: the
// environment to run it in, and its daemons stopped at the end.
func daemonProject(t *testing.T) (project, dataDir string, env []string) {
	t.Helper()
	root := t.TempDir()
	project = filepath.Join(root, "project")
	dataDir = filepath.Join(root, "data")
	if err := os.MkdirAll(filepath.Join(project, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemons(dataDir) })
	return project, dataDir, []string{"HOME=" + filepath.Join(root, "home"), "PATH=" + os.Getenv("PATH"), "ENGRAM_DATA_DIR=" + dataDir}
}

// daemonListening reports whether a hook daemon of a store under dataDir
// has its socket.
func daemonListening(dataDir string) bool {
	for _, s := range daemonSockets(dataDir) {
		if _, err := os.Stat(s); err == nil {
			return true
		}
	}
	return false
}

// holdDaemonLock waits until no hook daemon of the store under dataDir
// holds its lock (one that stops removes its socket, then lets the lock
// go), and holds it until the test ends.
func holdDaemonLock(t *testing.T, dataDir string) {
	t.Helper()
	dbs, _ := filepath.Glob(filepath.Join(dataDir, "projects", "*", "engram.db"))
	if len(dbs) != 1 {
		t.Fatalf("stores: %q, want one", dbs)
	}
	a := &app{}
	a.cfg.Store.Path = dbs[0]
	f, err := os.OpenFile(filepath.Join(a.cfg.StateDir(), "hook.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	for i := 0; syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil; i++ {
		if i == 600 {
			t.Fatal("the daemon did not stop")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDaemon waits for a hook daemon of a store under dataDir to listen.
func waitDaemon(t *testing.T, dataDir string) {
	t.Helper()
	for i := 0; !daemonListening(dataDir); i++ {
		if i == 200 {
			t.Fatal("no hook daemon listens")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
