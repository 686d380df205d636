package handlers

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// AuthConfig turns on API keys. With Keys nil every request is served
// without a key, as without a keys file.
type AuthConfig struct {
	// Keys returns the active key set (a reload swaps it); nil or a nil
	// set leaves the API open.
	Keys func() *auth.KeySet
	// FailBurst is how many failed authentications a client address may
	// make before it is throttled. Default 10.
	FailBurst int
	// FailWindow is how long a throttled client takes to earn its whole
	// burst back. Default 1m.
	FailWindow time.Duration
	// Now reads the clock of the throttle; nil is time.Now.
	Now func() time.Time
}

// TenantHeader lets a key of the keys file's admin section act on one
// tenant's namespace.
const TenantHeader = "Latchkey-Tenant"

// bearerChallenge is the WWW-Authenticate challenge of every 401 (RFC 6750).
const bearerChallenge = `Bearer realm="latchkey"`

// routeScopes is the scope each /v1 route needs, by method and route
// pattern. A /v1 route missing here needs admin (and a test fails).
var routeScopes = map[string]auth.Scope{
	"POST /v1/locks/{name}":                             auth.ScopeLocksWrite,
	"GET /v1/locks/{name}":                              auth.ScopeLocksRead,
	"GET /v1/locks/{name}/events":                       auth.ScopeLocksRead,
	"GET /v1/rwlocks/{name}/events":                     auth.ScopeLocksRead,
	"GET /v1/semaphores/{name}/events":                  auth.ScopeLocksRead,
	"GET /v1/elections/{name}/events":                   auth.ScopeLocksRead,
	"DELETE /v1/locks/{name}":                           auth.ScopeLocksWrite, // admin with ?force=true
	"POST /v1/locks/{name}/renew":                       auth.ScopeLocksWrite,
	"POST /v1/locks/{name}/hold":                        auth.ScopeLocksWrite,
	"POST /v1/rwlocks/{name}":                           auth.ScopeLocksWrite,
	"GET /v1/rwlocks/{name}":                            auth.ScopeLocksRead,
	"DELETE /v1/rwlocks/{name}":                         auth.ScopeLocksWrite, // admin with ?force=true
	"POST /v1/rwlocks/{name}/renew":                     auth.ScopeLocksWrite,
	"POST /v1/rwlocks/{name}/hold":                      auth.ScopeLocksWrite,
	"POST /v1/semaphores/{name}":                        auth.ScopeLocksWrite,
	"GET /v1/semaphores/{name}":                         auth.ScopeLocksRead,
	"PUT /v1/semaphores/{name}":                         auth.ScopeAdmin,      // the capacity is the admin's
	"DELETE /v1/semaphores/{name}":                      auth.ScopeLocksWrite, // admin with ?force=true
	"POST /v1/semaphores/{name}/renew":                  auth.ScopeLocksWrite,
	"POST /v1/semaphores/{name}/hold":                   auth.ScopeLocksWrite,
	"POST /v1/elections/{name}":                         auth.ScopeLocksWrite,
	"GET /v1/elections/{name}":                          auth.ScopeLocksRead,
	"PUT /v1/elections/{name}/value":                    auth.ScopeLocksWrite,
	"DELETE /v1/elections/{name}":                       auth.ScopeLocksWrite, // admin with ?force=true
	"POST /v1/elections/{name}/renew":                   auth.ScopeLocksWrite,
	"POST /v1/elections/{name}/hold":                    auth.ScopeLocksWrite,
	"GET /v1/locks":                                     auth.ScopeLocksRead,
	"GET /v1/rwlocks":                                   auth.ScopeLocksRead,
	"GET /v1/semaphores":                                auth.ScopeLocksRead,
	"GET /v1/elections":                                 auth.ScopeLocksRead,
	"GET /v1/lost/locks":                                auth.ScopeLocksRead,
	"GET /v1/lost/rwlocks":                              auth.ScopeLocksRead,
	"GET /v1/lost/semaphores":                           auth.ScopeLocksRead,
	"GET /v1/lost/elections":                            auth.ScopeLocksRead,
	"POST /v1/ratelimit/check":                          auth.ScopeRateLimitCheck,
	"GET /v1/ratelimit/policies":                        auth.ScopeRateLimitCheck,
	"GET /v1/ratelimit/policies/{policy}/top":           auth.ScopeRateLimitCheck,
	"DELETE /v1/ratelimit/policies/{policy}/keys/{key}": auth.ScopeAdmin,
	"* /v1/ratelimit/gate/{policy}":                     auth.ScopeRateLimitGate,
	"* /v1/ratelimit/gate/{policy}/*":                   auth.ScopeRateLimitGate,
}

