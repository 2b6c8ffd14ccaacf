package assemble_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engramhq/engram/internal/assemble"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/llm"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/window"
)

func TestStrategyFor(t *testing.T) {
	for _, c := range []struct {
		whole, room int
		want        assemble.Strategy
	}{
		{0, 100, assemble.Full}, {100, 100, assemble.Full}, {101, 100, assemble.Windowed}, {250, 100, assemble.Windowed},
		{251, 100, assemble.Compacted}, {800, 100, assemble.Compacted}, {801, 100, assemble.MultiLevel}, {5, 0, assemble.MultiLevel},
	} {
		if got := assemble.StrategyFor(c.whole, c.room); got != c.want {
			t.Errorf("StrategyFor(%d, %d) = %s, want %s", c.whole, c.room, got, c.want)
		}
	}
}

// opened is an assembler with a window of the given limit holding a
// conversation of n steps.
func opened(t *testing.T, limit, n int) (*assemble.Assembler, store.WindowKey, []window.Message) {
	t.Helper()
	a := assembler(t)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(context.Background(), key, window.OpenOptions{Limit: limit, Output: 100, Safety: 50}); err != nil {
		t.Fatal(err)
	}
	conv := conversation(n)
	if _, err := a.Windows.Append(context.Background(), key, conv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Wait) // before the store closes
	return a, key, conv
}

// covered checks that a turn's history shows each message of the
// conversation whole, or stands a marker for it that expands to it, or
// both (a key-message zone shows some of the messages its marker stands
// for), shows no message twice, and that no two markers stand for one
// message.
func covered(t *testing.T, a *assemble.Assembler, turn assemble.Turn, conv []window.Message) {
	t.Helper()
	shown, marked := map[int]int{}, map[int]int{}
	for _, it := range turn.History.Items {
		switch {
		case it.Message != nil:
			shown[it.Pos]++
		case it.RefID != "":
			back, err := a.Windows.Expand(context.Background(), it.RefID)
			if err != nil {
				t.Fatalf("marker %s: %v", it.RefID, err)
			}
			for i := range back {
				marked[it.Pos+i]++
			}
		}
	}
	for pos := 1; pos < len(conv); pos++ { // the system prompt leads the turn
		if shown[pos] > 1 || marked[pos] > 1 || shown[pos]+marked[pos] == 0 {
			t.Errorf("%s: message %d is shown %d times and under %d markers", turn.History.Strategy, pos, shown[pos], marked[pos])
		}
	}
}

// TestAssemble_Strategies: the strategy follows the ratio of the
// conversation to the room; whatever it is, the context fits the budget,
// keeps tool calls with their results, and shows every message whole or
// under a marker that expands to it.
func TestAssemble_Strategies(t *testing.T) {
	ctx := context.Background()
	seen := map[assemble.Strategy]bool{}
	for _, limit := range []int{60000, 30000, 12000, 1500} {
		a, key, conv := opened(t, limit, 60)
		turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "Why does handler7 time out?"})
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		h := turn.History
		seen[h.Strategy] = true
		t.Logf("limit %d: %s, %d of %d tokens, history %d of %d allocated (%d whole); zones %+v; summaries %+v",
			limit, h.Strategy, turn.Tokens, turn.Budget, turn.Layers[assemble.History], turn.Plan.Tokens(assemble.History), h.Whole, h.Zones, h.Summaries)
		if want := assemble.StrategyFor(h.Whole, turn.Plan.Tokens(assemble.History)); h.Strategy != want {
			t.Errorf("limit %d: strategy %s, the ratio calls for %s", limit, h.Strategy, want)
		}
		if turn.Tokens > turn.Budget {
			t.Errorf("limit %d: %d tokens over the budget of %d", limit, turn.Tokens, turn.Budget)
		}
		if _, err := window.Units(turn.Messages); err != nil {
			t.Errorf("limit %d: a tool pair is broken: %v", limit, err)
		}
		covered(t, a, turn, conv)
		again, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "Why does handler7 time out?"})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(again.Messages) != fmt.Sprint(turn.Messages) {
			t.Errorf("limit %d: the same request gave another context", limit)
		}
	}
	for _, s := range []assemble.Strategy{assemble.Full, assemble.Windowed, assemble.Compacted, assemble.MultiLevel} {
		if !seen[s] {
			t.Errorf("no budget chose %s", s)
		}
	}
}

