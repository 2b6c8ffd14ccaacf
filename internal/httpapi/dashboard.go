package httpapi

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// The dashboard: a page served from assets embedded in the binary (ui/),
// plain HTML, CSS and JavaScript with no build step and nothing fetched
// from elsewhere, which reads everything it shows from the JSON API under
// /v1 (signed in by the cookie of login.go) and follows changes through
// /v1/events/stream. The assets themselves hold no data, so they are
// served without a credential; the page says how to sign in when the API
// answers 401.
//
// Everything the page shows came from agents (tool outputs, fetched web
// pages, files) and is untrusted: the page puts it in the DOM as text
// only, and every page response carries a Content-Security-Policy that
// allows no inline script or style and nothing from another origin.

//go:embed ui
var uiFiles embed.FS

// pageCSP is the Content-Security-Policy of the page and its assets.
const pageCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// pageReferrer is the page's Referrer-Policy (its <meta name="referrer">
// says the same). Its own requests name it, nothing leaves for another
// origin. Not no-referrer: under it a browser sends a form's POST with
// "Origin: null" (Fetch: "append a request Origin header"), which the
// Origin check refuses, and the page's Sign out did nothing.
const pageReferrer = "same-origin"

// securePage sets the headers of everything the page is made of.
func securePage(h http.Header) {
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", pageReferrer)
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// asset is an embedded file, ready to serve: its bytes, gzipped too, and
// its ETag (a hash of its content).
type asset struct {
	body, gz []byte
	ctype    string
	etag     string
}

// assets are the dashboard's files by their path under ui/.
type assets map[string]*asset

// loadAssets reads and compresses the embedded files once.
func loadAssets() assets {
	out := assets{}
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		sum := sha256.Sum256(body)
		ctype := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // the machine's mime table may lack them
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".html":
			ctype = "text/html; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		out[strings.TrimPrefix(p, "ui/")] = &asset{body: body, gz: gz.Bytes(), ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("httpapi: the embedded dashboard cannot be read: " + err.Error()) // embed guarantees it can
	}
	return out
}

// serve answers GET and HEAD of the asset at name (404 for none), gzipped
// when the client takes it, revalidated by ETag.
func (as assets) serve(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := as[name]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such file: "+r.URL.Path)
		return
	}
	h := w.Header()
	securePage(h)
	h.Set("Content-Type", a.ctype)
	h.Set("ETag", a.etag)
	h.Add("Vary", "Accept-Encoding") // beside CORS's Vary: Origin
	// The page must follow the binary: revalidate every time (a 304 costs
	// a round trip on loopback, nothing more).
	h.Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && strings.Contains(match, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.body
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// dashboardRoutes adds the page, its assets and the login link to mux.
func (g *guard) dashboardRoutes(mux *http.ServeMux) {
	as := loadAssets()
	page := func(w http.ResponseWriter, r *http.Request) { as.serve(w, r, "index.html") }
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /assets/{file...}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if name == "index.html" {
			page(w, r)
			return
		}
		as.serve(w, r, name)
	})
	mux.HandleFunc("GET /login", g.login)
	mux.HandleFunc("POST /logout", g.logout)
}

// projectsPage is the page at / of a server of several projects: a link
// to each project's dashboard, by name. The names are no secret: /healthz
// lists them without a credential too. Like the dashboard, it holds no
// inline script or style.
var projectsPage = template.Must(template.New("projects").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>engram: {{len .}} projects</title>
<link rel="stylesheet" href="assets/style.css">
<link rel="icon" href="assets/icon.svg" type="image/svg+xml">
</head>
<body>
<header class="top"><h1>engram</h1><p class="meta">{{len .}} projects</p></header>
<main id="main">
<h2>Projects</h2>
<p>This server serves several projects, each with its own dashboard:</p>
<ul class="records projects">
{{- range .}}
<li><a href="p/{{.}}/">{{.}}</a> <span class="sub">at /p/{{.}}/</span></li>
{{- end}}
</ul>
<p class="sub">To sign in, run <code>engram token login --project NAME</code> on the server's machine and open the link it prints: one sign-in serves every project.</p>
</main>
</body>
</html>
`))

// projectsRoutes adds to mux the page at / of a server of the projects
// names, and the assets it takes (the dashboard's page itself is each
// project's).
func projectsRoutes(mux *http.ServeMux, names []string) {
	as := loadAssets()
	var page bytes.Buffer
	if err := projectsPage.Execute(&page, names); err != nil {
		panic("httpapi: the projects' page cannot be made: " + err.Error()) // a template of strings cannot fail
	}
	body := page.Bytes()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		securePage(h)
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET /assets/{file...}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if name == "index.html" {
			name = "" // a project's page: its own, under /p/NAME/
		}
		as.serve(w, r, name)
	})
}