// routeKey is a method (or "*") and a route pattern.
type routeKey struct{ method, pattern string }

// routeScopeIndex is routeScopes by method and pattern, so that finding a
// request's scope builds no string.
var routeScopeIndex = func() map[routeKey]auth.Scope {
	m := make(map[routeKey]auth.Scope, len(routeScopes))
	for k, scope := range routeScopes {
		method, pattern, _ := strings.Cut(k, " ")
		m[routeKey{method, pattern}] = scope
	}
	return m
}()

// authKey is the context key of the API key a request was made with.
type authKey struct{}

// keyOf returns the API key r was authenticated with, or nil.
func keyOf(ctx context.Context) *auth.Key {
	k, _ := ctx.Value(authKey{}).(*auth.Key)
	return k
}

// authenticator is the API-key middleware's state.
type authenticator struct {
	a        *api
	mux      *chi.Mux
	throttle *failThrottle
	results  *prometheus.CounterVec // tenant, result
	version  atomic.Pointer[string] // of the key set the labels were pruned for
	seen     sync.Map               // tenant labels counted since
}

func (a *api) newAuthenticator(mux *chi.Mux, reg prometheus.Registerer) *authenticator {
	c := a.cfg.Auth
	if c.FailBurst <= 0 {
		c.FailBurst = 10
	}
	if c.FailWindow <= 0 {
		c.FailWindow = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	a.cfg.Auth = c
	au := &authenticator{a: a, mux: mux, throttle: newFailThrottle(c.FailBurst, c.FailWindow, c.Now),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_auth_requests_total",
			Help: "Requests to the /v1 API by tenant (only tenants of the keys file; \"-\" for none) and result: ok, public, unauthenticated, forbidden, throttled, quota_exceeded.",
		}, []string{"tenant", "result"})}
	reg.MustRegister(au.results)
	return au
}

// keys returns the active key set, nil when authentication is off.
func (au *authenticator) keys() *auth.KeySet {
	if au.a.cfg.Auth.Keys == nil {
		return nil
	}
	return au.a.cfg.Auth.Keys()
}

// middleware requires an API key on the /v1 API when a key set is active:
// 401 without a valid one (429 once its address failed too often), 400
// for a release whose ?force= cannot be read, 403 without the route's
// scope or for a name the key may not use, 429 quota-exceeded past the
// tenant's request rate. The request then acts for the key's tenant (see
// store.WithTenant). A request no route serves gets the router's 404 or
// 405, with or without a key.
func (au *authenticator) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		set := au.keys()
		if set == nil || !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		au.pruneLabels(set)
		if err := au.authorize(w, r, set, next); err != nil {
			writeError(w, r, au.a.log, err)
		}
	})
}

// routeContexts are the route contexts authorize finds routes with, kept
// for the next request: a fresh one costs several allocations per request.
var routeContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