// TestAssemble_KeyMessages: compaction keeps the messages the turn's
// message asks about (beyond the seed's heuristics, which cannot know).
func TestAssemble_KeyMessages(t *testing.T) {
	a, key, _ := opened(t, 12000, 60)
	turn, err := a.Assemble(context.Background(), assemble.Request{Key: key, Message: "What did we find about handler33 and pkg33?"})
	if err != nil {
		t.Fatal(err)
	}
	if turn.History.Strategy != assemble.Compacted {
		t.Fatalf("strategy %s", turn.History.Strategy)
	}
	found := false
	for _, it := range turn.History.Items {
		if it.Message != nil && strings.Contains(textOfMessage(*it.Message), "handler33 waits") {
			found = true
		}
	}
	if !found {
		t.Errorf("the answer about handler33, in the key zone, is not shown whole: zones %+v", turn.History.Zones)
	}
}

func textOfMessage(m window.Message) string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		b.WriteString(bl.Text)
	}
	return b.String()
}

// TestRollingSummaries_Trigger: crossing into the multi-level strategy
// writes the chunks' summaries (extractive, with no model); the next turn
// reads them instead of making them.
func TestRollingSummaries_Trigger(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 1500, 60)
	epoch, sums, err := a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || epoch != 0 || len(sums) != 0 {
		t.Fatalf("before: epoch %d, %d summaries, %v", epoch, len(sums), err)
	}
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	r := turn.History.Summaries
	if turn.History.Strategy != assemble.MultiLevel || r.Chunks == 0 || r.Made != r.Chunks || r.By != assemble.Extractive {
		t.Fatalf("first turn: %s, %+v", turn.History.Strategy, r)
	}
	epoch, sums, err = a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || epoch != 1 || len(sums) != r.Chunks {
		t.Fatalf("after: epoch %d, %d summaries of %d chunks, %v", epoch, len(sums), r.Chunks, err)
	}
	again, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if r := again.History.Summaries; r.Stored != r.Chunks || r.Made != 0 {
		t.Errorf("second turn: %+v", r)
	}
	if fmt.Sprint(again.Messages) != fmt.Sprint(turn.Messages) {
		t.Error("stored summaries gave another context than made ones")
	}
}

// TestPutWindowSummaries_Race: writers that read the same epoch race; one
// wins, the others are refused and write nothing.
func TestPutWindowSummaries_Race(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 1500, 10)
	st := a.Engine.Store()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = st.PutWindowSummaries(ctx, key, 0, []store.WindowSummary{
				{Level: 1, From: 1, To: 21, Digest: "d", Text: fmt.Sprintf("writer %d", i), By: "test"}})
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both won", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, store.ErrStaleEpoch):
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	epoch, sums, err := st.WindowSummaries(ctx, key)
	if err != nil || epoch != 1 || len(sums) != 1 || sums[0].Text != fmt.Sprintf("writer %d", won) {
		t.Fatalf("epoch %d, %+v, %v (winner %d)", epoch, sums, err, won)
	}
	if _, err := st.PutWindowSummaries(ctx, key, 0, []store.WindowSummary{{Level: 1, From: 1, To: 21, Digest: "d", Text: "late", By: "test"}}); !errors.Is(err, store.ErrStaleEpoch) {
		t.Errorf("a write at the old epoch: %v", err)
	}
	for _, bad := range []store.WindowSummary{{Level: 0, From: 1, To: 2, Digest: "d", Text: "x", By: "t"}, {Level: 1, From: 3, To: 2, Digest: "d", Text: "x", By: "t"}, {Level: 1, From: 1, To: 2, Digest: "d", By: "t"}} {
		if _, err := st.PutWindowSummaries(ctx, key, 1, []store.WindowSummary{bad}); err == nil {
			t.Errorf("summary %+v written", bad)
		}
	}
	if _, err := st.PutWindowSummaries(ctx, store.WindowKey{SessionID: "s", AgentID: "nobody"}, 0, nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("summaries of no window: %v", err)
	}
}

