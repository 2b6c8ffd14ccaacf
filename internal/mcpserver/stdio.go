package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one JSON-RPC message on stdio.
const MaxMessageBytes = 16 << 20

// StdioTransport returns the transport engram mcp serves on. Unlike a bare
// IOTransport, a line that is not JSON, or is over MaxMessageBytes, gets
// the JSON-RPC parse error (-32700), and one that is JSON but not a
// JSON-RPC 2.0 message (a batch, no "jsonrpc", an id neither a string nor
// a number) the invalid-request error (-32600), and the session goes on:
// a harness that sends one bad line does not lose its server.
//
// At the end of its input it answers the requests it has read before it
// ends the session (for up to DrainTimeout): a client that pipes in its
// requests and closes stdin (printf ... | engram mcp) gets every answer;
// the SDK, seeing the end, would end the session under them.
func StdioTransport(in io.Reader, out io.Writer, log *slog.Logger) mcp.Transport {
	w := &lockedWriter{w: out, open: map[string]bool{}}
	w.drained = sync.NewCond(&w.mu)
	pr, pw := io.Pipe()
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, err := readLine(r, MaxMessageBytes)
			if len(line) > 0 {
				if answer, ok := checkMessage(line); ok {
					w.read(line)
					if _, werr := pw.Write(append(line, '\n')); werr != nil {
						return
					}
				} else {
					log.Warn("bad JSON-RPC message on stdin", "answer", string(bytes.TrimSpace(answer)))
					_, _ = w.Write(answer)
				}
			}
			if err != nil {
				if n := w.drain(DrainTimeout); n > 0 {
					log.Warn("the end of stdin came with requests unanswered; ending the session without them", "requests", n)
				}
				_ = pw.CloseWithError(err)
				return
			}
		}
	}()
	return &mcp.IOTransport{Reader: pr, Writer: w}
}

// DrainTimeout bounds how long the stdio server, at the end of its
// input, waits for the answers to the requests it read.
var DrainTimeout = time.Minute

// readLine reads one line without its end; a line over max is read to its
// end and returned truncated to nothing, with a marker checkMessage sees.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, isPrefix, err := r.ReadLine()
		if !over {
			line = append(line, chunk...)
			if len(line) > max {
				over, line = true, nil
			}
		}
		if err != nil || !isPrefix {
			if over {
				return []byte(tooLarge), err
			}
			return line, err
		}
	}
}

const tooLarge = "\x00too large"

// checkMessage reports whether line is a JSON-RPC 2.0 message the
// session can take, and if not, the error to answer it with. The SDK
// ends the session on a message it cannot read (no "jsonrpc", an id that
// is an object, a batch, which MCP no longer has), so those are answered
// here and kept from it.
func checkMessage(line []byte) ([]byte, bool) {
	if string(line) == tooLarge {
		return rpcError(nil, -32700, fmt.Sprintf("Parse error: message over %d bytes", MaxMessageBytes)), false
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		return rpcError(nil, -32700, "Parse error: not JSON: "+err.Error()), false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("[")) {
			return rpcError(nil, -32600, "Invalid Request: a batch; MCP sends one message at a time"), false
		}
		return rpcError(nil, -32600, "Invalid Request: not a JSON-RPC message (want an object)"), false
	}
	id, msg := readID(m["id"])
	if msg != "" {
		return rpcError(nil, -32600, msg), false
	}
	if v, ok := m["jsonrpc"]; !ok || string(bytes.TrimSpace(v)) != `"2.0"` {
		return rpcError(id, -32600, `Invalid Request: "jsonrpc" must be "2.0"`), false
	}
	method, isCall := m["method"]
	switch {
	case isCall:
		var name string
		if err := json.Unmarshal(method, &name); err != nil || name == "" {
			return rpcError(id, -32600, "Invalid Request: method must be a name"), false
		}
	case m["result"] == nil && m["error"] == nil:
		return rpcError(id, -32600, "Invalid Request: neither a request (method) nor a response (result or error)"), false
	case id == nil:
		return rpcError(nil, -32600, "Invalid Request: a response must name the request it answers (id)"), false
	}
	return nil, true
}