func (au *authenticator) authorize(w http.ResponseWriter, r *http.Request, set *auth.KeySet, next http.Handler) error {
	rctx := routeContexts.Get().(*chi.Context)
	rctx.Reset()
	defer routeContexts.Put(rctx)
	pattern := au.mux.Find(rctx, r.Method, routePath(r))
	if _, gate := gatePolicy(r.URL.Path); pattern == "" && !gate {
		// No route: the router answers 404 or 405 whoever asks (the
		// routes are public, in the OpenAPI document), and spends nothing.
		next.ServeHTTP(w, r)
		return nil
	}
	scope, policy, badForce := au.routeScope(r, pattern, rctx)
	if policy != "" && set.PublicGate(policy) {
		au.count(nil, "public")
		next.ServeHTTP(w, r)
		return nil
	}
	client, _ := au.a.cfg.RateLimit.ClientIP.ClientKey(r)
	if wait, ok := au.throttle.throttled(client); ok {
		au.count(nil, "throttled")
		w.Header().Set("Retry-After", retryAfterSeconds(wait))
		return &httpError{typ: rateLimited, detail: "too many failed authentications from this client; retry after " + retryAfterSeconds(wait) + "s"}
	}
	header, err := singleHeader(r, "Authorization")
	if err != nil {
		return err
	}
	if header == "" {
		au.count(nil, "unauthenticated")
		return &httpError{typ: unauthenticated, challenge: bearerChallenge,
			detail: "this server requires an API key: send it as Authorization: Bearer KEY"}
	}
	secret, ok := auth.ParseBearer(header)
	key := (*auth.Key)(nil)
	if ok {
		key = set.Lookup(secret)
	}
	if key == nil {
		au.throttle.fail(client)
		au.count(nil, "unauthenticated")
		return &httpError{typ: unauthenticated, challenge: bearerChallenge + `, error="invalid_token"`,
			detail: "the API key is not valid: unknown, revoked, or not sent as Authorization: Bearer KEY"}
	}
	tenant := key.Tenant
	h, err := singleHeader(r, TenantHeader)
	if err != nil {
		return err
	}
	if h != "" {
		if tenant != nil {
			au.count(tenant, "forbidden")
			return &httpError{typ: forbidden, detail: "a tenant's key acts for its own tenant only: leave out the " + TenantHeader + " header"}
		}
		if tenant = set.Tenant(h); tenant == nil {
			au.count(nil, "forbidden")
			return &httpError{typ: forbidden, detail: "the " + TenantHeader + " header names no tenant of the keys file"}
		}
	}
	if badForce != nil {
		// Authenticated, but the request does not say which scope it
		// needs: it is refused as the release would refuse it.
		au.count(tenant, "ok")
		return badForce
	}
	if !key.Has(scope) {
		au.count(tenant, "forbidden")
		return lacksScope(key, scope)
	}
	if name, ok := routeName(rctx); ok && !key.MayName(name) {
		au.count(tenant, "forbidden")
		return &httpError{typ: forbidden,
			detail: "key " + key.ID + " may only use the names " + strings.Join(key.Names, ", ")}
	}
	ctx := context.WithValue(r.Context(), authKey{}, key)
	if tenant != nil {
		ctx = store.WithTenant(ctx, tenant.Name)
		if err := au.requestQuota(ctx, tenant); err != nil {
			au.count(tenant, "quota_exceeded")
			return err
		}
	}
	au.count(tenant, "ok")
	r = r.WithContext(ctx)
	if scope != auth.ScopeAdmin {
		next.ServeHTTP(w, r)
		return nil
	}
	ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
	next.ServeHTTP(ww, r)
	name, _ := routeName(rctx)
	au.a.log.LogAttrs(r.Context(), slog.LevelInfo, "admin action",
		slog.String("request_id", requestIDOf(r.Context())),
		slog.String("key_id", key.ID),
		slog.String("tenant", tenantName(tenant)),
		slog.String("method", r.Method),
		slog.String("route", pattern),
		slog.String("name", name),
		slog.Int("status", ww.Status()))
	return nil
}

