package locks_test

import (
	"testing"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/prometheus/client_golang/prometheus"
)

func TestLockMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, _ := newTestService(t, locks.Config{Registerer: reg})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA})
	if _, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Token: tokenB}); err == nil {
		t.Fatal("second token got the held lock")
	}
	for range 2 {
		if _, err := svc.Release(t.Context(), "orders", tokenA); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenB})
	if _, err := svc.ForceRelease(t.Context(), "orders"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"latchkey_lock_grants_total", []string{"kind", "new"}, 2},
		{"latchkey_lock_grants_total", []string{"kind", "reentrant"}, 1},
		{"latchkey_lock_conflicts_total", nil, 1},
		{"latchkey_lock_releases_total", []string{"kind", "partial"}, 1},
		{"latchkey_lock_releases_total", []string{"kind", "final"}, 1},
		{"latchkey_lock_releases_total", []string{"kind", "forced"}, 1},
	}
	for _, tt := range tests {
		if got := storetest.CounterValue(t, reg, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}
