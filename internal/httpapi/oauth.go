package httpapi

import (
	"net/http"
	"strings"
)

// engram takes a bearer token, and is no OAuth authorization server.
// An MCP client that gets 401 may still look for one, as the MCP
// authorization specification lets it: Claude Code 2.1.121 asks for
// /.well-known/oauth-protected-resource (with and without the endpoint's
// path), /.well-known/oauth-authorization-server and
// /.well-known/openid-configuration, and finding none of them (404),
// registers a client at the server's own /register (RFC 7591), then
// would send the user to /authorize. It sends the configured
// Authorization header with each request.
//
// None of the discovery documents is served: each would either claim an
// authorization server or, without one, be passed over (Claude Code then
// takes the server itself for its authorization server). What stops the
// dance is /register's answer, an RFC 7591 error whose description the
// client reports as the connection's failure: it names the fault (the
// configured token) and its fix (engram token). The answer is the same
// for every caller and holds nothing: it needs no credential, and
// registers nothing.

// registerRoute is where an OAuth client registers itself (RFC 7591),
// at the root of the server: the authorization server an MCP client
// assumes when it finds no metadata is the endpoint's origin.
const registerRoute = "POST /register"

// registerRefusal is /register's answer's description.
const registerRefusal = "engram registers no OAuth clients: it takes a bearer token, and the token this MCP client sent is wrong (or none was sent). " +
	"engram token prints the server's token: send it as the header Authorization: Bearer <token> in the MCP server's configuration " +
	"(engram mcp --print-config CLIENT --http URL prints one); an agent sends the key it was registered with"

// noOAuth answers a client's registration with an RFC 7591 error
// (section 3.2.2): 400, and the error and its description as JSON.
func (g *guard) noOAuth(w http.ResponseWriter, r *http.Request) {
	g.metrics.Refused("oauth")
	g.log.Warn("request refused", "reason", "oauth", "status", http.StatusBadRequest, "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path,
		"host", r.Host, "detail", "an OAuth client registration: the MCP client's token is wrong or missing")
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": "registration_not_supported", "error_description": registerRefusal})
}

// bearerChallenge is the WWW-Authenticate of a 401 (RFC 6750 section
// 3): with the error and its description when the request carried an
// Authorization header, and none when it sent no credential, as the RFC
// says. A client shows it (Codex prints the header).
func bearerChallenge(r *http.Request, why string) string {
	hdr := r.Header.Get("Authorization")
	if hdr == "" {
		return `Bearer realm="engram"`
	}
	code := "invalid_token"
	if scheme, _, _ := strings.Cut(strings.TrimSpace(hdr), " "); !strings.EqualFold(scheme, "bearer") {
		code = "invalid_request"
	}
	desc := why + ": engram token prints the server's token; an agent sends the key it was registered with"
	// The description is a quoted string of printable ASCII but " and \.
	desc = strings.Map(func(c rune) rune {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return '\''
		}
		return c
	}, desc)
	return `Bearer realm="engram", error="` + code + `", error_description="` + desc + `"`
}
