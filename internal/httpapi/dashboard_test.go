package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"

	"github.com/engramhq/engram/internal/browsertest"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/postgres"
	"github.com/engramhq/engram/internal/store/postgres/pgtest"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// noRedirect is a client that shows redirects instead of following them.
func noRedirect(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestDashboardSignIn follows a login link as a browser would, and checks
// what the cookie it sets may do: read, never write, never MCP, and
// nothing once the token changes.
func TestDashboardSignIn(t *testing.T) {
	eng := newEngine(t)
	loginsFile := filepath.Join(t.TempDir(), "serve.token.logins")
	logins, err := OpenLogins(loginsFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", Logins: logins}))
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	c := noRedirect(jar)

	// Without a sign-in the page loads (it holds no data) and the API
	// says 401.
	resp, _ := get(t, c, srv.URL+"/")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /: %d", resp.StatusCode)
	}
	if resp, _ := get(t, c, srv.URL+"/v1/windows"); resp.StatusCode != 401 {
		t.Fatalf("GET /v1/windows without sign-in: %d", resp.StatusCode)
	}

	link, err := LoginURL(srv.URL+"/", "tok", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, _ = get(t, c, link)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./" {
		t.Fatalf("login: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	set := resp.Header.Get("Set-Cookie")
	name := SessionCookie + "_" + mustURL(t, srv.URL).Port()
	for _, want := range []string{name + "=", "HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=604800"} {
		if !strings.Contains(set, want) {
			t.Errorf("Set-Cookie %q lacks %q", set, want)
		}
	}
	if strings.Contains(set, "tok") {
		t.Errorf("the cookie carries the token: %q", set)
	}

	// Once only.
	if resp, body := get(t, c, link); resp.StatusCode != 401 || !strings.Contains(body, "already used") {
		t.Errorf("second use of a login link: %d %q", resp.StatusCode, body)
	}

	// The cookie reads the API and its event stream...
	if resp, body := get(t, c, srv.URL+"/v1/windows"); resp.StatusCode != 200 || body != "{\"windows\":[]}\n" {
		t.Errorf("GET /v1/windows signed in: %d %q", resp.StatusCode, body)
	}
	// ...runs the API's query POSTs...
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/retrieve", strings.NewReader(`{"query":"nothing at all"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("POST /v1/retrieve signed in: %v %v", resp.StatusCode, err)
	}
	// ...and writes nothing: not a record, not one through recall's
	// @arch:store:, and no other query POST either.
	var b []byte
	for path, body := range map[string]string{"/v1/patterns": `{"pattern":"x","category":"api.design"}`,
		"/v1/recall":   `{"query":"@arch:store:pattern{\"pattern\":\"READER WROTE THIS\",\"category\":\"api.design\"}"}`,
		"/v1/prefetch": `{"task":"retry"}`} {
		req, _ = http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Engram-Session", "s1")
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(b), "reads only") {
			t.Errorf("POST %s with the cookie: %d %s", path, resp.StatusCode, b)
		}
	}
	if agents, err := eng.Store().Agents(context.Background(), ""); err != nil || len(agents) != 0 {
		t.Errorf("the reader registered agents: %v %v", agents, err)
	}
	// A HEAD of a link (a previewer's) does not spend it.
	link2, _ := LoginURL(srv.URL+"/", "tok", time.Minute)
	req, _ = http.NewRequest(http.MethodHead, link2, nil)
	if resp, err := noRedirect(nil).Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("HEAD of a login link: %v %v", resp.StatusCode, err)
	}
	if resp, _ := get(t, noRedirect(nil), link2); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the link after a HEAD: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("MCP with the cookie: %v %v", resp.StatusCode, err)
	}
	// A page of another origin gets nothing, cookie or not (a browser
	// would not even send a SameSite=Strict cookie from there).
	if resp, _ := get(t, c, srv.URL+"/v1/windows", "Origin", "http://evil.example"); resp.StatusCode != 403 {
		t.Errorf("cross-origin read with the cookie: %d", resp.StatusCode)
	}

	// Signing out: the page's form posts /logout, which drops the cookie;
	// a page of another origin cannot.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/logout", nil)
	req.Header.Set("Origin", "http://evil.example")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("a cross-site sign-out: %v %v", resp.StatusCode, err)
	}
	saved := jar.Cookies(mustURL(t, srv.URL))
	other := noRedirect(nil) // another copy of the cookie, kept
	replay := func() int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/windows", nil)
		for _, ck := range saved {
			req.AddCookie(ck)
		}
		resp, err := other.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if st := replay(); st != 200 {
		t.Fatalf("a copy of the cookie: %d", st)
	}
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/logout", nil)
	req.Header.Set("Origin", srv.URL)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("sign out: %v %v", resp.Header.Get("Set-Cookie"), err)
	}
	if resp, _ := get(t, c, srv.URL+"/v1/windows"); resp.StatusCode != 401 {
		t.Errorf("GET /v1/windows after signing out: %d", resp.StatusCode)
	}
	// Signed out on the server too: a copy of the cookie is refused, by
	// this server, and after a restart, and the links used stay used.
	if st := replay(); st != 401 {
		t.Errorf("a copy of the cookie after signing out: %d", st)
	}
	restarted, err := OpenLogins(loginsFile)
	if err != nil {
		t.Fatal(err)
	}
	again := httptest.NewServer(Handler(eng, Options{Token: "tok", Logins: restarted}))
	defer again.Close()
	req, _ = http.NewRequest(http.MethodGet, again.URL+"/v1/windows", nil)
	for _, ck := range saved {
		req.AddCookie(&http.Cookie{Name: SessionCookie + "_" + mustURL(t, again.URL).Port(), Value: ck.Value})
	}
	if resp, err := other.Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("the signed-out cookie on a restarted server: %v %v", resp.StatusCode, err)
	}
	if resp, body := get(t, noRedirect(nil), strings.Replace(link, srv.URL, again.URL, 1)); resp.StatusCode != 401 || !strings.Contains(body, "already used") {
		t.Errorf("a used login link on a restarted server: %d %q", resp.StatusCode, body)
	}
	if fi, err := os.Stat(loginsFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the sign-ins' file: %v, %v", fi, err)
	}
	link3, _ := LoginURL(srv.URL+"/", "tok", time.Minute)
	resp, _ = get(t, c, link3) // signed in again, for what follows
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in again: %d", resp.StatusCode)
	}

	// The same cookie on a server with another token (rotated) is refused,
	// and says why.
	rotated := httptest.NewServer(Handler(eng, Options{Token: "new-token"}))
	defer rotated.Close()
	u, _ := url.Parse(srv.URL)
	req, _ = http.NewRequest(http.MethodGet, rotated.URL+"/v1/windows", nil)
	for _, ck := range jar.Cookies(u) {
		req.AddCookie(&http.Cookie{Name: SessionCookie + "_" + mustURL(t, rotated.URL).Port(), Value: ck.Value})
	}
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(b), "not signed with this server's token") {
		t.Errorf("a cookie of another token: %d %s", resp.StatusCode, b)
	}

	// Bad links: expired, forged, malformed; none sets a cookie.
	expired := sign("tok", "login", time.Now().Add(-time.Second), strings.Repeat("ab", 16))
	forged := sign("guess", "login", time.Now().Add(time.Minute), strings.Repeat("cd", 16))
	session := sign("tok", "session", time.Now().Add(time.Minute), strings.Repeat("ef", 16)) // a cookie is no login link
	for name, v := range map[string]string{"expired": expired, "forged": forged, "cookie as link": session, "malformed": "1.2.3",
		"empty": "", "huge": strings.Repeat("9", 5000)} {
		resp, body := get(t, noRedirect(nil), srv.URL+"/login?t="+url.QueryEscape(v))
		if resp.StatusCode != 401 || resp.Header.Get("Set-Cookie") != "" || !strings.Contains(body, "engram token login") {
			t.Errorf("%s link: %d, Set-Cookie %q, %q", name, resp.StatusCode, resp.Header.Get("Set-Cookie"), body)
		}
	}
	// A forged or expired cookie is no sign-in.
	for name, v := range map[string]string{"expired": sign("tok", "session", time.Now().Add(-time.Second), strings.Repeat("ab", 16)),
		"link as cookie": sign("tok", "login", time.Now().Add(time.Minute), strings.Repeat("ab", 16)), "garbage": "x.y.z"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/windows", nil)
		req.AddCookie(&http.Cookie{Name: name, Value: v})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s cookie: %d", name, resp.StatusCode)
		}
	}
}

