package integration

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// decision is the JSON body of a rate-limit decision.
type decision struct {
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Policy       string `json:"policy"`
	Key          string `json:"key"`
	Degraded     bool   `json:"degraded"`
}

func (r response) decision(t testing.TB) decision {
	t.Helper()
	var d decision
	if err := json.Unmarshal(r.Body, &d); err != nil {
		t.Fatalf("body %q is not a decision: %v", r.Body, err)
	}
	return d
}

// check posts a check request and returns the response and its decision.
func (e *testEnv) check(t testing.TB, body string) (response, decision) {
	t.Helper()
	r := e.do(t, "POST", "/v1/ratelimit/check", body)
	if r.Status != http.StatusOK && r.Status != http.StatusTooManyRequests {
		t.Fatalf("check %s: status = %d, want 200 or 429; body %s", body, r.Status, r.Body)
	}
	d := r.decision(t)
	if d.Allowed != (r.Status == http.StatusOK) {
		t.Fatalf("check %s: status %d with allowed=%v", body, r.Status, d.Allowed)
	}
	return r, d
}

// TestRateLimitThreePerTenSeconds is the reference case: a fixed window of 3
// requests per 10 s per IP, asked through the gate.
func TestRateLimitThreePerTenSeconds(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("per-ip", ratelimit.FixedWindow, 3, 10*time.Second)))
	for i := 1; i <= 3; i++ {
		r := e.do(t, "GET", "/v1/ratelimit/gate/per-ip", "")
		if r.Status != http.StatusOK {
			t.Fatalf("request %d: status = %d, want 200; body %s", i, r.Status, r.Body)
		}
		if got, want := r.Header.Get("RateLimit"), `"per-ip";r=`+strconv.Itoa(3-i)+";t=10"; got != want {
			t.Errorf("request %d: RateLimit = %q, want %q", i, got, want)
		}
		if got := r.Header.Get("Retry-After"); got != "" {
			t.Errorf("request %d: Retry-After = %q on an allowed request", i, got)
		}
	}
	for i := 4; i <= 6; i++ {
		r := e.do(t, "GET", "/v1/ratelimit/gate/per-ip", "", "Accept", "application/json")
		if r.Status != http.StatusTooManyRequests {
			t.Fatalf("request %d: status = %d, want 429", i, r.Status)
		}
		if got, want := r.Header.Get("RateLimit-Policy"), `"per-ip";q=3;w=10`; got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
		if ra := retryAfter(t, r); ra < 9 || ra > 10 {
			t.Errorf("Retry-After = %d, want 9 or 10", ra)
		}
		if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, `"per-ip";r=0;t=`) {
			t.Errorf("RateLimit = %q, want r=0", got)
		}
		d := r.decision(t)
		want := decision{Allowed: false, Limit: 3, Remaining: 0, Policy: "per-ip", Key: "127.0.0.1",
			ResetMS: d.ResetMS, RetryAfterMS: d.RetryAfterMS}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("decision (-want +got):\n%s", diff)
		}
		if d.RetryAfterMS <= d.ResetMS-1 || d.RetryAfterMS > 10001 {
			t.Errorf("retry_after_ms = %d, reset_ms = %d: want retry just past the reset", d.RetryAfterMS, d.ResetMS)
		}
	}
	// Denied requests were not counted: the counter holds 3 and expires with the window.
	keys := e.keys(t)
	if len(keys) != 1 {
		t.Fatalf("keys = %v, want one counter", keys)
	}
	if n, _ := e.RDB.Get(t.Context(), keys[0]).Int(); n != 3 {
		t.Errorf("counter = %d, want 3 (denials are not counted)", n)
	}
	if ttl := e.RDB.PTTL(t.Context(), keys[0]).Val(); ttl <= 8*time.Second || ttl > 10*time.Second {
		t.Errorf("counter PTTL = %s, want just under 10s", ttl)
	}
}

