package handlers

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// routeOf is the chi pattern that served r, so metrics and logs never carry
// raw lock names as labels.
func routeOf(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if p := rc.RoutePattern(); p != "" {
			return p
		}
	}
	return "unmatched"
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
				writeProblem(w, Problem{Type: "internal", Title: titles["internal"], Status: http.StatusInternalServerError,
					Detail: "internal error", Instance: r.URL.Path, RequestID: middleware.GetReqID(r.Context())})
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
