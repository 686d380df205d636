package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

// RateLimitFlags are the rate-limit settings.
type RateLimitFlags struct {
	PoliciesFile     string
	ReloadInterval   time.Duration
	DefaultLimit     int64
	DefaultWindow    time.Duration
	DefaultAlgorithm string
	AllowInline      bool
	Timeout          time.Duration
	CacheSize        int
	ClusterBuckets   int
	LogInterval      time.Duration
	LegacyHeaders    bool
	SelfPolicy       string
	AnonymousLimit   int64
	AnonymousWindow  time.Duration
	TrustedProxies   string
	RealIP           bool
	IPv6Prefix       int
}

func (f *RateLimitFlags) register(e *envFlags) {
	d := ratelimit.DefaultConfig()
	e.str(&f.PoliciesFile, "ratelimit-policies", "LATCHKEY_RATELIMIT_POLICIES", "", "YAML or JSON file of named rate-limit policies")
	e.dur(&f.ReloadInterval, "ratelimit-reload-interval", "LATCHKEY_RATELIMIT_RELOAD_INTERVAL", 5*time.Second, "how often to look for a changed policy file (SIGHUP reloads it at once); 0 leaves it to SIGHUP")
	e.int64(&f.DefaultLimit, "ratelimit-default-limit", "LATCHKEY_RATELIMIT_DEFAULT_LIMIT", 60, "limit of the per-IP policy named \"default\"; 0 leaves it out")
	e.dur(&f.DefaultWindow, "ratelimit-default-window", "LATCHKEY_RATELIMIT_DEFAULT_WINDOW", time.Minute, "window of the \"default\" policy")
	e.str(&f.DefaultAlgorithm, "ratelimit-default-algorithm", "LATCHKEY_RATELIMIT_DEFAULT_ALGORITHM", "fixed_window", "algorithm of the \"default\" policy: fixed_window, sliding_window or token_bucket")
	e.boolean(&f.AllowInline, "ratelimit-inline", "LATCHKEY_RATELIMIT_INLINE", true, "allow check requests to carry their own limit instead of a policy name")
	e.dur(&f.Timeout, "ratelimit-timeout", "LATCHKEY_RATELIMIT_TIMEOUT", d.Timeout, "bound on one decision's wait for Redis, its wait for a batch included; past it policies fail open or closed")
	e.integer(&f.CacheSize, "ratelimit-cache-size", "LATCHKEY_RATELIMIT_CACHE_SIZE", d.CacheSize, "entries in the in-process cache of keys over their limit; 0 disables it")
	e.integer(&f.ClusterBuckets, "ratelimit-cluster-buckets", "LATCHKEY_RATELIMIT_CLUSTER_BUCKETS", d.ClusterBuckets, "on a Redis Cluster, the hash-tag buckets each policy's single-limit counters are spread over (a multiple of the primaries, best the number of primaries itself: fewer buckets batch more; the same on every instance: a change restarts every window)")
	e.dur(&f.LogInterval, "ratelimit-log-interval", "LATCHKEY_RATELIMIT_LOG_INTERVAL", d.LogInterval, "at most one fail-open warning per interval")
	e.boolean(&f.LegacyHeaders, "ratelimit-legacy-headers", "LATCHKEY_RATELIMIT_LEGACY_HEADERS", false, "also send X-RateLimit-Limit, -Remaining and -Reset")
	e.str(&f.SelfPolicy, "ratelimit-self-policy", "LATCHKEY_RATELIMIT_SELF_POLICY", "", "policy applied per client IP to Latchkey's own /v1 API; empty disables it")
	e.int64(&f.AnonymousLimit, "ratelimit-anonymous-limit", "LATCHKEY_RATELIMIT_ANONYMOUS_LIMIT", 100, "without API keys or -ratelimit-self-policy: requests per -ratelimit-anonymous-window a client beyond loopback may make to the /v1 API (policy \"anonymous\"); 0 turns it off")
	e.dur(&f.AnonymousWindow, "ratelimit-anonymous-window", "LATCHKEY_RATELIMIT_ANONYMOUS_WINDOW", time.Second, "window of the \"anonymous\" policy")
	e.str(&f.TrustedProxies, "trusted-proxies", "LATCHKEY_TRUSTED_PROXIES", "", "comma-separated CIDRs whose X-Forwarded-For / X-Real-IP are believed")
	e.boolean(&f.RealIP, "real-ip", "LATCHKEY_REAL_IP", false, "take the client address from X-Real-IP sent by a trusted proxy")
	e.integer(&f.IPv6Prefix, "ipv6-prefix", "LATCHKEY_IPV6_PREFIX", 64, "IPv6 clients share a limit per network of this many bits (128: per address)")
}