// gate is a Summarizer that waits to be let go, then answers.
type gate struct {
	started chan struct{}
	release chan struct{}
	answer  func(budget int) (string, error)
}

func (g *gate) Name() string { return "test-model" }

func (g *gate) Summarize(ctx context.Context, _ []window.Message, budget int) (string, error) {
	select {
	case g.started <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return g.answer(budget)
}

// TestRollingSummaries_StaleModel: a model's summaries, made while another
// writer moved the window's summaries on, are discarded: they never
// overwrite the newer ones. The turn meanwhile quotes the chunks, and says
// the model's are pending.
func TestRollingSummaries_StaleModel(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 1500, 60)
	g := &gate{started: make(chan struct{}, 1), release: make(chan struct{}), answer: func(int) (string, error) { return "the model's summary", nil }}
	a.Summarizer = g
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	r := turn.History.Summaries
	if r.By != "test-model" || r.Pending != r.Chunks || r.Chunks == 0 || turn.Tokens > turn.Budget {
		t.Fatalf("turn while the model works: %+v, %d of %d tokens", r, turn.Tokens, turn.Budget)
	}
	<-g.started
	// Another process writes newer summaries meanwhile.
	_, sums, _ := a.Engine.Store().WindowSummaries(ctx, key)
	if len(sums) != 0 {
		t.Fatalf("extractive summaries were written while a model is configured: %+v", sums)
	}
	if _, err := a.Engine.Store().PutWindowSummaries(ctx, key, 0, []store.WindowSummary{{Level: 1, From: 1, To: 21, Digest: "other", Text: "newer", By: "other"}}); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	a.Wait()
	epoch, sums, err := a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || epoch != 1 || len(sums) != 1 || sums[0].Text != "newer" {
		t.Fatalf("after the stale model: epoch %d, %+v, %v", epoch, sums, err)
	}
	// The next turn gives the model the chunks again, at the new epoch.
	if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"}); err != nil {
		t.Fatal(err)
	}
	a.Wait()
	turn, err = a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if r := turn.History.Summaries; r.Stored != r.Chunks || r.Pending != 0 {
		t.Errorf("after the model's write: %+v", r)
	}
	if !strings.Contains(fmt.Sprint(turn.Messages), "the model's summary") {
		t.Error("the model's summaries are not shown")
	}
}

