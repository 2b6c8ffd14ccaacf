package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	r.Header.Set("X-Engram-Session", "s-serve")
	return http.DefaultTransport.RoundTrip(r)
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
	cmd := e.command(ctx, "serve", "--addr", "127.0.0.1:0", "--yes", "--no-embed")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var url, tokenFile string
	addrRe := regexp.MustCompile(`on (http://\S+) `)
	fileRe := regexp.MustCompile(`it is in (\S+)$`)
	var log strings.Builder
	for sc.Scan() && (url == "" || tokenFile == "") {
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
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v, %v", resp, err)
	}
	_ = resp.Body.Close()
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
	_ = cs.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
}