func (f RateLimitFlags) validate() []error {
	var errs []error
	if f.DefaultLimit < 0 {
		errs = append(errs, fmt.Errorf("-ratelimit-default-limit must be 0 (off) or positive, got %d", f.DefaultLimit))
	}
	if f.AnonymousLimit < 0 {
		errs = append(errs, fmt.Errorf("-ratelimit-anonymous-limit must be 0 (off) or positive, got %d", f.AnonymousLimit))
	}
	if f.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-ratelimit-timeout must be positive, got %s", f.Timeout))
	}
	if f.ReloadInterval < 0 {
		errs = append(errs, fmt.Errorf("-ratelimit-reload-interval must be 0 (SIGHUP only) or positive, got %s", f.ReloadInterval))
	}
	if f.LogInterval <= 0 {
		errs = append(errs, fmt.Errorf("-ratelimit-log-interval must be positive, got %s", f.LogInterval))
	}
	if f.CacheSize < 0 || f.CacheSize > 10_000_000 {
		errs = append(errs, fmt.Errorf("-ratelimit-cache-size must be between 0 and 10000000, got %d", f.CacheSize))
	}
	if f.ClusterBuckets < 1 || f.ClusterBuckets > 16384 {
		errs = append(errs, fmt.Errorf("-ratelimit-cluster-buckets must be between 1 and 16384, got %d", f.ClusterBuckets))
	}
	if f.IPv6Prefix < 1 || f.IPv6Prefix > 128 {
		errs = append(errs, fmt.Errorf("-ipv6-prefix must be between 1 and 128, got %d", f.IPv6Prefix))
	}
	if _, err := handlers.ParseTrustedProxies(f.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("-trusted-proxies: %w", err))
	}
	return errs
}

// load returns the rate-limit settings with the policies the flags give
// (the default per-IP policy) and checks them, so a bad one stops start-up
// with a message naming it. The policy file's policies join them in
// watchPolicies, once the Service exists.
func (f RateLimitFlags) load(log *slog.Logger) (ratelimit.Config, handlers.RateLimitConfig, error) {
	policies := f.withDefaultPolicy(nil)
	srl := ratelimit.Config{Policies: policies, AllowInline: f.AllowInline, Timeout: f.Timeout,
		CacheSize: f.CacheSize, ClusterBuckets: f.ClusterBuckets, LogInterval: f.LogInterval, Logger: log}
	if err := srl.Validate(); err != nil {
		return ratelimit.Config{}, handlers.RateLimitConfig{}, fmt.Errorf("rate-limit policies (the default policy (-ratelimit-default-*), the anonymous policy (-ratelimit-anonymous-*)): %w", err)
	}
	if f.PoliciesFile == "" {
		if err := f.checkSelfPolicy(policies); err != nil {
			return ratelimit.Config{}, handlers.RateLimitConfig{}, err
		}
	}
	trusted, _ := handlers.ParseTrustedProxies(f.TrustedProxies) // checked by validate
	hrl := handlers.RateLimitConfig{
		ClientIP:      handlers.ClientIPConfig{TrustedProxies: trusted, UseRealIP: f.RealIP, IPv6Prefix: f.IPv6Prefix},
		LegacyHeaders: f.LegacyHeaders, SelfPolicy: f.SelfPolicy,
	}
	if f.AnonymousLimit > 0 {
		hrl.AnonymousPolicy = anonymousPolicyName
	}
	return srl, hrl, nil
}