// TestRateLimitRetryAfterIsHonest checks, for every algorithm, that a denied
// client waiting exactly retry_after_ms is allowed, that waiting Retry-After
// seconds is too, and that denials are not counted.
func TestRateLimitRetryAfterIsHonest(t *testing.T) {
	e := newTestEnv(t, withPolicies())
	for _, alg := range ratelimit.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			body := `{"key":"honest-` + string(alg) + `","limit":2,"window":"1s","algorithm":"` + string(alg) + `"}`
			for round := 0; round < 2; round++ {
				allowed := 0
				var denied decision
				var deniedResp response
				for i := 0; i < 10; i++ {
					r, d := e.check(t, body)
					if !d.Allowed {
						denied, deniedResp = d, r
						break
					}
					allowed++
				}
				if round == 0 && allowed != 2 {
					t.Fatalf("allowed %d requests of a fresh key, want 2", allowed)
				}
				if allowed == 0 && round > 0 {
					t.Fatalf("round %d: denied right after waiting retry_after_ms", round)
				}
				// A sliding window may need the next window half gone.
				if denied.RetryAfterMS < 1 || denied.RetryAfterMS > 2001 {
					t.Fatalf("retry_after_ms = %d, want within two 1s windows", denied.RetryAfterMS)
				}
				if ra := retryAfter(t, deniedResp); int64(ra)*1000 < denied.RetryAfterMS {
					t.Fatalf("Retry-After %ds is shorter than retry_after_ms %d", ra, denied.RetryAfterMS)
				}
				// Denials in a row change nothing.
				for i := 0; i < 3; i++ {
					if _, d := e.check(t, body); d.Allowed {
						t.Fatalf("a denied key was allowed again without waiting")
					}
				}
				time.Sleep(time.Duration(denied.RetryAfterMS) * time.Millisecond)
			}
			// Waiting the rounded-up Retry-After also works.
			r, d := e.check(t, body)
			for d.Allowed {
				r, d = e.check(t, body)
			}
			time.Sleep(time.Duration(retryAfter(t, r)) * time.Second)
			if _, d := e.check(t, body); !d.Allowed {
				t.Fatalf("denied after waiting Retry-After")
			}
		})
	}
}

// TestRateLimitFixedWindowShortWindow checks the window edge: the counter
// lives exactly one window from the first hit.
func TestRateLimitFixedWindowShortWindow(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("short", ratelimit.FixedWindow, 2, time.Second)))
	body := `{"policy":"short","key":"edge"}`
	_, d := e.check(t, body)
	firstDone := time.Now() // the counter was created before this
	if !d.Allowed || d.Remaining != 1 || d.ResetMS != 1000 {
		t.Fatalf("first: %+v, want allowed, remaining 1, reset_ms 1000", d)
	}
	e.check(t, body)
	thirdSent := time.Now()
	_, d = e.check(t, body)
	if d.Allowed {
		t.Fatalf("third request in the window was allowed")
	}
	// At least thirdSent-firstDone of the window had passed in Redis.
	if passed := thirdSent.Sub(firstDone).Milliseconds(); d.ResetMS > 1000-passed+1 || d.RetryAfterMS != d.ResetMS+1 {
		t.Errorf("reset_ms = %d, retry_after_ms = %d with at least %dms of the window gone, want the key's remaining time",
			d.ResetMS, d.RetryAfterMS, passed)
	}
	time.Sleep(time.Duration(d.RetryAfterMS) * time.Millisecond)
	_, d = e.check(t, body)
	if !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after the window: %+v, want allowed with remaining 1", d)
	}
}

// TestRateLimitSlidingWindowWeighsPreviousWindow checks the two-counter
// estimate: a quarter into the next window, 75% of the previous count still
// counts, so only one of four requests fits where a fixed window allows four.
func TestRateLimitSlidingWindowWeighsPreviousWindow(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("slide", ratelimit.SlidingWindow, 4, 2*time.Second)))
	body := `{"policy":"slide","key":"weigh"}`
	waitForNextWindow(t, e, 2*time.Second, 100*time.Millisecond)
	for i := 0; i < 4; i++ {
		if _, d := e.check(t, body); !d.Allowed || d.Remaining != int64(3-i) {
			t.Fatalf("request %d: %+v, want allowed with remaining %d", i+1, d, 3-i)
		}
	}
	if _, d := e.check(t, body); d.Allowed {
		t.Fatal("5th request in the window was allowed")
	}
	waitForNextWindow(t, e, 2*time.Second, 550*time.Millisecond) // just over 25% into the next window
	_, d := e.check(t, body)
	if !d.Allowed {
		t.Fatalf("first request 27%% into the next window: %+v, want allowed (estimate 3 of 4)", d)
	}
	_, d = e.check(t, body)
	if d.Allowed {
		t.Fatalf("second request 27%% into the next window was allowed (estimate 4 of 4)")
	}
	// The previous window's weight must fall to 4-1-1 = 2 of its 4: halfway in.
	if d.RetryAfterMS < 1 || d.RetryAfterMS > 451 {
		t.Errorf("retry_after_ms = %d, want about 450 (until the window is half over)", d.RetryAfterMS)
	}
}

