package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// A Relay stands between a test and its PostgreSQL server, so that the
// test can take the server away (Down: every connection cut, new ones
// refused, as when the database host goes down) and bring it back (Up).
type Relay struct {
	t      testing.TB
	target string // the server's host:port
	addr   string // the relay's

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// NewRelay starts a relay to the server of dbURL (a postgres:// URL with
// a TCP host and port) and returns it with dbURL made to go through it.
// The relay stops when the test ends.
func NewRelay(t testing.TB, dbURL string) (*Relay, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		t.Fatalf("pgtest.NewRelay: %s names no TCP port", u.Redacted())
	}
	r := &Relay{t: t, target: u.Host, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(func() {
		r.Down()
		r.wg.Wait()
	})
	u.Host = r.addr
	return r, u.String()
}

// Down cuts every connection through the relay and refuses new ones.
func (r *Relay) Down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		_ = r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		_ = c.Close()
	}
}

// Up takes connections again, on the same address.
func (r *Relay) Up() {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatalf("relay up again on %s: %v", r.addr, err)
	}
	r.serve(ln)
}

func (r *Relay) serve(ln net.Listener) {
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", r.target)
			if err != nil {
				_ = client.Close()
				continue
			}
			if !r.track(client, server) {
				return
			}
			r.wg.Add(2)
			go r.pipe(client, server)
			go r.pipe(server, client)
		}
	}()
}

// track records a pair of connections to be cut by Down; it reports
// false, and closes them, when the relay went down meanwhile.
func (r *Relay) track(a, b net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		_ = a.Close()
		_ = b.Close()
		return false
	}
	r.conns[a], r.conns[b] = true, true
	return true
}

func (r *Relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	_, _ = io.Copy(dst, src) // until either side closes, or Down cuts both
	_ = dst.Close()
	_ = src.Close()
	r.mu.Lock()
	delete(r.conns, dst)
	delete(r.conns, src)
	r.mu.Unlock()
}