// anonymousPolicyName names the policy that protects an open API from
// anonymous callers beyond loopback (handlers.RateLimitConfig.AnonymousPolicy).
const anonymousPolicyName = "anonymous"

// withDefaultPolicy adds the per-IP policy named "default" unless ps has
// one or it is turned off, and likewise the "anonymous" policy.
func (f RateLimitFlags) withDefaultPolicy(ps []ratelimit.Policy) []ratelimit.Policy {
	if f.DefaultLimit > 0 && !hasPolicy(ps, ratelimit.DefaultPolicyName) {
		ps = append(ps, ratelimit.Policy{Name: ratelimit.DefaultPolicyName, Key: "ip",
			Limit: ratelimit.Limit{Algorithm: ratelimit.Algorithm(f.DefaultAlgorithm), Limit: f.DefaultLimit, Window: f.DefaultWindow}})
	}
	if f.AnonymousLimit > 0 && !hasPolicy(ps, anonymousPolicyName) {
		ps = append(ps, ratelimit.Policy{Name: anonymousPolicyName, Key: "ip",
			Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: f.AnonymousLimit, Window: f.AnonymousWindow}})
	}
	return ps
}

// checkSelfPolicy refuses a set without the self-protection policy.
func (f RateLimitFlags) checkSelfPolicy(ps []ratelimit.Policy) error {
	if f.SelfPolicy != "" && !hasPolicy(ps, f.SelfPolicy) {
		return errors.New("-ratelimit-self-policy " + f.SelfPolicy + ": no such policy (known: " + policyNames(ps) + ")")
	}
	return nil
}

// watchPolicies makes the policy file's policies, completed (the default
// policy added, the self-protection policy required), the active set of
// limits, through the Reloader that keeps them in step with the file
// afterwards: a file that cannot be applied stops start-up with a message
// naming it. Then, until the returned function stops it, it reloads the file
// on SIGHUP and, every -ratelimit-reload-interval, when its contents
// changed; a bad file then keeps the active set and is logged. Without a
// policy file it only logs the active set.
func (f RateLimitFlags) watchPolicies(ctx context.Context, limits *ratelimit.Service, reg prometheus.Registerer, log *slog.Logger) (func(), error) {
	if f.PoliciesFile == "" {
		f.logPolicies(log, limits.ActivePolicies())
		return func() {}, nil
	}
	r, err := ratelimit.NewReloader(limits, ratelimit.ReloaderConfig{
		Path: f.PoliciesFile, Logger: log, Registerer: reg,
		Read: func() ([]byte, error) { return os.ReadFile(f.PoliciesFile) },
		Complete: func(ps []ratelimit.Policy) ([]ratelimit.Policy, error) {
			ps = f.withDefaultPolicy(ps)
			return ps, f.checkSelfPolicy(ps)
		},
	})
	if err != nil {
		return nil, err
	}
	set, err := r.Load()
	if err != nil {
		return nil, fmt.Errorf("-ratelimit-policies: %w", err)
	}
	f.logPolicies(log, set)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, f.ReloadInterval, hup) }()
	return func() { signal.Stop(hup); cancel(); <-done }, nil
}

// logPolicies logs the policies Latchkey starts with.
func (f RateLimitFlags) logPolicies(log *slog.Logger, set ratelimit.PolicySet) {
	log.Info("rate-limit policies", "policies", policyNames(set.Policies), "self_policy", f.SelfPolicy,
		"trusted_proxies", f.TrustedProxies, "inline", f.AllowInline)
}

func hasPolicy(ps []ratelimit.Policy, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

func policyNames(ps []ratelimit.Policy) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
