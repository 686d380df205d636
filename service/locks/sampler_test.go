package locks_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// TestSamplerCountsEveryTenant: the sampler's gauges count the leases of
// every tenant and of the shared namespace, by kind, and the keep-alive
// registry's entries, once a walk that began after they were taken ends.
func TestSamplerCountsEveryTenant(t *testing.T) {
	_, rdb := newTestRedis(t)
	reg := prometheus.NewRegistry()
	svc := mustNew(t, rdb, locks.Config{Registerer: reg})
	a, b := store.WithTenant(t.Context(), "a"), store.WithTenant(t.Context(), "b")
	for _, ctx := range []context.Context{t.Context(), a, b} {
		if _, err := svc.Acquire(ctx, "orders", locks.AcquireRequest{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Acquire(b, "kept", locks.AcquireRequest{TTL: time.Minute, Keepalive: true}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := svc.AcquireRW(a, "catalog", locks.AcquireRequest{TTL: time.Minute, Mode: locks.ModeRead}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.AcquireSemaphore(b, "pool", locks.SemaphoreRequest{AcquireRequest: locks.AcquireRequest{TTL: time.Minute}, Permits: 3, Count: 2}); err != nil {
		t.Fatal(err)
	}
	for _, ctx := range []context.Context{a, b} {
		if _, err := svc.Campaign(ctx, "primary", locks.AcquireRequest{TTL: time.Minute, Value: "v"}); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunSampler(ctx, time.Millisecond) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for storetest.CounterValue(t, reg, "latchkey_sample_passes_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no two complete walks")
		}
		time.Sleep(time.Millisecond)
	}
	for _, tt := range []struct {
		name, kind string
		want       float64
	}{
		{"latchkey_leases_held", "lock", 4},
		{"latchkey_leases_held", "rwlock", 2},
		{"latchkey_leases_held", "semaphore", 1},
		{"latchkey_leases_held", "election", 2},
		{"latchkey_keepalive_leases", "", 1},
	} {
		var labels []string
		if tt.kind != "" {
			labels = []string{"kind", tt.kind}
		}
		if got := storetest.CounterValue(t, reg, tt.name, labels...); got != tt.want {
			t.Errorf("%s{%s} = %v, want %v", tt.name, tt.kind, got, tt.want)
		}
	}
}
