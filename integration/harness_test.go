package integration

// The harness: one builder of test servers (newTestEnv and its options).
// Requests and assertions are in harness_http_test.go, readers of Redis
// state in harness_redis_test.go.

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// testAdminKey is the admin credential of every test server.
const testAdminKey = "test-admin-key-0123456789"

// testEnv is one Latchkey server over HTTP on a real Redis, with its own
// key prefix so tests sharing a Redis never see each other's keys.
type testEnv struct {
	URL      string                // base URL of the server
	Client   *http.Client          // checks every response against api/openapi.yaml
	RDB      redis.UniversalClient // a cluster client in the cluster pass
	RedisURL string
	Prefix   string
	Svc      *services

	// Keys are the server's API keys (withKeysFile); nil: the API is open.
	Keys *auth.Keys

	srv         *httptest.Server
	stopRenewer func()
}

// envConfig is what newTestEnv builds: set through envOptions.
type envConfig struct {
	svc    serviceConfig
	router handlers.Config
	server func(*http.Server) // adjusts the HTTP server before it starts
	tls    *tls.Config        // serve HTTPS with it (withTLS); nil: plain HTTP

	rdb        redis.UniversalClient // reads Redis for the test; nil: a fresh Redis (newRedis)
	url        string
	noRedis    bool                                                 // the env has no Redis of its own (unreachable)
	serverAddr string                                               // where the service's own client dials ("": the env's Redis)
	serverTO   time.Duration                                        // > 0: the service has its own client, configured as cmd/server's
	wrap       func(testing.TB, redis.UniversalClient) store.Client // wraps the service's client
	noLoad     bool                                                 // scripts are not loaded at start-up
	renewer    bool                                                 // the keep-alive renewer runs
	keysFile   string                                               // the API keys file ("": none)
	cluster    bool                                                 // url is a Redis Cluster's seed URL
}

// envOption adjusts a server built by newTestEnv.
type envOption func(*envConfig)

// newTestEnv starts, for t, a Latchkey server with the harness's defaults (a
// fresh Redis, a unique key prefix, a private metrics registry, the test
// admin key, the scripts loaded as at a normal start-up) adjusted by opts.
// Its service is closed and its server shut when t ends.
func newTestEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := envConfig{
		svc:    serviceConfig{storeConfig: storeConfig{KeyPrefix: uniquePrefix(), Registerer: reg}, RateLimit: ratelimit.DefaultConfig()},
		router: handlers.Config{Logger: slog.New(slog.DiscardHandler), Registry: reg, AdminKey: testAdminKey, Store: "redis"},
	}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.rdb == nil && c.cluster:
		c.rdb = newClusterClient(t, c.url)
	case c.rdb == nil && c.url != "":
		c.rdb = newClient(t, c.url)
	case c.rdb == nil && !c.noRedis:
		c.rdb, c.url = newRedis(t)
	}
	base := c.rdb
	cc, cluster := c.rdb.(*redis.ClusterClient)
	switch {
	case cluster && c.serverAddr == "":
		// The service has its own cluster client, as cmd/server would.
		c.svc.storeConfig.Cluster = true
		if c.serverTO > 0 {
			c.svc.OpTimeout = c.serverTO
		}
		base = clusterServerClient(t, cc.Options(), cmp.Or(c.svc.OpTimeout, store.DefaultConfig().OpTimeout))
	case c.serverTO > 0:
		addr := c.serverAddr
		if addr == "" {
			addr = c.rdb.(*redis.Client).Options().Addr
		}
		c.svc.OpTimeout = c.serverTO
		base = serverClient(t, addr, c.serverTO)
	}
	var client store.Client = base
	if c.wrap != nil {
		client = c.wrap(t, base)
	}
	var keys *auth.Keys
	if c.keysFile != "" {
		var err error
		keys, err = auth.LoadKeys(auth.KeysConfig{Path: c.keysFile, Read: func() ([]byte, error) { return os.ReadFile(c.keysFile) },
			Logger: c.router.Logger, Registerer: c.svc.storeConfig.Registerer})
		if err != nil {
			t.Fatalf("keys file: %v", err)
		}
		c.router.Auth.Keys = keys.Current
		c.svc.Quotas = func(tenant string) locks.Quota { // as cmd/server's tenantQuotas
			q := keys.Current().Tenant(tenant)
			if q == nil {
				return locks.Quota{}
			}
			return locks.Quota{Leases: q.Quotas.Leases, Waiters: q.Quotas.Waiters}
		}
	}
	svc := newServices(t, client, c.svc)
	t.Cleanup(func() { _ = svc.Close() })
	if !c.noLoad {
		if err := svc.LoadScripts(t.Context()); err != nil {
			t.Fatalf("load scripts: %v", err)
		}
	}
	srv := httptest.NewUnstartedServer(handlers.NewRouter(svc.lockService, svc.limitService, c.router))
	srv.Listener = handlers.ProblemListener(srv.Listener, c.router.Logger) // as cmd/server serves plain HTTP
	if c.server != nil {
		c.server(srv.Config)
	}
	if c.tls != nil {
		srv.TLS = c.tls
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	e := &testEnv{URL: srv.URL, Client: newSpecClient(t), RDB: c.rdb, RedisURL: c.url, Prefix: c.svc.KeyPrefix, Svc: svc, srv: srv, Keys: keys}
	e.stopRenewer = func() {}
	if c.renewer {
		e.stopRenewer = startRenewer(t, svc)
	}
	return e
}

