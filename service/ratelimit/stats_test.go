package ratelimit_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// statsClock is a views clock a test moves by hand.
type statsClock struct{ now time.Time }

func (c *statsClock) read() time.Time { return c.now }

// A known sequence gives exact counts: 5 requests at a limit of 3 are 3
// allowed and 2 denied; 4 under a shadow limit of 2 are 4 allowed of which
// 2 would have been denied. The last minute holds them until it has
// passed; since-start keeps them. Another tenant saw none of them.
func TestPolicyStatsCountEachDecisionOnce(t *testing.T) {
	shadow := fixed("shadow", 2, time.Hour)
	shadow.Shadow = true
	for _, cache := range []int{0, 100} {
		t.Run("cache="+strconv.Itoa(cache), func(t *testing.T) {
			svc, _ := newTestService(t, rlConfig(cache, fixed("enforced", 3, time.Hour), shadow, fixed("idle", 1, time.Hour)))
			clock := &statsClock{now: time.Date(2026, 11, 23, 4, 0, 5, 0, time.UTC)}
			ratelimit.SetViewsClock(svc, clock.read)
			ctx := store.WithTenant(context.Background(), "acme")
			for range 5 {
				mustCheckIn(ctx, t, svc, ratelimit.Request{Policy: "enforced", Key: "k"})
			}
			for range 4 {
				mustCheckIn(ctx, t, svc, ratelimit.Request{Policy: "shadow", Key: "k"})
			}
			enforced := ratelimit.Counts{Allowed: 3, Denied: 2}
			shadowed := ratelimit.Counts{Allowed: 4, WouldDeny: 2}
			want := map[string]ratelimit.PolicyStats{
				"enforced": {SinceStart: enforced, LastMinute: enforced},
				"shadow":   {SinceStart: shadowed, LastMinute: shadowed},
				"idle":     {},
			}
			wantStats(t, svc.PolicyStats(ctx), want)

			clock.now = clock.now.Add(time.Minute)
			wantStats(t, svc.PolicyStats(ctx), want) // 60 s later: still within the last minute's steps
			clock.now = clock.now.Add(ratelimit.LastMinuteStep)
			wantStats(t, svc.PolicyStats(ctx), map[string]ratelimit.PolicyStats{
				"enforced": {SinceStart: enforced}, "shadow": {SinceStart: shadowed}, "idle": {},
			})
			wantStats(t, svc.PolicyStats(store.WithTenant(context.Background(), "other")),
				map[string]ratelimit.PolicyStats{"enforced": {}, "shadow": {}, "idle": {}})
			wantStats(t, svc.PolicyStats(context.Background()),
				map[string]ratelimit.PolicyStats{"enforced": {}, "shadow": {}, "idle": {}})
		})
	}
}

func mustCheckIn(ctx context.Context, t *testing.T, svc *ratelimit.Service, req ratelimit.Request) ratelimit.Decision {
	t.Helper()
	d, err := svc.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check(%+v): %v", req, err)
	}
	return d
}

func wantStats(t *testing.T, got, want map[string]ratelimit.PolicyStats) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("stats of %d policies, want %d: %+v", len(got), len(want), got)
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("stats of %s = %+v, want %+v", name, g, w)
		}
	}
}

// The near-limit counter counts exactly the allowed decisions that left
// less than a fifth of the limit: of 10 at a limit of 10 (remaining 9..0)
// the two leaving 1 and 0; never a denial or a would-denial; inline
// limits under "inline", as the decision counters name them.
func TestNearLimitCountsAllowedDecisionsWithLessThanAFifthLeft(t *testing.T) {
	reg := prometheus.NewRegistry()
	shadow := fixed("shadow", 10, time.Hour)
	shadow.Shadow = true
	cfg := rlConfig(0, fixed("api", 10, time.Hour), shadow)
	cfg.Registerer = reg
	svc, _ := newTestService(t, cfg)
	for range 12 {
		mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k"})
		mustCheck(t, svc, ratelimit.Request{Policy: "shadow", Key: "k"})
		mustCheck(t, svc, ratelimit.Request{Inline: &ratelimit.Limit{Limit: 5, Window: time.Hour}, Key: "k"})
	}
	for policy, want := range map[string]float64{"api": 2, "shadow": 2, "inline": 1} {
		if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_near_limit_total", "policy", policy); got != want {
			t.Errorf("near-limit decisions of %s = %v, want %v", policy, got, want)
		}
	}
}

