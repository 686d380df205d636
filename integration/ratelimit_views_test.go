package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// countsJSON and topKeysJSON are the RateLimitCounts and TopDeniedKeys
// schemas of api/openapi.yaml; policyStatsJSON is a policy's stats.
type countsJSON struct {
	Allowed   int64 `json:"allowed"`
	Denied    int64 `json:"denied"`
	WouldDeny int64 `json:"would_deny"`
}

type policyStatsJSON struct {
	Name  string `json:"name"`
	Stats struct {
		SinceStart countsJSON `json:"since_start"`
		LastMinute countsJSON `json:"last_minute"`
	} `json:"stats"`
}

type topKeysJSON struct {
	Policy        string `json:"policy"`
	WindowSeconds int64  `json:"window_seconds"`
	Approximate   bool   `json:"approximate"`
	Items         []struct {
		Key    string `json:"key"`
		Denied int64  `json:"denied"`
	} `json:"items"`
}

// policyStats reads each policy's stats from GET /v1/ratelimit/policies.
func (e *testEnv) policyStats(t *testing.T, headerPairs ...string) map[string]policyStatsJSON {
	t.Helper()
	r := e.do(t, "GET", "/v1/ratelimit/policies", "", headerPairs...)
	wantStatus(t, r, http.StatusOK)
	var body struct {
		Policies []policyStatsJSON `json:"policies"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("policies %s: %v", r.Body, err)
	}
	out := map[string]policyStatsJSON{}
	for _, p := range body.Policies {
		out[p.Name] = p
	}
	return out
}

// The rate-limit views on a real Redis, with tenants: a known sequence of
// tenant a's decisions gives exact stats and near-limit counts; the key a
// denied most among a hundred denied once comes first in its top keys;
// tenant b sees none of a's; bad limits and unknown policies are refused;
// and reading the views changes nothing in Redis.
func TestRateLimitViews(t *testing.T) {
	shadow := policy("shadow", ratelimit.FixedWindow, 2, time.Hour)
	shadow.Shadow = true
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))),
		withPolicies(policy("api", ratelimit.FixedWindow, 5, time.Hour), policy("tight", ratelimit.FixedWindow, 1, time.Hour), shadow))
	a, b := bearer(secretA), bearer(secretB)
	check := func(policy, key string, want int) {
		t.Helper()
		wantStatus(t, e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"`+policy+`","key":"`+key+`"}`, a...), want)
	}
	for i := range 8 { // 5 allowed (the fifth with 0 left: near the limit), 3 denied
		check("api", "k", map[bool]int{true: 200, false: 429}[i < 5])
	}
	for range 3 { // 3 allowed (the second with 0 left), the third a would-deny
		check("shadow", "k", 200)
	}
	// tight: "hot" is denied 10 times among 100 keys denied once each
	// (each allowed once first, with 0 left: near the limit).
	check("tight", "hot", 200)
	for i := range 100 {
		if i%10 == 0 {
			check("tight", "hot", 429)
		}
		check("tight", fmt.Sprintf("client-%d", i), 200)
		check("tight", fmt.Sprintf("client-%d", i), 429)
	}

	before := e.dumps(t)
	stats := e.policyStats(t, a...)
	want := map[string]countsJSON{"api": {5, 3, 0}, "shadow": {3, 0, 1}, "tight": {101, 110, 0}}
	for name, w := range want {
		s := stats[name].Stats
		if s.SinceStart != w || s.LastMinute != w {
			t.Errorf("a's stats of %s = %+v, want %+v since start and over the last minute", name, s, w)
		}
	}
	for name, s := range e.policyStats(t, b...) {
		if s.Stats.SinceStart != (countsJSON{}) || s.Stats.LastMinute != (countsJSON{}) {
			t.Errorf("b's stats of %s = %+v, want none of a's decisions", name, s.Stats)
		}
	}
	for policy, want := range map[string]float64{"api": 1, "shadow": 1, "tight": 101} {
		if got := metricValue(t, e, `latchkey_ratelimit_near_limit_total{policy="`+policy+`"}`); got != want {
			t.Errorf("near-limit decisions of %s = %v, want %v", policy, got, want)
		}
	}

	r := e.do(t, "GET", "/v1/ratelimit/policies/tight/top?limit=3", "", a...)
	wantStatus(t, r, http.StatusOK)
	top := decodeAs[topKeysJSON](t, r)
	if top.Policy != "tight" || top.WindowSeconds != 300 || !top.Approximate || len(top.Items) != 3 {
		t.Fatalf("a's top of tight: %s", r.Body)
	}
	if top.Items[0].Key != "hot" || top.Items[0].Denied != 10 {
		t.Errorf("a's most denied key of tight: %+v, want hot with 10 denials", top.Items[0])
	}
	r = e.do(t, "GET", "/v1/ratelimit/policies/tight/top", "", b...)
	if top := decodeAs[topKeysJSON](t, r); r.Status != http.StatusOK || len(top.Items) != 0 {
		t.Errorf("b's top of tight: %d %s, want no keys", r.Status, r.Body)
	}
	for _, limit := range []string{"0", "101", "-1", "ten", ""} {
		p := wantProblem(t, e.do(t, "GET", "/v1/ratelimit/policies/tight/top?limit="+limit, "", a...), http.StatusBadRequest, "invalid-request")
		if len(p.Errors) != 1 || p.Errors[0].Field != "limit" {
			t.Errorf("limit=%q: errors %+v, want one naming limit", limit, p.Errors)
		}
	}
	wantProblem(t, e.do(t, "GET", "/v1/ratelimit/policies/nope/top", "", a...), http.StatusNotFound, "policy-not-found")
	if after := e.dumps(t); !maps.Equal(before, after) {
		t.Errorf("reading the views changed Redis: %d keys before, %d after", len(before), len(after))
	}
}
