package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/archive"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/index"
	"github.com/engramhq/engram/internal/rerank"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

type client struct {
	t   *testing.T
	url string
}

// do sends a request with the caller's identity and returns status,
// headers and body.
func (c client) do(method, path, body string, hdr ...string) (int, http.Header, string) {
	c.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	if method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Engram-Session", "s1")
	req.Header.Set("X-Engram-Agent", "h1")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func (c client) want(status int, method, path, body, contains string, hdr ...string) (http.Header, string) {
	c.t.Helper()
	got, h, b := c.do(method, path, body, hdr...)
	if got != status || !strings.Contains(b, contains) {
		c.t.Errorf("%s %s: HTTP %d %s, want %d with %q", method, path, got, strings.TrimSpace(b), status, contains)
	}
	if got >= 400 && !strings.Contains(b, `"error":{"code":`) {
		c.t.Errorf("%s %s: error body %s lacks the error shape", method, path, b)
	}
	return h, b
}

func TestV1(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	if _, err := eng.Add(ctx, []engine.Record{{Session: "s0", Agent: "x", Type: store.ToolResult,
		Content: []byte("TestUploadRetry failed: context deadline exceeded after 3 retries")}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok", MaxBodyBytes: 4096}))
	defer srv.Close()
	c := client{t, srv.URL}

	// An empty list is [], never left out.
	c.want(200, "GET", "/v1/decisions", "", `"records":[]`)

	// Writes, with their statuses.
	c.want(201, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"never sleep in tests; use a fake clock"}`, `"status":"created"`)
	c.want(201, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"Never sleep in tests: use a fake clock."}`, `"status":"merged"`)
	c.want(409, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"always sleep in tests instead of a fake clock"}`, "contradicts")
	c.want(201, "POST", "/v1/failures", `{"approach":"raising timeouts","reason":"still flaky","resolution":"inject a clock","outcome":"success"}`, `"id":"fail-`)
	c.want(201, "POST", "/v1/insights", `{"insight":"CI has two cores"}`, `"status":"created"`)
	c.want(201, "POST", "/v1/decisions", `{"decision":"retries use full jitter"}`, `"status":"created"`)
	_, b := c.want(201, "POST", "/v1/intents", `{"description":"rename upload.Retry","paths":["internal/upload"]}`, `"id":"int-`)
	var intent archive.WriteResult
	if err := json.Unmarshal([]byte(b), &intent); err != nil {
		t.Fatal(err)
	}
	c.want(200, "POST", "/v1/intents/"+intent.ID+"/complete", "", `"status":"updated"`)
	c.want(200, "PUT", "/v1/sessions/s1/resume", `{"task":"fix the flaky test","current":"read retry.go","next":["patch"]}`, `"sv":`)
	c.want(200, "PUT", "/v1/sessions/s1/files/internal/upload/retry.go", `{"status":"modified","summary":"jitter"}`, `"sv":`)
	c.want(201, "POST", "/v1/sessions/s1/records", `{"type":"user_prompt","content":"why does TestUploadRetry time out?"}`, `"turn":1`)

	// Reads.
	c.want(200, "GET", "/v1/search?q=context+deadline+retries&limit=3", "", "session s0")
	c.want(200, "GET", "/v1/sessions/s1/turns?from=1&to=1", "", "why does TestUploadRetry")
	c.want(200, "POST", "/v1/retrieve", `{"query":"deadline exceeded","max_tokens":100}`, "context deadline exceeded")
	c.want(200, "POST", "/v1/prefetch", `{"query":"TestUploadRetry deadline","budget":300}`, `"budget":300`)
	c.want(200, "POST", "/v1/recall", `{"query":"@arch:check:failures?approach=raising timeouts"}`, "inject a clock")
	c.want(200, "GET", "/v1/sessions/s1", "", "fix the flaky test")
	c.want(200, "GET", "/v1/events?limit=5", "", `"events":[`)
	c.want(200, "GET", "/v1/agents?session=s1", "", `"id":"h1"`)

	// Conditional reads: the versions are the ETag.
	h, _ := c.want(200, "GET", "/v1/sessions/s1/briefing?tier=standard", "", "fix the flaky test")
	tag := h.Get("ETag")
	if tag == "" {
		t.Fatal("no ETag on the briefing")
	}
	if st, _, body := c.do("GET", "/v1/sessions/s1/briefing?tier=standard", "", "If-None-Match", tag); st != 304 || body != "" {
		t.Errorf("If-None-Match with the current ETag: HTTP %d %q", st, body)
	}
	h, _ = c.want(200, "GET", "/v1/patterns", "", "fake clock")
	if st, _, _ := c.do("GET", "/v1/patterns", "", "If-None-Match", h.Get("ETag")); st != 304 {
		t.Errorf("patterns with the current ETag: HTTP %d", st)
	}
	c.want(201, "POST", "/v1/insights", `{"insight":"a new one changes the global version"}`, "created")
	c.want(200, "GET", "/v1/patterns", "", "fake clock", "If-None-Match", h.Get("ETag"))
	c.want(200, "GET", "/v1/insights?since=1", "", "a new one")
	h, _ = c.want(200, "GET", "/v1/sessions/s1", "", "fix the flaky test")
	if st, _, _ := c.do("GET", "/v1/sessions/s1", "", "If-None-Match", h.Get("ETag")); st != 304 {
		t.Errorf("session with the current ETag: HTTP %d", st)
	}
	// A list of tags, one of them the current (RFC 9110), or *: 304.
	// A tag of other versions than the answer's: the answer.
	for _, match := range []string{`"1-0", ` + h.Get("ETag"), `W/` + h.Get("ETag"), `*`} {
		if st, _, _ := c.do("GET", "/v1/sessions/s1", "", "If-None-Match", match); st != 304 {
			t.Errorf("session with If-None-Match %s: HTTP %d", match, st)
		}
	}
	sv := strings.TrimPrefix(strings.Trim(h.Get("ETag"), `"`), "0-")
	if st, _, _ := c.do("GET", "/v1/sessions/s1", "", "If-None-Match", `"999-`+sv+`"`); st != 200 {
		t.Errorf("session with another global version in its tag: HTTP %d", st)
	}
	h, _ = c.want(200, "GET", "/v1/patterns", "", "fake clock")
	if st, _, _ := c.do("GET", "/v1/patterns", "", "If-None-Match", `"0-0", `+h.Get("ETag")); st != 304 {
		t.Errorf("patterns with the current ETag second in a list: HTTP %d", st)
	}

	// Errors: 400, 401, 403, 404, 413, 429.
	c.want(400, "POST", "/v1/patterns", `{"category":"cooking.pasta","pattern":"x"}`, "unknown first level")
	// A refused write in a new session registers no agent there; the
	// first write that goes in does.
	c.want(400, "POST", "/v1/patterns", `{"category":"bogus","pattern":"x"}`, "bogus", "X-Engram-Session", "zza", "X-Engram-Agent", "")
	c.want(404, "POST", "/v1/intents/int-999/complete", ``, "int-999", "X-Engram-Session", "zzb", "X-Engram-Agent", "")
	if _, b := c.want(200, "GET", "/v1/agents", "", `"id"`); strings.Contains(b, "zza") || strings.Contains(b, "zzb") {
		t.Errorf("refused writes registered agents: %s", b)
	}
	c.want(201, "POST", "/v1/insights", `{"insight":"zzc learned something"}`, "created", "X-Engram-Session", "zzc", "X-Engram-Agent", "")
	c.want(200, "GET", "/v1/agents?session=zzc", "", `"id":"http@zzc"`)
	c.want(400, "POST", "/v1/patterns", `{"pattern":"x","colour":"red"}`, "unknown field")
	c.want(400, "POST", "/v1/patterns", `{"pattern":`, "not valid")
	c.want(400, "POST", "/v1/patterns", ``, "empty")
	c.want(400, "POST", "/v1/patterns", `null`, "not a JSON object")
	c.want(400, "POST", "/v1/retrieve", `{"query":"x","Max_Tokens":100}`, `unknown field \"Max_Tokens\" (the field is \"max_tokens\")`)
	c.want(400, "POST", "/v1/insights", "{\"insight\":\"bad \xff bytes\"}", "not UTF-8 at byte offset 16")
	c.want(400, "GET", "/v1/search?q=", "", "empty")
	c.want(400, "GET", "/v1/search?q=x&limit=many", "", "not a whole number")
	c.want(400, "GET", "/v1/search?q=x&path=internal%00", "", "NUL byte")
	c.want(400, "POST", "/v1/recall", `{"query":"@arch:recall:wat"}`, "unknown domain")
	c.want(400, "GET", "/v1/sessions/s1/briefing?tier=huge", "", "huge")
	c.want(400, "GET", "/v1/sessions/s1/turns?from=3&to=1", "", "from <= to")
	c.want(401, "GET", "/v1/patterns", "", "wrong token", "Authorization", "Bearer nope")
	// The URL's session, without the header: agent h1 is of s1.
	c.want(403, "PUT", "/v1/sessions/s2/resume", `{"task":"x"}`, "belongs to session s1", "X-Engram-Session", "")
	c.want(404, "GET", "/v1/files/nope.go", "", "neither an indexed file")
	c.want(404, "GET", "/v1/sessions/nosuch/briefing", "", "nosuch")
	c.want(404, "GET", "/v1/nothing-here", "", "no such route")
	c.want(413, "POST", "/v1/insights", `{"insight":"`+strings.Repeat("x", 5000)+`"}`, "over 4096 bytes")
	for range 9 {
		c.do("POST", "/v1/patterns", `{"category":"testing.unit","pattern":"`+randomWords()+`"}`)
	}
	h, _ = c.want(429, "POST", "/v1/patterns", `{"category":"testing.unit","pattern":"use golden files"}`, "in the last minute")
	if h.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
}

var wordN int

// randomWords returns a distinct pattern text each call.
func randomWords() string {
	wordN++
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"}
	return "prefer " + words[wordN%len(words)] + " " + words[(wordN*7)%len(words)] + " over " + words[(wordN*3)%len(words)] + " " + strings.Repeat("z", wordN)
}

// With a re-ranker configured, search hits carry its relevance.
func TestV1SearchReranked(t *testing.T) {
	tei := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Texts []string `json:"texts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad request"}`, http.StatusUnprocessableEntity)
			return
		}
		out := make([]map[string]any, len(req.Texts))
		for i := range req.Texts {
			out[i] = map[string]any{"index": i, "score": 0.75}
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer tei.Close()
	rr, err := rerank.New(rerank.Options{API: rerank.APITEI, URL: tei.URL})
	if err != nil {
		t.Fatal(err)
	}
	st := sqlitetest.Open(t, sqlite.Options{})
	eng, err := engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}, Retrieve: retrieve.Options{Reranker: rr}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Add(context.Background(), []engine.Record{{Session: "s0", Agent: "x", Type: store.ToolResult,
		Content: []byte("TestUploadRetry failed: context deadline exceeded after 3 retries")}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	client{t, srv.URL}.want(200, "GET", "/v1/search?q=deadline+retries", "", `"rerank":0.75`)
}

// TestV1_Files: a file, version or entry that holds no content to give is
// 404 with what is wrong, not 500: a version past the file's last, a
// version of a path never indexed, a binary or generated file the
// indexer skipped.
func TestV1_Files(t *testing.T) {
	eng := newEngine(t)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"a.go":     "package a\n\nfunc A() {}\n",
		"blob.bin": "\x00\x01\x02binary\x00",
		"gen.go":   "// Code generated by stringer; DO NOT EDIT.\n\npackage a\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := index.Run(context.Background(), eng.Store(), dir, index.Options{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	c.want(200, "GET", "/v1/files/a.go?version=1", "", "func A()")
	c.want(404, "GET", "/v1/files/a.go?version=9", "", "has versions 1 to 1, not 9")
	c.want(404, "GET", "/v1/files/nope.go?version=1", "", "not an indexed file")
	c.want(404, "GET", "/v1/files/blob.bin", "", "blob.bin is not indexed")
	c.want(404, "GET", "/v1/files/gen.go", "", "gen.go is not indexed")
}

// TestRoutes_Errors: a path no route serves, or a method a route outside
// /v1 does not take, gets the API's JSON error (404; 405 with Allow), as
// /v1's do, not the mux's plain text; no credential is asked for.
func TestRoutes_Errors(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{Token: "tok"}))
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/foo", 404, ""},
		{"GET", "/healthz/", 404, ""},
		{"GET", "/mcp/x", 404, ""},
		{"GET", "/V1/status", 404, ""},
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"POST", "/", 405, "GET, HEAD"},
		{"GET", "/logout", 405, "POST"},
	} {
		st, h, b := raw(t, tc.method, srv.URL+tc.path, "")
		if st != tc.status || h.Get("Allow") != tc.allow || !strings.Contains(b, `"error":{"code":`) || !strings.Contains(b, tc.path) {
			t.Errorf("%s %s: HTTP %d, Allow %q, %s; want %d, Allow %q, the error's JSON", tc.method, tc.path, st, h.Get("Allow"), b, tc.status, tc.allow)
		}
	}
}

