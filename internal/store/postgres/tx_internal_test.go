package postgres

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
	"github.com/engramhq/engram/internal/store/storetest"
)

// terminate ends the server backend of tx's connection from another
// connection, as an administrator's pg_terminate_backend or a server
// restart would.
func terminate(t *testing.T, s *Store, tx pgx.Tx) {
	t.Helper()
	pid := tx.Conn().PgConn().PID()
	var ok bool
	// With a timeout, pg_terminate_backend waits until the backend is gone.
	if err := s.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate backend %d: %v %v", pid, ok, err)
	}
}

// TestWrite_ConnectionLostMidTransaction: a transaction whose connection
// dies before COMMIT was aborted by the server, so it runs again, whole,
// and what it writes is there once.
func TestWrite_ConnectionLostMidTransaction(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	var attempts atomic.Int32
	err := s.write(ctx, func(tx pgx.Tx) error {
		n := attempts.Add(1)
		if _, err := tx.Exec(ctx, `INSERT INTO settings (key, value) VALUES ('a', '1')`); err != nil {
			return err
		}
		if n == 1 {
			terminate(t, s, tx)
		}
		_, err := tx.Exec(ctx, `INSERT INTO settings (key, value) VALUES ('b', '2')`)
		return err
	})
	if err != nil {
		t.Fatalf("write after a lost connection: %v", err)
	}
	if attempts.Load() != 2 {
		t.Errorf("ran %d times, want 2", attempts.Load())
	}
	for _, k := range []string{"a", "b"} {
		if v, err := s.Setting(ctx, k); err != nil || v == "" {
			t.Errorf("setting %s: %q %v", k, v, err)
		}
	}
}

// TestWrite_ConnectionLostAtCommit: the backend ends just before COMMIT.
// Either the client finds out as it sends COMMIT (nothing was sent: the
// write runs again and is stored once), or after sending it: then it
// cannot know whether the server committed, so the write is not run
// again and the caller gets an error saying so; here the backend ended
// before COMMIT reached it, so nothing of the batch is stored. The store
// goes on serving either way.
func TestWrite_ConnectionLostAtCommit(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	var kills atomic.Int32
	s.beforeCommit = func(tx pgx.Tx) {
		if kills.Add(1) == 1 {
			terminate(t, s, tx)
		}
	}
	entries := []store.Entry{
		storetest.Entry("s1", "claude", store.UserPrompt, "the first of a batch lost at its commit"),
		storetest.Entry("s1", "claude", store.AgentResponse, "the second of it"),
	}
	_, err := s.PutEntries(ctx, entries)
	if err == nil {
		// COMMIT was never sent: run again, stored once.
		if st, err := s.Stats(ctx); err != nil || kills.Load() != 2 || st.Entries != 2 || st.Occurrences != 2 {
			t.Fatalf("stored after %d commits: %+v %v; want 2 commits, 2 entries, 2 occurrences", kills.Load(), st, err)
		}
		return
	}
	if !strings.Contains(err.Error(), "may or may not have been stored") || kills.Load() != 1 {
		t.Fatalf("PutEntries with its connection lost at COMMIT = %v after %d commits; want an error saying the write may not be stored, after 1", err, kills.Load())
	}
	t.Log(err)
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 0 || st.Occurrences != 0 || st.Sessions != 0 {
		t.Errorf("after the lost commit the store holds %d entries, %d occurrences, %d sessions; want nothing", st.Entries, st.Occurrences, st.Sessions)
	}
	if err := s.IntegrityCheck(ctx); err != nil {
		t.Error(err)
	}
	// The caller may try again: now it is stored, once.
	if _, err := s.PutEntries(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Stats(ctx); err != nil || st.Entries != 2 || st.Occurrences != 2 {
		t.Errorf("after the retry: %+v %v", st, err)
	}
}

// TestWrite_StaleConnections: every pooled connection dies while idle (a
// server restart, a proxy's timeout); the next writes and reads find out
// at their first statement and run again on new connections.
func TestWrite_StaleConnections(t *testing.T) {
	s := openInternal(t)
	ctx := context.Background()
	if _, err := s.PutEntries(ctx, []store.Entry{storetest.Entry("s1", "claude", store.UserPrompt, "before the restart")}); err != nil {
		t.Fatal(err)
	}
	var db string
	if err := s.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(ctx, s.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, db).Scan(&n); err != nil || n == 0 {
		t.Fatalf("terminated %d backends: %v", n, err)
	}
	if _, err := s.PutEntries(ctx, []store.Entry{storetest.Entry("s1", "claude", store.UserPrompt, "after the restart")}); err != nil {
		t.Fatalf("write on stale connections: %v", err)
	}
	if hits, err := s.Search(ctx, store.Query{Text: "restart"}); err != nil || len(hits) != 2 {
		t.Errorf("search on stale connections: %d hits, %v", len(hits), err)
	}
}

// cutter forwards connections to a PostgreSQL server and, once armed
// with a client's address, cuts that connection when it sends COMMIT:
// after forwarding it with the server's answers held back (the server
// commits; the answer never arrives), or instead of forwarding it (the
// server aborts).
type cutter struct {
	target  string
	forward bool // forward COMMIT before cutting
	mu      sync.Mutex
	armed   string // the client address whose COMMIT is cut
	cut     atomic.Int32
}

func newCutter(t *testing.T, target string, forward bool) (*cutter, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{target: target, forward: forward}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go c.serve(client)
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return c, ln
}

// arm cuts the connection of tx at its COMMIT.
func (c *cutter) arm(tx pgx.Tx) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = tx.Conn().PgConn().Conn().LocalAddr().String()
}

