package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/engramhq/engram/internal/hook"
)

// The hook daemon: hooks are short-lived processes, and opening the store
// and its in-memory indexes for each would cost a pre-fetch its latency
// budget. The first hook of a project starts `engram daemon` in the
// background (as gopls -remote=auto does) and runs itself in-process;
// later hooks hand their payload to the daemon over a Unix socket in the
// project's data directory (only the user can reach it: the directory
// and the socket are the user's alone). A daemon of another engram
// version is told to stop, and the hook runs in-process meanwhile. The
// daemon exits after --idle without a hook.

// daemonIdle is how long a daemon waits for hooks before it exits.
const daemonIdle = 30 * time.Minute

// socketPath is the project's hook socket: in its data directory, or,
// where that path is too long for a Unix socket, in the temporary
// directory under a name derived from it.
func (a *app) socketPath() string {
	dir := a.cfg.StateDir()
	p := filepath.Join(dir, "hook.sock")
	if len(p) < 100 {
		return p
	}
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(os.TempDir(), fmt.Sprintf("engram-%d-%s.sock", os.Getuid(), hex.EncodeToString(sum[:8])))
}

func (a *app) daemonCmd() *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:    "daemon",
		Short:  "Serve the project's hooks from one long-lived process (hooks start it themselves)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.serveDaemon(cmd.Context(), idle)
		},
	}
	cmd.Flags().DurationVar(&idle, "idle", daemonIdle, "exit after this long without a hook")
	return cmd
}

func (a *app) serveDaemon(ctx context.Context, idle time.Duration) error {
	dir := a.cfg.StateDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// One daemon per project: the lock's holder serves, any other exits.
	lock, err := os.OpenFile(filepath.Join(dir, "hook.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		a.log.Info("another engram daemon serves this project", "dir", dir)
		return nil
	}
	eng, err := a.engine(ctx, false)
	if err != nil {
		return err
	}
	sock := a.socketPath()
	_ = os.Remove(sock) // a dead daemon's: the lock says none runs
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(sock) }()
	if err := os.Chmod(sock, 0o600); err != nil {
		return err
	}
	version := a.daemonVersion()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := a.cfg.Hooks
	opts := hook.Options{Briefing: h.Briefing, PrefetchBudget: h.PrefetchBudget, MaxToolTokens: h.MaxToolTokens, KeepTokens: h.KeepTokens}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		cancel()
	})
	mux.HandleFunc("POST /hook/{harness}/{event}", func(w http.ResponseWriter, r *http.Request) {
		last.Store(time.Now().UnixNano())
		// On every answer, a failure's too: a hook that gets none takes
		// this daemon for another version's and stops it.
		w.Header().Set("X-Engram-Version", version)
		harness, event := r.PathValue("harness"), r.PathValue("event")
		p, err := hook.ReadPayload(r.Body, event)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := json.Unmarshal([]byte(r.Header.Get("X-Engram-Procs")), &p.Procs); r.Header.Get("X-Engram-Procs") != "" && err != nil {
			http.Error(w, "X-Engram-Procs: "+err.Error(), http.StatusBadRequest)
			return
		}
		rctx, rcancel := context.WithTimeout(r.Context(), hookTimeout)
		defer rcancel()
		run := hook.Runner{Eng: eng, Harness: harness, Opts: opts}
		res, err := run.Run(rctx, p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(min(idle/4+time.Millisecond, time.Minute))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				// The hooks in flight finish (Serve returns at once; the
				// daemon waits for this): cut off, they would fail, and
				// their events be lost until the transcript's import.
				sctx, scancel := context.WithTimeout(context.Background(), hookTimeout)
				_ = srv.Shutdown(sctx)
				scancel()
				return
			case <-t.C:
				if time.Since(time.Unix(0, last.Load())) > idle {
					a.log.Info("engram daemon idle: exiting", "idle", idle)
					cancel()
				}
			}
		}
	}()
	a.log.Info("engram daemon serving hooks", "socket", sock, "project", a.cfg.Project)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-stopped // Serve returns when the shutdown begins, not when it ends
	return nil
}