// TestRateLimitSlidingWindowStorage checks the sliding window's key on real
// Redis: an allowed request stores w, c and p as one integer, which Redis
// keeps in the key itself; counts too long for 64 bits as "w:c:p" text; and
// a hash {w, c, p} left by an earlier version is read, kept as it is by a
// denial and replaced by the next allowed request.
func TestRateLimitSlidingWindowStorage(t *testing.T) {
	const window = time.Hour
	e := newTestEnv(t, withPolicies(policy("slide", ratelimit.SlidingWindow, 10, window),
		policy("big", ratelimit.SlidingWindow, 1_000_000_000, window)))
	cur := currentWindow(t, e, window)
	w := strconv.FormatInt(cur, 10)
	tests := []struct {
		name     string
		policy   string
		hash     []int64 // w, c and p of a hash left by an earlier version; nil for none
		value    string  // a string already in the key; "" for none
		cost     int64
		allowed  bool
		want     string // the value afterwards; "" when the hash stays
		encoding string // of the value afterwards
	}{
		{"new key", "slide", nil, "", 3, true, w + "301", "int"},
		{"integer", "slide", nil, w + "301", 2, true, w + "501", "int"},
		{"full integer", "slide", nil, w + "10002", 1, false, w + "10002", "int"},
		{"hash of the current window", "slide", []int64{cur, 4, 0}, "", 1, true, w + "501", "int"},
		{"hash of the previous window", "slide", []int64{cur - 1, 4, 0}, "", 1, true, w + "141", "int"},
		{"hash of an older window", "slide", []int64{cur - 2, 9, 9}, "", 1, true, w + "101", "int"},
		{"hash of a later window (the clock went back)", "slide", []int64{cur + 1, 4, 0}, "", 1, true,
			strconv.FormatInt(cur+1, 10) + "501", "int"},
		{"full hash", "slide", []int64{cur, 10, 0}, "", 1, false, "", ""},
		{"counts of ten digits", "big", nil, "", 1_000_000_000, true, w + ":1000000000:0", "embstr"},
		{"full text", "big", nil, w + ":1000000000:0", 1, false, w + ":1000000000:0", "embstr"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := "192.0.2." + strconv.Itoa(i)
			key := e.limitKeyOf(t, tt.policy)(client)
			if tt.hash != nil {
				if err := e.RDB.HSet(t.Context(), key, "w", tt.hash[0], "c", tt.hash[1], "p", tt.hash[2]).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if tt.value != "" {
				if err := e.RDB.Set(t.Context(), key, tt.value, window).Err(); err != nil {
					t.Fatal(err)
				}
			}
			_, d := e.check(t, `{"policy":"`+tt.policy+`","key":"`+client+`","cost":`+strconv.FormatInt(tt.cost, 10)+`}`)
			if d.Allowed != tt.allowed {
				t.Fatalf("decision %+v, want allowed=%v", d, tt.allowed)
			}
			if tt.want == "" {
				got, err := e.RDB.HGetAll(t.Context(), key).Result()
				want := map[string]string{"w": strconv.FormatInt(tt.hash[0], 10),
					"c": strconv.FormatInt(tt.hash[1], 10), "p": strconv.FormatInt(tt.hash[2], 10)}
				if err != nil || !cmp.Equal(got, want) {
					t.Errorf("hash after a denial = %v, %v; want %v unchanged", got, err, want)
				}
			} else if got, err := e.RDB.Get(t.Context(), key).Result(); err != nil || got != tt.want {
				t.Errorf("GET %s = %q, %v; want %q", key, got, err, tt.want)
			}
			if tt.encoding == "" {
				return
			}
			if got, err := e.RDB.ObjectEncoding(t.Context(), key).Result(); err != nil || got != tt.encoding {
				t.Errorf("OBJECT ENCODING = %q, %v; want %q", got, err, tt.encoding)
			}
		})
	}
}

