package browsertest

import (
	"bytes"
	"encoding/base64"
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

	"github.com/chromedp/chromedp"
)

// csp is the policy of every test page: the dashboard's, in short.
const csp = "default-src 'self'; script-src 'self'"

// pixelPNG is a 1x1 transparent PNG, so that the pages' images load.
var pixelPNG, _ = base64.StdEncoding.DecodeString(
	"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")

// doc wraps a body in a document axe-core has nothing against.
func doc(title, body string) string {
	return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>` + title +
		`</title></head><body><main><h1>` + title + `</h1>` + body + `</main></body></html>`
}

// testServer serves the test pages, each with the strict CSP.
func testServer(t *testing.T) *httptest.Server {
	t.Helper()
	files := map[string]struct{ typ, body string }{
		// The script writes the text a moment after the load, so WaitText
		// has something to wait for.
		"/wait": {"text/html", doc("Wait", `<p id="out">loading</p><script src="/wait.js"></script>`)},
		"/wait.js": {"text/javascript", `console.log('app started');
setTimeout(() => { document.getElementById('out').textContent = 'ready: ' + (1 + 1); }, 50);`},
		"/inline": {"text/html", doc("Inline", `<p id="out">static</p>
<script>window.inlineRan = true; document.getElementById('out').textContent = 'inline script ran';</script>`)},
		"/throw":    {"text/html", doc("Throw", `<script src="/throw.js"></script>`)},
		"/throw.js": {"text/javascript", `throw new Error('boom from throw.js');`},
		"/axe-bad":  {"text/html", doc("No alt", `<img src="/pixel.png">`)},
		"/axe-clean": {"text/html", doc("Clean", `<p>Plain text.</p><img src="/pixel.png" alt="a dot">
<label for="q">Query</label> <input id="q" type="search">`)},
		"/pixel.png": {"image/png", string(pixelPNG)},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", csp)
		f, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", f.typ)
		fmt.Fprint(w, f.body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestTab(t *testing.T) {
	srv := testServer(t)
	b := New(t)
	if !strings.HasPrefix(b.Version(), "Chrome/") && !strings.HasPrefix(b.Version(), "HeadlessChrome/") {
		t.Errorf("Version() = %q, want Chrome/…", b.Version())
	}

	t.Run("WaitText", func(t *testing.T) {
		tab := b.Tab(t)
		tab.Navigate(srv.URL + "/wait")
		tab.WaitText("#out", "ready: 2")
		var size [2]int
		tab.Eval(`[innerWidth, innerHeight]`, &size)
		if size != [2]int{WindowWidth, WindowHeight} {
			t.Errorf("viewport %dx%d, want %dx%d", size[0], size[1], WindowWidth, WindowHeight)
		}
		if errs := tab.Errors(); len(errs) > 0 {
			t.Errorf("a clean page reported errors:\n%s", formatMessages(errs))
		}
		if !hasMessage(tab.Console(), func(m Message) bool {
			return m.Kind == KindConsole && m.Level == "log" && m.Text == "app started"
		}) {
			t.Errorf("console.log('app started') missing from Console():\n%s", formatMessages(tab.Console()))
		}
	})

	t.Run("WaitTextFails", func(t *testing.T) {
		t.Setenv("ENGRAM_TEST_SCREENSHOTS", t.TempDir())
		rt := newRecordingTB(t)
		tab := b.Tab(rt)
		tab.Timeout = time.Second
		tab.Navigate(srv.URL + "/wait")
		tab.WaitText("#out", "ready: 2")
		rt.do(func() { tab.WaitText("#out", "never there") })
		if !rt.Failed() || !strings.Contains(rt.fatal, `its text is "ready: 2"`) {
			t.Errorf("WaitText of text that never comes: failed %v, %q; want a failure saying the text is \"ready: 2\"", rt.Failed(), rt.fatal)
		}
		rt.do(func() { tab.WaitText("#missing", "x") })
		if !strings.Contains(rt.fatal, "no element matches #missing") {
			t.Errorf("WaitText of a missing element: %q, want it to say no element matches", rt.fatal)
		}
	})

	t.Run("InlineScriptBlocked", func(t *testing.T) {
		tab := b.Tab(t)
		tab.Navigate(srv.URL + "/inline")
		v := tab.WaitMessage(func(m Message) bool { return m.Kind == KindCSP && m.Blocked == "inline" })
		if !strings.HasPrefix(v.Directive, "script-src") || !v.IsError() {
			t.Errorf("violation = %+v, want script-src… blocking inline, an error", v)
		}
		var ran, text string
		tab.Eval(`typeof window.inlineRan`, &ran)
		tab.Eval(`document.getElementById('out').textContent`, &text)
		if ran != "undefined" || text != "static" {
			t.Errorf("the inline script ran under script-src 'self': inlineRan is %s, the text %q", ran, text)
		}
		if !hasMessage(tab.Errors(), func(m Message) bool { return m.Kind == KindCSP }) {
			t.Errorf("Errors() lacks the violation:\n%s", formatMessages(tab.Errors()))
		}
	})

	t.Run("Exception", func(t *testing.T) {
		tab := b.Tab(t)
		tab.Navigate(srv.URL + "/throw")
		m := tab.WaitMessage(func(m Message) bool { return m.Kind == KindException })
		if !strings.Contains(m.Text, "boom from throw.js") || !strings.HasSuffix(m.URL, "/throw.js") {
			t.Errorf("exception = %+v, want the Error thrown by /throw.js", m)
		}
		if !hasMessage(tab.Errors(), func(e Message) bool { return e == m }) {
			t.Errorf("Errors() lacks the exception:\n%s", formatMessages(tab.Errors()))
		}
	})

	t.Run("Axe", func(t *testing.T) {
		tab := b.Tab(t)
		tab.Navigate(srv.URL + "/axe-bad")
		vs := tab.Axe(AxeOptions{})
		serious := SeriousViolations(vs)
		if !strings.Contains(serious, "image-alt (critical)") || !strings.Contains(serious, "img") {
			t.Errorf("axe on an <img> without alt: SeriousViolations = %q from %+v, want image-alt (critical) at img", serious, vs)
		}
		if vs := tab.Axe(AxeOptions{Disable: []string{"image-alt"}}); hasViolation(vs, "image-alt") {
			t.Errorf("Axe with image-alt disabled still reports it: %+v", vs)
		}

		tab.Navigate(srv.URL + "/axe-clean")
		if vs := tab.Axe(AxeOptions{}); len(vs) > 0 {
			t.Errorf("axe on a clean page: %+v, want none", vs)
		}
		// axe ran on pages whose CSP forbids eval and foreign scripts, and
		// tripped nothing.
		if errs := tab.Errors(); len(errs) > 0 {
			t.Errorf("axe made the pages report errors:\n%s", formatMessages(errs))
		}
	})

	t.Run("RunFailureSavesScreenshot", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("ENGRAM_TEST_SCREENSHOTS", dir)
		rt := newRecordingTB(t)
		tab := b.Tab(rt)
		tab.Timeout = time.Second
		tab.Navigate(srv.URL + "/wait")
		rt.do(func() { tab.Run(chromedp.WaitVisible(chromedp.CSS("#missing"))) })
		if !rt.Failed() || !strings.Contains(rt.fatal, "run:") {
			t.Fatalf("Run of an action that times out: failed %v, %q; want a failure", rt.Failed(), rt.fatal)
		}
		checkScreenshot(t, rt, filepath.Join(dir, fileName(t.Name())), "failed")
		// The cleanup does not save the same failure twice.
		rt.runCleanups()
		if n := pngs(t, dir); n != 1 {
			t.Errorf("%d screenshots after the cleanup, want 1", n)
		}
	})

	t.Run("FailedTestScreenshot", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv("ENGRAM_TEST_SCREENSHOTS", dir)

		passing := newRecordingTB(t)
		b.Tab(passing).Navigate(srv.URL + "/wait")
		passing.runCleanups()
		if n := pngs(t, dir); n != 0 {
			t.Errorf("a passing test left %d screenshots, want none", n)
		}

		rt := newRecordingTB(t)
		tab := b.Tab(rt)
		tab.Navigate(srv.URL + "/wait")
		tab.WaitText("#out", "ready")
		rt.Errorf("the test fails after the page loaded")
		rt.runCleanups()
		checkScreenshot(t, rt, filepath.Join(dir, fileName(t.Name())), "at-failure")
	})
}

func TestNew_NoBrowser(t *testing.T) {
	t.Run("NoneOnPath", func(t *testing.T) {
		t.Setenv("ENGRAM_TEST_CHROMIUM", "")
		t.Setenv("PATH", t.TempDir())
		rt := newRecordingTB(t)
		rt.do(func() { New(rt) })
		if !rt.skipped || !strings.Contains(rt.skip, "ENGRAM_TEST_CHROMIUM") {
			t.Errorf("New without a browser: skipped %v (%q), want a skip naming ENGRAM_TEST_CHROMIUM", rt.skipped, rt.skip)
		}
	})
	t.Run("NamedButMissing", func(t *testing.T) {
		t.Setenv("ENGRAM_TEST_CHROMIUM", filepath.Join(t.TempDir(), "chromium"))
		rt := newRecordingTB(t)
		rt.do(func() { New(rt) })
		if rt.skipped || !rt.Failed() || !strings.Contains(rt.fatal, "ENGRAM_TEST_CHROMIUM") {
			t.Errorf("New with a named browser that is absent: skipped %v, failed %v (%q), want a failure", rt.skipped, rt.Failed(), rt.fatal)
		}
	})
}

func TestSeriousViolations(t *testing.T) {
	vs := []Violation{
		{ID: "region", Impact: "moderate", Help: "All page content should be contained by landmarks", Targets: []string{"p"}},
		{ID: "image-alt", Impact: "critical", Help: "Images must have alternative text", HelpURL: "https://dequeuniversity.com/rules/axe/4.14/image-alt", Targets: []string{"img", "#logo"}},
		{ID: "color-contrast", Impact: "serious", Help: "Elements must meet minimum color contrast ratio thresholds", Targets: []string{"iframe >>> .low"}},
	}
	want := "image-alt (critical): Images must have alternative text, at img, #logo (https://dequeuniversity.com/rules/axe/4.14/image-alt)\n" +
		"color-contrast (serious): Elements must meet minimum color contrast ratio thresholds, at iframe >>> .low ()"
	if got := SeriousViolations(vs); got != want {
		t.Errorf("SeriousViolations =\n%s\nwant\n%s", got, want)
	}
	if got := SeriousViolations(vs[:1]); got != "" {
		t.Errorf("SeriousViolations of a moderate one = %q, want empty", got)
	}
}

func hasMessage(ms []Message, match func(Message) bool) bool {
	for _, m := range ms {
		if match(m) {
			return true
		}
	}
	return false
}

func hasViolation(vs []Violation, id string) bool {
	for _, v := range vs {
		if v.ID == id {
			return true
		}
	}
	return false
}

// checkScreenshot checks that rt logged a screenshot in dir whose name ends
// in name, and that it is a PNG.
func checkScreenshot(t *testing.T, rt *recordingTB, dir, name string) {
	t.Helper()
	var path string
	for _, l := range rt.logs {
		if _, p, ok := strings.Cut(l, "screenshot of the failure: "); ok {
			path = p
		}
	}
	if filepath.Dir(path) != dir || !strings.HasSuffix(path, "-"+name+".png") {
		t.Fatalf("logged screenshot %q, want one named …-%s.png in %s; the log:\n%s", path, name, dir, strings.Join(rt.logs, "\n"))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
		t.Errorf("%s: %d bytes, not a page's PNG", path, len(b))
	}
}

// pngs counts the PNG files under dir.
func pngs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if strings.HasSuffix(p, ".png") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// recordingTB is the real test's testing.TB, except that it records
// failures, skips and logs instead of acting on them, and keeps the
// cleanups for the test to run: it lets a test see how the package fails
// another test. Fatalf and Skip end the goroutine, as the real ones do, so
// calls that may make them go through do.
type recordingTB struct {
	testing.TB

	// mu guards the fields below: the calls that record run on do's
	// goroutine.
	mu       sync.Mutex
	failed   bool
	fatal    string
	skipped  bool
	skip     string
	logs     []string
	cleanups []func()
}

func newRecordingTB(t *testing.T) *recordingTB {
	rt := &recordingTB{TB: t}
	t.Cleanup(rt.runCleanups)
	return rt
}

// do runs f on a goroutine of its own, which Fatalf and Skip may end, and
// waits for it.
func (rt *recordingTB) do(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func (rt *recordingTB) Helper() {}

func (rt *recordingTB) Logf(format string, args ...any) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.logs = append(rt.logs, fmt.Sprintf(format, args...))
}

func (rt *recordingTB) Errorf(format string, args ...any) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.failed = true
	rt.logs = append(rt.logs, fmt.Sprintf(format, args...))
}

func (rt *recordingTB) Fatalf(format string, args ...any) {
	rt.mu.Lock()
	rt.failed = true
	rt.fatal = fmt.Sprintf(format, args...)
	rt.mu.Unlock()
	runtime.Goexit()
}

func (rt *recordingTB) Skip(args ...any) {
	rt.mu.Lock()
	rt.skipped = true
	rt.skip = fmt.Sprint(args...)
	rt.mu.Unlock()
	runtime.Goexit()
}

func (rt *recordingTB) Failed() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.failed
}

func (rt *recordingTB) Cleanup(f func()) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.cleanups = append(rt.cleanups, f)
}

// runCleanups runs the cleanups registered so far, last first, as the
// testing package does.
func (rt *recordingTB) runCleanups() {
	rt.mu.Lock()
	cs := rt.cleanups
	rt.cleanups = nil
	rt.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}