// TestDashboardAssets checks what the page is made of: every response
// carries the strict policy, and no embedded file holds what the policy
// would block (inline script or style, handlers in markup, a foreign
// source): the page would break in a browser, or the policy be loosened to
// let it work.
func TestDashboardAssets(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{Token: "tok"}))
	defer srv.Close()
	c := noRedirect(nil)
	resp, page := get(t, c, srv.URL+"/")
	if resp.Header.Get("Content-Security-Policy") != pageCSP || !strings.Contains(pageCSP, "script-src 'self';") || strings.Contains(pageCSP, "unsafe") {
		t.Fatalf("CSP %q", resp.Header.Get("Content-Security-Policy"))
	}
	for _, h := range []string{"X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("no %s", h)
		}
	}
	// The page's referrer policy sends no Referer to another origin, and
	// leaves the Origin of its own form's POST (Sign out) in place, which
	// no-referrer turns into "null".
	if rp := resp.Header.Get("Referrer-Policy"); rp != "same-origin" {
		t.Errorf("Referrer-Policy %q, want same-origin", rp)
	}
	metaReferrer := ""
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if n.Data == "meta" && attr(n, "name") == "referrer" {
				metaReferrer = attr(n, "content")
			}
			src := ""
			for _, a := range n.Attr {
				switch {
				case strings.HasPrefix(a.Key, "on"), a.Key == "style":
					t.Errorf("<%s %s=...>: inline handlers and styles are blocked by the policy", n.Data, a.Key)
				case a.Key == "src" || a.Key == "href":
					src = a.Val
				}
			}
			if n.Data == "style" || n.Data == "script" && src == "" {
				t.Errorf("inline <%s>", n.Data)
			}
			if src != "" && !strings.HasPrefix(src, "#") {
				if strings.Contains(src, "//") || strings.HasPrefix(src, "/") {
					t.Errorf("%q is not relative: a project's page is served under /p/NAME/", src)
				}
				refs = append(refs, src)
			}
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(doc)
	if metaReferrer != resp.Header.Get("Referrer-Policy") {
		t.Errorf("the page's <meta name=referrer> says %q, its header %q: the meta wins", metaReferrer, resp.Header.Get("Referrer-Policy"))
	}
	if len(refs) < 4 {
		t.Fatalf("the page refers to %v", refs)
	}
	for _, ref := range refs {
		resp, body := get(t, c, srv.URL+"/"+ref, "Accept-Encoding", "identity")
		if resp.StatusCode != 200 || len(body) == 0 || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s: %d, %d bytes, CSP %q", ref, resp.StatusCode, len(body), resp.Header.Get("Content-Security-Policy"))
		}
		if strings.Contains(body, "innerHTML") && !strings.Contains(ref, "vendor/") {
			t.Errorf("%s sets innerHTML: the page puts what it shows in as text only", ref)
		}
		// Revalidation answers 304.
		if resp2, _ := get(t, c, srv.URL+"/"+ref, "If-None-Match", resp.Header.Get("ETag")); resp2.StatusCode != http.StatusNotModified {
			t.Errorf("%s revalidated: %d", ref, resp2.StatusCode)
		}
	}
	// Every embedded file is reachable, the vendored library with its
	// licence, and nothing else is.
	err = fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != "ui/index.html" {
			if resp, _ := get(t, c, srv.URL+"/assets/"+strings.TrimPrefix(p, "ui/")); resp.StatusCode != 200 {
				t.Errorf("%s: %d", p, resp.StatusCode)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/assets/../server.go", "/assets/nothing.js", "/index.htm", "/assets/vendor/../../dashboard.go"} {
		if resp, _ := get(t, http.DefaultClient, srv.URL+p); resp.StatusCode != 404 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	// gzip when asked.
	resp, _ = get(t, c, srv.URL+"/assets/app.js", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("app.js with Accept-Encoding gzip: %q", resp.Header.Get("Content-Encoding"))
	}
}

// sseReader reads server-sent events.
type sseReader struct {
	sc *bufio.Scanner
}

// next returns the next event's name and data, skipping comments and the
// retry field.
func (r sseReader) next(t *testing.T) (string, string) {
	t.Helper()
	var name, data string
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "" && name != "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("the stream ended: %v", r.sc.Err())
	return "", ""
}

// until reads events until one named name whose data holds want, and
// returns its data; other events may come first (an agent's registration
// and its record can be two polls apart), but at most 20.
func (r sseReader) until(t *testing.T, name, want string) string {
	t.Helper()
	var seen []string
	for range 20 {
		n, data := r.next(t)
		if n == name && strings.Contains(data, want) {
			return data
		}
		seen = append(seen, n+" "+data)
	}
	t.Fatalf("no %s event with %s in 20: %v", name, want, seen)
	return ""
}

// TestProjectsPage asks a server of several projects for / as a browser
// would: it answers a page, under the dashboard's policy, with a link to
// each project's dashboard, and its stylesheet.
func TestProjectsPage(t *testing.T) {
	handlers := map[string]http.Handler{}
	for _, name := range []string{"web", "api"} {
		handlers[name] = Handler(newEngine(t), Options{Token: "tok"})
	}
	srv := httptest.NewServer(Projects(handlers, Options{Token: "tok"}))
	defer srv.Close()
	c := noRedirect(nil)
	resp, page := get(t, c, srv.URL+"/")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		resp.Header.Get("Content-Security-Policy") != pageCSP || resp.Header.Get("Referrer-Policy") != pageReferrer {
		t.Fatalf("GET /: %d, %v\n%s", resp.StatusCode, resp.Header, page)
	}
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var links, sheets []string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			for _, a := range n.Attr {
				if strings.HasPrefix(a.Key, "on") || a.Key == "style" {
					t.Errorf("<%s %s=...>: inline handlers and styles are blocked by the policy", n.Data, a.Key)
				}
			}
			switch {
			case n.Data == "script" || n.Data == "style":
				t.Errorf("<%s> on the projects' page", n.Data)
			case n.Data == "a":
				links = append(links, attr(n, "href"))
			case n.Data == "link" && attr(n, "rel") == "stylesheet":
				sheets = append(sheets, attr(n, "href"))
			}
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(doc)
	if want := []string{"p/api/", "p/web/"}; !slices.Equal(links, want) {
		t.Errorf("the projects' page links to %q, want %q", links, want)
	}
	for _, l := range links {
		if resp, body := get(t, c, srv.URL+"/"+l); resp.StatusCode != 200 || !strings.Contains(body, `src="assets/app.js"`) {
			t.Errorf("%s: %d %.200s", l, resp.StatusCode, body)
		}
	}
	for _, css := range sheets {
		if resp, body := get(t, c, srv.URL+"/"+css); resp.StatusCode != 200 || !strings.Contains(body, ".top") {
			t.Errorf("%s: %d %.200s", css, resp.StatusCode, body)
		}
	}
	if len(sheets) != 1 {
		t.Errorf("the projects' page has stylesheets %q", sheets)
	}
	// A project's page is its own, not the server's.
	if resp, _ := get(t, c, srv.URL+"/assets/index.html"); resp.StatusCode != 404 {
		t.Errorf("GET /assets/index.html: %d", resp.StatusCode)
	}
	if resp, body := get(t, c, srv.URL+"/v1/windows"); resp.StatusCode != 404 || !strings.Contains(body, "api, web") {
		t.Errorf("GET /v1/windows: %d %s", resp.StatusCode, body)
	}
}

// TestProjectsPageInBrowser opens the page at / of a server of several
// projects in Chromium: nothing on it breaks the policy, axe-core finds
// no serious violation, and a project's link opens its dashboard.
func TestProjectsPageInBrowser(t *testing.T) {
	b := browsertest.New(t)
	handlers := map[string]http.Handler{}
	for _, name := range []string{"web", "api"} {
		handlers[name] = Handler(newEngine(t), Options{Token: "tok"})
	}
	srv := httptest.NewServer(Projects(handlers, Options{Token: "tok"}))
	defer srv.Close()
	tab := b.Tab(t)
	tab.Navigate(srv.URL + "/")
	tab.WaitText("main", "This server serves several projects")
	if os.Getenv("ENGRAM_TEST_AXE") != "" {
		if v := browsertest.SeriousViolations(tab.Axe(browsertest.AxeOptions{})); v != "" {
			t.Errorf("axe-core, the projects' page: serious violations:\n%s", v)
		}
	}
	var styled bool // the stylesheet applies: the header is the dashboard's
	tab.Eval(`getComputedStyle(document.querySelector('header.top')).display === 'flex'`, &styled)
	if !styled {
		t.Errorf("the projects' page is not styled")
	}
	tab.Click(`a[href="p/web/"]`)
	tab.Run(chromedp.WaitVisible(chromedp.CSS("#signin"))) // a query of the DOM waits out the navigation
	tab.WaitText("#conn", "Not signed in")
	var path string
	tab.Eval(`location.pathname`, &path)
	if path != "/p/web/" {
		t.Errorf("the link to web opened %s", path)
	}
	for _, m := range tab.Errors() {
		if m.Kind != browsertest.KindLog || m.Source != "network" { // the dashboard's 401s, signed out
			t.Errorf("the page reported an error: %v", m)
		}
	}
}

// TestEventStream follows the event stream while windows and the archive
// change, through the API as agents change them.
func TestEventStream(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", EventPoll: 20 * time.Millisecond}))
	defer srv.Close()
	c := client{t, srv.URL}
	c.want(200, "PUT", "/v1/windows/s1/coder", `{"limit":3000}`, `"budget"`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() (*http.Response, sseReader) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/events/stream", nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return resp, sseReader{bufio.NewScanner(resp.Body)}
	}
	_, ev := open()
	name, data := ev.next(t)
	var hello struct{ Server, Version string }
	if err := json.Unmarshal([]byte(data), &hello); name != "hello" || err != nil || hello.Server == "" {
		t.Fatalf("first event %s %s (%v)", name, data, err)
	}

	// An append is a windows event naming the window at its new version.
	_, b := c.want(201, "POST", "/v1/windows/s1/coder/messages", `{"messages":[{"role":"user","content":"hello"}]}`, `"positions"`)
	var out struct{ Window struct{ Version int64 } }
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	data = ev.until(t, "windows", `"agent":"coder"`)
	name = "windows"
	var ws struct {
		Windows []windowVersion
	}
	if err := json.Unmarshal([]byte(data), &ws); name != "windows" || err != nil || len(ws.Windows) != 1 ||
		ws.Windows[0] != (windowVersion{Session: "s1", Agent: "coder", Version: out.Window.Version}) {
		t.Fatalf("after an append: %s %s (%v)", name, data, err)
	}

	// A record is an archive event carrying the log's new events.
	c.want(201, "POST", "/v1/insights", `{"insight":"<script>alert(1)</script> is stored as text"}`, `"id"`)
	data = ev.until(t, "archive", `"type":"insight_add"`)
	name = "archive"
	var arch struct {
		Events []struct {
			Type, Session string
			Seq           int64
		}
	}
	if err := json.Unmarshal([]byte(data), &arch); name != "archive" || err != nil || len(arch.Events) == 0 || arch.Events[0].Session != "s1" {
		t.Fatalf("after a record: %s %s (%v)", name, data, err)
	}

	// A second stream gets its own hello, and both get what follows.
	_, ev2 := open()
	if name, _ := ev2.next(t); name != "hello" {
		t.Fatalf("second stream's first event: %s", name)
	}
	c.want(201, "POST", "/v1/windows/s1/coder/messages", `{"messages":[{"role":"assistant","content":"hi"}]}`, `"positions"`)
	for _, r := range []sseReader{ev, ev2} {
		if data := r.until(t, "windows", `"agent":"coder"`); !regexp.MustCompile(`"version":\d+`).MatchString(data) {
			t.Fatalf("both streams: %s", data)
		}
	}

	// Without a credential, no stream.
	resp, err := http.Get(srv.URL + "/v1/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("stream without a credential: %d", resp.StatusCode)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// openStream opens the event stream of the server at url with the token
// "tok" and reads its hello.
func openStream(ctx context.Context, t *testing.T, url string) sseReader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	r := sseReader{bufio.NewScanner(resp.Body)}
	if name, _ := r.next(t); resp.StatusCode != 200 || name != "hello" {
		t.Fatalf("stream: %d, first event %s", resp.StatusCode, name)
	}
	return r
}

// TestEventStreamTwoServers: a page open on one server sees what agents
// do through another server of the same store, since the hub reads the
// store, not the server's own writes: two processes on one SQLite file,
// two servers on one PostgreSQL database.
func TestEventStreamTwoServers(t *testing.T) {
	ctx := context.Background()
	stores := map[string]func(t *testing.T) (store.Store, store.Store){
		"sqlite": func(t *testing.T) (store.Store, store.Store) {
			path := filepath.Join(t.TempDir(), "engram.db")
			return sqlitetest.OpenPath(t, path, sqlite.Options{}), sqlitetest.OpenPath(t, path, sqlite.Options{})
		},
		"postgres": func(t *testing.T) (store.Store, store.Store) {
			u := pgtest.Database(t)
			var out [2]store.Store
			for i := range out {
				st, err := postgres.Open(ctx, u, postgres.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = st.Close() })
				out[i] = st
			}
			return out[0], out[1]
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			a, b := open(t)
			var urls [2]string
			for i, st := range []store.Store{a, b} {
				eng, err := engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(Handler(eng, Options{Token: "tok", EventPoll: 20 * time.Millisecond}))
				t.Cleanup(srv.Close)
				urls[i] = srv.URL
			}
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ev := openStream(sctx, t, urls[0])
			other := client{t, urls[1]}
			other.want(200, "PUT", "/v1/windows/s1/coder", `{"limit":3000}`, `"budget"`)
			ev.until(t, "windows", `"agent":"coder"`) // a window opened through the other server
			other.want(201, "POST", "/v1/insights", `{"insight":"seen from the other server"}`, `"id"`)
			ev.until(t, "archive", `"type":"insight_add"`) // a record written through the other server
		})
	}
}

