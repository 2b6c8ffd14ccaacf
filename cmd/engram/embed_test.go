package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
)

// semanticProject writes a small project whose files talk about a few
// topics in different words, enough for the corpus model to train on.
func semanticProject(t *testing.T, root string) {
	t.Helper()
	topics := []struct{ pkg, words string }{
		{"retry", "retry backoff jitter attempt transient network failure timeout"},
		{"auth", "token bearer login session credential expiry refresh user"},
		{"cache", "cache eviction entry capacity hit miss lru memory"},
		{"parse", "parser token lexer syntax grammar expression literal statement"},
	}
	for i := range 40 {
		tp := topics[i%len(topics)]
		w := strings.Fields(tp.words)
		body := fmt.Sprintf("package %s\n\n// F%d handles %s and %s with %s.\nfunc F%d() string {\n\treturn %q\n}\n",
			tp.pkg, i, w[i%len(w)], w[(i+1)%len(w)], w[(i+3)%len(w)], i, strings.Join(w[i%3:], " "))
		writeFile(t, root, fmt.Sprintf("internal/%s/f%d.go", tp.pkg, i), body)
	}
}

func TestCLI_EmbedSearchPrefetch(t *testing.T) {
	e := newEnv(t)
	semanticProject(t, e.project)
	// index embeds after storing, with the default provider: a model
	// trained on the store.
	out := e.ok("", "index", "--yes")
	if !strings.Contains(out, "new 40") {
		t.Fatalf("index:\n%s", out)
	}
	var st engine.EmbedStatus
	if err := json.Unmarshal([]byte(e.ok("", "embed", "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Provider != "corpus" || !strings.HasPrefix(st.Model, "corpus-lsa-") || st.Chunks == 0 || st.Embedded != st.Chunks || st.Pending != 0 {
		t.Fatalf("embed status after index: %+v", st)
	}
	if st.Fusion != retrieve.WithDefaults(engine.CorpusFusion) {
		t.Errorf("embed status fusion %+v, want the corpus model's %+v", st.Fusion, engine.CorpusFusion)
	}
	if out := e.ok("", "embed", "status"); !strings.Contains(out, st.Model) || !strings.Contains(out, "weighted, lexical 0.8 / vector 0.2") {
		t.Errorf("embed status:\n%s", out)
	}
	// Nothing left to do.
	var rep engine.EmbedReport
	if err := json.Unmarshal([]byte(e.ok("", "embed", "--json")), &rep); err != nil || rep.Embedded != 0 {
		t.Errorf("embed again: %+v, %v", rep, err)
	}
	if code, _, errOut := e.run("", "embed"); code != 0 || !strings.Contains(errOut, "nothing pending: every chunk has a vector from "+st.Model) {
		t.Errorf("embed with nothing pending: exit %d, %q", code, errOut)
	}

	// Hybrid search shows both signals; vector search alone finds files
	// about a topic by words they do not all hold.
	var res searchJSON
	if err := json.Unmarshal([]byte(e.ok("", "search", "backoff", "jitter", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Lexical || !res.Vector || res.Degraded || len(res.Hits) == 0 {
		t.Fatalf("hybrid search: %+v", res)
	}
	top := res.Hits[0]
	if top.LexicalRank == 0 || top.VectorRank == 0 || top.Vector <= 0 || !strings.HasPrefix(top.Files[0], "internal/retry/") {
		t.Errorf("top hit lacks a signal: %+v", top)
	}
	if err := json.Unmarshal([]byte(e.ok("", "search", "transient", "network", "--mode", "vector", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Lexical || !res.Vector || len(res.Hits) == 0 || !strings.HasPrefix(res.Hits[0].Files[0], "internal/retry/") {
		t.Errorf("vector search: %+v", res)
	}
	if out := e.ok("", "search", "backoff", "jitter"); !strings.Contains(out, "vec") || !strings.Contains(out, "lex") {
		t.Errorf("search output shows no signals:\n%s", out)
	}
	if code, _, errOut := e.run("", "search", "x", "--mode", "semantic"); code != 2 || !strings.Contains(errOut, "--mode") {
		t.Errorf("bad mode: exit %d, %s", code, errOut)
	}

	// Pre-fetch: the block fits its budget and says its token count.
	var b retrieve.Block
	if err := json.Unmarshal([]byte(e.ok("", "prefetch", "retry", "backoff", "jitter", "--budget", "300", "--json")), &b); err != nil {
		t.Fatal(err)
	}
	if b.Budget != 300 || b.Tokens > b.Budget {
		t.Errorf("prefetch block: %+v", b)
	}
	code, out, errOut := e.run("", "prefetch", "retry", "backoff", "--remaining", "5000")
	if code != 0 || !strings.Contains(out, "internal/retry/") || !strings.Contains(errOut, "of a 500-token budget") {
		t.Errorf("prefetch: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut = e.run("", "prefetch", "retry"); code != 2 || !strings.Contains(errOut, "--budget") {
		t.Errorf("prefetch without a budget: exit %d, %s", code, errOut)
	}

	// Lexical only: no vectors are made, and search says so.
	e.vars["ENGRAM_EMBED_PROVIDER"] = "none"
	if err := json.Unmarshal([]byte(e.ok("", "search", "backoff", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Lexical || res.Vector || len(res.Hits) == 0 {
		t.Errorf("provider none: %+v", res)
	}
}

// TestCLI_VectorsBeforeTheCorpusModel checks what a new project, too
// small for the corpus model, is told: engram embed status and a vector
// search say that the model trains once the store holds enough chunks,
// and how many it holds, rather than to run engram embed (which cannot
// train it yet) or that no embedder is configured (the corpus model is).
func TestCLI_VectorsBeforeTheCorpusModel(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.project, "retry.go", "package retry\n\n// Backoff waits between attempts.\nfunc Backoff() {}\n")
	writeFile(t, e.project, "auth.go", "package retry\n\n// Login checks a token.\nfunc Login() {}\n")
	e.ok("", "index", "--yes")
	want := fmt.Sprintf("trains once the store holds %d chunks (it holds 2)", lsa.MinDocs)
	if out := e.ok("", "embed", "status"); !strings.Contains(out, want) || strings.Contains(out, "run engram embed") {
		t.Errorf("embed status of a store too small to train on:\n%s", out)
	}
	code, _, errOut := e.run("", "search", "backoff", "--mode", "vector")
	if code != 1 || !strings.Contains(errOut, "corpus model is not trained yet") || !strings.Contains(errOut, want) {
		t.Errorf("vector search before the corpus model: exit %d, %s", code, errOut)
	}
	e.vars["ENGRAM_EMBED_PROVIDER"] = "none"
	code, _, errOut = e.run("", "search", "backoff", "--mode", "vector")
	if code != 1 || !strings.Contains(errOut, "embed.provider is none") {
		t.Errorf("vector search with no embedder: exit %d, %s", code, errOut)
	}
}

func TestCLI_ModelCheck(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(t.TempDir(), "potion")
	code, _, errOut := e.run("", "model", "check", dir)
	if code != 1 || !strings.Contains(errOut, dir) {
		t.Errorf("model check of a missing directory: exit %d, %s", code, errOut)
	}
	writeFile(t, dir, "config.json", `{"normalize": true}`)
	code, _, errOut = e.run("", "model", "check", dir)
	if code != 1 || !strings.Contains(errOut, "model.safetensors") {
		t.Errorf("model check without weights: exit %d, %s", code, errOut)
	}
	if out := e.ok("", "model"); !strings.Contains(out, "model2vec") && !strings.Contains(out, "corpus") {
		t.Errorf("model:\n%s", out)
	}
}

// TestCLI_WatchEmbedsInTheBackground runs engram watch in process: a file
// saved while it watches is indexed and then embedded by its background
// embedder, with no command run.
func TestCLI_WatchEmbedsInTheBackground(t *testing.T) {
	e := newEnv(t)
	semanticProject(t, e.project)
	e.ok("", "index", "--yes")
	before := embedStatus(t, e)
	startInProcess(t, e, "watching ", "watch")
	// Once it watches, save a new file.
	writeFile(t, e.project, "internal/retry/late.go", "package retry\n\n// Late retries with backoff and jitter.\nfunc Late() {}\n")
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := embedStatus(t, e)
		if st.Chunks > before.Chunks && st.Embedded == st.Chunks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the saved file was not indexed and embedded in time: %+v (before %+v)", st, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCLI_WatchEmbedsWhatAgentsStore: what a writer stores without
// embedding (engram's hooks, its proxy, the MCP and HTTP front ends; here
// engram add --no-embed, which stores as they do) while engram watch, or
// engram serve without indexing, runs is embedded by its embedder within
// a poll, with no file changed and no command run. Before, it waited for
// the next file saved or engram embed, searchable only by its words.
func TestCLI_WatchEmbedsWhatAgentsStore(t *testing.T) {
	defer func(p time.Duration) { embedPoll = p }(embedPoll)
	embedPoll = 100 * time.Millisecond
	serve := []string{"serve", "--yes", "--addr", "127.0.0.1:0", "--no-index", "--no-proxy"}
	for _, c := range []struct {
		name  string
		args  []string
		ready string
		index bool // the project indexed first: a corpus model trained
	}{
		{"watch", []string{"watch"}, "watching ", true},
		{"serve", serve, "engram serving ", true},
		// The store's first model is trained from what agents stored.
		{"serve, no model yet", serve, "engram serving ", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			semanticProject(t, e.project)
			if c.index {
				e.ok("", "index", "--yes")
			}
			errOut := startInProcess(t, e, c.ready, c.args...)
			before := embedStatus(t, e)
			var lines strings.Builder
			for i := range 30 { // enough to train a first model on
				fmt.Fprintf(&lines, `{"session":"s1","agent":"claude","role":"user","content":"Turn %d: the retry loop should back off with jitter when queue %d is full."}`+"\n", i, i)
			}
			e.ok(lines.String(), "add", "--no-embed", "--quiet")
			if st := embedStatus(t, e); st.Chunks <= before.Chunks {
				t.Fatalf("add stored no chunk: %+v (before %+v)", st, before)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				st := embedStatus(t, e)
				if st.Chunks > before.Chunks && st.Model != "" && st.Pending == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("what add stored was not embedded in time: %+v (before %+v)\n%s", st, before, errOut.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// embedStatus is what engram embed status --json says in e.
func embedStatus(t *testing.T, e *env) engine.EmbedStatus {
	t.Helper()
	var st engine.EmbedStatus
	if err := json.Unmarshal([]byte(e.ok("", "embed", "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// startInProcess runs engram with args in process, in e, until the test
// ends, and returns once its standard error says ready (or fails the test
// after 30 s); what it returns is that standard error.
func startInProcess(t *testing.T, e *env, ready string, args ...string) *lockedBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	errOut := &lockedBuffer{}
	done := make(chan int)
	go func() {
		done <- run(ctx, args, strings.NewReader(""), &out, errOut, func(k string) string { return e.vars[k] })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 && code != 130 {
			t.Errorf("%s exited %d:\n%s", args[0], code, errOut.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errOut.String(), ready) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start:\n%s", args[0], errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errOut
}

// lockedBuffer is a bytes.Buffer safe to write from one goroutine and read
// from another.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEmbedProgressLines checks the lines written where standard error is
// not a terminal: labelled, and no more often than every.
func TestEmbedProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := newEmbedProgress(&b)
	p.label, p.every = "locomo conv-26", 0
	step := func(done int64) engine.EmbedProgress {
		var pr engine.EmbedProgress
		pr.Phase, pr.Done, pr.Total = "embed", done, 10
		return pr
	}
	p.update(step(4))
	p.update(step(10))
	p.every = time.Hour
	p.update(step(10))
	p.finish()
	want := "locomo conv-26: embed: 4/10 chunks\nlocomo conv-26: embed: 10/10 chunks\n"
	if b.String() != want {
		t.Errorf("progress lines:\n%q\nwant\n%q", b.String(), want)
	}
}
