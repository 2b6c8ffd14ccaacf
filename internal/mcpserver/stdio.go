package mcpserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one JSON-RPC message on stdio.
const MaxMessageBytes = 16 << 20

// StdioTransport returns the transport engram mcp serves on. Unlike a bare
// IOTransport, a line that is not JSON, or is over MaxMessageBytes, gets
// the JSON-RPC parse error (-32700) and the session goes on: a harness
// that sends one bad line does not lose its server.
func StdioTransport(in io.Reader, out io.Writer, log *slog.Logger) mcp.Transport {
	w := &lockedWriter{w: out}
	pr, pw := io.Pipe()
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, err := readLine(r, MaxMessageBytes)
			if len(line) > 0 {
				if msg, ok := checkMessage(line); ok {
					if _, werr := pw.Write(append(line, '\n')); werr != nil {
						return
					}
				} else {
					log.Warn("bad JSON-RPC message on stdin", "reason", msg)
					_, _ = w.Write(parseError(msg))
				}
			}
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
		}
	}()
	return &mcp.IOTransport{Reader: pr, Writer: w}
}

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

// checkMessage reports whether line is a JSON object or array (a batch),
// and why not.
func checkMessage(line []byte) (string, bool) {
	if string(line) == tooLarge {
		return fmt.Sprintf("message over %d bytes", MaxMessageBytes), false
	}
	var v any
	if err := json.Unmarshal(line, &v); err != nil {
		return "not JSON: " + err.Error(), false
	}
	switch v.(type) {
	case map[string]any, []any:
		return "", true
	}
	return "not a JSON-RPC message (want an object)", false
}

func parseError(msg string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32700, "message": "Parse error: " + msg}})
	return append(b, '\n')
}

// lockedWriter makes each Write whole, so that the SDK's messages and the
// parse errors never interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