// remoteEnv is a testEnv for a Latchkey server running elsewhere (a
// container) at url: requests only, no Redis, no service, nothing to kill.
func remoteEnv(t testing.TB, url string) *testEnv {
	t.Helper()
	return &testEnv{URL: url, Client: newSpecClient(t)}
}

// kill stops the server the hard way, as a crash would: its renewer is
// cancelled mid-flight and every connection cut, nothing drained.
func (e *testEnv) kill() {
	e.stopRenewer()
	e.srv.CloseClientConnections()
	e.srv.Close()
}

func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "lktest:" + hex.EncodeToString(b[:]) + ":"
}

// beside makes the server another instance of e's deployment: the same
// Redis and key prefix.
func beside(e *testEnv) envOption {
	return func(c *envConfig) { c.rdb, c.url, c.svc.KeyPrefix = e.RDB, e.RedisURL, e.Prefix }
}

// withKeysFile requires the API keys of the keys file at path (reloaded
// when the test calls e.Keys.Reload).
func withKeysFile(path string) envOption {
	return func(c *envConfig) { c.keysFile = path }
}

// withPrefix sets the key prefix (instances of one deployment share it).
func withPrefix(prefix string) envOption {
	return func(c *envConfig) { c.svc.KeyPrefix = prefix }
}

// withRedis runs the server on the Redis at url.
func withRedis(url string) envOption {
	return func(c *envConfig) { c.url = url }
}

// withCluster runs the server on the Redis Cluster at the seed URL url,
// through a cluster client of its own; the env's RDB is a cluster client
// too.
func withCluster(url string) envOption {
	return func(c *envConfig) { c.url, c.cluster = url, true }
}

// withRedisClient runs the server on the Redis at url through rdb, which
// the test also reads Redis with. In the cluster pass the server has its
// own cluster client on url (rdb's when url is "").
func withRedisClient(rdb redis.UniversalClient, url string) envOption {
	return func(c *envConfig) { c.rdb, c.url = rdb, url }
}

// withServerClient gives the service a client of its own, configured as
// cmd/server configures its own (every bound the Redis timeout d, request
// deadlines reach the socket, no automatic resend), and the Redis timeout d.
// The env's RDB stays a plain client for inspecting Redis.
func withServerClient(d time.Duration) envOption {
	return func(c *envConfig) { c.serverTO = d }
}

// withServerAddr points the service's own client (withServerClient) at
// addr, e.g. a proxy in front of the env's Redis.
func withServerAddr(addr string) envOption {
	return func(c *envConfig) { c.serverAddr = addr }
}

// unreachable serves from a Redis at addr that cannot be used (nothing
// listens, or it never answers), as cmd/server does when Redis cannot be
// reached at start-up: the scripts are not loaded and it serves 503 until
// Redis answers. The env has no RDB. Use with withServerClient.
func unreachable(addr string) envOption {
	return func(c *envConfig) { c.serverAddr, c.noRedis, c.noLoad = addr, true, true }
}

// unloaded starts the server without loading the scripts: the test loads
// them itself, or sees them loaded on first use.
func unloaded() envOption {
	return func(c *envConfig) { c.noLoad = true }
}

// withClient wraps the client the service uses (the env's RDB, or its own
// from withServerClient).
func withClient(wrap func(testing.TB, redis.UniversalClient) store.Client) envOption {
	return func(c *envConfig) { c.wrap = wrap }
}

// withClientOf wraps the service's client with wrap, which needs no t.
func withClientOf(wrap func(redis.UniversalClient) store.Client) envOption {
	return withClient(func(_ testing.TB, rdb redis.UniversalClient) store.Client { return wrap(rdb) })
}

// withRenewer runs the service's keep-alive renewer, polling every poll (0:
// the default), until t ends or the env is killed.
func withRenewer(poll time.Duration) envOption {
	return func(c *envConfig) {
		c.renewer = true
		if poll > 0 {
			c.svc.RenewPoll = poll
		}
	}
}

// withServiceConfig adjusts the services' config.
func withServiceConfig(f func(*serviceConfig)) envOption {
	return func(c *envConfig) { f(&c.svc) }
}

