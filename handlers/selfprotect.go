package handlers

import (
	"net/http"
	"strings"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// selfProtect applies the self-protection policy, per client IP, to the /v1
// API except the gate (whose callers are gateways asking on behalf of many
// clients): SelfPolicy to every caller, or else AnonymousPolicy to anonymous
// callers beyond loopback (see RateLimitConfig). A denied caller gets 429
// rate-limited with the policy's headers.
func (a *api) selfProtect(next http.Handler) http.Handler {
	self, anonymous := a.cfg.RateLimit.SelfPolicy, a.cfg.RateLimit.AnonymousPolicy
	if self == "" && anonymous == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/v1/ratelimit/gate/") {
			next.ServeHTTP(w, r)
			return
		}
		ip, err := a.cfg.RateLimit.ClientIP.ClientIP(r)
		if err != nil {
			writeError(w, r, a.log, badRequest("client", "address", err.Error()))
			return
		}
		policy := self
		if policy == "" {
			if ip.IsLoopback() || !a.open() {
				next.ServeHTTP(w, r)
				return
			}
			policy = anonymous
		}
		d, err := a.svc.Check(r.Context(), ratelimit.Request{Policy: policy, Key: "api:" + a.cfg.RateLimit.ClientIP.Key(ip)})
		if err != nil {
			writeError(w, r, a.log, err)
			return
		}
		if d.WouldDeny {
			w.Header()[shadowHeader] = wouldDeny
		}
		if !d.Allowed {
			setRateLimitHeaders(w.Header(), d, a.cfg.RateLimit.LegacyHeaders)
			writeError(w, r, a.log, &httpError{typ: rateLimited,
				detail: "too many requests from this client; retry after " + retryAfterSeconds(d.RetryAfter) + "s"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// open reports whether the API is open: no key set is active, so every
// caller is anonymous.
func (a *api) open() bool {
	return a.cfg.Auth.Keys == nil || a.cfg.Auth.Keys() == nil
}