// TestRollingSummaries_ModelFails: a summarizer that times out or answers
// garbage falls back to quoting, reported; the context stays within budget.
func TestRollingSummaries_ModelFails(t *testing.T) {
	ctx := context.Background()
	for name, answer := range map[string]func(int) (string, error){
		"empty":   func(int) (string, error) { return "  ", nil },
		"huge":    func(b int) (string, error) { return strings.Repeat("word ", 10*b), nil },
		"invalid": func(int) (string, error) { return "bad \xff bytes", nil },
		"error":   func(int) (string, error) { return "", llm.ErrBadAnswer },
		"timeout": nil,
		// A marker none of the chunk's messages shows: made up.
		"invented marker": func(int) (string, error) {
			return `- the fix is behind [CTX-REF:conversation | 3 turns 2-4 (300 tokens) | retrieve_context(ref_id="a1b2c3d4.2.4.e7fb5")]`, nil
		},
		"short invented marker": func(int) (string, error) { return "- see [CTX-REF:a1b2c3d4.2.4.e7fb5]", nil },
		"malformed marker":      func(int) (string, error) { return "- the fix is behind [CTX-REF:conversation | 3 turns", nil },
		// Control characters, which a terminal obeys.
		"ansi escape":     func(int) (string, error) { return "- handler0 \x1b[2J\x1b[31mwaits\x1b[0m on a deadline", nil },
		"bell":            func(int) (string, error) { return "- handler0 waits on a deadline\a", nil },
		"carriage return": func(int) (string, error) { return "- all tests pass\r- handler0 waits on a deadline", nil },
		"c1 control":      func(int) (string, error) { return "- handler0 \u009b31m waits on a deadline", nil },
	} {
		t.Run(name, func(t *testing.T) {
			a, key, _ := opened(t, 1500, 60)
			g := &gate{started: make(chan struct{}, 1), release: make(chan struct{}), answer: answer}
			if answer == nil {
				a.SummaryTimeout = 50 * time.Millisecond // never released
			} else {
				close(g.release)
			}
			a.Summarizer = g
			if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"}); err != nil {
				t.Fatal(err)
			}
			a.Wait()
			turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
			if err != nil {
				t.Fatal(err)
			}
			r := turn.History.Summaries
			if r.Fallback == "" || r.Stored != r.Chunks || turn.Tokens > turn.Budget {
				t.Errorf("%+v, %d of %d tokens", r, turn.Tokens, turn.Budget)
			}
			_, sums, _ := a.Engine.Store().WindowSummaries(ctx, key)
			for _, s := range sums {
				if !strings.HasPrefix(s.By, assemble.Extractive) {
					t.Errorf("a summary by %s was written", s.By)
				}
			}
		})
	}
}

// TestRollingSummaries_ModelLater: summaries quoted before a model was
// configured are not the model's failure: the model is given their
// chunks, the turn meanwhile says they are pending, and the turns after
// show the model's.
func TestRollingSummaries_ModelLater(t *testing.T) {
	ctx := context.Background()
	a, key, _ := opened(t, 1500, 60)
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if r := turn.History.Summaries; r.By != assemble.Extractive || r.Made != r.Chunks || r.Chunks == 0 {
		t.Fatalf("with no model: %+v", r)
	}
	a.Summarizer = &summarizer{answer: func([]window.Message, int) (string, error) { return "- the model's summary", nil }}
	turn, err = a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if r := turn.History.Summaries; r.Fallback != "" || r.Stored != r.Chunks || r.Pending != r.Chunks || turn.Tokens > turn.Budget {
		t.Errorf("the first turn with a model: %+v, %d of %d tokens", r, turn.Tokens, turn.Budget)
	}
	a.Wait()
	turn, err = a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if r := turn.History.Summaries; r.Fallback != "" || r.Stored != r.Chunks || r.Pending != 0 {
		t.Errorf("after the model's work: %+v", r)
	}
	if !strings.Contains(fmt.Sprint(turn.Messages), "the model's summary") {
		t.Error("the model's summaries are not shown")
	}
}

// summarizer is a Summarizer whose answer is a function of what it is
// asked.
type summarizer struct {
	answer func(msgs []window.Message, budget int) (string, error)
}

var _ assemble.Summarizer = (*summarizer)(nil)

func (s *summarizer) Name() string { return "test-model" }

func (s *summarizer) Summarize(_ context.Context, msgs []window.Message, budget int) (string, error) {
	return s.answer(msgs, budget)
}

