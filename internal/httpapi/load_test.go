package httpapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/store"
)

// openFiles counts the process's open file descriptors, where /proc says
// (Linux); ok is false elsewhere.
func openFiles() (n int, ok bool) {
	ents, err := os.ReadDir("/proc/self/fd")
	return len(ents), err == nil
}

// settle waits until f reports at most want, for up to d, and returns its
// last report.
func settle(f func() int, want int, d time.Duration) int {
	deadline := time.Now().Add(d)
	n := f()
	for n > want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = f()
	}
	return n
}

// fillPool runs as many searches at once as the store has readers, so that
// its connection pool (and the files it holds open) is full in a baseline.
func fillPool(t *testing.T, url string) {
	t.Helper()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if resp, err := http.Get(url + "/v1/search?q=warm+up+the+pool"); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

// TestManyConnections opens 200 MCP sessions at once, each writing and
// reading, then closes them: every write is stored, and the goroutines
// and file descriptors the sessions used are gone.
func TestManyConnections(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{}))
	defer srv.Close()
	ctx := context.Background()
	// Warm up once, so that what starts once per process is in the baseline.
	cs, err := connect(t, srv.URL, map[string]string{"X-Engram-Session": "warm"})
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.Close()
	fillPool(t, srv.URL)
	time.Sleep(100 * time.Millisecond)
	base := runtime.NumGoroutine()
	baseFiles, haveFiles := openFiles()

	const n = 200
	sessions := make([]*mcp.ClientSession, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			c := mcp.NewClient(&mcp.Implementation{Name: "load", Version: "v0"}, nil)
			hdr := headers{map[string]string{"X-Engram-Session": fmt.Sprintf("s%d", i%20), "X-Engram-Agent": fmt.Sprintf("a%d", i)}, http.DefaultTransport}
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: hdr}, MaxRetries: -1}, nil)
			if err != nil {
				errs <- err
				return
			}
			sessions[i] = cs
		})
	}
	wg.Wait()
	for i := range n {
		cs := sessions[i]
		if cs == nil {
			continue
		}
		wg.Go(func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "record_insight", Arguments: map[string]any{"insight": fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "%d", i)))}})
			if err != nil || res.IsError || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "created") {
				errs <- fmt.Errorf("session %d: %v %v", i, err, res)
				return
			}
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "briefing", Arguments: map[string]any{"tier": "micro"}}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	for _, cs := range sessions {
		if cs != nil {
			_ = cs.Close()
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	recs, err := eng.Store().ArchiveRecords(ctx, store.RecordQuery{Kinds: []store.RecordKind{store.KindInsight}})
	if err != nil || len(recs) != n {
		t.Errorf("%d insights stored of %d, %v", len(recs), n, err)
	}
	http.DefaultClient.CloseIdleConnections()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if g := settle(runtime.NumGoroutine, base+10, 10*time.Second); g > base+10 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after the sessions closed, %d before:\n%s", g, base, buf[:runtime.Stack(buf, true)])
	}
	checkFiles(t, haveFiles, baseFiles)
}

// checkFiles fails the test if more files are open than base (with a
// little room for a connection being torn down).
func checkFiles(t *testing.T, have bool, base int) {
	t.Helper()
	if !have {
		t.Log("no /proc/self/fd here: open files not checked")
		return
	}
	if n := settle(func() int { n, _ := openFiles(); return n }, base+2, 10*time.Second); n > base+2 {
		ents, _ := os.ReadDir("/proc/self/fd")
		var targets []string
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
				targets = append(targets, l)
			}
		}
		t.Errorf("%d files open after the sessions closed, %d before: %s", n, base, strings.Join(targets, " "))
	}
}

// TestClientGoesAway cancels requests in flight: the server answers the
// next ones and keeps no goroutine for them.
func TestClientGoesAway(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{}))
	defer srv.Close()
	fillPool(t, srv.URL)
	base := runtime.NumGoroutine()
	baseFiles, haveFiles := openFiles()
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/search?q=anything+at+all", nil)
		go cancel()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	c := client{t, srv.URL}
	c.want(200, "GET", "/healthz", "", "ok")
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if g := settle(runtime.NumGoroutine, base+5, 5*time.Second); g > base+5 {
		t.Errorf("%d goroutines, %d before", g, base)
	}
	checkFiles(t, haveFiles, baseFiles)
}