// TopDenied lists one tenant's denied keys of a policy, most denied first;
// another tenant's denials of the same keys are not in it. An unknown
// policy is not found; a limit outside 1..MaxTopKeys is refused naming it.
func TestTopDeniedListsATenantsMostDeniedKeys(t *testing.T) {
	svc, _ := newTestService(t, rlConfig(100, fixed("api", 1, time.Hour), fixed("quiet", 1, time.Hour)))
	acme := store.WithTenant(context.Background(), "acme")
	other := store.WithTenant(context.Background(), "other")
	for i, key := range []string{"a", "b", "c"} {
		for range i + 2 { // a: 1 allowed, 1 denied; b: 2 denied; c: 3
			mustCheckIn(acme, t, svc, ratelimit.Request{Policy: "api", Key: key})
		}
	}
	for range 5 {
		mustCheckIn(other, t, svc, ratelimit.Request{Policy: "api", Key: "z"})
	}
	top, err := svc.TopDenied(acme, "api", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []ratelimit.KeyCount{{Key: "c", Denied: 3}, {Key: "b", Denied: 2}}
	if top.Policy != "api" || top.Window != ratelimit.TopKeysWindow || len(top.Items) != 2 || top.Items[0] != want[0] || top.Items[1] != want[1] {
		t.Errorf("top of acme = %+v, want %v", top, want)
	}
	if top, _ := svc.TopDenied(other, "api", 10); len(top.Items) != 1 || top.Items[0] != (ratelimit.KeyCount{Key: "z", Denied: 4}) {
		t.Errorf("top of other = %+v, want z (4) only", top)
	}
	if top, _ := svc.TopDenied(acme, "quiet", 10); top.Items == nil || len(top.Items) != 0 {
		t.Errorf("top of a policy without denials = %+v, want no items", top)
	}
	if n := ratelimit.TopKeysSize(svc, "acme", "api"); n != 3 {
		t.Errorf("acme's sketch holds %d keys, want 3", n)
	}

	_, err = svc.TopDenied(acme, "nope", 10)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown policy: %v, want ErrNotFound", err)
	}
	for _, n := range []int{0, -1, ratelimit.MaxTopKeys + 1} {
		var ve *store.ValidationError
		if _, err := svc.TopDenied(acme, "api", n); !errors.As(err, &ve) || ve.Field != "limit" {
			t.Errorf("limit %d: %v, want a validation error naming limit", n, err)
		}
	}
}

// A policy that leaves the active set takes its views with it: its
// near-limit series goes, and a policy of the same name added back starts
// from zero.
func TestPolicyViewsGoWithTheirPolicy(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := rlConfig(0, fixed("api", 1, time.Hour), fixed("other", 1, time.Hour))
	cfg.Registerer = reg
	svc, _ := newTestService(t, cfg)
	mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k"})
	mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k"})
	if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_near_limit_total", "policy", "api"); got != 1 {
		t.Fatalf("near-limit of api = %v, want 1", got)
	}
	if _, _, err := svc.SetPolicies([]ratelimit.Policy{fixed("other", 1, time.Hour)}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	for _, f := range families {
		if f.GetName() == "latchkey_ratelimit_near_limit_total" && len(f.GetMetric()) != 1 { // inline's stays
			t.Errorf("near-limit series after api left: %v, want inline's only", f.GetMetric())
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if ratelimit.TopKeysSize(svc, "", "api") != 0 {
		t.Error("api's sketch outlived the policy")
	}
	if _, _, err := svc.SetPolicies([]ratelimit.Policy{fixed("api", 1, time.Hour), fixed("other", 1, time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := svc.PolicyStats(context.Background())["api"]; got != (ratelimit.PolicyStats{}) {
		t.Errorf("api added back: %+v, want zero counts", got)
	}
}
