package storetest

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// CounterValue reads one counter of reg: the metric name with exactly the
// given label pairs (name, value, name, value, ...), or 0 when it has not
// been counted yet.
func CounterValue(tb testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	families, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather metrics: %v", err)
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
			if maps.Equal(got, want) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() // the one it is
			}
		}
	}
	return 0
}
