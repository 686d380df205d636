package grpcapi

import (
	"context"
	"strings"

	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// authenticate requires, when API keys are on, an "authorization: Bearer
// KEY" metadata entry on ShouldRateLimit with a key of the ratelimit:gate
// scope, as the HTTP gate does, and makes the call act for the key's
// tenant. Health checks and reflection are open, as /healthz is.
func (s *Server) authenticate(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if s.cfg.Keys == nil || !strings.HasPrefix(info.FullMethod, "/envoy.service.ratelimit.") {
		return h(ctx, req)
	}
	set := s.cfg.Keys()
	if set == nil {
		return h(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return nil, status.Error(codes.Unauthenticated, "this server requires an API key: send it as authorization: Bearer KEY metadata, once")
	}
	secret, ok := auth.ParseBearer(vals[0])
	var key *auth.Key
	if ok {
		key = set.Lookup(secret)
	}
	if key == nil {
		return nil, status.Error(codes.Unauthenticated, "the API key is not valid: unknown, revoked, or not sent as authorization: Bearer KEY")
	}
	if !key.Has(auth.ScopeRateLimitGate) {
		return nil, status.Errorf(codes.PermissionDenied, "the API key lacks the %s scope", auth.ScopeRateLimitGate)
	}
	return h(store.WithTenant(ctx, key.TenantName()), req)
}
