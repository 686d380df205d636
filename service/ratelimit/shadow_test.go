package ratelimit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

// A shadow policy decides and counts as it would if enforced, but allows:
// N requests over a limit of L give L plain allows and N-L would-denials,
// the counter stops at L (a would-deny consumes nothing), and the metric
// counts exactly the would-denials. With the deny cache on, the cached
// would-denials are counted as well.
func TestShadowPolicyAllowsAndCountsWouldDenials(t *testing.T) {
	for _, cache := range []int{0, 100} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			shadow := fixed("shadow", 3, 10*time.Second)
			shadow.Shadow = true
			cfg := rlConfig(cache, shadow, fixed("enforced", 3, 10*time.Second))
			cfg.Registerer = reg
			svc, m := newTestService(t, cfg)
			const n = 10
			var would int
			for i := 1; i <= n; i++ {
				d := mustCheck(t, svc, ratelimit.Request{Policy: "shadow", Key: "k"})
				if !d.Allowed || d.RetryAfter != 0 {
					t.Fatalf("request %d: %+v, want allowed", i, d)
				}
				if d.WouldDeny != (i > 3) {
					t.Fatalf("request %d: WouldDeny = %v, want %v", i, d.WouldDeny, i > 3)
				}
				if d.WouldDeny {
					would++
				}
			}
			if would != n-3 {
				t.Errorf("%d would-denials, want %d", would, n-3)
			}
			if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_shadow_would_deny_total", "policy", "shadow"); got != n-3 {
				t.Errorf("would-deny metric = %v, want %d", got, n-3)
			}
			if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_decisions_total", "policy", "shadow", "result", "denied"); got != 0 {
				t.Errorf("denied metric = %v, want 0: a shadow policy denies nothing", got)
			}
			// What an enforced twin would have consumed: the limit, no more.
			keys := m.Keys()
			if len(keys) != 1 {
				t.Fatalf("keys %v, want the one counter", keys)
			}
			if v, _ := m.Get(keys[0]); v != "3" {
				t.Errorf("counter %s = %q, want 3: a would-deny must consume nothing", keys[0], v)
			}
			// The same requests under the enforced policy are denied.
			for i := 1; i <= 4; i++ {
				d := mustCheck(t, svc, ratelimit.Request{Policy: "enforced", Key: "k"})
				if d.Allowed != (i <= 3) || d.WouldDeny {
					t.Fatalf("enforced request %d: %+v", i, d)
				}
			}
		})
	}
}

// A shadow token bucket spends no token on a would-deny either.
func TestShadowTokenBucketConsumesNothingOnWouldDeny(t *testing.T) {
	p := ratelimit.Policy{Name: "tb", Shadow: true, Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 2, Window: 10 * time.Second}}
	svc, _ := newTestService(t, rlConfig(0, p))
	for i := 1; i <= 2; i++ {
		mustCheck(t, svc, ratelimit.Request{Policy: "tb", Key: "k"})
	}
	for i := 0; i < 3; i++ {
		d := mustCheck(t, svc, ratelimit.Request{Policy: "tb", Key: "k", Cost: 1})
		if !d.WouldDeny || d.Remaining != 0 {
			t.Fatalf("over the bucket: %+v, want a would-deny with 0 remaining", d)
		}
	}
}