// TestEventStreamCredentials: one credential holds at most
// maxStreamsEach streams, so that one agent's key cannot take them all
// from the dashboards; and a stream ends when its sign-in does, with no
// event after it.
func TestEventStreamCredentials(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", EventPoll: 20 * time.Millisecond}))
	defer srv.Close()
	c := client{t, srv.URL}
	c.want(200, "PUT", "/v1/windows/s1/coder", `{"limit":3000}`, `"budget"`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range maxStreamsEach {
		openStream(ctx, t, srv.URL)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "with this credential") {
		t.Errorf("a stream past the credential's bound: %d %s", resp.StatusCode, b)
	}

	// A dashboard signed in still gets its stream.
	jar, _ := cookiejar.New(nil)
	page := noRedirect(jar)
	link, err := LoginURL(srv.URL+"/", "tok", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, page, link); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	// The stream is cut after 30 s: it should end by itself long before.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	req, _ = http.NewRequestWithContext(sctx, http.MethodGet, srv.URL+"/v1/events/stream", nil)
	resp, err = page.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the dashboard's stream: %v, %v", resp, err)
	}
	defer resp.Body.Close()
	ev := sseReader{bufio.NewScanner(resp.Body)}
	if name, _ := ev.next(t); name != "hello" {
		t.Fatalf("first event: %s", name)
	}
	c.want(201, "POST", "/v1/windows/s1/coder/messages", `{"messages":[{"role":"user","content":"hello"}]}`, `"positions"`)
	ev.until(t, "windows", `"agent":"coder"`)
	// The append's chunks come as an index event a few polls after the
	// window's: read it too, or a slow sign-out below lets it reach the
	// stream first, and it is read as sent after signing out.
	st, err := eng.EmbedStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev.until(t, "index", fmt.Sprintf(`"chunks":%d,`, st.Chunks))

	// Signed out: what changes next is not sent, and the stream ends.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/logout", nil)
	req.Header.Set("Origin", srv.URL)
	if resp, err := page.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %v %v", resp, err)
	}
	c.want(201, "POST", "/v1/windows/s1/coder/messages", `{"messages":[{"role":"assistant","content":"hi"}]}`, `"positions"`)
	for ev.sc.Scan() {
		if strings.HasPrefix(ev.sc.Text(), "event: ") {
			t.Fatalf("an event after signing out: %s", ev.sc.Text())
		}
	}
	if err := ev.sc.Err(); err != nil {
		t.Errorf("the stream did not end after signing out: %v", err)
	}
}