// withRouterConfig adjusts the router's config.
func withRouterConfig(f func(*handlers.Config)) envOption {
	return func(c *envConfig) { f(&c.router) }
}

// withHTTPServer adjusts the HTTP server (its timeouts) before it starts.
func withHTTPServer(f func(*http.Server)) envOption {
	return func(c *envConfig) { c.server = f }
}

// withTLS serves HTTPS with cfg (its certificate, and for mTLS its client
// CAs and ClientAuth); the env's URL is then https://. The env's own
// clients do not trust cfg's certificate: the test brings its own.
func withTLS(cfg *tls.Config) envOption {
	return func(c *envConfig) { c.tls = cfg }
}

// withOpTimeout sets the Redis timeout of the service.
func withOpTimeout(d time.Duration) envOption {
	return withServiceConfig(func(s *serviceConfig) { s.OpTimeout = d })
}

// withAdminKey sets the router's admin key ("" disables admin actions).
func withAdminKey(key string) envOption {
	return withRouterConfig(func(h *handlers.Config) { h.AdminKey = key })
}

// withPolicies configures named rate-limit policies.
func withPolicies(ps ...ratelimit.Policy) envOption {
	return withServiceConfig(func(s *serviceConfig) {
		s.RateLimit.Policies = append(s.RateLimit.Policies, ps...)
		s.RateLimit.AllowInline = true
	})
}

// withTrustedProxies makes the given CIDRs trusted forwarders.
func withTrustedProxies(cidrs ...string) envOption {
	return withRouterConfig(func(h *handlers.Config) {
		for _, c := range cidrs {
			h.RateLimit.ClientIP.TrustedProxies = append(h.RateLimit.ClientIP.TrustedProxies, netip.MustParsePrefix(c))
		}
	})
}

// startRenewer runs svc's renewer until t ends or the returned function is
// called; either way it waits for the renewer to return.
func startRenewer(t testing.TB, svc interface{ RunRenewer(context.Context) }) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunRenewer(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

type (
	storeConfig  = store.Config
	locksConfig  = locks.Config
	lockService  = locks.Service
	limitService = ratelimit.Service
)

// serviceConfig configures the services of a test server, as cmd/server
// does: the store's fields (KeyPrefix, OpTimeout, ...) and the locks' (MaxWait,
// RenewPoll, ...) are promoted; Registerer is set for all three by
// newServices.
type serviceConfig struct {
	storeConfig
	locksConfig
	RateLimit ratelimit.Config
}

// services are the store and the two domains of a test server, their
// methods promoted (the store's LoadScripts, the locks' Acquire, ...).
type services struct {
	*store.Store
	*lockService
	*limitService
}

// newServices builds the store and both domains on client, as cmd/server
// does.
func newServices(t testing.TB, client store.Client, cfg serviceConfig) *services {
	t.Helper()
	cfg.locksConfig.Registerer = cfg.storeConfig.Registerer // one registry, as in cmd/server
	cfg.RateLimit.Registerer = cfg.storeConfig.Registerer
	st, err := store.New(client, cfg.storeConfig)
	if err != nil {
		t.Fatalf("store.New: %v", err)
	}
	lk, err := locks.New(st, cfg.locksConfig)
	if err != nil {
		t.Fatalf("locks.New: %v", err)
	}
	rl, err := ratelimit.New(st, cfg.RateLimit)
	if err != nil {
		t.Fatalf("ratelimit.New: %v", err)
	}
	return &services{Store: st, lockService: lk, limitService: rl}
}

// serverClient returns a go-redis client for addr configured as cmd/server
// configures its own (openStore): every timeout is the Redis timeout, request
// deadlines reach the socket, no automatic resend.
func serverClient(t testing.TB, addr string, timeout time.Duration) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:                  addr,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolTimeout:           timeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// pipelinedClient wraps rdb as cmd/server does by default (-redis-pipeline):
// a single node's client pipelines script calls, a cluster client one
// pipeline per primary.
func pipelinedClient(t testing.TB, rdb redis.UniversalClient) store.Client {
	t.Helper()
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return store.NewClusterPipelinedClient(cc, 0)
	}
	node, ok := rdb.(*redis.Client)
	if !ok {
		return rdb
	}
	pc, err := store.NewPipelinedClient(node, 0)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// serverClients are the two ways cmd/server talks to Redis: one command per
// call, or script calls pipelined (its default).
var serverClients = []struct {
	name string
	wrap func(testing.TB, redis.UniversalClient) store.Client
}{
	{"plain", func(_ testing.TB, rdb redis.UniversalClient) store.Client { return rdb }},
	{"pipelined", pipelinedClient},
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// policy is a rate-limit policy of the given algorithm, limit and window.
func policy(name string, alg ratelimit.Algorithm, limit int64, window time.Duration) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Limit: ratelimit.Limit{Algorithm: alg, Limit: limit, Window: window}}
}
