package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	// DefaultTimeout bounds each Run, Eval, WaitText, WaitMessage and Axe
	// of a tab whose Timeout is zero.
	DefaultTimeout = 20 * time.Second
	// pollInterval is how often WaitText checks the page. The check runs in
	// the page (a DOM query), so a short interval costs little.
	pollInterval = 50 * time.Millisecond
	// maxMessages caps the messages a tab keeps; past it they are counted,
	// and Console and Errors say how many were dropped.
	maxMessages = 10_000
	// maxMessageBytes caps one message's text.
	maxMessageBytes = 4 << 10
	// cspBinding is the function through which the page reports its
	// securitypolicyviolation events to the test (Runtime.addBinding).
	cspBinding = "__engramBrowsertestCSP"
)

// cspListener runs in every document of the tab before the page's own
// scripts (Page.addScriptToEvaluateOnNewDocument, which the page's CSP does
// not govern). It listens on window in the capture phase so that it sees a
// violation before any of the page's listeners can stop it.
const cspListener = `window.addEventListener('securitypolicyviolation', (e) => {
	` + cspBinding + `(JSON.stringify({
		directive: e.effectiveDirective || e.violatedDirective,
		blocked: e.blockedURI,
		sample: e.sample,
		url: e.sourceFile || e.documentURI,
		line: e.lineNumber,
		disposition: e.disposition,
	}));
}, true);`

// Kind says where a Message came from.
type Kind string

// The kinds of Message.
const (
	// KindConsole is a call of the page's console API (console.log, …).
	KindConsole Kind = "console"
	// KindException is an exception nothing caught, or a promise rejection
	// nothing handled.
	KindException Kind = "exception"
	// KindLog is an entry of the browser's log: a failed request (source
	// "network"), a blocked action (source "security": a CSP violation is
	// reported here in prose as well as by a KindCSP message), a deprecation.
	KindLog Kind = "log"
	// KindCSP is a Content-Security-Policy violation, from the page's
	// securitypolicyviolation event.
	KindCSP Kind = "csp"
)

// Message is one thing a tab's page reported.
type Message struct {
	Kind Kind
	// Level is the console call's type ("log", "info", "warning", "error",
	// "assert", …), the log entry's level ("verbose", "info", "warning",
	// "error"), or "error" for an exception or a violation.
	Level string
	// Source is the log entry's source ("network", "security",
	// "javascript", …), empty for the other kinds.
	Source string
	// Text is what DevTools' console would show, at most 4 KiB.
	Text string
	// URL and Line say where the message came from, when the browser knows.
	// Line counts from 1 for a violation and from 0 for the rest, as the
	// protocol does.
	URL  string
	Line int64
	// Directive and Blocked are a violation's effective directive
	// ("script-src-elem") and what it blocked: a URL, or "inline", "eval".
	Directive string
	Blocked   string
}

// String formats the message for a test's log.
func (m Message) String() string {
	s := string(m.Kind) + " " + m.Level
	if m.Source != "" {
		s += " (" + m.Source + ")"
	}
	s += ": " + m.Text
	if m.URL != "" {
		s += fmt.Sprintf(" [%s:%d]", m.URL, m.Line)
	}
	return s
}

// IsError reports whether the message is one a working page does not
// produce: an exception, a violation, console.error or console.assert, or
// a log entry of level error.
func (m Message) IsError() bool {
	switch m.Kind {
	case KindException, KindCSP:
		return true
	case KindConsole:
		return m.Level == "error" || m.Level == "assert"
	case KindLog:
		return m.Level == string(log.EntryLevelError) && !isFaviconMiss(m)
	}
	return false
}

// isFaviconMiss reports whether the message is the 404 of the /favicon.ico
// that Chromium asks for by itself, after the load, when a page names no
// icon. The page did not ask for it and the request races with the test,
// so counting it would make Errors flaky; an icon the page names and
// misses is still an error.
func isFaviconMiss(m Message) bool {
	if m.Source != string(log.EntrySourceNetwork) {
		return false
	}
	u, err := url.Parse(m.URL)
	return err == nil && u.Path == "/favicon.ico"
}