// currentWindow returns the index of the current window of length w on the
// Redis clock, first waiting out the window's last 5 seconds so that a test
// of a few seconds stays inside it.
func currentWindow(t testing.TB, e *testEnv, w time.Duration) int64 {
	t.Helper()
	now, err := e.RDB.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	if left := w - time.Duration(now.UnixNano())%w; left < 5*time.Second {
		time.Sleep(left)
		now = now.Add(left)
	}
	return now.UnixMilli() / w.Milliseconds()
}

// waitForNextWindow sleeps until the Redis clock is offset past the start of
// the next window of length w (windows are aligned on the Redis clock).
func waitForNextWindow(t testing.TB, e *testEnv, w, offset time.Duration) {
	t.Helper()
	now, err := e.RDB.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	in := time.Duration(now.UnixNano()) % w
	time.Sleep(w - in + offset)
}

// TestRateLimitTokenBucketBurst checks GCRA: a full bucket of burst tokens,
// then one token per emission interval.
func TestRateLimitTokenBucketBurst(t *testing.T) {
	p := policy("bucket", ratelimit.TokenBucket, 10, 10*time.Second) // a token a second
	p.Burst = 5
	e := newTestEnv(t, withPolicies(p))
	body := `{"policy":"bucket","key":"burst"}`
	for i := 0; i < 5; i++ {
		_, d := e.check(t, body)
		if !d.Allowed || d.Remaining != int64(4-i) {
			t.Fatalf("request %d: %+v, want allowed with remaining %d", i+1, d, 4-i)
		}
	}
	r, d := e.check(t, body)
	if d.Allowed {
		t.Fatal("6th request of a burst of 5 was allowed")
	}
	if d.RetryAfterMS < 500 || d.RetryAfterMS > 1001 {
		t.Errorf("retry_after_ms = %d, want up to one emission interval (1s)", d.RetryAfterMS)
	}
	if d.ResetMS < 4000 || d.ResetMS > 5000 {
		t.Errorf("reset_ms = %d, want about 5000 (until the bucket is full)", d.ResetMS)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != `"bucket";q=10;w=10` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	time.Sleep(time.Duration(d.RetryAfterMS) * time.Millisecond)
	if _, d := e.check(t, body); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after one interval: %+v, want allowed with remaining 0", d)
	}
	if _, d := e.check(t, body); d.Allowed {
		t.Fatal("second request after one interval was allowed")
	}
}

// TestRateLimitTokenBucketHighRate checks a token bucket refilling 10
// million tokens a second (0.1 µs a token) through HTTP: a decision, not an
// error, and the first request takes exactly one token.
func TestRateLimitTokenBucketHighRate(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("fast", ratelimit.TokenBucket, 10_000_000, time.Second)))
	r, d := e.check(t, `{"policy":"fast","key":"k"}`)
	if !d.Allowed || d.Remaining != 9_999_999 || d.ResetMS != 1 {
		t.Fatalf("decision %+v, want allowed with 9999999 remaining, reset_ms 1", d)
	}
	if got := r.Header.Get("RateLimit"); got != `"fast";r=9999999;t=1` {
		t.Errorf("RateLimit = %q", got)
	}
}