// TestRollingSummaries_ModelMarkers: a model's summary may keep a marker
// that a message of its chunk shows (a handoff's, say), tabs and line
// ends (CRLF as LF); the summary is the model's. A marker none shows is refused (TestRollingSummaries_ModelFails).
func TestRollingSummaries_ModelMarkers(t *testing.T) {
	ctx := context.Background()
	a := assembler(t)
	t.Cleanup(a.Wait)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 1500, Output: 100, Safety: 50}); err != nil {
		t.Fatal(err)
	}
	const marker = `[CTX-REF:conversation | 11 turns 1-11 (684 tokens) | retrieve_context(ref_id="c65dab9a.1.11.2693a")]`
	conv := conversation(60)
	conv[1] = text(window.RoleUser, "You continue the work of engineer. Its prior window:\n"+marker)
	if _, err := a.Windows.Append(ctx, key, conv); err != nil {
		t.Fatal(err)
	}
	a.Summarizer = &summarizer{answer: func(msgs []window.Message, _ int) (string, error) {
		for _, m := range msgs {
			for _, b := range m.Blocks {
				if strings.Contains(b.Text, marker) {
					return "- took over from engineer: " + marker, nil
				}
			}
		}
		// Tabs and line ends, even a model's CRLF, are text.
		return "- the handlers' deadlines\r\n-\tall one second", nil
	}}
	if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"}); err != nil {
		t.Fatal(err)
	}
	a.Wait()
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if r := turn.History.Summaries; r.Fallback != "" || r.Stored != r.Chunks || r.Chunks == 0 {
		t.Errorf("%+v", r)
	}
	_, sums, err := a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || len(sums) == 0 || !strings.Contains(sums[0].Text, marker) {
		t.Fatalf("%+v, %v: want the first chunk's summary to keep its marker", sums, err)
	}
	for _, s := range sums {
		if s.By != "test-model" || strings.Contains(s.Text, "\r") {
			t.Errorf("the summary of %d-%d is by %s: %q", s.From, s.To, s.By, s.Text)
		}
	}
}

// TestRollingSummaries_ModelRetry: a chunk the model failed on is asked
// of it again on a later turn, reported meanwhile, so a failure that
// passes (an outage) leaves no quoted summary for good; a model that
// keeps failing is asked MaxSummaryTries times a chunk, and no more,
// even by another Assembler (a restart).
func TestRollingSummaries_ModelRetry(t *testing.T) {
	ctx := context.Background()
	t.Run("Passes", func(t *testing.T) {
		a, key, _ := opened(t, 1500, 60)
		var down atomic.Bool
		down.Store(true)
		a.Summarizer = &summarizer{answer: func([]window.Message, int) (string, error) {
			if down.Load() {
				return "", fmt.Errorf("%w: 503 Service Unavailable", llm.ErrBadAnswer)
			}
			return "- the model's summary", nil
		}}
		if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"}); err != nil {
			t.Fatal(err)
		}
		a.Wait()
		down.Store(false)
		turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
		if err != nil {
			t.Fatal(err)
		}
		if r := turn.History.Summaries; !strings.Contains(r.Fallback, "503") || !strings.Contains(r.Fallback, "asked of it again") || r.Pending != r.Chunks {
			t.Errorf("after the model failed: %+v", r)
		}
		a.Wait()
		turn, err = a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
		if err != nil {
			t.Fatal(err)
		}
		if r := turn.History.Summaries; r.Fallback != "" || r.Pending != 0 || r.Stored != r.Chunks {
			t.Errorf("after the model's retry: %+v", r)
		}
		if !strings.Contains(fmt.Sprint(turn.Messages), "the model's summary") {
			t.Error("the model's summaries are not shown")
		}
	})
	t.Run("Bounded", func(t *testing.T) {
		a, key, _ := opened(t, 1500, 60)
		var calls atomic.Int64
		failing := &summarizer{answer: func([]window.Message, int) (string, error) {
			calls.Add(1)
			return "", llm.ErrBadAnswer
		}}
		a.Summarizer = failing
		var r assemble.SummaryReport
		for range assemble.MaxSummaryTries + 2 {
			turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
			if err != nil {
				t.Fatal(err)
			}
			if turn.Tokens > turn.Budget {
				t.Fatalf("%d of %d tokens", turn.Tokens, turn.Budget)
			}
			r = turn.History.Summaries
			a.Wait()
		}
		if got, want := calls.Load(), int64(r.Chunks*assemble.MaxSummaryTries); got != want || r.Chunks == 0 {
			t.Errorf("the model was asked %d times for %d chunks, want %d", got, r.Chunks, want)
		}
		if r.Pending != 0 || !strings.Contains(r.Fallback, fmt.Sprintf("%d stay quoted", r.Chunks)) {
			t.Errorf("after the tries: %+v", r)
		}
		// Another Assembler over the store (a restart) does not start over.
		b := assemblerOn(t, a.Engine.Store())
		t.Cleanup(b.Wait)
		b.Summarizer = failing
		turn, err := b.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
		if err != nil {
			t.Fatal(err)
		}
		b.Wait()
		if got := calls.Load(); got != int64(r.Chunks*assemble.MaxSummaryTries) || turn.History.Summaries.Fallback == "" {
			t.Errorf("after a restart: %d calls, %+v", got, turn.History.Summaries)
		}
	})
}

