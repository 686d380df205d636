// Package handlers is Latchkey's HTTP layer: chi routes, request decoding and
// validation, and the one mapping from service errors to problem+json.
package handlers

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-playground/validator/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config tunes the router. Zero values fall back to defaults.
type Config struct {
	// Logger receives request logs; nil discards them.
	Logger *slog.Logger
	// Registry receives the HTTP metrics and is served at /metrics; nil
	// gives a private registry.
	Registry *prometheus.Registry
	// AdminKey is the bearer credential for admin actions; empty disables them.
	AdminKey string
	// MaxBodyBytes bounds request bodies. Default 64 KiB.
	MaxBodyBytes int64
	// Store names the backing store reported by /readyz ("redis" or "embedded").
	Store string
	// RateLimit tunes the rate-limit routes and self-protection.
	RateLimit RateLimitConfig
	// HoldPing is how often a hold stream sends a comment line when nothing
	// else happens, so proxies keep it open. Default 15s.
	HoldPing time.Duration
	// StreamWriteTimeout bounds each write of a hold stream (and the answer
	// to a waiting acquire, past its wait); the server's write timeout does
	// not apply to them. Default 10s.
	StreamWriteTimeout time.Duration
	// WatchPing is how often a watch stream sends a comment line when no
	// event came. Default 15s.
	WatchPing time.Duration
	// WatchMaxStreams caps the watch streams open on this instance; one
	// more is answered 503 watch-streams-exhausted. Default 10000.
	WatchMaxStreams int
	// WatchMaxPerClient caps the watch streams one client (an API key, or
	// a client address on an open API) has open on this instance; one more
	// is answered 429 watch-streams-per-client. Default 100.
	WatchMaxPerClient int
	// Auth turns on API keys, scopes, tenants and their request rate (the
	// lock service counts their leases and waiters); its zero value leaves
	// the API open (AdminKey still guards force-release).
	Auth AuthConfig
	// Stopping is closed when the server begins to shut down: hold streams
	// then release their lease and end with a "released" event, and waiting
	// acquires end with a 503, so shutdown need not wait for them. Nil
	// never closes.
	Stopping <-chan struct{}
}

// api holds what every handler needs.
type api struct {
	svc      services
	cfg      Config
	log      *slog.Logger
	validate *validator.Validate
	watches  watchStreams // the watch streams open (watch.go)
}

// NewRouter returns the whole HTTP surface of Latchkey: the v1 routes, the
// OpenAPI document and Swagger UI, the dashboard, health, readiness and
// metrics.
func NewRouter(lk Locks, rl RateLimits, cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.Store == "" {
		cfg.Store = "redis"
	}
	if cfg.HoldPing <= 0 {
		cfg.HoldPing = 15 * time.Second
	}
	if cfg.WatchPing <= 0 {
		cfg.WatchPing = 15 * time.Second
	}
	if cfg.WatchMaxStreams <= 0 {
		cfg.WatchMaxStreams = 10000
	}
	if cfg.WatchMaxPerClient <= 0 {
		cfg.WatchMaxPerClient = 100
	}
	if cfg.StreamWriteTimeout <= 0 {
		cfg.StreamWriteTimeout = 10 * time.Second
	}
	a := &api{svc: services{lk, rl}, cfg: cfg, log: cfg.Logger, validate: newValidator(),
		watches: watchStreams{perClient: map[string]int{}}}

	r := chi.NewRouter()
	metrics := newHTTPMetrics(cfg.Registry)
	r.Use(edge(a.log, metrics)) // request ID, log and metrics, outside recoverer: they count a panic's 500
	r.Use(recoverer(a.log))
	r.Use(a.selfProtect)
	r.Use(a.newAuthenticator(r, cfg.Registry).middleware)

	gate := a.handle(a.handleGateRateLimit)
	mux := r
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, a.log, &httpError{typ: routeNotFound,
			detail: "no route for " + r.Method + " " + r.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		if policy, ok := gatePolicy(r.URL.Path); ok {
			// A gateway forwards its client's method (Envoy's ext_authz
			// does), and the gate's answer does not depend on it: methods
			// with no route of their own (TRACE, WebDAV's PROPFIND) get it
			// too, rather than a 405 passed on to the client.
			// The gate's route pattern labels its metrics, as for its
			// routed methods.
			rctx := chi.RouteContext(r.Context())
			rctx.URLParams.Add("policy", policy)
			rctx.RoutePatterns = append(rctx.RoutePatterns, gatePattern(r.URL.Path))
			gate(w, r)
			return
		}
		allowed := allowedMethods(r, mux)
		writeError(w, r, a.log, &httpError{typ: methodNotAllowed, allow: allowed,
			detail: "method " + r.Method + " is not allowed on " + r.URL.Path + ": it allows " + strings.Join(allowed, ", ")})
	})

	getAndHead(r, "/healthz", http.HandlerFunc(a.handleHealthz))
	getAndHead(r, "/readyz", http.HandlerFunc(a.handleReadyz))
	getAndHead(r, "/metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	getAndHead(r, "/openapi.yaml", http.HandlerFunc(handleOpenAPI))
	getAndHead(r, "/docs", http.HandlerFunc(redirectToDocs))
	getAndHead(r, "/docs/*", docsHandler())
	getAndHead(r, "/ui", a.handleParams(redirectToDashboard))
	getAndHead(r, "/ui/", a.handleParams(handleGetDashboard))
	getAndHead(r, "/ui/{asset}", a.handleParams(handleGetDashboardAsset))

	leaseRoutes(a, r, a.lockPrimitive())
	leaseRoutes(a, r, a.rwLockPrimitive())
	leaseRoutes(a, r, a.semaphorePrimitive())
	leaseRoutes(a, r, a.electionPrimitive())
	r.Put("/v1/elections/{name}/value", a.handleParams(a.handleProclaim))
	r.Put("/v1/semaphores/{name}", a.handleParams(a.handleSetSemaphorePermits))
	r.Get("/v1/locks", a.handleParams(a.handleListLocks, listParams...))
	r.Get("/v1/rwlocks", a.handleParams(a.handleListRWLocks, listParams...))
	r.Get("/v1/semaphores", a.handleParams(a.handleListSemaphores, listParams...))
	r.Get("/v1/elections", a.handleParams(a.handleListElections, listParams...))
	for _, kind := range lostKinds {
		r.Get("/v1/lost/"+kind.path, a.handleParams(a.handleListLost(kind.label), listParams...))
	}

	r.Post("/v1/ratelimit/check", a.handleParams(a.handleCheckRateLimit))
	r.Get("/v1/ratelimit/policies", a.handleParams(a.handleListPolicies))
	r.Get("/v1/ratelimit/policies/{policy}/top", a.handleParams(a.handleListTopDeniedKeys, "limit"))
	r.Delete("/v1/ratelimit/policies/{policy}/keys/{key}", a.handleParams(a.handleResetRateLimitKey))
	// The gate takes any query: a gateway forwards its client's.
	for _, m := range gateMethods {
		r.Method(m, "/v1/ratelimit/gate/{policy}", gate)
		r.Method(m, "/v1/ratelimit/gate/{policy}/*", gate)
	}
	metrics.learnRoutes(r)
	return r
}