// TestRateLimitCost checks requests that spend more than one unit.
func TestRateLimitCost(t *testing.T) {
	for _, alg := range ratelimit.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t, withPolicies(policy("costly", alg, 10, time.Minute)))
			steps := []struct {
				cost      int
				allowed   bool
				remaining int64
			}{
				{4, true, 6}, {4, true, 2}, {4, false, 2}, {3, false, 2}, {2, true, 0}, {1, false, 0},
			}
			for i, s := range steps {
				_, d := e.check(t, `{"policy":"costly","key":"k","cost":`+strconv.Itoa(s.cost)+`}`)
				if d.Allowed != s.allowed || d.Remaining != s.remaining {
					t.Fatalf("step %d (cost %d): allowed=%v remaining=%d, want %v %d",
						i, s.cost, d.Allowed, d.Remaining, s.allowed, s.remaining)
				}
			}
			r := e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"costly","key":"k","cost":11}`)
			if r.Status != http.StatusBadRequest || r.JSON(t)["errors"].([]any)[0].(map[string]any)["field"] != "cost" {
				t.Errorf("cost above the limit: %d %s, want 400 naming cost", r.Status, r.Body)
			}
		})
	}
}

// TestRateLimitBadInput checks that bad requests get a problem naming the
// field and rule, and change nothing in Redis.
func TestRateLimitBadInput(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("per-ip", ratelimit.FixedWindow, 3, 10*time.Second)))
	cases := []struct {
		name, method, path, body string
		status                   int
		typ, field, rule         string
	}{
		{"unknown policy", "POST", "/v1/ratelimit/check", `{"policy":"nope"}`, 404, "policy-not-found", "", ""},
		{"unknown policy at the gate", "GET", "/v1/ratelimit/gate/nope", "", 404, "policy-not-found", "", ""},
		{"malformed policy at the gate", "GET", "/v1/ratelimit/gate/-x", "", 400, "invalid-request", "policy", "format"},
		{"limit 0", "POST", "/v1/ratelimit/check", `{"key":"k","limit":0,"window":"10s"}`, 400, "invalid-request", "limit", "min"},
		{"limit negative", "POST", "/v1/ratelimit/check", `{"key":"k","limit":-3,"window":"10s"}`, 400, "invalid-request", "limit", "min"},
		{"window too short", "POST", "/v1/ratelimit/check", `{"key":"k","limit":3,"window":"100ms"}`, 400, "invalid-request", "window", "min"},
		{"window too long", "POST", "/v1/ratelimit/check", `{"key":"k","limit":3,"window":"48h"}`, 400, "invalid-request", "window", "max"},
		{"window not a duration", "POST", "/v1/ratelimit/check", `{"key":"k","limit":3,"window":"soon"}`, 400, "invalid-request", "window", "posduration"},
		{"window missing", "POST", "/v1/ratelimit/check", `{"key":"k","limit":3}`, 400, "invalid-request", "window", "required"},
		{"bad algorithm", "POST", "/v1/ratelimit/check", `{"key":"k","limit":3,"window":"10s","algorithm":"leaky_bucket"}`, 400, "invalid-request", "algorithm", "oneof"},
		{"burst without token bucket", "POST", "/v1/ratelimit/check", `{"key":"k","limit":3,"window":"10s","burst":5}`, 400, "invalid-request", "burst", "excluded"},
		{"key with a space", "POST", "/v1/ratelimit/check", `{"key":"a b","limit":3,"window":"10s"}`, 400, "invalid-request", "key", "format"},
		{"key with a brace", "POST", "/v1/ratelimit/check", `{"key":"{slot}","limit":3,"window":"10s"}`, 400, "invalid-request", "key", "format"},
		{"key too long", "POST", "/v1/ratelimit/check", `{"key":"` + strings.Repeat("k", 257) + `","limit":3,"window":"10s"}`, 400, "invalid-request", "key", "format"},
		{"inline without key", "POST", "/v1/ratelimit/check", `{"limit":3,"window":"10s"}`, 400, "invalid-request", "key", "required"},
		{"policy and inline", "POST", "/v1/ratelimit/check", `{"policy":"per-ip","limit":3,"window":"10s"}`, 400, "invalid-request", "policy", "excluded"},
		{"nothing", "POST", "/v1/ratelimit/check", `{}`, 400, "invalid-request", "policy", "required"},
		{"cost 0", "POST", "/v1/ratelimit/check", `{"policy":"per-ip","cost":0}`, 400, "invalid-request", "cost", "min"},
		{"cost above limit", "POST", "/v1/ratelimit/check", `{"policy":"per-ip","cost":4}`, 400, "invalid-request", "cost", "max"},
		{"unknown field", "POST", "/v1/ratelimit/check", `{"policy":"per-ip","rate":4}`, 400, "invalid-request", "rate", "unknown"},
		{"limit not a number", "POST", "/v1/ratelimit/check", `{"key":"k","limit":"3","window":"10s"}`, 400, "invalid-request", "limit", "type"},
		{"token bucket refilling in over 10 years", "POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":"24h","algorithm":"token_bucket","burst":1000000000}`, 400, "invalid-request", "burst", "max"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.method, c.path, c.body)
			if r.Status != c.status {
				t.Fatalf("status = %d, want %d; body %s", r.Status, c.status, r.Body)
			}
			p := r.JSON(t)
			if p["type"] != c.typ {
				t.Errorf("type = %v, want %s", p["type"], c.typ)
			}
			if c.field != "" {
				errs, _ := p["errors"].([]any)
				if len(errs) == 0 {
					t.Fatalf("no errors member in %s", r.Body)
				}
				fe := errs[0].(map[string]any)
				if fe["field"] != c.field || fe["rule"] != c.rule {
					t.Errorf("errors[0] = %v, want field %s rule %s", fe, c.field, c.rule)
				}
			}
		})
	}
	if ks := e.keys(t); len(ks) != 0 {
		t.Errorf("bad requests left keys in Redis: %v", ks)
	}
}