// Tab is a browser tab (a page target) of one test. Its methods fail the
// test on error, saving a screenshot, so they must be called from the
// test's goroutine (chromedp runs one action at a time on a tab).
type Tab struct {
	// Timeout bounds each Run, Eval, WaitText, WaitMessage and Axe. Zero
	// means DefaultTimeout.
	Timeout time.Duration

	t testing.TB
	// ctx is the tab's chromedp context: chromedp addresses a target by its
	// context. The cleanup Tab registers cancels it.
	ctx context.Context
	// name is "tab1", "tab2", … in the order the browser opened them, for the
	// screenshots' names.
	name string
	// shots counts the screenshots taken, to keep their names apart.
	shots int
	// failShot is set when a failing method has saved a screenshot, so that
	// the cleanup does not save the same page again.
	failShot bool

	// mu guards messages, dropped and changed.
	mu       sync.Mutex
	messages []Message
	dropped  int
	// changed is closed, and replaced, when a message arrives, to wake
	// WaitMessage.
	changed chan struct{}
}

// Tab opens a new tab for the test, collecting its console messages,
// exceptions and CSP violations from the start, with a WindowWidth x
// WindowHeight viewport (a test may change it with chromedp.EmulateViewport,
// as to a phone's 390x844 with chromedp.EmulateMobile), and registers its close
// with t.Cleanup; when the test has failed by then, the cleanup first saves
// a screenshot of the tab (see Screenshot). t may be a subtest of the test
// that started the browser.
func (b *Browser) Tab(t testing.TB) *Tab {
	t.Helper()
	tab := &Tab{
		t:       t,
		name:    fmt.Sprintf("tab%d", b.tabs.Add(1)),
		changed: make(chan struct{}),
	}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(tab.listen))
	tab.ctx = ctx

	// The first Run creates the target, which then lives as long as the
	// context of that Run: no deadline on it, a timer instead.
	timer := time.AfterFunc(DefaultTimeout, cancel)
	err := chromedp.Do(ctx,
		reportViolations(),
		// Headless Chromium keeps part of its window for a browser UI it
		// does not draw (a 1280x900 window had a 1280x761 page), so the
		// page's viewport is set, to the window's size.
		chromedp.EmulateViewport(WindowWidth, WindowHeight),
	)
	if !timer.Stop() {
		err = fmt.Errorf("no answer within %v: %w", DefaultTimeout, err)
	}
	if err != nil {
		cancel()
		t.Fatalf("open %s: %v", tab.name, err)
	}
	t.Cleanup(func() {
		if t.Failed() && !tab.failShot {
			tab.saveScreenshot("at-failure")
		}
		cancel()
	})
	return tab
}

// reportViolations makes every document the tab loads from now on report
// its CSP violations to the test, through cspBinding.
func reportViolations() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, runtime.AddBinding, runtime.AddBindingParams{Name: cspBinding}); err != nil {
			return fmt.Errorf("add binding: %w", err)
		}
		if _, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument,
			page.AddScriptToEvaluateOnNewDocumentParams{Source: cspListener}); err != nil {
			return fmt.Errorf("add violation listener: %w", err)
		}
		return nil
	})
}

// Run runs the chromedp actions in the tab, in order, within the tab's
// Timeout; on error it saves a screenshot and fails the test.
func (tab *Tab) Run(actions ...chromedp.Action[chromedp.Void]) {
	tab.t.Helper()
	ctx, cancel := tab.context()
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tab.fail("run: %v", err)
	}
}

