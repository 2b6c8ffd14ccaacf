package engine_test

import (
	"testing"
	"time"

	"github.com/engramhq/engram/internal/embed/lsa"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/retrieve"
	"github.com/engramhq/engram/internal/store"
)

// history is a session about a flaky upload test: what the floor tests
// ask about, and enough turns to train a corpus model on, so that vector
// search ranks something for any query.
var history = []string{
	"Why does TestUploadRetry fail on CI but pass on my laptop?",
	"The retry loop sleeps a fixed two seconds between attempts, without jitter, so every client retries at once.",
	"Run go test ./internal/upload -run TestUploadRetry -count 20 to see how often it fails.",
	"--- FAIL: TestUploadRetry (2.00s) upload_test.go:88: context deadline exceeded after 3 retries",
	"Add full jitter to the backoff: sleep a random time between zero and the current delay.",
	"The test server answers 503 twice before it accepts the upload.",
	"Inject a fake clock into the uploader so the test does not sleep for real.",
	"CI machines have two cores, so timing-based tests are flaky there.",
	"The checksum of each block is compared with the one the server sends back.",
	"Rename upload.Retry to upload.Backoff once the jitter change lands.",
	"Multipart uploads split the file into blocks of eight mebibytes.",
	"The uploader gives up after five attempts and returns the last error.",
	"Logging each retry at debug level shows the delays between attempts.",
	"A 429 from the server carries Retry-After, which the uploader must honour.",
	"The deadline of the whole upload is thirty seconds by default.",
	"The fake clock advances when the uploader sleeps, so the test runs instantly.",
	"Blocks are uploaded four at a time by a pool of workers.",
	"Each worker reads its block from disk and streams it to the server.",
	"The server stores blocks in a temporary bucket until the upload completes.",
	"When the upload completes, the server assembles the blocks into the object.",
	"A failed block is retried alone; the others are kept.",
	"The client reports progress as the share of blocks uploaded.",
	"Cancelling the context stops every worker and aborts the upload.",
	"Aborting an upload asks the server to delete the temporary blocks.",
}

func addHistory(t *testing.T, e *engine.Engine) {
	t.Helper()
	var recs []engine.Record
	for i, text := range history {
		typ := store.UserPrompt
		if i%2 == 1 {
			typ = store.AgentResponse
		}
		recs = append(recs, engine.Record{Session: "s1", Agent: "claude", Type: typ, Content: []byte(text)})
	}
	if _, err := e.Add(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	if rep, err := e.Embed(t.Context(), nil); err != nil || !rep.Trained {
		t.Fatalf("embed: %+v, %v", rep, err)
	}
}

// TestRelevance: a question about nothing the history holds finds
// nothing, though hybrid search ranks hits for it; a rewording of a
// stored message, and a question that names when it was said, find it;
// the floor is a setting, and off finds anything ranked.
func TestRelevance(t *testing.T) {
	ctx := t.Context()
	e := newEngine(t, engine.Options{Embed: engine.EmbedOptions{Corpus: lsa.Options{Dim: 8}}})
	addHistory(t, e)
	search := func(e *engine.Engine, q string) (retrieve.Result, engine.Relevance) {
		t.Helper()
		res, err := e.Retrieve(ctx, retrieve.Query{Text: q, Filter: store.Filter{History: true}, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		rel, err := e.Relevance(ctx, q, res)
		if err != nil {
			t.Fatal(err)
		}
		return res, rel
	}
	for _, c := range []struct {
		query  string
		found  bool
		ranked bool // hybrid search ranks hits, the least bad of which the floor turns away
	}{
		{"what is the best server for a cooking blog", false, true},
		{"which kubernetes ingress controller did we pick", false, false},
		{"why does every client retry at the same time", true, true},
		{"what did we say about the fake clock yesterday", true, true},
		// Dates are when, not what: "May 2026" counts neither way.
		{"the jitter change in May 2026", true, true},
	} {
		res, rel := search(e, c.query)
		if rel.Floor != engine.DefaultRelevanceFloor || rel.Found() != c.found {
			t.Errorf("%q: best %.2f, floor %.2f: found %v, want %v", c.query, rel.Best, rel.Floor, rel.Found(), c.found)
		}
		if c.ranked && len(res.Hits) == 0 {
			t.Errorf("%q: search ranked nothing", c.query)
		}
	}
	// A rewording's best hit is the message it rewords.
	if res, _ := search(e, "why does every client retry at the same time"); len(res.Hits) == 0 || res.Hits[0].Chunk.Text != history[1] {
		t.Errorf("the rewording's best hit: %+v", res.Hits)
	}

	// The floor is a setting: higher finds less; negative is off.
	strict := engine.Options{RelevanceFloor: 0.99}
	off := engine.Options{RelevanceFloor: -1}
	for _, c := range []struct {
		opts  engine.Options
		query string
		found bool
	}{
		{strict, "why does every client retry at the same time", false},
		{off, "what is the best server for a cooking blog", true},
	} {
		other, err := engine.New(e.Store(), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, rel := search(other, c.query); rel.Found() != c.found {
			t.Errorf("floor %v, %q: best %.2f: found %v, want %v", c.opts.RelevanceFloor, c.query, rel.Best, rel.Found(), c.found)
		}
	}
}
