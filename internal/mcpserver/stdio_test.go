package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
)

// logBuffer is a log's text, written from the server's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStdio_IDsAsWritten: a request whose id the SDK answers in another
// spelling (a string with an escape, -0) counts as answered. Kept as the
// client wrote it, the end of input waited DrainTimeout (a minute) for
// answers already sent, and logged them as lost.
func TestStdio_IDsAsWritten(t *testing.T) {
	old := DrainTimeout
	DrainTimeout = 10 * time.Second // what the old code waited, shorter
	t.Cleanup(func() { DrainTimeout = old })
	st := sqlitetest.Open(t, sqlite.Options{})
	eng, err := engine.New(st, engine.Options{Embed: engine.EmbedOptions{Provider: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	srv := New(eng, Options{Session: "stdio-ids"})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ran := make(chan error, 1)
	go func() {
		ran <- srv.Run(context.Background(), StdioTransport(inR, outW, slog.New(slog.NewTextHandler(&logs, nil))))
		_ = outW.Close()
	}()
	out := bufio.NewScanner(outR)
	out.Buffer(make([]byte, 1<<20), 1<<20)
	// Each request, and the id its answer must carry.
	for _, tc := range []struct{ line, id string }{
		{`{"jsonrpc":"2.0","id":"init\u0031","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ids","version":"0"}}}`, `"init1"`},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
		{`{"jsonrpc":"2.0","id":-0,"method":"ping"}`, `0`},
		{`{"jsonrpc":"2.0","id":"\/list","method":"tools/list"}`, `"/list"`},
	} {
		if _, err := io.WriteString(inW, tc.line+"\n"); err != nil {
			t.Fatal(err)
		}
		if tc.id == "" {
			continue
		}
		if !out.Scan() {
			t.Fatalf("no answer to %.60s: %v", tc.line, out.Err())
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(out.Bytes(), &m); err != nil || m.Result == nil || string(m.ID) != tc.id {
			t.Fatalf("answer to %.60s: %.200s (%v), want a result with id %s", tc.line, out.Bytes(), err, tc.id)
		}
	}
	// Every request is answered: the end of input ends the session at once.
	_ = inW.Close()
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if err := <-ran; err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Errorf("Run: %v", err)
	}
	if strings.Contains(logs.String(), "unanswered") {
		t.Errorf("every request was answered, but the server waited for answers at the end of input:\n%s", logs.String())
	}
}