// readID returns a message's id (nil when it has none, or null), or why
// the SDK cannot answer it as sent.
func readID(raw json.RawMessage) (json.RawMessage, string) {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0, string(t) == "null":
		return nil, ""
	case t[0] == '"':
		return t, ""
	case t[0] == '-' || (t[0] >= '0' && t[0] <= '9'):
		// The SDK reads a number as an int64: one it cannot hold, or
		// with a fraction, would end the session or be answered as
		// another (1.5 as 1).
		if _, err := strconv.ParseInt(string(t), 10, 64); err != nil {
			return nil, "Invalid Request: id must be a string or a whole number"
		}
		return t, ""
	default:
		return nil, "Invalid Request: id must be a string or a number"
	}
}

// CheckHTTPMessage checks the ids of a JSON-RPC message (or a batch) that
// MCP's streamable HTTP transport is to take, as the stdio transport does
// (checkMessage): the SDK answers an id with a fraction as another
// (1.5 as 1, which the client may take for its request 1's answer), and
// ends on one it cannot hold. It returns the JSON-RPC error to answer
// with, or nil; a body that is not JSON is left to the SDK.
func CheckHTTPMessage(body []byte) []byte {
	var msgs []map[string]json.RawMessage
	var one map[string]json.RawMessage
	switch {
	case json.Unmarshal(body, &one) == nil:
		msgs = append(msgs, one)
	case json.Unmarshal(body, &msgs) == nil:
	default:
		return nil
	}
	for _, m := range msgs {
		if _, msg := readID(m["id"]); msg != "" {
			return rpcError(nil, -32600, msg)
		}
	}
	return nil
}

// rpcError is a JSON-RPC error response to the request of id (null when
// it has none that can be read), a line.
func rpcError(id json.RawMessage, code int, msg string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	return append(b, '\n')
}

// lockedWriter makes each Write whole, so that the SDK's messages and the
// parse errors never interleave, and keeps the requests read (by id)
// that no answer written has answered yet.
type lockedWriter struct {
	mu      sync.Mutex
	w       io.Writer
	open    map[string]bool
	drained *sync.Cond
}

// message is what the stdio transport reads of a JSON-RPC message: its
// id, its method (a request's or a notification's), and a cancellation's
// request.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"`
	} `json:"params"`
}

// read notes a message read from the client: a request waits for its
// answer; a cancelled one will have none.
func (l *lockedWriter) read(line []byte) {
	var m message
	if json.Unmarshal(line, &m) != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch id := idKey(m.ID); {
	case m.Method == "notifications/cancelled":
		delete(l.open, idKey(m.Params.RequestID))
		l.drained.Broadcast()
	case m.Method != "" && id != "" && id != "null":
		l.open[id] = true
	}
}

// idKey is a request's id as the SDK writes it in its answer: a string
// without the escapes the client may have written in it ("x\u0079" is
// answered as "xy"), a number as an int64 prints (-0 is answered as 0).
// Kept as written, such an id was never answered as far as drain knew,
// and the end of input waited DrainTimeout for nothing.
func idKey(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '"' {
		var s string
		if json.Unmarshal(t, &s) == nil {
			return strconv.Quote(s)
		}
	} else if n, err := strconv.ParseInt(string(t), 10, 64); err == nil {
		return strconv.FormatInt(n, 10)
	}
	return string(t)
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.open) > 0 {
		var m message
		if json.Unmarshal(p, &m) == nil && m.Method == "" {
			delete(l.open, idKey(m.ID))
			l.drained.Broadcast()
		}
	}
	return l.w.Write(p)
}

// drain waits until every request read is answered, or for d; it returns
// how many it gave up on.
func (l *lockedWriter) drain(d time.Duration) int {
	left := 0
	stop := time.AfterFunc(d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		left, l.open = len(l.open), map[string]bool{}
		l.drained.Broadcast()
	})
	defer stop.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.open) > 0 {
		l.drained.Wait()
	}
	return left
}

func (l *lockedWriter) Close() error { return nil }
