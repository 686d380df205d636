package locks_test

import (
	"testing"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/prometheus/client_golang/prometheus"
)

// counterValue reads one counter (or gauge) from reg: the metric name with
// exactly the given labels, or 0 when it has not been counted yet.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if len(got) == len(want) && matches(got, want) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() // the one it is
			}
		}
	}
	return 0
}

func matches(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

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
		if got := counterValue(t, reg, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}