// TestRateLimitClientIdentity checks the gate's key: forwarded headers count
// only from a trusted proxy, walked right to left past trusted hops.
func TestRateLimitClientIdentity(t *testing.T) {
	limited := policy("per-ip", ratelimit.FixedWindow, 1, time.Minute)
	t.Run("untrusted peer", func(t *testing.T) {
		e := newTestEnv(t, withPolicies(limited))
		r := e.do(t, "GET", "/v1/ratelimit/gate/per-ip", "", "Accept", "application/json", "X-Forwarded-For", "198.51.100.1")
		if d := r.decision(t); r.Status != 200 || d.Key != "127.0.0.1" {
			t.Fatalf("first: %d key %q, want 200 for 127.0.0.1", r.Status, d.Key)
		}
		// A different forged address changes nothing: same key, now over its limit.
		r = e.do(t, "GET", "/v1/ratelimit/gate/per-ip", "", "Accept", "application/json", "X-Forwarded-For", "198.51.100.2", "X-Real-IP", "198.51.100.3")
		if d := r.decision(t); r.Status != 429 || d.Key != "127.0.0.1" {
			t.Fatalf("spoofed: %d key %q, want 429 for 127.0.0.1", r.Status, d.Key)
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		e := newTestEnv(t, withPolicies(limited), withTrustedProxies("127.0.0.0/8", "10.0.0.0/8"))
		steps := []struct {
			xff     string
			status  int
			wantKey string
		}{
			{"203.0.113.7", 200, "203.0.113.7"},
			{"203.0.113.7", 429, "203.0.113.7"},
			{"203.0.113.8, 10.1.2.3", 200, "203.0.113.8"},             // trusted hop skipped
			{"192.0.2.66, 203.0.113.9, 10.1.2.3", 200, "203.0.113.9"}, // the client's own claim is ignored
			{"192.0.2.67, 203.0.113.9", 429, "203.0.113.9"},
			{"::ffff:203.0.113.10", 200, "203.0.113.10"},
			{"2001:db8:1:2::1", 200, "2001:db8:1:2::/64"},
			{"2001:db8:1:2:ffff::9", 429, "2001:db8:1:2::/64"}, // same /64
			{"", 200, "127.0.0.1"},                             // no header: the proxy itself
		}
		for i, s := range steps {
			hdr := []string{"Accept", "application/json"}
			if s.xff != "" {
				hdr = append(hdr, "X-Forwarded-For", s.xff)
			}
			r := e.do(t, "GET", "/v1/ratelimit/gate/per-ip", "", hdr...)
			if d := r.decision(t); r.Status != s.status || d.Key != s.wantKey {
				t.Errorf("step %d (XFF %q): %d key %q, want %d key %q", i, s.xff, r.Status, d.Key, s.status, s.wantKey)
			}
		}
	})
}

// TestRateLimitCheckKeys checks whose quota /check spends: an explicit key,
// else the caller's address for an ip policy or the header a header policy
// names.
func TestRateLimitCheckKeys(t *testing.T) {
	byKey := policy("by-api-key", ratelimit.FixedWindow, 1, time.Minute)
	byKey.Key = "header:X-Api-Key"
	e := newTestEnv(t, withPolicies(policy("per-ip", ratelimit.FixedWindow, 1, time.Minute), byKey))
	r := e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"per-ip"}`)
	if d := r.decision(t); r.Status != 200 || d.Key != "127.0.0.1" {
		t.Errorf("ip policy without key: %d key %q, want 200 for 127.0.0.1", r.Status, d.Key)
	}
	r = e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"by-api-key"}`, "X-Api-Key", "alpha")
	if d := r.decision(t); r.Status != 200 || d.Key != "alpha" {
		t.Errorf("header policy: %d key %q, want 200 for alpha", r.Status, d.Key)
	}
	r = e.do(t, "GET", "/v1/ratelimit/gate/by-api-key", "", "Accept", "application/json", "X-Api-Key", "alpha")
	if d := r.decision(t); r.Status != 429 || d.Key != "alpha" {
		t.Errorf("gate, same header: %d key %q, want 429 for alpha", r.Status, d.Key)
	}
	r = e.do(t, "GET", "/v1/ratelimit/gate/by-api-key", "")
	if r.Status != 400 || r.JSON(t)["errors"].([]any)[0].(map[string]any)["field"] != "X-Api-Key" {
		t.Errorf("gate without the header: %d %s, want 400 naming X-Api-Key", r.Status, r.Body)
	}
	r = e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"per-ip","key":"user:42"}`)
	if d := r.decision(t); r.Status != 200 || d.Key != "user:42" {
		t.Errorf("explicit key: %d key %q, want 200 for user:42", r.Status, d.Key)
	}
}

// TestRateLimitGateMethodsAndDenyStatus checks that the gate answers any
// method and uses the policy's deny status.
func TestRateLimitGateMethodsAndDenyStatus(t *testing.T) {
	nginx := policy("nginx", ratelimit.FixedWindow, 2, time.Minute)
	nginx.DenyStatus = 403
	e := newTestEnv(t, withPolicies(nginx), withRouterConfig(func(h *handlers.Config) { h.RateLimit.LegacyHeaders = true }))
	// Any method, and with the original path appended (Envoy's path_prefix).
	for _, c := range []struct{ method, path string }{{"POST", "/v1/ratelimit/gate/nginx"}, {"DELETE", "/v1/ratelimit/gate/nginx/orders"}} {
		if r := e.do(t, c.method, c.path, ""); r.Status != 200 {
			t.Errorf("%s %s: status = %d, want 200", c.method, c.path, r.Status)
		}
	}
	r := e.do(t, "PUT", "/v1/ratelimit/gate/nginx", "")
	if r.Status != 403 {
		t.Fatalf("PUT over the limit: status = %d, want the policy's 403", r.Status)
	}
	want := map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "RateLimit-Policy": `"nginx";q=2;w=60`}
	for h, v := range want {
		if got := r.Header.Get(h); got != v {
			t.Errorf("%s = %q, want %q", h, got, v)
		}
	}
	if r.Header.Get("Retry-After") == "" || r.Header.Get("X-RateLimit-Reset") == "" {
		t.Errorf("denial without Retry-After or X-RateLimit-Reset: %v", r.Header)
	}
}

// TestRateLimitDuplicateHeaders: a policy's key or cost header sent twice is
// a 400 naming it, on the gate and on check, and spends nothing.
func TestRateLimitDuplicateHeaders(t *testing.T) {
	keyed := policy("keyed", ratelimit.FixedWindow, 3, 10*time.Second)
	keyed.Key = "header:X-Api-Key"
	costly := policy("costly", ratelimit.FixedWindow, 3, 10*time.Second)
	costly.Cost = ratelimit.CostSource{Header: "X-Tokens", Max: 3}
	e := newTestEnv(t, withPolicies(keyed, costly))
	for _, c := range []struct {
		name, method, path, body, header string
	}{
		{"gate key header", "GET", "/v1/ratelimit/gate/keyed", "", "X-Api-Key"},
		{"check key header", "POST", "/v1/ratelimit/check", `{"policy":"keyed"}`, "X-Api-Key"},
		{"gate cost header", "GET", "/v1/ratelimit/gate/costly", "", "X-Tokens"},
		{"check cost header", "POST", "/v1/ratelimit/check", `{"policy":"costly"}`, "X-Tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.method, c.path, c.body, c.header, "1", c.header, "2", "Accept", "application/json")
			p := wantProblem(t, r, http.StatusBadRequest, "invalid-request")
			if want := "the " + c.header + " header must be sent once, got 2 values"; p.Detail != want ||
				len(p.Errors) != 1 || p.Errors[0].Field != c.header || p.Errors[0].Rule != "once" {
				t.Errorf("detail %q, errors %+v, want %q naming %s, rule once", p.Detail, p.Errors, want, c.header)
			}
		})
	}
	if ks := e.keys(t); len(ks) != 0 {
		t.Errorf("refused requests left keys in Redis: %v", ks)
	}
}
