// Command server runs Latchkey: distributed lock leases and rate-limit
// decisions over HTTP, with Redis as the single source of truth.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
)

// programName is what the server calls itself in its usage and errors: the
// command line client is latchkey.
const programName = "latchkey-server"

// errUsage marks a command line the server cannot parse: an unknown flag, a
// flag value that is not of its type, or an argument where none is taken.
// The process then exits 2, as the latchkey command does.
var errUsage = errors.New("usage")

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, programName+":", err)
		os.Exit(exitStatus(err))
	}
}

// exitStatus is the process's exit status after run returned err: 2 for a
// command line that cannot be parsed, 1 for any other error.
func exitStatus(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// run starts Latchkey and serves until ctx ends or SIGINT/SIGTERM arrives,
// then drains in-flight requests for up to the shutdown timeout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is written, nothing went wrong
	}
	if err != nil {
		return err
	}
	if cfg.Version {
		_, err := fmt.Fprintln(stdout, versionString())
		return err
	}
	if cfg.HealthCheck {
		tlsCfg, err := cfg.Auth.tlsConfig()
		if err != nil {
			return err
		}
		return healthCheck(ctx, cfg.Addr, tlsCfg, stdout)
	}
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	setRedisLogger(log)
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	rdb, guard, storeName, closeStore, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()

	serviceRL, handlersRL, err := cfg.RateLimit.load(log)
	if err != nil {
		return err
	}
	serviceRL = cfg.decisionBatching(serviceRL)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st, err := store.New(rdb, store.Config{
		KeyPrefix: cfg.KeyPrefix, OpTimeout: cfg.RedisTimeout, Registerer: reg,
		MinReplicas: cfg.MinReplicas, ReplicaTimeout: cfg.ReplicaTimeout,
	})
	if err != nil {
		return err
	}
	keys, stopKeys, err := cfg.Auth.loadKeys(ctx, cfg.AdminKey, reg, log)
	if err != nil {
		return err
	}
	defer stopKeys()
	lc := locks.DefaultConfig()
	lc.DefaultTTL, lc.MaxTTL, lc.MaxWait = cfg.DefaultTTL, cfg.MaxTTL, cfg.MaxWait
	lc.DefaultMaxHold, lc.MaxHoldCap = cfg.MaxHold, cfg.MaxHoldCap
	lc.FenceTTL, lc.RenewParallel = cfg.FenceRetention, cfg.RenewParallel
	lc.Registerer, lc.Quotas = reg, tenantQuotas(keys)
	lc.WatchResync = cfg.Watch.Resync
	svc, err := locks.New(st, lc)
	if err != nil {
		return err
	}
	defer func() { _ = svc.Close() }()
	serviceRL.Registerer = reg
	limits, err := ratelimit.New(st, serviceRL)
	if err != nil {
		return err
	}
	stopWatch, err := cfg.RateLimit.watchPolicies(ctx, limits, reg, log)
	if err != nil {
		return err
	}
	defer stopWatch()
	authCfg := cfg.Auth.handlersAuth(keys)
	tlsCfg, err := cfg.Auth.tlsConfig()
	if err != nil {
		return err
	}
	if err := st.LoadScripts(ctx); err != nil {
		if !errors.Is(err, store.ErrUnavailable) {
			return fmt.Errorf("start-up: %w", err)
		}
		msg := "redis is not reachable yet; serving 503 until it is"
		if errors.Is(err, syscall.ECONNREFUSED) {
			msg = "redis is not reachable yet: it refused the connection (is it running, and on this port?); serving 503 until it is"
		}
		log.Warn(msg, "err", err)
	} else {
		warnReplicas(ctx, st, log)
	}

	// stopping closes when shutdown begins: hold streams and waiting
	// acquires end then, instead of holding the shutdown up.
	stopping := make(chan struct{})
	var lk handlers.Locks = svc
	if guard != nil {
		lk = guardedLocks{Locks: svc, guard: guard}
	}
	router := handlers.NewRouter(lk, limits, handlers.Config{
		Logger: log, Registry: reg, AdminKey: cfg.AdminKey, MaxBodyBytes: cfg.MaxBodyBytes, Store: storeName,
		RateLimit: handlersRL,
		HoldPing:  cfg.HoldPing,
		WatchPing: cfg.Watch.Ping, WatchMaxStreams: cfg.Watch.MaxStreams, WatchMaxPerClient: cfg.Watch.MaxPerClient,
		Stopping: stopping,
		Auth:     authCfg,
	})
	srv := &http.Server{
		Handler:           router,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Requests must outlive the stop signal, or Shutdown could not drain
		// them: their context keeps ctx's values but not its cancellation.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		TLSConfig:   tlsCfg,
	}
	srv.RegisterOnShutdown(func() { close(stopping) })
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	} else {
		ln = handlers.ProblemListener(ln, log) // net/http's own refusals as problem+json
	}
	// The warning comes before "listening", so whoever waits for that line
	// (an operator, a supervisor, a test) has seen it too.
	cfg.Auth.warnOpen(cfg.Addr, log)
	log.Info("listening", "addr", ln.Addr().String(), "store", storeName, "tls", tlsCfg != nil,
		"mtls", tlsCfg != nil && tlsCfg.ClientCAs != nil, "api_keys", keys != nil)
	if cfg.PprofAddr != "" {
		stopPprof, err := servePprof(cfg.PprofAddr, log)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("-pprof-addr: %w", err)
		}
		defer stopPprof()
	}

	// The keep-alive renewer runs until run returns — through the drain of
	// in-flight requests after a stop signal, so no lease lapses meanwhile —
	// and stops before the Redis client closes.
	renewerCtx, stopRenewer := context.WithCancel(context.WithoutCancel(ctx))
	renewerDone := make(chan struct{})
	go func() { defer close(renewerDone); svc.RunRenewer(renewerCtx) }()
	defer func() { stopRenewer(); <-renewerDone }()
	// The sampler sets the gauges of what every instance holds
	// (latchkey_leases_held, latchkey_waiters, latchkey_keepalive_leases).
	samplerCtx, stopSampler := context.WithCancel(ctx)
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); svc.RunSampler(samplerCtx, locks.DefaultSampleEvery) }()
	defer func() { stopSampler(); <-samplerDone }()

	errc := make(chan error, 2)
	gs, stopEnvoy, err := cfg.GRPC.serve(ctx, grpcDeps{limits: limits, keys: authCfg.Keys, tls: tlsCfg, cluster: cfg.RedisCluster, reg: reg, log: log}, errc)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer stopEnvoy()
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// The gRPC calls in flight drain beside the HTTP requests, under the
	// same timeout.
	grpcDone := make(chan struct{})
	go func() { defer close(grpcDone); gs.stop(shutdownCtx) }()
	defer func() { <-grpcDone }()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// warnReplicas logs a warning when -redis-min-replicas asks for more