// Click clicks the element sel finds, as a user's mouse does, within the
// tab's Timeout. A page that renders a list anew (the dashboard's, on each
// event of its stream) can replace the element between the query that
// found it and the click: the click then finds it again, rather than
// failing on a node that left the document.
func (tab *Tab) Click(sel string) {
	tab.t.Helper()
	ctx, cancel := tab.context()
	defer cancel()
	for {
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		if err == nil {
			return
		}
		if !replaced(err) || ctx.Err() != nil {
			tab.fail("click %s: %v", sel, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replaced reports whether err says a node the browser was asked about
// left the document (the page replaced it).
func replaced(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Could not find node with given id") || strings.Contains(msg, "Node is detached from document") ||
		strings.Contains(msg, "No node with given id found")
}

// Navigate loads url in the tab and waits for its load event.
func (tab *Tab) Navigate(url string) {
	tab.t.Helper()
	tab.Run(chromedp.Navigate(url))
}

// Eval evaluates the JavaScript expression js in the page, awaits it if it
// is a promise, and decodes its value (as JSON) into out; out nil discards
// it. An exception, a rejection, or a value of undefined when out is not nil
// fails the test.
func (tab *Tab) Eval(js string, out any) {
	tab.t.Helper()
	raw, err := tab.eval(js)
	if err != nil {
		tab.fail("eval %s: %v", shorten(js), err)
		return
	}
	if out == nil {
		return
	}
	if raw == nil {
		tab.fail("eval %s: the value is undefined", shorten(js))
		return
	}
	if err := json.Unmarshal(raw, out); err != nil {
		tab.fail("eval %s: decode %s: %v", shorten(js), shorten(string(raw)), err)
	}
}

// eval evaluates js and returns its value as JSON, nil for undefined.
func (tab *Tab) eval(js string) ([]byte, error) {
	ctx, cancel := tab.context()
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[[]byte](js, chromedp.EvalAwaitPromise))
}

// WaitText waits, within the tab's Timeout, until the first element that
// the CSS selector sel matches has text (textContent) containing substring;
// it fails the test, saying what the text was, when that does not happen.
// The page checks itself every 50 ms, so the wait ends as soon as the text
// is there.
func (tab *Tab) WaitText(sel, substring string) {
	tab.t.Helper()
	timeout := tab.timeout()
	ctx, cancel := context.WithTimeout(tab.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](
		`(sel, sub) => { const el = document.querySelector(sel); return !!el && el.textContent.includes(sub); }`,
		chromedp.WithPollingInterval(pollInterval),
		chromedp.WithPollingTimeout(timeout),
		chromedp.WithPollingArgs(sel, substring),
	))
	if err == nil {
		return
	}
	// Say what the page shows instead: most failures are a near miss.
	var now *string
	q, _ := json.Marshal(sel)
	raw, qerr := tab.eval(`(() => { const el = document.querySelector(` + string(q) + `); return el ? el.textContent : null; })()`)
	if qerr == nil && raw != nil {
		_ = json.Unmarshal(raw, &now)
	}
	switch {
	case qerr != nil:
		tab.fail("wait for %q in %s: %v", substring, sel, err)
	case now == nil:
		tab.fail("wait for %q in %s: %v; no element matches %s", substring, sel, err, sel)
	default:
		tab.fail("wait for %q in %s: %v; its text is %q", substring, sel, err, shorten(*now))
	}
}

// Console returns every message the tab's page has reported so far, in the
// order they came: console calls, exceptions, log entries and violations.
func (tab *Tab) Console() []Message {
	tab.flush()
	return tab.collected(func(Message) bool { return true })
}

// Errors returns the messages the tab's page has reported so far that a
// working page does not produce (see Message.IsError): a test asserts it
// is empty, or finds the violation it provoked. A CSP violation is there
// twice: as the browser's log entry (KindLog, source "security") and as the
// page's event (KindCSP, with Directive and Blocked).
//
// Messages the page sent before the call are there; a violation's event is
// dispatched a moment after the violation, so a test that provokes one
// waits for it with WaitMessage.
func (tab *Tab) Errors() []Message {
	tab.flush()
	return tab.collected(Message.IsError)
}

// WaitMessage waits, within the tab's Timeout, for a message match accepts
// (one that came earlier counts), and returns it; it fails the test when
// none comes. It wakes on each message rather than polling.
func (tab *Tab) WaitMessage(match func(Message) bool) Message {
	tab.t.Helper()
	timer := time.NewTimer(tab.timeout())
	defer timer.Stop()
	seen := 0
	for {
		tab.mu.Lock()
		for _, m := range tab.messages[seen:] {
			if match(m) {
				tab.mu.Unlock()
				return m
			}
		}
		seen = len(tab.messages)
		changed := tab.changed
		tab.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			tab.fail("wait for a message: none matched within %v; the page reported:\n%s", tab.timeout(), formatMessages(tab.Console()))
			return Message{}
		}
	}
}

// flush makes sure the events the page sent before the call have been
// collected: the answer to an evaluation comes after them on the same
// connection, and chromedp hands an event to the listener before it reads
// the next message.
func (tab *Tab) flush() {
	if _, err := tab.eval("0"); err != nil {
		tab.t.Logf("%s: flush messages: %v", tab.name, err)
	}
}

// collected returns the messages keep accepts, and a note of any dropped.
func (tab *Tab) collected(keep func(Message) bool) []Message {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	var out []Message
	for _, m := range tab.messages {
		if keep(m) {
			out = append(out, m)
		}
	}
	if tab.dropped > 0 {
		// An error may be among them: say so as an error, so that a test
		// asserting none fails rather than passing blind.
		out = append(out, Message{Kind: KindLog, Level: "error", Source: "browsertest",
			Text: fmt.Sprintf("%d more messages dropped past the cap of %d", tab.dropped, maxMessages)})
	}
	return out
}

// listen collects the tab's messages. chromedp calls it on the goroutine
// that reads the tab's messages, so it only converts and appends.
func (tab *Tab) listen(ev any) {
	var m Message
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		m = Message{Kind: KindConsole, Level: string(e.Type), Text: argsText(e.Args)}
		if st := e.StackTrace; st != nil && len(st.CallFrames) > 0 {
			m.URL, m.Line = st.CallFrames[0].URL, st.CallFrames[0].LineNumber
		}
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		m = Message{Kind: KindException, Level: "error", Text: d.Text, URL: d.URL, Line: d.LineNumber}
		if d.Exception != nil {
			// The description of an error holds its stack after the first
			// line; the first line is the message.
			desc, _, _ := strings.Cut(objectText(d.Exception), "\n")
			m.Text = strings.TrimSpace(d.Text + " " + desc)
		}
	case *log.EventEntryAdded:
		en := e.Entry
		m = Message{Kind: KindLog, Level: string(en.Level), Source: string(en.Source), Text: en.Text, URL: en.URL, Line: en.LineNumber}
	case *runtime.EventBindingCalled:
		if e.Name != cspBinding {
			return
		}
		var v struct {
			Directive, Blocked, Sample, URL, Disposition string
			Line                                         int64
		}
		if err := json.Unmarshal([]byte(e.Payload), &v); err != nil {
			m = Message{Kind: KindCSP, Level: "error", Text: "undecodable violation report: " + e.Payload}
			break
		}
		text := fmt.Sprintf("%s blocked %s", v.Directive, v.Blocked)
		if v.Disposition == "report" {
			text = fmt.Sprintf("%s would block %s (report only)", v.Directive, v.Blocked)
		}
		if v.Sample != "" {
			text += ": " + v.Sample
		}
		m = Message{Kind: KindCSP, Level: "error", Text: text, URL: v.URL, Line: v.Line, Directive: v.Directive, Blocked: v.Blocked}
	default:
		return
	}
	if len(m.Text) > maxMessageBytes {
		m.Text = m.Text[:maxMessageBytes] + "…"
	}
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if len(tab.messages) >= maxMessages {
		tab.dropped++
		return
	}
	tab.messages = append(tab.messages, m)
	close(tab.changed)
	tab.changed = make(chan struct{})
}

