package handlers

import (
	"embed"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// uiFiles is the dashboard: one HTML page, its script, its style sheet and
// its icon, served as they are (no build step, nothing from elsewhere).
//
//go:embed ui/index.html ui/app.js ui/style.css ui/favicon.svg
var uiFiles embed.FS

// uiTypes are the dashboard's files by name and their media types: the
// only names /ui/{asset} serves.
var uiTypes = map[string]string{
	"app.js":      "text/javascript; charset=utf-8",
	"style.css":   "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// uiSecurityPolicy lets the page load its own files and call its own
// server, and nothing else: no inline script or style, no other origin,
// no framing.
const uiSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handleGetDashboard serves the dashboard's page. It calls the public API
// with relative URLs, so it works at /ui/ and behind a proxy's path prefix.
func handleGetDashboard(w http.ResponseWriter, r *http.Request) error {
	return writeUIFile(w, "index.html", "text/html; charset=utf-8")
}

// handleGetDashboardAsset serves one of the page's files, /ui/{asset}. Returns a
// not-found error for a name that is not one of them.
func handleGetDashboardAsset(w http.ResponseWriter, r *http.Request) error {
	name := chi.URLParam(r, "asset")
	typ, ok := uiTypes[name]
	if !ok {
		return &httpError{typ: routeNotFound, detail: "no route for " + r.Method + " " + r.URL.Path}
	}
	return writeUIFile(w, name, typ)
}

// redirectToDashboard sends /ui to /ui/ with a relative Location, which
// a browser resolves against the address it asked, prefix included.
func redirectToDashboard(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Location", "ui/")
	w.WriteHeader(http.StatusMovedPermanently)
	return nil
}

// writeUIFile writes the embedded file ui/name with its type, the page's
// security policy and no caching (a new binary serves a new page).
func writeUIFile(w http.ResponseWriter, name, typ string) error {
	b, err := uiFiles.ReadFile("ui/" + name)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", typ)
	h.Set("Content-Security-Policy", uiSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
	return nil
}