// TestLoginsShared: servers of one data directory spending nonces into
// one file at once lose none of them.
func TestLoginsShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.token.logins")
	const servers, each = 6, 30
	var wg sync.WaitGroup
	exp := time.Now().Add(time.Hour)
	for s := range servers {
		l, err := OpenLogins(path)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range each {
				if ok, _, err := l.spend(fmt.Sprintf("%016x%016x", s, i), exp, time.Now(), maxSpent); !ok || err != nil {
					t.Errorf("server %d, nonce %d: %v, %v", s, i, ok, err)
				}
			}
		})
	}
	wg.Wait()
	l, err := OpenLogins(path)
	if err != nil {
		t.Fatal(err)
	}
	for s := range servers {
		for i := range each {
			if !l.spentNonce(fmt.Sprintf("%016x%016x", s, i)) {
				t.Fatalf("server %d's nonce %d is not in the file", s, i)
			}
		}
	}
}

// TestStreamBounds: each credential holds at most maxStreamsEach streams
// (each browser's sign-in its own), and agents' keys together leave
// maxStreamsEach for the dashboards.
func TestStreamBounds(t *testing.T) {
	eng := newEngine(t)
	var cancels []func()
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	open := func(h *hub, who string) string {
		_, cancel, why := h.subscribe(who)
		if why == "" {
			cancels = append(cancels, cancel)
		}
		return why
	}
	h := newHub(eng, time.Hour, "test", slog.New(slog.DiscardHandler), nil, nil)
	for range maxStreamsEach {
		if why := open(h, "reader:a"); why != "" {
			t.Fatal(why)
		}
	}
	if why := open(h, "reader:a"); !strings.Contains(why, "with this credential") {
		t.Errorf("one sign-in past its bound: %q", why)
	}
	if why := open(h, "reader:b"); why != "" {
		t.Errorf("another browser's sign-in: %q", why)
	}
	cancels[0]() // one of sign-in a's streams ends: it may open one again
	cancels = cancels[1:]
	if why := open(h, "reader:a"); why != "" {
		t.Errorf("a sign-in after one of its streams ended: %q", why)
	}

	h = newHub(eng, time.Hour, "test", slog.New(slog.DiscardHandler), nil, nil)
	agents := 0
	for k := 0; ; k++ {
		why := open(h, fmt.Sprintf("agent:a%d", k/maxStreamsEach))
		if why != "" {
			if !strings.Contains(why, "agents' keys") || agents != maxStreams-maxStreamsEach {
				t.Errorf("after %d agents' streams: %q", agents, why)
			}
			break
		}
		agents++
	}
	for range maxStreamsEach {
		if why := open(h, "reader:c"); why != "" {
			t.Fatalf("a dashboard beside the agents' streams: %q", why)
		}
	}
}

// attr returns the value of n's attribute key, "" if it has none.
func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