// argsText joins a console call's arguments as the console shows them.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		parts = append(parts, objectText(a))
	}
	return strings.Join(parts, " ")
}

// objectText is a value as the console shows it: a string as it is, a
// primitive as JSON, an object by its description.
func objectText(o *runtime.RemoteObject) string {
	switch {
	case o == nil:
		return ""
	case len(o.Value) > 0:
		var s string
		if json.Unmarshal(o.Value, &s) == nil {
			return s
		}
		return string(o.Value)
	case o.UnserializableValue != "":
		return string(o.UnserializableValue)
	case o.Description != "":
		return o.Description
	}
	return string(o.Type)
}

// Screenshot saves a PNG of the whole page (beyond the window too) and
// returns its path: in the test's directory under ENGRAM_TEST_SCREENSHOTS
// (os.TempDir()/engram-screenshots unset), named after the tab, a count and
// name. It logs the path, and fails the test (without stopping it) when the
// capture fails.
func (tab *Tab) Screenshot(name string) string {
	tab.t.Helper()
	path, err := tab.screenshot(name)
	if err != nil {
		tab.t.Errorf("%s: screenshot %s: %v", tab.name, name, err)
		return ""
	}
	tab.t.Logf("%s: screenshot %s", tab.name, path)
	return path
}

// saveScreenshot saves a screenshot of a failed test, logging where, or why
// it could not.
func (tab *Tab) saveScreenshot(name string) {
	tab.t.Helper()
	tab.failShot = true
	path, err := tab.screenshot(name)
	if err != nil {
		tab.t.Logf("%s: no screenshot of the failure: %v", tab.name, err)
		return
	}
	tab.t.Logf("%s: screenshot of the failure: %s", tab.name, path)
}

