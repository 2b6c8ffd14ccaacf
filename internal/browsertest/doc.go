// Package browsertest drives a real headless Chromium from tests, through
// chromedp and the DevTools protocol, so that the dashboard's tests look at
// the page a person sees: its text, its console, the violations of its
// Content-Security-Policy, its accessibility (axe-core) and, when a test
// fails, a screenshot of it.
//
// It is a test helper: only _test.go files import it. It is a normal
// package, not a _test.go file, so that the tests of several packages can
// share it. Unlike the rest of engram it reads the environment, as the other
// test helpers do, because that is how CI tells tests where their outside
// tools are:
//
//   - ENGRAM_TEST_CHROMIUM: the browser's executable. Unset, New looks for
//     chromium, chromium-browser and google-chrome on PATH, and skips the
//     test when none is there. Debian's chromium package is the browser of
//     CI (Playwright's own download is not reachable from it).
//   - ENGRAM_TEST_AXE: axe-core's axe.min.js, or the axe-core package
//     directory that holds it (npm install axe-core@4.14.1). Unset, Tab.Axe
//     skips the test.
//   - ENGRAM_TEST_SCREENSHOTS: where screenshots go, one directory per test.
//     Unset, they go under os.TempDir()/engram-screenshots.
//
// Start with New, open a Tab, and drive it with Tab.Run and the chromedp
// actions; Tab.WaitText, Tab.Eval, Tab.Errors and Tab.Axe cover what the
// dashboard's tests check most. Every method fails the test (with a
// screenshot) rather than returning an error, and every wait is bounded by
// Tab.Timeout.
//
// # Scripts injected past the page's CSP
//
// The dashboard's Content-Security-Policy allows only its own script files,
// so the tests cannot add axe-core with a <script> element: an inline one is
// refused ("Executing inline script violates ... script-src 'self'") and a
// file from another origin too. They evaluate it with Runtime.evaluate
// instead, which the policy does not govern: the protocol's evaluation is
// not a script the page loads. Checked on Chromium 148: on a page served
// with "default-src 'self'; script-src 'self'" an evaluated expression runs
// even with allowUnsafeEvalBlockedByCSP false, while an inline <script>
// element appended by the same evaluation does not run, and eval() inside
// the evaluation throws EvalError when that flag is false (the flag, true by
// default, only waives the policy's ban on eval for the evaluation itself).
// Tab.Axe injects axe-core with the flag false, so axe gets no exception from
// the page's policy beyond being injected: axe-core 4.14.1 needs none.
package browsertest