// TestV1_RecordFiles: a record's files are bounded as a failure's are
// (100), and a record over the bound stores nothing; 180,000 names in a
// 4 MiB body were stored with the record.
func TestV1_RecordFiles(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	files := func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%q", fmt.Sprintf("src/f%d.go", i))
		}
		return "[" + strings.Join(names, ",") + "]"
	}
	ctx := t.Context()
	before, err := eng.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{101, 50_000} {
		c.want(400, "POST", "/v1/sessions/s1/records", `{"type":"note","content":"a note about too many files","files":`+files(n)+`}`,
			fmt.Sprintf("files: has %d items; at most 100", n))
	}
	after, err := eng.Store().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Entries != before.Entries || after.Occurrences != before.Occurrences {
		t.Errorf("refused records stored something: %d entries and %d occurrences, before %d and %d",
			after.Entries, after.Occurrences, before.Entries, before.Occurrences)
	}
	c.want(201, "POST", "/v1/sessions/s1/records", `{"type":"note","content":"a note about its files","files":`+files(100)+`}`, `"new":true`)
}

// TestV1_QueryUnread: a query string that cannot be read whole is a 400
// that says why. url.Values dropped the pairs it could not read, so that
// a session's filter went unseen (every session's windows listed) and a
// search said its query was empty.
func TestV1_QueryUnread(t *testing.T) {
	eng := newEngine(t)
	c := windowServer(t, eng, Options{})
	for _, s := range []string{"s1", "s2"} {
		c.want(200, "PUT", "/v1/windows/"+s+"/a1", `{"limit":3000}`, `"session":"`+s+`"`, "X-Engram-Session", s)
	}
	many := "q=handler" + strings.Repeat("&type=note", 10_000)
	for _, tc := range []struct{ path, want string }{
		{"/v1/windows?session=s1;", "invalid semicolon separator in query"},
		{"/v1/windows?session=s1%zz", `invalid URL escape \"%zz\"`},
		{"/v1/search?q=handler%zz", `invalid URL escape \"%zz\"`},
		{"/v1/search?" + many, "number of URL query parameters exceeded limit"},
		{"/v1/events?limit=5;", "the query string cannot be read"},
	} {
		c.want(400, "GET", tc.path, "", tc.want)
	}
	if _, b := c.want(200, "GET", "/v1/windows?session=s1", "", `"session":"s1"`); strings.Contains(b, `"session":"s2"`) {
		t.Errorf("session s1's windows: %s", b)
	}
}