func (tab *Tab) screenshot(name string) (string, error) {
	// From tab.ctx, not the context of the action that failed, which may
	// be the one that ran out of time.
	ctx, cancel := tab.context()
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "", err
	}
	dir := screenshotDir(tab.t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tab.shots++
	path := filepath.Join(dir, fmt.Sprintf("%s-%02d-%s.png", tab.name, tab.shots, fileName(name)))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// screenshotDir is the test's directory of screenshots.
func screenshotDir(t testing.TB) string {
	root := os.Getenv("ENGRAM_TEST_SCREENSHOTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "engram-screenshots")
	}
	return filepath.Join(root, fileName(t.Name()))
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileName makes s (a test's or a screenshot's name) safe as one path
// element: a subtest's "/" and anything else odd become "_".
func fileName(s string) string {
	s = unsafeFileChars.ReplaceAllString(s, "_")
	if s == "" || s == "." || s == ".." {
		s = "_"
	}
	return s
}

// fail saves a screenshot and fails the test, stopping it.
func (tab *Tab) fail(format string, args ...any) {
	tab.t.Helper()
	tab.saveScreenshot("failed")
	tab.t.Fatalf(tab.name+": "+format, args...)
}

// context is a context for one call on the tab, bounded by its Timeout.
func (tab *Tab) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(tab.ctx, tab.timeout())
}

func (tab *Tab) timeout() time.Duration {
	if tab.Timeout > 0 {
		return tab.Timeout
	}
	return DefaultTimeout
}

// shorten cuts s for an error message.
func shorten(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

func formatMessages(ms []Message) string {
	if len(ms) == 0 {
		return "  (nothing)"
	}
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("  " + m.String() + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Capture returns a full-page PNG of the tab, for a test that keeps it
// (the README's pictures); Screenshot saves one for a person looking into
// a test.
func (tab *Tab) Capture() []byte {
	tab.t.Helper()
	ctx, cancel := tab.context()
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tab.fail("capture: %v", err)
	}
	return png
}
