package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/latchkey/latchkey/grpcapi"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

// GRPCFlags configure Envoy's rate-limit service over gRPC.
type GRPCFlags struct {
	Addr            string
	EnvoyConfig     string
	ResponseHeaders bool
	CallTimeout     time.Duration
	MaxMessageBytes int
	ReloadInterval  time.Duration
}

func (f *GRPCFlags) register(e *envFlags) {
	e.str(&f.Addr, "grpc-addr", "LATCHKEY_GRPC_ADDR", "", "serve Envoy's rate-limit service (envoy.service.ratelimit.v3 ShouldRateLimit), gRPC health and reflection on this address; empty: off")
	e.str(&f.EnvoyConfig, "envoy-config", "LATCHKEY_ENVOY_CONFIG", "", "envoyproxy/ratelimit configuration: a YAML file, or a directory of them (one domain per file); reloaded on SIGHUP and every -ratelimit-reload-interval")
	e.boolean(&f.ResponseHeaders, "grpc-response-headers", "LATCHKEY_GRPC_RESPONSE_HEADERS", false, "add x-ratelimit-limit, -remaining and -reset to ShouldRateLimit answers (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED)")
	e.dur(&f.CallTimeout, "grpc-call-timeout", "LATCHKEY_GRPC_CALL_TIMEOUT", time.Second, "longest a gRPC call may take, whatever deadline its client sets")
	e.integer(&f.MaxMessageBytes, "grpc-max-message-bytes", "LATCHKEY_GRPC_MAX_MESSAGE_BYTES", 64<<10, "largest gRPC request accepted")
	e.dur(&f.ReloadInterval, "envoy-config-reload-interval", "LATCHKEY_ENVOY_CONFIG_RELOAD_INTERVAL", 5*time.Second, "how often to reload -envoy-config (SIGHUP reloads it at once); 0 leaves it to SIGHUP")
}

// grpcDeps is what the gRPC server is built on.
type grpcDeps struct {
	limits  *ratelimit.Service
	keys    func() *auth.KeySet
	tls     *tls.Config
	cluster bool
	reg     prometheus.Registerer
	log     *slog.Logger
}

// grpcServer stops the gRPC server, if any.
type grpcServer struct{ s *grpcapi.Server }

func (g grpcServer) stop(ctx context.Context) {
	if g.s != nil {
		g.s.GracefulStop(ctx)
	}
}

// serve starts the gRPC server when -grpc-addr is set, sending its end on
// errc, and the envoy configuration's reloader. The returned func stops the
// reloader.
func (f GRPCFlags) serve(ctx context.Context, d grpcDeps, errc chan<- error) (grpcServer, func(), error) {
	if f.Addr == "" {
		if f.EnvoyConfig != "" {
			return grpcServer{}, nil, fmt.Errorf("-envoy-config needs -grpc-addr: only the gRPC service reads it")
		}
		return grpcServer{}, func() {}, nil
	}
	conf := func() *grpcapi.EnvoyConfig { return nil }
	stop := func() {}
	if f.EnvoyConfig != "" {
		r, err := grpcapi.NewReloader(f.EnvoyConfig, d.limits.ValidateLimit, d.reg, d.log)
		if err != nil {
			return grpcServer{}, nil, fmt.Errorf("-envoy-config: %w", err)
		}
		conf = r.Current
		rctx, cancel := context.WithCancel(ctx)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		done := make(chan struct{})
		go func() { defer close(done); r.Run(rctx, f.ReloadInterval, hup) }()
		stop = func() { signal.Stop(hup); cancel(); <-done }
	}
	s := grpcapi.New(d.limits, conf, grpcapi.Config{TLS: d.tls, Keys: d.keys, MaxMessageBytes: f.MaxMessageBytes,
		CallTimeout: f.CallTimeout, ResponseHeaders: f.ResponseHeaders, Cluster: d.cluster, Logger: d.log})
	ln, err := net.Listen("tcp", f.Addr)
	if err != nil {
		stop()
		return grpcServer{}, nil, fmt.Errorf("-grpc-addr: %w", err)
	}
	d.log.Info("grpc listening", "addr", ln.Addr().String(), "tls", d.tls != nil)
	go func() {
		if err := s.Serve(ln); err != nil {
			errc <- fmt.Errorf("grpc: %w", err)
		}
	}()
	return grpcServer{s: s}, stop, nil
}