// TestModel_Summarize: the model summarizer speaks the chat completions
// wire format, and an answer without the summary is an error.
func TestModel_Summarize(t *testing.T) {
	var got struct {
		Model    string        `json:"model"`
		Messages []llm.Message `json:"messages"`
		Tools    []any         `json:"tools"`
	}
	answer := `{"summary":"- handler0 waits on a one-second deadline"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		args, _ := json.Marshal(answer)
		fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"summary","arguments":%s}}]}}]}`, args)
	}))
	defer srv.Close()
	c, err := llm.New(llm.Options{URL: srv.URL + "/v1", Model: "m", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	m := assemble.Model{Client: c}
	s, err := m.Summarize(context.Background(), conversation(1), 100)
	if err != nil || s != "- handler0 waits on a one-second deadline" {
		t.Fatalf("%q, %v", s, err)
	}
	if got.Model != "m" || len(got.Messages) != 2 || !strings.Contains(got.Messages[0].Content, "~100 tokens") ||
		!strings.Contains(got.Messages[1].Content, "handler0 in internal/pkg0/server.go") || len(got.Tools) != 1 {
		t.Errorf("request %+v", got)
	}
	answer = `{"text":"no summary field"}`
	if s, err := m.Summarize(context.Background(), conversation(1), 100); err == nil && s != "" {
		t.Errorf("an answer without a summary gave %q", s)
	}
}

// TestRollingSummaries_Kept: an Assembler keeps the summaries it wrote and
// reads the store again only when a write of its own is refused. Another
// process's summary, written meanwhile, makes the next chunk's write
// stale: nothing of the other's is overwritten, and the turn after writes
// the new chunks at the store's epoch.
func TestRollingSummaries_Kept(t *testing.T) {
	ctx := context.Background()
	a := assembler(t)
	t.Cleanup(a.Wait)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 1500, Output: 100, Safety: 50}); err != nil {
		t.Fatal(err)
	}
	conv := conversation(70)
	if _, err := a.Windows.Append(ctx, key, conv[:1+4*60]); err != nil {
		t.Fatal(err)
	}
	turn := func() assemble.SummaryReport {
		t.Helper()
		tr, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
		if err != nil {
			t.Fatal(err)
		}
		if tr.Tokens > tr.Budget {
			t.Fatalf("%d tokens of %d", tr.Tokens, tr.Budget)
		}
		return tr.History.Summaries
	}
	if r := turn(); r.Chunks == 0 || r.Made != r.Chunks {
		t.Fatalf("first turn: %+v", r)
	}
	epoch, sums, err := a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || epoch != 1 || len(sums) == 0 {
		t.Fatalf("after the first turn: epoch %d, %d summaries, %v", epoch, len(sums), err)
	}
	other := sums[0]
	other.Text, other.By = "the other process's summary", "other"
	if _, err := a.Engine.Store().PutWindowSummaries(ctx, key, epoch, []store.WindowSummary{other}); err != nil {
		t.Fatal(err)
	}
	if r := turn(); r.Stored != r.Chunks || r.Made != 0 || r.Stale != 0 {
		t.Errorf("a turn with no new chunk: %+v", r)
	}
	if _, err := a.Windows.Append(ctx, key, conv[1+4*60:]); err != nil {
		t.Fatal(err)
	}
	if r := turn(); r.Made == 0 || r.Stale != r.Made {
		t.Errorf("the turn after the other's write, with new chunks: %+v, want its write stale", r)
	}
	_, sums, err = a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || sums[0].Text != other.Text {
		t.Fatalf("the other's summary was overwritten: %+v, %v", sums[0], err)
	}
	r := turn()
	if r.Made == 0 || r.Stale != 0 {
		t.Errorf("the turn after the stale write: %+v, want the new chunks written", r)
	}
	if epoch, _, err := a.Engine.Store().WindowSummaries(ctx, key); err != nil || epoch != 3 {
		t.Errorf("epoch %d after three writes, %v", epoch, err)
	}
	if r := turn(); r.Stored != r.Chunks || r.Made != 0 {
		t.Errorf("the turn after: %+v", r)
	}
}

