package handlers

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
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

// requestIDKey is the context key of a request's ID (see requestIDOf).
type requestIDKey struct{}

// requestCtx is a request's context with its ID. The ID is kept as the
// one-element slice the X-Request-Id header of the answer holds, so the
// context and the header share it.
type requestCtx struct {
	context.Context
	id [1]string
}

// Value returns the request's context itself for requestIDKey, and the
// parent's value for any other key.
func (c *requestCtx) Value(key any) any {
	if key == (requestIDKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// requestIDOf returns the ID the edge middleware gave the request of ctx,
// "" outside one.
func requestIDOf(ctx context.Context) string {
	if c, ok := ctx.Value(requestIDKey{}).(*requestCtx); ok {
		return c.id[0]
	}
	return ""
}

// exchange is what the edge middleware keeps of one request: its context
// with the ID, and the writer that records the answer's status and size.
// They are allocated together, once per request.
type exchange struct {
	ctx requestCtx
	w   statusWriter
}

// edge is the outermost middleware, in this order: it gives each request
// an ID (the client's X-Request-Id when it is a valid one, see
// validRequestID, else a new one), which is in the request's context (see
// requestIDOf, for logs and problems) and in the X-Request-Id header of the
// answer; once the rest has answered, it counts the request in the HTTP
// metrics and logs one line for it (see requestLogLevel). It never logs
// headers, so lease tokens and credentials stay out of the logs. The
// metrics sit outside the recoverer, so they count a panic's 500.
//
// This runs on every request: the ID, the context and the status recorder
// are one allocation, the log line is built only when its level is
// enabled, and the route is found once for both.
func edge(log *slog.Logger, m *httpMetrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			id := r.Header.Get(requestIDHeader)
			if !validRequestID(id) {
				id = newRequestID()
			}
			x := &exchange{ctx: requestCtx{Context: r.Context(), id: [1]string{id}}, w: statusWriter{ResponseWriter: w}}
			w.Header()[requestIDHeader] = x.ctx.id[:]
			next.ServeHTTP(&x.w, r.WithContext(&x.ctx))
			route := routeOf(r)
			elapsed := time.Since(start)
			m.count(route, r.Method, x.w.status, elapsed)
			level := requestLogLevel(route, x.w.status)
			if !log.Enabled(r.Context(), level) {
				return
			}
			log.LogAttrs(r.Context(), level, "request",
				slog.String("request_id", id),
				slog.String("method", r.Method),
				slog.String("route", route),
				slog.Int("status", x.w.status),
				slog.Int("bytes", x.w.bytes),
				slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
			)
		})
	}
}

// probeRoutes are polled by orchestrators and scrapers; their successful
// requests are logged at debug level.
var probeRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// requestLogLevel is the level of a request's log line: info, but debug
// for a probe's answer below 500 (health checks and scrapes every few
// seconds would drown the log).
func requestLogLevel(route string, status int) slog.Level {
	if probeRoutes[route] && status < 500 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// statusWriter passes an answer on and records its status (0 until one is
// sent) and the bytes of its body, as chi's middleware.WrapResponseWriter
// does. Flush, ReadFrom and Unwrap (for http.ResponseController: hold and
// watch streams set write deadlines through it) reach the writer it wraps.
type statusWriter struct {
	http.ResponseWriter
	status      int
	bytes       int
	wroteHeader bool
}

// WriteHeader passes code on: an informational one (1xx but 101) every
// time, else only the first, which is the status recorded.
func (w *statusWriter) WriteHeader(code int) {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += n
	return n, err
}

// ReadFrom lets io.Copy reach the wrapped writer's ReadFrom (net/http's
// response has one), counting what it copies.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(w.ResponseWriter, src)
	}
	w.bytes += int(n)
	return n, err
}

// Flush sends what is buffered, as chi's wrapper does (a flush before any
// status leaves the recorded status 0).
func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush, returning the wrapped writer's error (see
// http.ResponseController.Flush).
func (w *statusWriter) FlushError() error {
	w.wroteHeader = true
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the writer statusWriter wraps.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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
				log.Error("panic", "request_id", requestIDOf(r.Context()), "panic", rec)
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

	// series are the counter and histogram of each route, method and
	// status seen, found once: looking them up by their label values
	// hashes the labels on every request. The labels are bounded (see
	// above), and so is series.
	mu     sync.RWMutex
	series map[seriesKey]requestSeries
}

// seriesKey is the labels of one request counter.
type seriesKey struct {
	route, method string
	status        int
}

// requestSeries are the metrics a request of one seriesKey counts in.
type requestSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
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
		series: map[seriesKey]requestSeries{},
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

// count counts one answered request of route (see routeOf) and method
// with status, and its latency.
func (m *httpMetrics) count(route, method string, status int, elapsed time.Duration) {
	if !m.routes[route] {
		route = unmatchedRoute
	}
	k := seriesKey{route, methodLabel(method), status}
	m.mu.RLock()
	s, ok := m.series[k]
	m.mu.RUnlock()
	if !ok {
		s = requestSeries{m.requests.WithLabelValues(k.route, k.method, statusLabel(status)),
			m.duration.WithLabelValues(k.route, k.method)}
		m.mu.Lock()
		m.series[k] = s
		m.mu.Unlock()
	}
	s.requests.Inc()
	s.duration.Observe(elapsed.Seconds())
}

// statusLabels are the labels of the statuses 100-599, made once: the
// label of every request is one of them.
var statusLabels = func() []string {
	l := make([]string, 500)
	for i := range l {
		l[i] = strconv.Itoa(100 + i)
	}
	return l
}()

// statusLabel is status as a metric label.
func statusLabel(status int) string {
	if status >= 100 && status < 600 {
		return statusLabels[status-100]
	}
	return strconv.Itoa(status)
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