// daemonVersion tells a daemon from one a hook would start now: engram's
// version and commit, the binary's time (development builds share a
// version), and the configuration it was loaded with (each file's time,
// each variable's value), so that a rebuilt engram or a changed setting
// replaces the daemon at the next hook.
func (a *app) daemonVersion() string {
	v, commit := versionInfo()
	var b strings.Builder
	b.WriteString(v + " " + commit)
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat(exe); err == nil {
			fmt.Fprintf(&b, " %d", fi.ModTime().UnixNano())
		}
	}
	for _, src := range a.cfg.Sources {
		if name, ok := strings.CutPrefix(src, "$"); ok {
			fmt.Fprintf(&b, " %s=%q", name, a.getenv(name))
		} else if fi, err := os.Stat(src); err == nil {
			fmt.Fprintf(&b, " %s@%d", src, fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

// errNoDaemon says the hook must run in-process.
var errNoDaemon = errors.New("no daemon")

// dialError is a failure to reach the daemon at all: nothing was sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// daemonClient talks to the project's daemon over its socket.
func (a *app) daemonClient() *http.Client {
	sock := a.socketPath()
	return &http.Client{Timeout: hookTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
	}}
}

// viaDaemon runs a hook in the project's daemon. errNoDaemon means none
// answered (or one of another version, now told to stop): the caller
// runs the hook itself, and a daemon is started for the next hooks.
func (a *app) viaDaemon(ctx context.Context, harness string, p hook.Payload) (hook.Result, error) {
	if a.getenv("ENGRAM_HOOK_DAEMON") == "off" {
		return hook.Result{}, errNoDaemon
	}
	c := a.daemonClient()
	url := "http://engram/hook/" + harness + "/" + p.Event
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(p.Raw))
	if err != nil {
		return hook.Result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	procs, _ := json.Marshal(p.Procs)
	req.Header.Set("X-Engram-Procs", string(procs))
	resp, err := c.Do(req)
	var de *dialError
	switch {
	case errors.As(err, &de):
		a.startDaemon()
		return hook.Result{}, errNoDaemon
	case err != nil:
		// The daemon had the event, and may have stored it: run again
		// here, a prompt would be stored twice. The transcript's import
		// at the next Stop stores what this one did not.
		return hook.Result{}, fmt.Errorf("the engram daemon: %w", err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Engram-Version") != a.daemonVersion() {
		// A daemon of another engram or configuration: it answers this
		// hook, and stops, so that the next hook starts one of the binary
		// the settings name, with the configuration in force.
		defer func() {
			if r, err := c.Post("http://engram/stop", "text/plain", nil); err == nil {
				r.Body.Close()
			}
		}()
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, hook.MaxPayloadBytes))
	if err != nil {
		return hook.Result{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return hook.Result{}, fmt.Errorf("the engram daemon: %s", strings.TrimSpace(string(body)))
	}
	var res hook.Result
	if err := json.Unmarshal(body, &res); err != nil {
		return hook.Result{}, fmt.Errorf("the engram daemon's answer: %w", err)
	}
	return res, nil
}

// startDaemon starts the project's daemon in the background, detached
// from the hook, with the configuration flags the hook was given. Only an
// installed engram binary starts one (not a test binary).
func (a *app) startDaemon() {
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) != "engram" {
		return
	}
	args := []string{"daemon", "--project", a.cfg.Project}
	for _, f := range []struct{ name, v string }{{"--config", a.flags.ConfigFile}, {"--data-dir", a.flags.DataDir}, {"--store", a.flags.Store}} {
		if f.v != "" {
			args = append(args, f.name, f.v)
		}
	}
	// The project's state directory is made with its store, which the
	// first hook of a project may not have made yet.
	if err := os.MkdirAll(a.cfg.StateDir(), 0o700); err != nil {
		return
	}
	logf, err := os.OpenFile(filepath.Join(a.cfg.StateDir(), "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer logf.Close()
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(a.stderr, "engram hook: cannot start the daemon: %v\n", err)
		return
	}
	_ = cmd.Process.Release()
}
