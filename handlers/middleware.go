package handlers

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// routeOf is the chi pattern that served r, so metrics and logs never carry
// raw lock names as labels. A request refused before it was routed (by
// authentication or self-protection) has the pattern of the route it asked
// for; one no route serves is "unmatched".
func routeOf(r *http.Request) string {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return unmatchedRoute
	}
	if p := rc.RoutePattern(); p != "" {
		return p
	}
	if rc.Routes != nil {
		if p := rc.Routes.Find(chi.NewRouteContext(), r.Method, routePath(r)); p != "" {
			return p
		}
	}
	if _, ok := gatePolicy(r.URL.Path); ok {
		return gatePattern(r.URL.Path) // the gate answers every method
	}
	return unmatchedRoute
}

// routePath is the path chi routes r on: the raw (still percent-encoded)
// path when the request has one.
func routePath(r *http.Request) string {
	if r.URL.RawPath != "" {
		return r.URL.RawPath
	}
	return r.URL.Path
}

// requestIDHeader carries a request's ID: a client (or a proxy in front of
// Latchkey) may send one, and every answer carries the ID its request got.
const requestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds a client's request ID; a longer one is replaced.
const maxRequestIDLen = 128

// validRequestID reports whether a client's request ID is kept as it is:
// 1-128 characters of A-Z, a-z, 0-9 and . _ : / - (IDs Latchkey generates
// are of this form too, so an ID passes unchanged through several
// instances). Anything else is replaced, so logs and answers never carry
// what a client chose to put there.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !requestIDChar(id[i]) {
			return false
		}
	}
	return true
}

func requestIDChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
		c == '.', c == '_', c == ':', c == '/', c == '-':
		return true
	}
	return false
}

// requestIDPrefix starts every request ID this process generates: the host
// name (as far as it is made of request-ID characters) and ten random
// base62 characters, as "host/Ab3dEf7hIj".
var requestIDPrefix = func() string {
	host, _ := os.Hostname()
	b := []byte(host)
	for i, c := range b {
		if !requestIDChar(c) || c == '/' {
			b[i] = '-'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		b = []byte("latchkey")
	}
	const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b = append(b, '/')
	for range 10 {
		b = append(b, base62[rand.IntN(len(base62))])
	}
	return string(b)
}()

var requestIDSeq atomic.Uint64

// newRequestID returns this process's next request ID, as
// "host/Ab3dEf7hIj-000042".
func newRequestID() string {
	var buf [maxRequestIDLen]byte
	b := append(buf[:0], requestIDPrefix...)
	b = append(b, '-')
	n := requestIDSeq.Add(1)
	for d := uint64(100000); d > 1 && n < d; d /= 10 {
		b = append(b, '0')
	}
	return string(strconv.AppendUint(b, n, 10))
}

// requestID gives each request an ID: the client's X-Request-Id when it is
// a valid one (see validRequestID), else a new one. The ID is in the
// request's context (middleware.GetReqID reads it, for logs and problems)
// and in the X-Request-Id header of the answer.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header()[requestIDHeader] = []string{id}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), middleware.RequestIDKey, id)))
	})
}

// probeRoutes are polled by orchestrators and scrapers; their successful
// requests are logged at debug level.
var probeRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// requestLogger logs one line per request. It never logs headers, so lease
// tokens and credentials stay out of the logs.
func requestLogger(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := routeOf(r)
			level := slog.LevelInfo
			if probeRoutes[route] && ww.Status() < 500 {
				level = slog.LevelDebug // health checks and scrapes every few seconds would drown the log
			}
			log.LogAttrs(r.Context(), level, "request",
				slog.String("request_id", middleware.GetReqID(r.Context())),
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.Int("status", ww.Status()),
				slog.Int("bytes", ww.BytesWritten()),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			)
		})
	}
}

// recoverer turns a panic into a logged 500 problem without a stack trace in
// the response.
func recoverer(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				rec := recover()
				if rec == nil {
					return
				}
				if rec == http.ErrAbortHandler {
					panic(rec)
				}
				log.Error("panic", "request_id", middleware.GetReqID(r.Context()), "panic", rec)
				writeProblem(w, r, &panicError{value: rec})
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// httpMetrics counts requests by route, method and status, with a latency
// histogram. Every label value comes from a bounded set, so no request can
// add series: the route is one of the router's patterns (or "unmatched"),
// the method one of RFC 9110's (or "OTHER"), the status a three-digit code
// (net/http refuses any other) or 0 when nothing was written.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// routes are the router's patterns, filled in once every route is
	// registered (see NewRouter) and only read afterwards.
	routes map[string]bool
}

// unmatchedRoute labels requests no route pattern served.
const unmatchedRoute = "unmatched"

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "latchkey_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		routes: map[string]bool{},
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// learnRoutes records the route patterns of r as the only route labels.
func (m *httpMetrics) learnRoutes(r chi.Routes) {
	_ = chi.Walk(r, func(_ string, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		m.routes[route] = true
		return nil
	})
}

func (m *httpMetrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := routeOf(r)
		if !m.routes[route] {
			route = unmatchedRoute
		}
		method := methodLabel(r.Method)
		m.requests.WithLabelValues(route, method, strconv.Itoa(ww.Status())).Inc()
		m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}

// methodLabel is the method as a metric label: RFC 9110's methods as they
// are, any other (the gate answers every method) "OTHER".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}
