// Package grpcapi serves Envoy's rate-limit protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over gRPC,
// configured in envoyproxy/ratelimit's YAML format, on the same decisions,
// counters and API keys as the HTTP API.
package grpcapi

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/latchkey/latchkey/service/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// Config configures the gRPC server. Zero values take the defaults.
type Config struct {
	// TLS, when set, serves TLS (mTLS when it requires client certificates),
	// as the HTTP server does.
	TLS *tls.Config
	// Keys returns the active API keys; nil (or a nil set) serves without.
	Keys func() *auth.KeySet
	// MaxMessageBytes bounds a request's size. Default 64 KiB.
	MaxMessageBytes int
	// CallTimeout bounds every call, whatever deadline its client sets.
	// Default 1s.
	CallTimeout time.Duration
	// ResponseHeaders adds x-ratelimit-limit, -remaining and -reset to
	// every answer, as envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED.
	ResponseHeaders bool
	// Cluster says the store is a Redis Cluster: one request's rules are
	// decided one slot at a time.
	Cluster bool
	Logger  *slog.Logger
	// Now is the clock that places the domain's fixed windows on the epoch
	// (envoyproxy/ratelimit reads its own clock too). Default time.Now.
	Now func() time.Time
}

// Server is the gRPC rate-limit service.
type Server struct {
	pb.UnimplementedRateLimitServiceServer
	cfg    Config
	rl     RateLimits
	envoy  func() *EnvoyConfig
	grpc   *grpc.Server
	health *health.Server
}

// New returns the server deciding with rl under the envoy configuration
// conf returns (nil: none, every descriptor OK).
func New(rl RateLimits, conf func() *EnvoyConfig, cfg Config) *Server {
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 64 << 10
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, rl: rl, envoy: conf, health: health.NewServer()}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxConcurrentStreams(1024),
		grpc.ChainUnaryInterceptor(s.deadline, s.authenticate),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.grpc = grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// Serve serves on ln until GracefulStop.
func (s *Server) Serve(ln net.Listener) error { return s.grpc.Serve(ln) }

// GracefulStop stops taking calls, answers NOT_SERVING to health checks and
// waits for the calls in flight, or until ctx ends, then stops them.
func (s *Server) GracefulStop(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}

// ShouldRateLimit decides a request of Envoy's rate-limit filter.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return s.decide(ctx, s.envoy(), req)
}

// deadline bounds every call by CallTimeout.
func (s *Server) deadline(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	return h(ctx, req)
}