// Redaction tests: a window whose assistant says secret in every
// answer. The marker counts as many tokens as the string, which leaves the
// chunks of the history where they were, so that their summaries' digests
// (of entry IDs, which a redaction keeps) still match.
const secret, marker = "zebra", "horse"

// secretWindow opens a window over st (a new store if nil) and appends
// 60 steps whose answers hold secret.
func secretWindow(t *testing.T, st store.Store) (*assemble.Assembler, store.WindowKey) {
	t.Helper()
	ctx := context.Background()
	if st == nil {
		st = sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{})
	}
	a := assemblerOn(t, st)
	t.Cleanup(a.Wait)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := a.Windows.Open(ctx, key, window.OpenOptions{Limit: 1500, Output: 100, Safety: 50}); err != nil {
		t.Fatal(err)
	}
	conv := conversation(60)
	for i := range conv {
		if conv[i].Role == window.RoleAssistant && conv[i].Blocks[0].Type == window.BlockText {
			conv[i].Blocks[0].Text += " The deploy password is " + secret + "."
		}
	}
	if _, err := a.Windows.Append(ctx, key, conv); err != nil {
		t.Fatal(err)
	}
	return a, key
}

// redactSecret redacts secret with marker.
func redactSecret(t *testing.T, a *assemble.Assembler) {
	t.Helper()
	if _, err := a.Engine.Redact(context.Background(), engine.RedactRequest{Text: []byte(secret), Marker: marker, Actor: "test"}); err != nil {
		t.Error(err)
	}
}

