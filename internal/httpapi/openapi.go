package httpapi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/engramhq/engram/internal/api"
)

var (
	openapiOnce sync.Once
	openapiDoc  map[string]any
)

// openapi serves the API's OpenAPI 3.1 document, built from the route
// table the server is made from.
func (v *v1) openapi(w http.ResponseWriter, r *http.Request) {
	openapiOnce.Do(func() { openapiDoc = v.document() })
	writeJSON(w, http.StatusOK, openapiDoc)
}

// responses are the answers documented with a schema: a zero value of
// the type each route answers with.
var responses = map[string]any{
	"POST /v1/retrieve":                           api.RetrieveOut{},
	"GET /v1/history":                             api.SearchOut{},
	"GET /v1/windows":                             api.WindowsOut{},
	"PUT /v1/windows/{session}/{agent}":           api.WindowOut{},
	"GET /v1/windows/{session}/{agent}":           api.WindowOut{},
	"POST /v1/windows/{session}/{agent}/messages": api.AppendOut{},
	"POST /v1/windows/{session}/{agent}/readmit":  api.AppendOut{},
	"POST /v1/windows/{session}/{agent}/handoff":  api.HandoffOut{},
	"POST /v1/windows/{session}/{agent}/assemble": api.AssembleOut{},
	"GET /v1/windows/{session}/{agent}/context":   api.ContextOut{},
	"GET /v1/refs/{id}":                           api.ExpandOut{},

	// A window's assembled turns.
	"GET /v1/windows/{session}/{agent}/status":                            api.TurnStatusOut{},
	"GET /v1/windows/{session}/{agent}/snapshots":                         api.SnapshotsOut{},
	"GET /v1/windows/{session}/{agent}/snapshots/{snapshot}":              api.SnapshotOut{},
	"GET /v1/windows/{session}/{agent}/snapshots/{snapshot}/diff/{other}": api.SnapshotDiffOut{},

	// The status API.
	"GET /v1/windows/{session}/{agent}/timeline": api.TimelineOut{},
	"GET /v1/sessions":                           api.SessionsOut{},
	"GET /v1/index":                              api.IndexOut{},
	"GET /v1/status":                             api.StatusOut{},
}

// operationIDs name the operations whose paths alone would not: a
// window's routes share their words with the list of windows.
var operationIDs = map[string]string{
	"GET /v1/windows":                             "list_windows",
	"PUT /v1/windows/{session}/{agent}":           "open_window",
	"GET /v1/windows/{session}/{agent}":           "get_window",
	"POST /v1/windows/{session}/{agent}/messages": "append_window_messages",
	"POST /v1/windows/{session}/{agent}/readmit":  "readmit_window_ref",
	"POST /v1/windows/{session}/{agent}/handoff":  "handoff_window",
	"POST /v1/windows/{session}/{agent}/assemble": "assemble_window_turn",
	"GET /v1/windows/{session}/{agent}/context":   "get_window_context",
	"GET /v1/refs/{id}":                           "expand_ref",
	"GET /v1/windows/{session}/{agent}/timeline":  "get_window_timeline",
	"GET /v1/sessions":                            "list_sessions",

	// A window's assembled turns.
	"GET /v1/windows/{session}/{agent}/status":                            "get_window_status",
	"GET /v1/windows/{session}/{agent}/snapshots":                         "list_window_snapshots",
	"GET /v1/windows/{session}/{agent}/snapshots/{snapshot}":              "get_window_snapshot",
	"GET /v1/windows/{session}/{agent}/snapshots/{snapshot}/diff/{other}": "diff_window_snapshots",
}

// schemaFor infers a type's schema; json.RawMessage, which holds a
// vendor's or a tool's JSON as it came, is any JSON value (the default
// would be a list of bytes).
func schemaFor(t reflect.Type) (*jsonschema.Schema, error) {
	return jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {Description: "any JSON value, kept as it came"},
	}})
}

