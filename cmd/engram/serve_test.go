package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/engramhq/engram/internal/modelserver"
)

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	r.Header.Set("X-Engram-Session", "s-serve")
	return http.DefaultTransport.RoundTrip(r)
}

// startServe starts the built binary's engram serve with args and returns
// where it listens and where its token is, once it has said so.
func startServe(ctx context.Context, t *testing.T, e *env, args ...string) (cmd *exec.Cmd, url, tokenFile string) {
	t.Helper()
	cmd = e.command(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--yes", "--no-embed"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stderr)
	addrRe := regexp.MustCompile(`on (http://\S+)`)
	fileRe := regexp.MustCompile(`bearer token in (\S+)`)
	var log strings.Builder
	// Found before the next Scan, which would wait for a line more.
	for (url == "" || tokenFile == "") && sc.Scan() {
		line := sc.Text()
		log.WriteString(line + "\n")
		if m := addrRe.FindStringSubmatch(line); m != nil {
			url = m[1]
		}
		if m := fileRe.FindStringSubmatch(line); m != nil {
			tokenFile = m[1]
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if url == "" || tokenFile == "" {
		t.Fatalf("serve did not say where it listens:\n%s", log.String())
	}
	return cmd, url, tokenFile
}

// TestServe runs the built binary's engram serve: it indexes the project,
// serves MCP over streamable HTTP with its token, and stops on SIGTERM.
func TestServe(t *testing.T) {
	e := newEnv(t)
	if err := os.WriteFile(e.project+"/retry.go", []byte("package p\n\n// Backoff waits longer after each failed attempt.\nfunc Backoff(n int) int { return n * n }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, url, tokenFile := startServe(ctx, t, e)
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v, %v", resp, err)
	}
	_ = resp.Body.Close()
	// engram token prints the token serve made, from the data directory.
	if got := e.ok("", "token"); got != string(tok) {
		t.Errorf("engram token = %q, serve's token file holds %q", got, tok)
	}
	// With $ENGRAM_TOKEN set, serve requires it, and engram token says so.
	e.vars["ENGRAM_TOKEN"] = "abcdefghijklmnopqrstuvwxyz0123456789"
	if got := e.ok("", "token"); got != "abcdefghijklmnopqrstuvwxyz0123456789\n" {
		t.Errorf("engram token with $ENGRAM_TOKEN = %q", got)
	}
	delete(e.vars, "ENGRAM_TOKEN")
	// Loopback is not trusted by default, and a rebound name is refused.
	for _, tc := range []struct {
		hdr    map[string]string
		status int
	}{
		{nil, http.StatusUnauthorized},
		{map[string]string{"Authorization": "Bearer " + strings.TrimSpace(string(tok)), "Host": "evil.example.com"}, http.StatusForbidden},
	} {
		req, _ := http.NewRequest("GET", url+"/v1/search?q=Backoff", nil)
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		req.Host = tc.hdr["Host"]
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%v: HTTP %d, want %d", tc.hdr, resp.StatusCode, tc.status)
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "serve-test", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{strings.TrimSpace(string(tok))}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The index is built in the background: wait for the file to be found.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"query": "Backoff failed attempt"}})
		if err != nil {
			t.Fatal(err)
		}
		if text := res.Content[0].(*mcp.TextContent).Text; strings.Contains(text, "retry.go") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the project was not indexed within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_file", Arguments: map[string]any{"path": "retry.go", "start_line": 3, "end_line": 3}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "// Backoff waits longer after each failed attempt.\n" {
		t.Fatalf("get_file: %+v, %v", res, err)
	}
	// A file written while it serves is indexed by the watcher, which
	// /metrics reports.
	if err := os.WriteFile(e.project+"/jitter.go", []byte("package p\n\n// Jitter spreads the retries of many clients apart.\nfunc Jitter() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: bearer{strings.TrimSpace(string(tok))}}
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := hc.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(b), `engram_index_files_total{change="new"} 1`) {
			if !strings.Contains(string(b), `engram_index_updates_total{result="ok"}`) || !strings.Contains(string(b), "engram_index_pending_paths 0") {
				t.Errorf("index metrics after an update:\n%s", grepLines(string(b), "engram_index"))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher's update is not in /metrics after 30s:\n%s", grepLines(string(b), "engram_index"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A dashboard's event stream and the MCP session stay open: they
	// never go idle, and used to hold the shutdown to its 10 s limit,
	// which it then failed.
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := hc.Do(req)
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("event stream: %v, %v", stream, err)
	}
	defer stream.Body.Close()
	hello := make([]byte, 1)
	if _, err := stream.Body.Read(hello); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM, with an event stream and an MCP session open: %v", err)
	}
	if _, err := io.Copy(io.Discard, stream.Body); err != nil {
		t.Errorf("the event stream after the shutdown: %v", err)
	}
	_ = cs.Close()
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeProjects serves two projects from one process: each is indexed
// into its own store and answers under /p/NAME/, with one token.
func TestServeProjects(t *testing.T) {
	e := newEnv(t)
	root := filepath.Dir(e.project)
	dirs := map[string]string{"api": "// Retry retries a request with backoff.\n", "web": "// Render draws the page template.\n"}
	var args []string
	for name, doc := range dirs {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".go"), []byte("package "+name+"\n\n"+doc+"func F() {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, dir)
	}
	// Two directories with one name are refused.
	if code, _, errOut := e.run("", "serve", "--yes", args[0], filepath.Join(root, "project", "..", filepath.Base(args[0]))); code != 2 || !strings.Contains(errOut, "two projects named") {
		t.Errorf("same name twice: exit %d, %s", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, url, tokenFile := startServe(ctx, t, e, args...)
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: bearer{strings.TrimSpace(string(tok))}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := hc.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, `"projects":["api","web"]`) {
		t.Errorf("healthz: %d %s", code, body)
	}
	if code, body := get("/v1/search?q=x"); code != 404 || !strings.Contains(body, "api, web") {
		t.Errorf("a route outside the projects: %d %s", code, body)
	}
	// The server's address, opened in a browser: a page that leads to
	// each project's dashboard.
	if code, body := get("/"); code != 200 || !strings.Contains(body, `<a href="p/api/">api</a>`) || !strings.Contains(body, `<a href="p/web/">web</a>`) {
		t.Errorf("GET /: %d %s", code, body)
	}
	for name, want := range map[string]string{"api": "Retry retries", "web": "Render draws"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, body := get("/p/" + name + "/v1/search?q=retry+request+render+page+template")
			if strings.Contains(body, want) {
				for other, text := range map[string]string{"api": "Retry retries", "web": "Render draws"} {
					if other != name && strings.Contains(body, text) {
						t.Errorf("project %s found project %s's file: %s", name, other, body)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("project %s was not indexed within 30s: %s", name, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "serve-test", Version: "v0"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url + "/p/web/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_file", Arguments: map[string]any{"path": "web.go"}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "Render draws") {
		t.Errorf("get_file over /p/web/mcp: %+v, %v", res, err)
	}
	_ = cs.Close()

	// The dashboard of a project: engram token login mints a link to its
	// page, which signs the browser in for every project of the server
	// (one token, one cookie), to read only.
	addr := strings.TrimPrefix(url, "http://")
	code, out, errOut := e.run("", "token", "login", "--addr", addr, "--project", "web")
	link := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(link, url+"/p/web/login?t=") {
		t.Fatalf("engram token login: exit %d, %q %s", code, out, errOut)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/p/web/" || !strings.Contains(string(page), `src="assets/app.js"`) {
		t.Errorf("the login link led to %s: %d %.200s", resp.Request.URL, resp.StatusCode, page)
	}
	for _, p := range []string{"/p/web/v1/windows", "/p/api/v1/windows"} {
		resp, err := browser.Get(url + p)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s signed in: %d", p, resp.StatusCode)
		}
	}
	// Spent for every project of the server, not only its own.
	for _, again := range []string{link, strings.Replace(link, "/p/web/", "/p/api/", 1)} {
		if resp, err := http.Get(again); err != nil || resp.StatusCode != 401 {
			t.Errorf("a login link used twice (%s): %v %v", again, resp.StatusCode, err)
		}
	}
	for _, args := range [][]string{{"--ttl", "0s"}, {"--ttl", "48h"}, {"--addr", "nowhere"}} {
		if code, _, errOut := e.run("", append([]string{"token", "login"}, args...)...); code != 2 || errOut == "" {
			t.Errorf("engram token login %v: exit %d, %s", args, code, errOut)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
}

// TestServe_Proxy runs the built binary's engram serve with the model APIs
// to the scripted model server: a streamed Messages request reaches the
// model with the vendor's key intact and is stored in the window engram's
// API shows; a request without engram's token in X-Engram-Token is
// refused, from loopback and from a host the server answers to alike, and
// so is one for a host it does not; /metrics counts them.
func TestServe_Proxy(t *testing.T) {
	e := newEnv(t)
	conf := filepath.Join(e.vars["HOME"], ".config", "engram", "config.toml")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("[serve]\nallowed_hosts = [\"engram.internal\"]\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	up := modelserver.Start(modelserver.Options{APIKey: "sk-ant-vendor-key", Main: []modelserver.Step{modelserver.Say("Through serve.")}})
	defer up.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, url, tokenFile := startServe(ctx, t, e, "--no-index", "--anthropic", up.URL(), "--openai", up.URL())
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(b))
	post := func(path, body string, hdr ...string) (int, string) {
		t.Helper()
		base := []string{"Content-Type", "application/json", "X-Api-Key", "sk-ant-vendor-key",
			"Anthropic-Version", "2023-06-01", "X-Engram-Session", "s-serve"}
		return send(t, "POST", url+path, body, append(base, hdr...)...)
	}
	msg := `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"system":"You are terse.","messages":[{"role":"user","content":"hi"}]}`
	if code, body := post("/v1/messages", msg, "X-Engram-Token", tok); code != 200 || streamedText(body) != "Through serve." {
		t.Fatalf("a streamed Messages request: %d\n%s", code, body)
	}
	// Counting tokens goes through too, for a host the server answers to.
	count := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`
	if code, body := post("/v1/messages/count_tokens", count, "X-Engram-Token", tok, "Host", "engram.internal"); code != 200 || !strings.Contains(body, "input_tokens") {
		t.Errorf("count_tokens: %d %s", code, body)
	}
	reached := len(up.Requests())
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
	}{
		{"no token, loopback", nil, http.StatusUnauthorized},
		{"no token, an allowed host", []string{"Host", "engram.internal"}, http.StatusUnauthorized},
		{"the token as a bearer", []string{"Authorization", "Bearer " + tok, "Host", "engram.internal"}, http.StatusUnauthorized},
		{"a foreign host", []string{"X-Engram-Token", tok, "Host", "evil.example.com"}, http.StatusForbidden},
	} {
		if code, body := post("/v1/messages", msg, tc.hdr...); code != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.status)
		}
	}
	if err := up.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(up.Requests()); n != reached {
		t.Errorf("%d refused requests reached the model", n-reached)
	}
	// engram's own API answers, and shows the stored conversation.
	hc := &http.Client{Transport: bearer{tok}}
	resp, err := hc.Get(url + "/v1/windows/s-serve/proxy")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"messages":2`) {
		t.Errorf("the window through engram's API: %d %s", resp.StatusCode, body)
	}
	// /metrics counts them: the proxy's refusals among its own counters,
	// the requests and the guard's refusal among serve's.
	resp, err = hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{
		`engram_proxy_refused_total{reason="token"} 3`,
		`engram_proxy_requests_total{route="messages"}`,
		`engram_proxy_upstream_total{class="2xx"}`,
		`engram_http_requests_total{code="200",method="POST",route="POST /v1/messages"} 1`,
		`engram_http_requests_total{code="200",method="POST",route="POST /v1/messages/count_tokens"} 1`,
		`engram_http_refused_total{reason="host"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(body), "_refused_total")+"\n"+grepLines(string(body), "requests_total"))
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
}

// streamedText is the text of a Messages stream's text deltas.
func streamedText(stream string) string {
	var b strings.Builder
	for _, line := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Delta struct{ Type, Text string }
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Delta.Type == "text_delta" {
			b.WriteString(ev.Delta.Text)
		}
	}
	return b.String()
}

// TestListen_InUse: an address another program holds is refused with
// what to do about it, as serve and proxy report it.
func TestListen_InUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Close() }()
	e := newEnv(t)
	code, _, errOut := e.run("", "serve", "--yes", "--no-index", "--addr", held.Addr().String())
	if code != 1 || !strings.Contains(errOut, held.Addr().String()+" is in use") || !strings.Contains(errOut, "--addr") {
		t.Errorf("serve on an address in use: exit %d, %q", code, errOut)
	}
}
