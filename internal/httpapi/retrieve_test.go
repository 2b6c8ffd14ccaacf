package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
)

// TestRetrieve: POST /v1/retrieve answers with the chunk that matches a
// query, not the entry's head, with its lines and bytes; a line range of
// one entry, with the range that reads on; and the OpenAPI document gives
// the answer's schema.
func TestRetrieve(t *testing.T) {
	eng := newEngine(t)
	var b strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&b, "ok %d: upload block %d stored\n", i, i)
		if i == 150 {
			b.WriteString("FAIL: context deadline exceeded waiting for the quokka server\n")
		}
	}
	content := b.String()
	res, err := eng.Add(context.Background(), []engine.Record{{Session: "s0", Agent: "x", Type: store.ToolResult, Content: []byte(content)}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].ID
	srv := httptest.NewServer(Handler(eng, Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	decode := func(body string) api.RetrieveOut {
		t.Helper()
		var out api.RetrieveOut
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	_, body := c.want(200, "POST", "/v1/retrieve", `{"query":"deadline exceeded quokka"}`, `"start_line":`)
	out := decode(body)
	if len(out.Items) == 0 {
		t.Fatalf("no items: %s", body)
	}
	it := out.Items[0]
	if !strings.Contains(it.Content, "FAIL: context deadline exceeded") || it.StartLine == 1 || it.Content != content[it.StartByte:it.EndByte] {
		t.Errorf("best item: %+v", it)
	}
	if r, _ := engine.LineRange([]byte(content), it.StartLine, it.EndLine); string(r) != it.Content {
		t.Errorf("lines %d-%d are not the item's content", it.StartLine, it.EndLine)
	}

	_, body = c.want(200, "POST", "/v1/retrieve", fmt.Sprintf(`{"content_ids":[%q],"start_line":151,"end_line":151}`, id[:10]), `"end_line":151`)
	out = decode(body)
	if len(out.Items) != 1 || out.Items[0].Content != "FAIL: context deadline exceeded waiting for the quokka server\n" {
		t.Errorf("line 151: %s", body)
	}
	if n := out.Items[0].Next; n == nil || n.StartLine != 152 || n.EndLine != 152 || n.ContentIDs[0] != id[:12] {
		t.Errorf("next of line 151: %+v", n)
	}
	c.want(400, "POST", "/v1/retrieve", fmt.Sprintf(`{"content_ids":[%q],"start_line":400}`, id), "has 301 lines, the range starts at 400")
	_, body = c.want(200, "POST", "/v1/retrieve", `{"query":"zanzibar"}`, `"items":[]`)
	if out := decode(body); out.Message == "" {
		t.Errorf("nothing found without a message: %s", body)
	}

	// A reference's marker, pasted whole as ref_id, names its entry, for
	// a line range or a query; one that is not a marker is the caller's
	// mistake.
	ref := store.Reference{ID: "ref1", Type: store.RefToolResults, SessionID: "s0", AgentID: "x", ContentIDs: []string{id},
		TokensSaved: 2000, TurnFrom: 1, TurnTo: 1, Topics: []string{"upload blocks"}}
	if err := eng.Store().PutReference(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(api.RetrieveIn{RefID: ctxref.Render(ctxref.FromReference(ref)), StartLine: 151, EndLine: 151})
	c.want(200, "POST", "/v1/retrieve", string(req), `"content":"FAIL: context deadline exceeded waiting for the quokka server\n"`)
	req, _ = json.Marshal(api.RetrieveIn{RefID: ctxref.Render(ctxref.FromReference(ref)), Query: "deadline exceeded"})
	if _, body = c.want(200, "POST", "/v1/retrieve", string(req), `"items":`); !strings.Contains(decode(body).Items[0].Content, "FAIL: context deadline") {
		t.Errorf("the marker with a query: %s", body)
	}
	c.want(400, "POST", "/v1/retrieve", `{"ref_id":"[CTX-REF:tool_results | retrieve_context(ref_id=\"ref1\")]"}`, "a marker is its type, span")

	_, doc := c.want(200, "GET", "/v1/openapi.json", "", `"openapi":"3.1.0"`)
	var d struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema struct {
						Properties map[string]json.RawMessage `json:"properties"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	items := d.Paths["/v1/retrieve"]["post"].Responses["200"].Content["application/json"].Schema.Properties["items"]
	for _, field := range []string{"start_line", "end_line", "start_byte", "end_byte", "next"} {
		if !strings.Contains(string(items), `"`+field+`"`) {
			t.Errorf("the documented answer of /v1/retrieve lacks %s: %s", field, items)
		}
	}
}
