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
// closed as they come, as when the database host goes down) and bring it
// back (Up). It keeps its listening port throughout, which another
// socket of a busy machine could otherwise take while it is down.
type Relay struct {
	target string // the server's host:port
	ln     net.Listener

	mu    sync.Mutex
	down  bool
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{target: u.Host, ln: ln, conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		r.Down()
		r.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return r, u.String()
}

// Down cuts every connection through the relay, and closes new ones as
// they come, until Up.
func (r *Relay) Down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = true
	for c := range r.conns {
		_ = c.Close()
	}
}

// Up relays new connections again.
func (r *Relay) Up() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = false
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		down := r.down
		r.mu.Unlock()
		if down {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !r.track(client, server) {
			continue
		}
		r.wg.Add(2)
		go r.pipe(client, server)
		go r.pipe(server, client)
	}
}

// track records a pair of connections to be cut by Down; it reports
// false, and closes them, when the relay went down meanwhile.
func (r *Relay) track(a, b net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
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