// routeScope is the scope a routed request (or a gate request of any
// method) needs, and the gate's policy when it is a gate request. A
// release's ?force= is read by forceParam, as the release itself reads it:
// force=true needs admin. Returns forceParam's error when it refuses the
// force, with the route's own scope.
func (au *authenticator) routeScope(r *http.Request, pattern string, rctx *chi.Context) (auth.Scope, string, error) {
	if pattern == "" {
		policy, _ := gatePolicy(r.URL.Path) // the gate answers every method (see NewRouter)
		return auth.ScopeRateLimitGate, policy, nil
	}
	scope, ok := routeScopeIndex[routeKey{r.Method, pattern}]
	if !ok {
		scope, ok = routeScopeIndex[routeKey{"*", pattern}]
	}
	if !ok {
		return auth.ScopeAdmin, "", nil
	}
	if scope == auth.ScopeRateLimitGate {
		return scope, rctx.URLParam("policy"), nil
	}
	if r.Method == http.MethodDelete {
		forced, err := forceParam(r)
		if err != nil {
			return scope, "", err
		}
		if forced {
			return auth.ScopeAdmin, "", nil
		}
	}
	return scope, "", nil
}

// lacksScope is the forbidden error of a key without the scope a request
// needs, its challenge naming the scope (RFC 6750's insufficient_scope).
func lacksScope(key *auth.Key, scope auth.Scope) error {
	return &httpError{typ: forbidden, challenge: bearerChallenge + `, error="insufficient_scope", scope="` + string(scope) + `"`,
		detail: "key " + key.ID + " lacks the scope " + string(scope) + " this request needs"}
}

// routeName is the {name} a route names, decoded as lockName decodes it.
func routeName(rctx *chi.Context) (string, bool) {
	for i, k := range rctx.URLParams.Keys {
		if k == "name" {
			name := rctx.URLParams.Values[i]
			if d, err := url.PathUnescape(name); err == nil {
				name = d
			}
			return name, true
		}
	}
	return "", false
}

// quotaPolicyName names the tenant's request-rate bucket. Configured
// policy names start with a letter or digit, so none is this one.
const quotaPolicyName = "_quota"

// requestQuota spends one token of the tenant's request-rate bucket: a
// token bucket of requests_per_second tokens refilled per second, in Redis
// under the tenant's prefix, so every instance spends from the same bucket.
// When Redis does not answer the request goes on (it will meet the outage
// itself). Returns a *store.QuotaError when the bucket is empty.
func (au *authenticator) requestQuota(ctx context.Context, t *auth.Tenant) error {
	rps := t.Quotas.RequestsPerSecond
	if rps <= 0 {
		return nil
	}
	d, err := au.a.svc.Check(ctx, ratelimit.Request{Key: "requests", Using: ratelimit.Policy{
		Name: quotaPolicyName, Key: "const", DenyStatus: http.StatusTooManyRequests, Fail: ratelimit.FailOpen,
		Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: rps, Window: time.Second},
	}})
	if err != nil || d.Allowed {
		return nil
	}
	return &store.QuotaError{Quota: "requests_per_second", Limit: rps, RetryAfter: d.RetryAfter}
}

func tenantName(t *auth.Tenant) string {
	if t == nil {
		return ""
	}
	return t.Name
}

func (au *authenticator) count(t *auth.Tenant, result string) {
	label := "-"
	if t != nil {
		label = t.Name // only ever a tenant of the keys file
		if _, ok := au.seen.Load(label); !ok {
			au.seen.Store(label, true)
		}
	}
	au.results.WithLabelValues(label, result).Inc()
}

// pruneLabels drops the series of tenants a reload removed, once per set.
func (au *authenticator) pruneLabels(set *auth.KeySet) {
	v := set.Version()
	if p := au.version.Load(); p != nil && *p == v {
		return
	}
	au.version.Store(&v)
	au.seen.Range(func(t, _ any) bool {
		if set.Tenant(t.(string)) == nil {
			au.results.DeletePartialMatch(prometheus.Labels{"tenant": t.(string)})
			au.seen.Delete(t)
		}
		return true
	})
}