// TestFailBusy: a write that other servers' changes kept stale is a 409
// that says to send it again (code busy, Retry-After); a write that
// contradicts what is stored is a conflict, without Retry-After.
func TestFailBusy(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code, wait string
	}{
		{&store.ConflictError{What: "window s/a", Msg: "other servers kept changing it meanwhile; try again", Busy: true}, "busy", "1"},
		{&store.ConflictError{What: "append k", Msg: "the key is another append's"}, "conflict", ""},
	} {
		rec := httptest.NewRecorder()
		(&v1{}).fail(rec, httptest.NewRequest(http.MethodPost, "/v1/windows/s/a/messages", nil), tc.err)
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusConflict || body.Error.Code != tc.code || rec.Header().Get("Retry-After") != tc.wait {
			t.Errorf("%v: %d %q Retry-After %q, want 409 %q Retry-After %q", tc.err, rec.Code, body.Error.Code, rec.Header().Get("Retry-After"), tc.code, tc.wait)
		}
	}
}

// TestV1_SessionHeaderAndURL: a write whose X-Engram-Session header names
// one session and whose URL (or body) another is refused with 403, with
// the operator's token as with an agent's key, and writes nothing: no
// content, no session state, no window, no agent. The same session in
// both, or either alone, writes; a read may name another session.
func TestV1_SessionHeaderAndURL(t *testing.T) {
	eng := newEngine(t)
	srv := httptest.NewServer(Handler(eng, Options{Token: tok}))
	defer srv.Close()
	ctx := context.Background()
	alice := agentKey(t, srv.URL, "alice", "a1")
	arc, err := eng.Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]archive.Versions{}
	for _, s := range []string{"s1", "s2", "alice"} {
		if before[s], err = arc.Versions(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	op := func(extra ...string) []string {
		return withToken(append([]string{"Content-Type", "application/json"}, extra...)...)
	}
	as := func(key string, extra ...string) []string {
		return append([]string{"Authorization", "Bearer " + key, "Content-Type", "application/json"}, extra...)
	}
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
	}{
		{"record", "POST", "/v1/sessions/s2/records", `{"type":"note","content":"meant for one session"}`, op("X-Engram-Session", "s1")},
		{"resume", "PUT", "/v1/sessions/s2/resume", `{"task":"meant for one session"}`, op("X-Engram-Session", "s1")},
		{"file", "PUT", "/v1/sessions/s2/files/go.mod", `{"status":"modified"}`, op("X-Engram-Session", "s1")},
		{"open window", "PUT", "/v1/windows/s2/w1", `{"limit":1500,"output":200,"safety":100}`, op("X-Engram-Session", "s1")},
		{"append", "POST", "/v1/windows/s2/w1/messages", `{"messages":[{"role":"user","content":"hello"}]}`, op("X-Engram-Session", "s1")},
		{"body's session", "POST", "/v1/sessions/s2/records", `{"type":"note","content":"meant for one session","session":"s1"}`, op()},
		{"agent's key, header", "PUT", "/v1/sessions/alice/resume", `{"task":"meant for one session"}`, as(alice, "X-Engram-Session", "s1")},
	} {
		st, _, b := raw(t, tc.method, srv.URL+tc.path, tc.body, tc.hdr...)
		if st != http.StatusForbidden || !strings.Contains(b, `"code":"other_session"`) || !strings.Contains(b, "s1") {
			t.Errorf("%s: HTTP %d %s, want 403 other_session naming both sessions", tc.name, st, strings.TrimSpace(b))
		}
	}
	// Nothing written.
	if ss, err := eng.Store().Sessions(ctx); err != nil || len(ss) != 0 {
		t.Errorf("content sessions after refused writes: %+v, %v", ss, err)
	}
	if ws, err := eng.Store().Windows(ctx, ""); err != nil || len(ws) != 0 {
		t.Errorf("windows after refused writes: %+v, %v", ws, err)
	}
	for _, s := range []string{"s1", "s2", "alice"} {
		if ag, err := arc.Agents(ctx, s); err != nil || s != "alice" && len(ag) != 0 {
			t.Errorf("agents of %s after refused writes: %+v, %v", s, ag, err)
		}
		if v, err := arc.Versions(ctx, s); err != nil || v != before[s] {
			t.Errorf("session %s after refused writes: %+v, %v; before %+v", s, v, err, before[s])
		}
	}
	// One session named once or twice alike writes; a read may name another.
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
	}{
		{"header and URL alike", "POST", "/v1/sessions/s2/records", `{"type":"note","content":"meant for s2"}`, op("X-Engram-Session", "s2"), 201},
		{"URL alone", "PUT", "/v1/sessions/s2/resume", `{"task":"meant for s2"}`, op(), 200},
		{"agent's key, its own session", "PUT", "/v1/sessions/alice/resume", `{"task":"alice's"}`, as(alice, "X-Engram-Session", "alice"), 200},
		{"read another session", "GET", "/v1/sessions/s2", "", op("X-Engram-Session", "s1"), 200},
	} {
		if st, _, b := raw(t, tc.method, srv.URL+tc.path, tc.body, tc.hdr...); st != tc.status {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, st, strings.TrimSpace(b), tc.status)
		}
	}
}
