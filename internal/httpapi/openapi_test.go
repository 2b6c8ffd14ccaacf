package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestOpenAPI checks the document against the server: every route of the
// document is served (no "no such route"), every operation id is unique,
// and request bodies have schemas.
func TestOpenAPI(t *testing.T) {
	srv := httptest.NewServer(Handler(newEngine(t), Options{Token: "tok"}))
	defer srv.Close()
	c := client{t, srv.URL}
	_, body := c.want(200, "GET", "/v1/openapi.json", "", `"openapi":"3.1.0"`)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Parameters  []struct {
				Name, In string
				Schema   struct{ Type string }
			}
			RequestBody *struct {
				Content map[string]struct {
					Schema map[string]any `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	n := 0
	param := regexp.MustCompile(`\{\w+\}`)
	for path, ops := range doc.Paths {
		for method, op := range ops {
			n++
			if ids[op.OperationID] || op.OperationID == "" {
				t.Errorf("%s %s: operation id %q empty or repeated", method, path, op.OperationID)
			}
			ids[op.OperationID] = true
			if op.RequestBody != nil && op.RequestBody.Content["application/json"].Schema["type"] != "object" {
				t.Errorf("%s %s: request body without an object schema", method, path)
			}
			concrete := param.ReplaceAllString(path, "x")
			if concrete == "/v1/events/stream" { // never ends: a HEAD says it is there
				if st, h, _ := c.do("HEAD", concrete, ""); st != 200 || h.Get("Content-Type") != "text/event-stream" {
					t.Errorf("HEAD %s: HTTP %d %q", concrete, st, h.Get("Content-Type"))
				}
				continue
			}
			st, _, b := c.do(strings.ToUpper(method), concrete, "{}")
			if strings.Contains(b, "no such route") || st == 405 {
				t.Errorf("%s %s (documented) is not served: HTTP %d %s", method, concrete, st, b)
			}
			// A query parameter documented as a number or a boolean is
			// read as one: a word is refused, naming it; one documented
			// as a string is not.
			for _, p := range op.Parameters {
				if p.In != "query" || method != "get" {
					continue
				}
				st, _, b := c.do("GET", concrete+"?"+p.Name+"=several", "")
				refused := st == 400 && strings.Contains(b, p.Name) && (strings.Contains(b, "whole number") || strings.Contains(b, "true or false"))
				if refused != (p.Schema.Type == "integer" || p.Schema.Type == "boolean") {
					t.Errorf("GET %s?%s=several, documented as %s: HTTP %d %s", concrete, p.Name, p.Schema.Type, st, b)
				}
			}
		}
	}
	if n != 45 {
		t.Errorf("%d documented operations, want the 45 routes", n)
	}
	// And a route that is not documented is not served: another method on
	// a documented path is 405 with the methods it takes, another path 404.
	if st, h, b := c.do("DELETE", "/v1/patterns", ""); st != 405 || h.Get("Allow") != "GET, HEAD, POST" || !strings.Contains(b, "this route takes GET, HEAD, POST") {
		t.Errorf("an undocumented method: HTTP %d, Allow %q, %s", st, h.Get("Allow"), b)
	}
	if st, _, b := c.do("GET", "/v1/nothing/here", ""); st != 404 || !strings.Contains(b, "no such route") {
		t.Errorf("an undocumented route: HTTP %d %s", st, b)
	}
	// A path another method only redirects is no route of it; a POST of
	// a GET route is 405, not a complaint about its content type.
	if st, h, b := c.do("GET", "/v1/sessions/s1/files", ""); st == 405 {
		t.Errorf("a path PUT only redirects: HTTP %d, Allow %q, %s", st, h.Get("Allow"), b)
	}
	if st, h, _ := c.do("POST", "/v1/openapi.json", ""); st != 405 || h.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /v1/openapi.json: HTTP %d, Allow %q", st, h.Get("Allow"))
	}
}