// checkNoSecret fails t if the turn, the window's stored summaries or
// those the Assembler keeps hold secret.
func checkNoSecret(t *testing.T, a *assemble.Assembler, key store.WindowKey, turn assemble.Turn) {
	t.Helper()
	if strings.Contains(fmt.Sprint(turn.Messages), secret) {
		t.Errorf("the turn shows the string (summaries: %+v)", turn.History.Summaries)
	}
	_, stored, err := a.Engine.Store().WindowSummaries(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for where, sums := range map[string][]store.WindowSummary{"stored": stored, "the Assembler keeps": assemble.CachedSummaries(a, key)} {
		for _, s := range sums {
			if strings.Contains(s.Text, secret) {
				t.Errorf("a summary %s holds the string: %q", where, s.Text)
				break
			}
		}
	}
}

// TestRollingSummaries_Redacted: after a redaction, the next turn shows
// the string nowhere: not in the rolling summaries the store kept, nor in
// those the Assembler had in memory. Before, both quoted it, and every
// turn after sent it to the model again.
func TestRollingSummaries_Redacted(t *testing.T) {
	ctx := context.Background()
	a, key := secretWindow(t, nil)
	turn := func() assemble.Turn {
		t.Helper()
		tr, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
		if err != nil {
			t.Fatal(err)
		}
		a.Wait()
		return tr
	}
	if tr := turn(); !strings.Contains(fmt.Sprint(tr.Messages), secret) {
		t.Fatal("the first turn does not show the string: the test shows nothing")
	}
	_, sums, err := a.Engine.Store().WindowSummaries(ctx, key)
	if err != nil || !slices.ContainsFunc(sums, func(s store.WindowSummary) bool { return strings.Contains(s.Text, secret) }) {
		t.Fatalf("no stored summary quotes the string (%d summaries, %v): the test shows nothing", len(sums), err)
	}
	redactSecret(t, a)
	checkNoSecret(t, a, key, turn())
}

// purgingStore runs a redaction in the middle of the next turn, once
// armed: after the turn has read its window's head, or with onSummaries
// its summaries.
type purgingStore struct {
	store.Store
	armed       atomic.Bool
	onSummaries bool
	redact      func()
}

func (s *purgingStore) Window(ctx context.Context, key store.WindowKey) (store.Window, error) {
	w, err := s.Store.Window(ctx, key)
	if !s.onSummaries && s.armed.CompareAndSwap(true, false) {
		s.redact()
	}
	return w, err
}

func (s *purgingStore) WindowSummaries(ctx context.Context, key store.WindowKey) (int64, []store.WindowSummary, error) {
	epoch, sums, err := s.Store.WindowSummaries(ctx, key)
	if s.onSummaries && s.armed.CompareAndSwap(true, false) {
		s.redact()
	}
	return epoch, sums, err
}

// TestRollingSummaries_RedactedMidTurn: a redaction that runs while a turn
// is being laid out makes the turn start again, so that neither what it
// sends nor what the Assembler keeps holds the string. Before, the turn
// went on with what it had read, and kept it.
func TestRollingSummaries_RedactedMidTurn(t *testing.T) {
	ctx := context.Background()
	st := &purgingStore{Store: sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{})}
	a, key := secretWindow(t, st)
	st.redact = func() { redactSecret(t, a) }
	if _, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(assemble.CachedSummaries(a, key), func(s store.WindowSummary) bool { return strings.Contains(s.Text, secret) }) {
		t.Fatal("no summary the Assembler keeps quotes the string: the test shows nothing")
	}
	st.armed.Store(true)
	turn, err := a.Assemble(ctx, assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if st.armed.Load() {
		t.Fatal("the redaction did not run during the turn")
	}
	checkNoSecret(t, a, key, turn)
}

// TestRollingSummaries_RedactedBeforeTheirWrite: summaries made from what
// a turn read before a redaction are not written after it, where the next
// turn would find them by their digest (of entry IDs, which a redaction
// keeps) and send the string again; and the window whose messages the
// redaction rewrote is laid out again.
func TestRollingSummaries_RedactedBeforeTheirWrite(t *testing.T) {
	st := &purgingStore{Store: sqlitetest.OpenPath(t, filepath.Join(t.TempDir(), "engram.db"), sqlite.Options{}), onSummaries: true}
	a, key := secretWindow(t, st)
	st.redact = func() { redactSecret(t, a) }
	st.armed.Store(true) // the first turn's read of its summaries: none yet
	turn, err := a.Assemble(context.Background(), assemble.Request{Key: key, Message: "And now?"})
	if err != nil {
		t.Fatal(err)
	}
	if st.armed.Load() {
		t.Fatal("the redaction did not run during the turn")
	}
	if _, stored, err := a.Engine.Store().WindowSummaries(context.Background(), key); err != nil || len(stored) == 0 {
		t.Fatalf("no summary stored (%v): the test shows nothing", err)
	}
	checkNoSecret(t, a, key, turn)
}
