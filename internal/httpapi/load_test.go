package httpapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
)

// openFiles returns the process's open file descriptors (Linux's
// /proc/self/fd): the store's files (the database, its WAL and shared
// memory, which its connection pools hold) apart from the others; ok is
// false where /proc cannot say.
func openFiles() (other, storeFiles []string, ok bool) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, nil, false
	}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the descriptor ReadDir itself used
		}
		if strings.Contains(filepath.Base(target), "engram.db") {
			storeFiles = append(storeFiles, target)
		} else {
			other = append(other, target)
		}
	}
	return other, storeFiles, true
}

// maxStoreFiles is the most files a store holds open: a database and a WAL
// for the writer and each reader, and one shared-memory file.
const maxStoreFiles = 2*(sqlite.DefaultReaders+1) + 1

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

// TestManyConnections opens 100 MCP sessions at once, each writing and
// reading, then closes them: every write is stored, and the goroutines
// and file descriptors the sessions used are gone. Admission lets every
// request wait for its turn here (load shedding has a test of its own).
func TestManyConnections(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{TrustLoopback: true, Admission: NewAdmission(0, 1000, time.Hour)}))
	defer srv.Close()
	ctx := context.Background()
	// Warm up once, so that what starts once per process is in the baseline.
	cs, err := connect(t, srv.URL, map[string]string{"X-Engram-Session": "warm"})
	if err != nil {
		t.Fatal(err)
	}
	_ = cs.Close()
	time.Sleep(100 * time.Millisecond)
	base := runtime.NumGoroutine()
	baseFiles, _, haveFiles := openFiles()

	const n = 100
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

// checkFiles fails the test if more files other than the store's are open
// than in base (with a little room for a connection being torn down), or
// if the store holds more than its pools can.
func checkFiles(t *testing.T, have bool, base []string) {
	t.Helper()
	if !have {
		t.Log("no /proc/self/fd here: open files not checked")
		return
	}
	var other, storeFiles []string
	settle(func() int { other, storeFiles, _ = openFiles(); return len(other) }, len(base)+2, 10*time.Second)
	if len(other) > len(base)+2 {
		t.Errorf("%d files open after the sessions closed, %d before:\nnow %s\nbefore %s", len(other), len(base),
			strings.Join(other, " "), strings.Join(base, " "))
	}
	if len(storeFiles) > maxStoreFiles {
		t.Errorf("the store holds %d files open, more than its pools can (%d): %s", len(storeFiles), maxStoreFiles, strings.Join(storeFiles, " "))
	}
}

// TestClientGoesAway cancels requests in flight: the server answers the
// next ones and keeps no goroutine for them.
func TestClientGoesAway(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{TrustLoopback: true}))
	defer srv.Close()
	base := runtime.NumGoroutine()
	baseFiles, _, haveFiles := openFiles()
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