// queryTypes are the query parameters the routes read as whole numbers
// (intParams) and as booleans (boolParams); the rest are strings.
var queryTypes = map[string]string{
	"limit": "integer", "spans": "integer", "from": "integer", "to": "integer", "max_tokens": "integer",
	"start": "integer", "end": "integer", "version": "integer", "since": "integer", "after": "integer",
	"history": "boolean", "files": "boolean", "all": "boolean",
}

var pathParam = regexp.MustCompile(`\{(\w+)(\.\.\.)?\}`)

func (v *v1) document() map[string]any {
	errSchema := map[string]any{"type": "object", "properties": map[string]any{"error": map[string]any{"type": "object",
		"properties": map[string]any{"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}}}}}
	paths := map[string]map[string]any{}
	for _, rt := range v.table() {
		method, pattern, _ := strings.Cut(rt.pattern, " ")
		path := pathParam.ReplaceAllString(pattern, "{$1}")
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(pattern, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		if rt.pattern == appendRoute {
			params = append(params, map[string]any{"name": idempotencyKey, "in": "header", "schema": map[string]any{"type": "string"},
				"description": "this append's own key (or the body's key): a retry under it is not appended again, and is answered 200 with replayed set and Idempotent-Replayed: true"})
		}
		for _, q := range rt.query {
			name, desc, _ := strings.Cut(q, ": ")
			params = append(params, map[string]any{"name": name, "in": "query", "description": desc, "schema": map[string]any{"type": cmp.Or(queryTypes[name], "string")}})
		}
		op := map[string]any{
			"summary":     rt.summary,
			"operationId": cmp.Or(operationIDs[rt.pattern], operationID(method, path)),
			"responses": map[string]any{
				fmt.Sprint(rt.status): map[string]any{"description": "OK", "content": map[string]any{"application/json": map[string]any{}}},
				"default":             map[string]any{"description": "an error", "content": map[string]any{"application/json": map[string]any{"schema": errSchema}}},
			},
			"security": []any{map[string]any{"bearer": []string{}}},
		}
		if method == http.MethodGet {
			// The dashboard's sign-in reads what a GET reads.
			op["security"] = []any{map[string]any{"bearer": []string{}}, map[string]any{"dashboard": []string{}}}
		}
		if rt.pattern == streamRoute {
			op["responses"].(map[string]any)["200"] = map[string]any{"description": "server-sent events: event names hello, windows, archive, index; each data line is JSON",
				"content": map[string]any{"text/event-stream": map[string]any{"schema": map[string]any{"type": "string"}}}}
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if out, ok := responses[rt.pattern]; ok {
			schema, err := schemaFor(reflect.TypeOf(out))
			if err != nil {
				panic(fmt.Sprintf("openapi: %s: %v", rt.pattern, err)) // the types are ours: a test catches it
			}
			op["responses"].(map[string]any)[fmt.Sprint(rt.status)] = map[string]any{"description": "OK",
				"content": map[string]any{"application/json": map[string]any{"schema": schema}}}
		}
		if rt.body != nil {
			schema, err := schemaFor(reflect.TypeOf(rt.body))
			if err != nil {
				panic(fmt.Sprintf("openapi: %s: %v", rt.pattern, err)) // the types are ours: a test catches it
			}
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
		}
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "engram", "version": "v1",
			"description": "engram's JSON API: search, files, context, agents' context windows, session state and the shared memory of agents. The caller's session and agent go in the X-Engram-Session and X-Engram-Agent headers."},
		"paths": paths,
		"components": map[string]any{"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"},
			"dashboard": map[string]any{"type": "apiKey", "in": "cookie", "name": SessionCookie,
				"description": "the dashboard's sign-in, set by a login link (engram token login); it reads only"}}},
	}
}

func operationID(method, path string) string {
	var parts []string
	for _, p := range strings.Split(strings.Trim(path, "/"), "/") {
		if p == "v1" || strings.HasPrefix(p, "{") {
			continue
		}
		parts = append(parts, p)
	}
	return strings.ToLower(method) + "_" + strings.Join(parts, "_")
}