// replicas than a primary has connected: the server is not ready then, and
// every lock change would be a 503 until enough are.
func warnReplicas(ctx context.Context, st *store.Store, log *slog.Logger) {
	var short *store.ReplicasError
	if err := st.CheckReplicas(ctx); errors.As(err, &short) {
		log.Warn("fewer redis replicas connected than -redis-min-replicas requires: not ready, and every lock change gets 503 until enough are",
			"connected", short.Connected, "required", short.Required, "primary", short.Primary)
	}
}

// decisionBatching applies -redis-pipeline and -redis-max-queued to the
// rate-limit decisions: without pipelining each decision is a script call of
// its own.
func (c Config) decisionBatching(rl ratelimit.Config) ratelimit.Config {
	rl.MaxQueued = c.RedisMaxQueued
	if !c.RedisPipeline {
		rl.Batch = 1
	}
	return rl
}

// openStore connects to Redis (see openRedis), or starts the embedded store
// when no URL is configured. It returns the client, the guard that keeps
// /readyz from calling a cluster node taken for a single node ready (nil
// when there is nothing to guard), the store's name for /readyz and a
// function that closes both.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Client, *clusterGuard, string, func(), error) {
	name := "redis"
	url := cfg.RedisURL
	stopEmbedded := func() {}
	if url == "" {
		addr, stop, err := startEmbedded(ctx)
		if err != nil {
			return nil, nil, "", nil, err
		}
		url, name, stopEmbedded = "redis://"+addr, "embedded", stop
		log.Warn("no LATCHKEY_REDIS_URL: running on the embedded in-memory store; " +
			"state is lost on exit and not shared with other instances: use it to try Latchkey out, not in production")
	}
	rdb, guard, err := openRedis(ctx, url, cfg.RedisTimeout, cfg.RedisCluster, log)
	if err != nil {
		stopEmbedded()
		return nil, nil, "", nil, fmt.Errorf("-redis-url: %w", err)
	}
	closeAll := func() { _ = rdb.Close(); stopEmbedded() }
	if cc, ok := rdb.(*redis.ClusterClient); ok && cfg.RedisPipeline {
		// Lock scripts ride one pipeline per primary; rate-limit decisions
		// are batched per bucket's slot on the cluster client beneath.
		return store.NewClusterPipelinedClient(cc, cfg.RedisMaxQueued), guard, name, closeAll, nil
	}
	single, ok := rdb.(*redis.Client)
	if !cfg.RedisPipeline || !ok {
		return rdb, guard, name, closeAll, nil
	}
	pc, err := store.NewPipelinedClient(single, cfg.RedisMaxQueued)
	if err != nil {
		closeAll()
		return nil, nil, "", nil, err
	}
	return pc, guard, name, closeAll, nil
}
