package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// TestNothingFound: search_history and recall answer nothing found, with
// no hits or records and a message that says so, when their best match
// holds too little of the question; a rewording of what is stored still
// finds it.
func TestNothingFound(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "a1", Structured: true})
	var recs []engine.Record
	for _, text := range []string{
		"Why does TestUploadRetry fail on CI but pass on my laptop?",
		"The retry loop sleeps a fixed two seconds between attempts, without jitter, so every client retries at once.",
		"The test server answers 503 twice before it accepts the upload.",
		"Inject a fake clock into the uploader so the test does not sleep for real.",
		"CI machines have two cores, so timing-based tests are flaky there.",
		"The checksum of each block is compared with the one the server sends back.",
		"Multipart uploads split the file into blocks of eight mebibytes.",
		"The uploader gives up after five attempts and returns the last error.",
		"A 429 from the server carries Retry-After, which the uploader must honour.",
		"The deadline of the whole upload is thirty seconds by default.",
		"Blocks are uploaded four at a time by a pool of workers.",
		"A failed block is retried alone; the others are kept.",
		"Cancelling the context stops every worker and aborts the upload.",
	} {
		recs = append(recs, engine.Record{Session: "s0", Agent: "claude", Type: store.AgentResponse, Content: []byte(text)})
	}
	if _, err := eng.Add(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	history := func(query string) (api.SearchOut, string) {
		t.Helper()
		text, res := call(t, cs, "search_history", map[string]any{"query": query})
		if res.IsError {
			t.Fatalf("search_history(%q): %s", query, text)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var out api.SearchOut
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		return out, text
	}
	// "server" is stored, in another sense: without the floor, that hit
	// would be the answer.
	out, text := history("what is the best server for a cooking blog")
	if len(out.Hits) != 0 || out.Relevance == nil || out.Relevance.Found() || !strings.HasPrefix(text, "nothing found: no hit holds 33% of the query's words") ||
		out.Message != text {
		t.Errorf("an unrelated question: %+v, %q", out, text)
	}
	out, text = history("why does every client retry at the same time")
	if len(out.Hits) == 0 || !strings.Contains(out.Hits[0].Text, "without jitter") || out.Message != "" || !out.Relevance.Found() {
		t.Errorf("a rewording: %+v, %q", out, text)
	}

	ok(t, cs, "record_decision", map[string]any{"decision": "version the API in the URL path", "rationale": "caches and logs see it", "category": "api.versioning"})
	if got := ok(t, cs, "recall", map[string]any{"query": "what did we decide about the kubernetes API gateway?"}); !strings.HasPrefix(got, "nothing found (the closest record matches") {
		t.Errorf("recall of something not recorded: %q", got)
	}
	_, res := call(t, cs, "recall", map[string]any{"query": "what did we decide about the kubernetes API gateway?"})
	raw, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(raw), `"text":"nothing found`) || strings.Contains(string(raw), `"records"`) {
		t.Errorf("recall's structured answer: %s", raw)
	}
	if got := ok(t, cs, "recall", map[string]any{"query": "what was our choice on API versioning?"}); !strings.Contains(got, "version the API in the URL path") {
		t.Errorf("recall of a rewording: %q", got)
	}
}