// routeMethods are the methods chi routes: the candidates of an Allow header.
var routeMethods = []string{http.MethodConnect, http.MethodDelete, http.MethodGet, http.MethodHead,
	http.MethodOptions, http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodTrace}

// allowedMethods are the methods mux serves on r's path, in alphabetical
// order: the Allow header of a 405 (RFC 9110 §15.5.6). They come from the
// route tree itself, path matched as chi matches it (the raw path when
// the request has one), so they cannot drift from the routes.
func allowedMethods(r *http.Request, mux *chi.Mux) []string {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	for _, m := range routeMethods {
		if mux.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// leaseRoutes mounts a lease primitive's operations (see primitive) on
// its resource, base+{name}: POST acquires, GET reads, DELETE releases,
// POST {name}/renew and {name}/hold renew and hold, and GET {name}/events
// watches, for a primitive that is watched (watchKind).
func leaseRoutes[A, H leaseBody[R], R, L any](a *api, r chi.Router, p *primitive[A, H, R, L]) {
	resource := p.base + "{name}"
	r.Post(resource, a.handleParams(p.handleAcquire))
	r.Get(resource, a.handleParams(p.handleGet))
	r.Delete(resource, a.handleParams(p.handleRelease, append([]string{"force"}, p.params...)...))
	r.Post(resource+"/renew", a.handleParams(p.handleRenew, p.params...))
	r.Post(resource+"/hold", a.handleParams(p.handleHold))
	if p.watchKind != "" {
		r.Get(resource+"/events", a.handleParams(p.handleWatch))
	}
}

// handlerFunc is a handler that returns its error instead of answering it
// (chi's _examples/custom-handler): a nil error means it answered.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h to net/http: the one place a handler's error is
// answered, as problem+json (see writeError).
func (a *api) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, r, a.log, err)
		}
	}
}

// handleParams adapts h as handle does, refusing first a query parameter
// other than accepted (see knownParams).
func (a *api) handleParams(h handlerFunc, accepted ...string) http.HandlerFunc {
	return a.handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := knownParams(r, accepted...); err != nil {
			return err
		}
		return h(w, r)
	})
}

// getAndHead mounts h for GET and HEAD on pattern: HEAD answers as GET
// does, without the body (net/http drops what h writes), whatever method
// h itself accepts (Swagger UI's handler answers GET only).
func getAndHead(r chi.Router, pattern string, h http.Handler) {
	r.Method(http.MethodGet, pattern, h)
	r.Method(http.MethodHead, pattern, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		get := req.WithContext(req.Context())
		get.Method = http.MethodGet
		h.ServeHTTP(w, get)
	}))
}
