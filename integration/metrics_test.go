package integration

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/redis/go-redis/v9"
)

func TestMetrics(t *testing.T) {
	c, url := startRedisContainer(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, withRedisClient(serverClient(t, opts.Addr, outageTimeout), url), withOpTimeout(outageTimeout))
	const name = "metered-lock"

	l := e.acquire(t, name, "")                                                                   // POST 201
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name, ""), http.StatusConflict, "lock-held")      // POST 409
	wantStatus(t, e.do(t, "POST", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)   // POST 200
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name, `{"ttl":"0s"}`), 400, "invalid-request")    // POST 400
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK) // partial
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK) // final
	e.acquire(t, name, "")
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", "Authorization", "Bearer "+testAdminKey),
		http.StatusNoContent)

	// The outage: Redis stops; an acquire is answered 503.
	stop := 5 * time.Second
	if err := c.Stop(t.Context(), &stop); err != nil {
		t.Fatalf("stop the Redis container: %v", err)
	}
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name, ""), http.StatusServiceUnavailable, "store-unavailable")

	const (
		lockRoute = `route="/v1/locks/{name}"`
		post      = `latchkey_http_requests_total{method="POST",` + lockRoute
		del       = `latchkey_http_requests_total{method="DELETE",` + lockRoute
	)
	got := metrics(t, e)
	want := map[string]float64{
		post + `,status="201"}`: 2,
		post + `,status="200"}`: 1,
		post + `,status="409"}`: 1,
		post + `,status="400"}`: 1,
		post + `,status="503"}`: 1,
		del + `,status="200"}`:  2,
		del + `,status="204"}`:  1,
		`latchkey_http_request_duration_seconds_count{method="POST",` + lockRoute + `}`:            6,
		`latchkey_http_request_duration_seconds_bucket{method="POST",` + lockRoute + `,le="+Inf"}`: 6,
		`latchkey_http_request_duration_seconds_count{method="DELETE",` + lockRoute + `}`:          3,
		`latchkey_lock_grants_total{kind="new"}`:                                                   2,
		`latchkey_lock_grants_total{kind="reentrant"}`:                                             1,
		`latchkey_lock_conflicts_total`:                                                            1,
		`latchkey_lock_releases_total{kind="partial"}`:                                             1,
		`latchkey_lock_releases_total{kind="final"}`:                                               1,
		`latchkey_lock_releases_total{kind="forced"}`:                                              1,
		`latchkey_redis_errors_total{kind="unavailable",op="acquire"}`:                             1,
	}
	for series, w := range want {
		if g, ok := got[series]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", series, g, ok, w)
		}
	}
	if sum := got[`latchkey_http_request_duration_seconds_sum{method="POST",`+lockRoute+`}`]; sum <= 0 {
		t.Errorf("latency histogram sum = %v, want > 0", sum)
	}
	// Routes, not raw lock names, label the series.
	for series := range got {
		if strings.Contains(series, name) {
			t.Errorf("series %s carries a lock name", series)
		}
	}
}

// TestMetricSeriesBoundedOverHTTP: methods a client makes up (the gate
// answers every method) and paths no route serves add no series to
// /metrics once one of each kind has been seen, and the made-up values
// appear in no label.
func TestMetricSeriesBoundedOverHTTP(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("open", ratelimit.FixedWindow, 1_000_000, time.Hour)))
	raw := *e
	raw.Client = &http.Client{} // made-up methods are not in api/openapi.yaml
	send := func(i int) {
		method := "XM" + strconv.Itoa(i)
		wantStatus(t, raw.do(t, method, "/v1/ratelimit/gate/open", ""), http.StatusOK)
		wantStatus(t, raw.do(t, method, "/v1/ratelimit/gate/p"+strconv.Itoa(i), ""), http.StatusNotFound)
		wantStatus(t, raw.do(t, method, "/nope/"+strconv.Itoa(i), ""), http.StatusMethodNotAllowed)
		wantStatus(t, raw.do(t, "GET", "/nope/"+strconv.Itoa(i), ""), http.StatusNotFound)
	}
	send(0)
	metrics(t, e) // the scrape's own series
	before := metrics(t, e)
	const n = 1000
	for i := 1; i <= n; i++ {
		send(i)
	}
	after := metrics(t, e)
	var added []string
	for series := range after {
		if _, ok := before[series]; !ok {
			added = append(added, series)
		}
		if strings.Contains(series, "XM") || strings.Contains(series, "/nope") {
			t.Errorf("series %s carries a client's method or path", series)
		}
	}
	if len(added) > 0 {
		t.Errorf("%d made-up methods and paths added %d series: %v", n, len(added), added)
	}
	for series, want := range map[string]float64{
		`latchkey_http_requests_total{method="OTHER",route="/v1/ratelimit/gate/{policy}",status="200"}`: n + 1,
		`latchkey_http_requests_total{method="OTHER",route="/v1/ratelimit/gate/{policy}",status="404"}`: n + 1,
		`latchkey_http_requests_total{method="OTHER",route="unmatched",status="405"}`:                   n + 1,
		`latchkey_http_requests_total{method="GET",route="unmatched",status="404"}`:                     n + 1,
	} {
		if got := after[series]; got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