func (c *cutter) serve(client net.Conn) {
	server, err := net.Dial("tcp", c.target)
	if err != nil {
		_ = client.Close()
		return
	}
	closeBoth := func() { _ = client.Close(); _ = server.Close() }
	var mute atomic.Bool // hold the server's answers back
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if err != nil {
				closeBoth()
				return
			}
			if mute.Load() {
				continue
			}
			if _, err := client.Write(buf[:n]); err != nil {
				closeBoth()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	parsed := false // the armed connection's COMMIT was prepared, not yet run
	for {
		n, err := client.Read(buf)
		if err != nil {
			closeBoth()
			return
		}
		chunk := buf[:n]
		c.mu.Lock()
		armed := c.armed != "" && c.armed == client.RemoteAddr().String()
		c.mu.Unlock()
		// pgx sends COMMIT as a simple query ('Q', its length,
		// "commit\x00"), or prepares it first ('P' ... "commit\x00") and
		// runs it in the next message ('B'ind, 'E'xecute): that one runs it.
		run := false
		if armed && bytes.Contains(bytes.ToLower(chunk), []byte("commit\x00")) {
			if chunk[0] == 'Q' {
				run = true
			} else {
				parsed = true
			}
		} else if armed && parsed && chunk[0] == 'B' {
			run = true
		}
		if run {
			if c.forward {
				mute.Store(true)
				_, _ = server.Write(chunk)
				time.Sleep(200 * time.Millisecond) // the server commits
			}
			c.cut.Add(1)
			closeBoth()
			return
		}
		if _, err := server.Write(chunk); err != nil {
			closeBoth()
			return
		}
	}
}

// TestWrite_ConnectionCutAfterCommitSent: COMMIT was sent and no answer
// came. The server may have committed (here it did, or did not), so the
// write is never run again: that could store it twice (its occurrences
// are not idempotent). The caller is told the write may or may not have
// been stored, and the store holds it whole or not at all.
func TestWrite_ConnectionCutAfterCommitSent(t *testing.T) {
	for _, forward := range []bool{true, false} {
		t.Run(map[bool]string{true: "committed", false: "aborted"}[forward], func(t *testing.T) {
			u, err := url.Parse(pgtest.Database(t))
			if err != nil {
				t.Fatal(err)
			}
			c, ln := newCutter(t, u.Host, forward)
			u.Host = ln.Addr().String()
			ctx := context.Background()
			s, err := Open(ctx, u.String(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			var commits atomic.Int32
			s.beforeCommit = func(tx pgx.Tx) {
				if commits.Add(1) == 1 {
					c.arm(tx)
				}
			}
			entries := []store.Entry{
				storetest.Entry("s1", "claude", store.UserPrompt, "a batch whose commit gets no answer"),
				storetest.Entry("s1", "claude", store.AgentResponse, "its second entry"),
			}
			_, err = s.PutEntries(ctx, entries)
			if err == nil || !strings.Contains(err.Error(), "may or may not have been stored") || commits.Load() != 1 || c.cut.Load() != 1 {
				t.Fatalf("PutEntries whose COMMIT got no answer = %v after %d commits, %d cuts; want an error saying it may not be stored, after 1 and 1", err, commits.Load(), c.cut.Load())
			}
			st, err := s.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(0)
			if forward {
				want = 2
			}
			if st.Entries != want || st.Occurrences != want {
				t.Errorf("the store holds %d entries and %d occurrences; want %d of each", st.Entries, st.Occurrences, want)
			}
			if err := s.IntegrityCheck(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}
