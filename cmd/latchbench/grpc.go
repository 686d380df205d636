package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// benchEnvoyConfig is the envoy configuration -start serves on the gRPC
// port: one domain of three high-limit fixed windows, so the scenarios
// measure the decision path rather than denials.
const benchEnvoyConfig = `domain: bench
descriptors:
  - {key: remote_address, rate_limit: {unit: minute, requests_per_unit: 1000000000}}
  - {key: api_key, rate_limit: {unit: minute, requests_per_unit: 1000000000}}
  - {key: tenant, rate_limit: {unit: minute, requests_per_unit: 1000000000}}
`

// grpcScenarios are ShouldRateLimit with one descriptor and with three
// (one decision of three limits, one script), unary calls shared out over
// b.grpcConns HTTP/2 connections.
func (b *bench) grpcScenarios() []scenario {
	call := func(descriptors int) func(context.Context, *worker) {
		return func(ctx context.Context, w *worker) {
			n := w.next() % uint64(b.ips)
			ds := []*rlv3.RateLimitDescriptor{entry("remote_address", clientIP(n))}
			if descriptors == 3 {
				ds = append(ds, entry("api_key", fmt.Sprintf("key-%d", n)), entry("tenant", fmt.Sprintf("t-%d", n%100)))
			}
			c := b.grpc[w.id%len(b.grpc)]
			start := time.Now()
			r, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", Descriptors: ds})
			w.record(start, grpcStatus(r, err))
		}
	}
	return []scenario{
		{
			name:        "grpc1",
			description: "gRPC ShouldRateLimit, one descriptor (remote_address), over a few HTTP/2 connections",
			op:          call(1),
			setup:       dialGRPC,
		},
		{
			name:        "grpc3",
			description: "gRPC ShouldRateLimit, three descriptors (remote_address, api_key, tenant): one decision of three limits",
			op:          call(3),
			setup:       dialGRPC,
		},
	}
}

// entry is a descriptor of one entry.
func entry(key, value string) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}
}

// grpcStatus is a call's answer as the HTTP status the results count: 200
// for OK, 429 for OVER_LIMIT, 0 for a failed call.
func grpcStatus(r *pb.RateLimitResponse, err error) int {
	switch {
	case err != nil:
		return 0
	case r.OverallCode == pb.RateLimitResponse_OK:
		return 200
	default:
		return 429
	}
}

// dialGRPC opens b.grpcConns connections to b.grpcAddr for a gRPC
// scenario, closed by the cleanup.
func dialGRPC(ctx context.Context, b *bench) (func(), error) {
	if b.grpcAddr == "" {
		return nil, errors.New("no gRPC port: give -grpc-addr (the server's -grpc-addr), or -start")
	}
	if err := checkLoopback("http://" + b.grpcAddr); err != nil {
		return nil, err
	}
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
		b.grpc = nil
	}
	for range max(b.grpcConns, 1) {
		c, err := grpc.NewClient(b.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, err
		}
		conns = append(conns, c)
		b.grpc = append(b.grpc, pb.NewRateLimitServiceClient(c))
	}
	return closeAll, nil
}
