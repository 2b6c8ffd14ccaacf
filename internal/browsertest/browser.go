package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
)

const (
	// StartTimeout bounds how long New waits for the browser to start and
	// answer. It took 0.2 to 0.7 s on a 2-core machine; the margin is for a
	// busy CI runner.
	StartTimeout = 60 * time.Second
	// closeTimeout bounds how long the cleanup waits for the browser to
	// close gracefully before chromedp kills it.
	closeTimeout = 10 * time.Second
	// WindowWidth and WindowHeight are the browser window's size in CSS
	// pixels: a laptop's screen, fixed so that screenshots and layout do not
	// depend on the machine.
	WindowWidth  = 1280
	WindowHeight = 900
	// maxOutputBytes caps how much of the browser's stdout and stderr is
	// kept for the message of a failed start.
	maxOutputBytes = 64 << 10
)

// candidates are the names the browser goes by on PATH, in the order tried:
// Debian's package, Ubuntu's and others' older name, and Google's.
var candidates = []string{"chromium", "chromium-browser", "google-chrome"}

// Browser is a headless Chromium that lives as long as the test that
// started it. Its tabs (Tab) may be used by that test and its subtests, one
// goroutine per tab.
type Browser struct {
	// ctx is the browser's chromedp context, the parent of every tab's. It is
	// kept because chromedp addresses a browser through its context; the
	// cleanup New registers cancels it.
	ctx     context.Context
	path    string
	version string
	// tabs numbers the tabs, for their screenshots' names.
	tabs atomic.Int64
}

// New starts a headless Chromium for the test and registers its shutdown
// with t.Cleanup. The browser is the executable ENGRAM_TEST_CHROMIUM names,
// else the first of chromium, chromium-browser and google-chrome on PATH;
// with none, New skips the test. A browser named but absent, or one that
// does not start within StartTimeout, fails the test.
//
// The browser gets a fresh profile in t.TempDir(), a WindowWidth x
// WindowHeight window, no GPU, and chromedp's defaults (no first-run
// dialog, no background networking, no extensions, no sync), so it opens
// only what the test navigates to.
func New(t testing.TB) *Browser {
	t.Helper()
	path := findBrowser(t)

	out := &tailBuffer{max: maxOutputBytes}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(WindowWidth, WindowHeight),
		// Headless Chromium draws in software without a GPU process; the
		// GPU process only fails to start in a container. chromedp's
		// DisableGPU also turns on SwiftShader for WebGL, which the
		// dashboard does not use, so only the flag.
		chromedp.Flag("disable-gpu", true),
		chromedp.CombinedOutput(out),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to start as root with its sandbox ("Running as
		// root without --no-sandbox is not supported", crbug.com/638180),
		// and CI's containers run as root. As any other user the sandbox
		// stays on: the tests open only pages they serve themselves, but a
		// sandbox that works costs nothing.
		opts = append(opts, chromedp.NoSandbox)
	}
	// Not t.Context(): it is canceled before the cleanups run, and the
	// tabs' cleanups still take screenshots of failed tests.
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)

	// The first call starts the browser, which then lives as long as the
	// context of that call, so the call cannot carry a deadline of its own:
	// a timer cancels the context instead when the start takes too long.
	start := time.Now()
	timer := time.AfterFunc(StartTimeout, cancel)
	v, err := chromedp.CallBrowser(ctx, browser.GetVersion, cdp.Empty{})
	stopped := timer.Stop()
	if err != nil {
		cancel()
		cancelAlloc()
		if !stopped {
			err = fmt.Errorf("no answer within %v: %w", StartTimeout, err)
		}
		t.Fatalf("start %s: %v\nits output:\n%s", path, err, out.String())
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, closeTimeout)
		defer ccancel()
		if err := chromedp.Cancel(cctx); err != nil {
			t.Logf("close %s: %v", path, err)
		}
		cancel()
		cancelAlloc()
	})
	b := &Browser{ctx: ctx, path: path, version: v.Product}
	t.Logf("browser %s (%s), started in %v", b.version, path, time.Since(start).Round(time.Millisecond))
	return b
}

// Version is the browser's product and version, as "Chrome/148.0.7778.167".
func (b *Browser) Version() string { return b.version }

// findBrowser returns the browser's path, skipping the test when there is
// none.
func findBrowser(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ENGRAM_TEST_CHROMIUM"); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("ENGRAM_TEST_CHROMIUM: %v", err)
		}
		return path
	}
	for _, name := range candidates {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("no Chromium: set ENGRAM_TEST_CHROMIUM or install Debian's chromium (apt-get install chromium; .ci/run does)")
	return ""
}

// tailBuffer keeps the last max bytes written to it; the browser writes to
// it from chromedp's goroutine while a failed start reads it.
type tailBuffer struct {
	max int

	// mu guards buf.
	mu  sync.Mutex
	buf []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
