package handlers

import (
	"net/http"

	apispec "github.com/latchkey/latchkey/api"
	httpSwagger "github.com/swaggo/http-swagger/v2"
)

// handleOpenAPI serves the embedded OpenAPI document.
func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(apispec.Spec)
}

// docsHandler serves Swagger UI, pointed at /openapi.yaml.
func docsHandler() http.HandlerFunc {
	return httpSwagger.Handler(httpSwagger.URL("/openapi.yaml"))
}

func redirectToDocs(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/docs/index.html", http.StatusMovedPermanently)
}
