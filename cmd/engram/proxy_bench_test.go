package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/modelserver"
	"github.com/engramhq/engram/internal/proxy"
	"github.com/engramhq/engram/internal/tokens"
)

// BenchmarkClaudeCode_ProxySession runs the real Claude Code (ENGRAM_TEST_CLAUDE)
// through the same 60-request session of file reads five times, straight
// to the scripted model and through engram proxy (--window 30000 and
// 60000) with its windows' own role (tool_loop) and the default role's,
// and reports
// what reached the model: tokens per main request, their sum, the
// effective tokens with a prompt cache (as ../shared/bench/trajectories
// defines them: each request's leading blocks, system, tools, then each
// message, byte-identical to the previous request's cost 0.1 a token, the
// rest 1.0), Claude Code's compactions with what they sent, and the
// requests that reached the model without the task's prompt.
//
//	ENGRAM_TEST_CLAUDE=… go test ./cmd/engram -run '^$' -bench ClaudeCode_ProxySession -benchtime 1x
func BenchmarkClaudeCode_ProxySession(b *testing.B) { runProxySessions(b, proxySession) }

// runProxySessions runs session straight (role "") and through the proxy
// at --window 30000 and 60000 with the tool_loop and default roles, and
// reports what each sent the model.
func runProxySessions(b *testing.B, session func(b *testing.B, role string, window int) sessionFigures) {
	type benchCase struct {
		name, role string
		window     int
	}
	cases := []benchCase{{"direct", "", 0}}
	for _, w := range []int{30000, 60000} {
		cases = append(cases, benchCase{fmt.Sprintf("proxy-%d", w), "tool_loop", w}, benchCase{fmt.Sprintf("proxy-%d-default-role", w), "default", w})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				s := session(b, c.role, c.window)
				b.ReportMetric(float64(s.requests), "requests")
				b.ReportMetric(float64(s.tokens)/float64(s.requests), "tokens/request")
				b.ReportMetric(float64(s.most), "max-tokens")
				b.ReportMetric(float64(s.tokens), "tokens")
				b.ReportMetric(s.effective, "effective-tokens")
				b.ReportMetric(float64(s.compactions), "compactions")
				b.ReportMetric(float64(s.compactTokens), "compaction-tokens")
				b.ReportMetric(float64(s.noTask), "requests-without-task")
				b.Logf("%s: %d main requests, %d tokens (%.0f a request, the largest %d), %.0f effective with a prompt cache; %d compactions sending %d tokens; %d requests without the task's prompt",
					c.name, s.requests, s.tokens, float64(s.tokens)/float64(s.requests), s.most, s.effective, s.compactions, s.compactTokens, s.noTask)
			}
		})
	}
}

type sessionFigures struct {
	requests, tokens, most     int
	effective                  float64
	compactions, compactTokens int
	noTask                     int // main requests that lack the task's prompt
}

// proxySession runs 59 file reads and an answer, straight (role "") or
// through the proxy with its windows of role and size, and measures what reached
// the model.
func proxySession(b *testing.B, role string, window int) sessionFigures {
	b.Helper()
	srv := modelserver.Start(modelserver.Options{})
	defer srv.Close()
	cc := modelserver.NewClaudeCode(b, srv)
	cc.Env = append(cc.Env, "CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000")
	if role != "" {
		dataDir := b.TempDir()
		env := append(cc.Env, "ENGRAM_DATA_DIR="+dataDir, "ENGRAM_TOKEN=proxy-bench-token")
		url := startProxyArgs(b, env, srv.URL(), "--window", strconv.Itoa(window), "--role", role, "--project", cc.Dir)
		throughProxy(cc, url, "proxy-bench-token")
	}
	var steps []modelserver.Step
	for i := range 59 {
		var sb strings.Builder
		for j := 0; sb.Len() < 7000; j++ {
			fmt.Fprintf(&sb, "ledger %d line %d: the quartermaster counts crates of tea and tallow for voyage %d\n", i, j, i*1000+j)
		}
		p := filepath.Join(cc.Dir, fmt.Sprintf("ledger%02d.txt", i))
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		steps = append(steps, modelserver.Call("Read", map[string]any{"file_path": p}))
	}
	steps = append(steps, modelserver.Say("Read them all."))
	srv.Add(steps...)
	if _, err := cc.Run(b, "-p", "Read the ledgers one by one.", "--output-format", "json", "--allowedTools", "Read"); err != nil {
		b.Fatal(err)
	}
	if err := srv.Err(); err != nil {
		b.Fatal(err)
	}
	return measureSession(b, srv, func(r modelserver.Request) (bool, []string) {
		task := false
		for _, m := range r.Params.Messages {
			task = task || m.Role == "user" && strings.Contains(m.Text(), "Read the ledgers one by one.")
		}
		return task, requestBlocks(b, r.Body)
	})
}

// measureSession sums up the requests srv received: compactions apart,
// and for each main request its tokens, whether it holds the task and
// its blocks as a prompt cache compares them (read tells both), the
// blocks it shares with the request before at 0.1 a token.
func measureSession(b *testing.B, srv *modelserver.Server, read func(modelserver.Request) (task bool, blocks []string)) sessionFigures {
	enc, err := tokens.Get(tokens.O200kBase)
	if err != nil {
		b.Fatal(err)
	}
	var f sessionFigures
	var prev []string
	for _, r := range srv.Requests(modelserver.KindMain, modelserver.KindCompact) {
		if r.Kind == modelserver.KindCompact {
			f.compactions++
			f.compactTokens += r.InputTokens
			continue
		}
		f.requests++
		f.tokens += r.InputTokens
		f.most = max(f.most, r.InputTokens)
		task, blocks := read(r)
		if !task {
			f.noTask++
		}
		same := 0
		for same < len(blocks) && same < len(prev) && blocks[same] == prev[same] {
			same++
		}
		for i, blk := range blocks {
			n := float64(enc.Count(blk))
			if i < same {
				n *= 0.1
			}
			f.effective += n
		}
		prev = blocks
	}
	return f
}

// requestBlocks are a Messages request's blocks as a prompt cache sees
// them: the system prompt, the tool schemas, then each message, with what
// does not change the prompt (cache_control, Claude Code's billing header,
// which its prompt cache leaves out) taken out.
func requestBlocks(b *testing.B, body []byte) []string {
	return promptBlocks(b, body, "system", "tools", "messages")
}

// promptBlocks are a request's blocks as a prompt cache sees them, each
// made stable (proxy.Stable): the fields head1 and head2, whole (null
// when absent), then each element of the list field.
func promptBlocks(b *testing.B, body []byte, head1, head2, list string) []string {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		b.Fatal(err)
	}
	var h1, h2 any
	var items []any
	for _, f := range []struct {
		name string
		into any
	}{{head1, &h1}, {head2, &h2}, {list, &items}} {
		if raw := req[f.name]; len(raw) > 0 {
			if err := json.Unmarshal(raw, f.into); err != nil {
				b.Fatalf("%s: %v", f.name, err)
			}
		}
	}
	var out []string
	for _, v := range append([]any{h1, h2}, items...) {
		j, _ := json.Marshal(proxy.Stable(v))
		out = append(out, string(j))
	}
	return out
}
