package integration

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
)

// badInputMaxTTL and badInputMaxBody are the bounds of the bad-input server.
const (
	badInputMaxTTL  = time.Minute
	badInputMaxBody = 1024
)

func withLimits(maxTTL time.Duration, maxBody int64) envOption {
	return func(c *envConfig) {
		c.svc.MaxTTL = maxTTL
		c.svc.DefaultTTL = maxTTL / 2
		c.router.MaxBodyBytes = maxBody
	}
}

// redisSnapshot is everything this server has in Redis: its keys and the
// content of the victim lock.
type redisSnapshot struct {
	Keys  []string
	Lock  redisLock
	Fence string
}

func (e *testEnv) snapshot(t testing.TB, name string) redisSnapshot {
	t.Helper()
	keys := e.keys(t)
	slices.Sort(keys)
	fence, err := e.RDB.Get(t.Context(), e.fenceKey(name)).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", e.fenceKey(name), err)
	}
	return redisSnapshot{Keys: keys, Lock: e.lockHash(t, name), Fence: fence}
}

func TestBadInputChangesNothing(t *testing.T) {
	e := newTestEnv(t, withLimits(badInputMaxTTL, badInputMaxBody))
	const victim = "victim"
	held := e.acquire(t, victim, `{"ttl":"50s"}`)
	tok := held.Token
	// rwVictim is held for read by rwTok: a release or renew that picked a
	// mode from a repeated or empty ?mode= would drop or extend it.
	const rwVictim = "rwvictim"
	r := e.do(t, "POST", "/v1/rwlocks/"+rwVictim, `{"mode":"read","ttl":"50s"}`)
	wantStatus(t, r, http.StatusCreated)
	rwTok, _ := r.JSON(t)["token"].(string)
	before := e.snapshot(t, victim)

	long := strings.Repeat("a", 129)
	badTokens := map[string]string{
		"too short":     "abc",
		"bad character": "aaaaaaaaaaaaaaaaaaaa!!",
		"space":         "aaaaaaaaaa aaaaaaaaaaa",
		"too long":      strings.Repeat("a", 129),
	}
	type tc struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		status  int
		typ     string
		field   string // the field named in errors, "" when none is expected
		detail  string // a phrase the detail must contain
	}
	cases := []tc{
		{"name with {", "POST", "/v1/locks/%7B", "", nil, 400, "invalid-request", "name", "lock name must be 1-128 characters"},
		{"name with }", "POST", "/v1/locks/a%7D", "", nil, 400, "invalid-request", "name", "lock name must be 1-128 characters"},
		{"hash tag in name", "POST", "/v1/locks/%7Bvictim%7D", "", nil, 400, "invalid-request", "name", "lock name"},
		{"name with space", "POST", "/v1/locks/a%20b", "", nil, 400, "invalid-request", "name", "lock name"},
		{"name starting with -", "POST", "/v1/locks/-victim", "", nil, 400, "invalid-request", "name", "starting with a letter or digit"},
		{"129-character name", "POST", "/v1/locks/" + long, "", nil, 400, "invalid-request", "name", "1-128 characters"},
		{"bad name on inspect", "GET", "/v1/locks/a%7Bb", "", nil, 400, "invalid-request", "name", "lock name"},
		{"bad name on renew", "POST", "/v1/locks/a%20b/renew", "", []string{"Lock-Token", tok}, 400, "invalid-request", "name", "lock name"},
		{"bad name on release", "DELETE", "/v1/locks/" + long, "", []string{"Lock-Token", tok}, 400, "invalid-request", "name", "lock name"},
		{"bad name on force-release", "DELETE", "/v1/locks/%7D?force=true", "", []string{"Authorization", "Bearer " + testAdminKey}, 400, "invalid-request", "name", "lock name"},

		{"malformed JSON", "POST", "/v1/locks/" + victim, `{"ttl":`, nil, 400, "invalid-request", "body", "malformed JSON"},
		{"JSON syntax error", "POST", "/v1/locks/fresh", `{ttl: 5s}`, nil, 400, "invalid-request", "body", "malformed JSON at byte"},
		{"unknown field", "POST", "/v1/locks/fresh", `{"ttl":"5s","colour":"red"}`, nil, 400, "invalid-request", "colour", `unknown field "colour"`},
		{"trailing object", "POST", "/v1/locks/fresh", `{"ttl":"5s"} {"ttl":"6s"}`, nil, 400, "invalid-request", "body", "single JSON object"},
		{"trailing garbage", "POST", "/v1/locks/fresh", `{"ttl":"5s"}x`, nil, 400, "invalid-request", "body", "single JSON object"},
		{"not an object", "POST", "/v1/locks/fresh", `["5s"]`, nil, 400, "invalid-request", "body", "JSON object"},
		{"ttl of the wrong type", "POST", "/v1/locks/fresh", `{"ttl":5}`, nil, 400, "invalid-request", "ttl", "ttl must be a JSON string"},
		{"unknown field on renew", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"5s","extra":1}`, []string{"Lock-Token", tok}, 400, "invalid-request", "extra", "unknown field"},
		{"field names in another case", "POST", "/v1/locks/fresh", `{"TTL":"1h","Keepalive":true,"MAX_HOLD":"2h"}`, nil, 400, "invalid-request", "TTL", `unknown field "TTL" (field names are case-sensitive`},
		{"field name in another case on re-entry", "POST", "/v1/locks/" + victim, `{"Ttl":"40s"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "Ttl", `did you mean "ttl"`},
		{"duplicate ttl", "POST", "/v1/locks/fresh", `{"ttl":"1s","ttl":"50s"}`, nil, 400, "invalid-request", "ttl", `duplicate field "ttl"`},
		{"duplicate renew ttl", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"1s","ttl":"50s"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", `duplicate field "ttl"`},
		{"duplicate limit", "POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":"1m","limit":1000000}`, nil, 400, "invalid-request", "limit", `duplicate field "limit"`},
		{"limit with an exponent", "POST", "/v1/ratelimit/check", `{"key":"k","limit":1e3,"window":"1m"}`, nil, 400, "invalid-request", "limit", "limit must be an integer written without a fraction or exponent"},
		{"fractional limit", "POST", "/v1/ratelimit/check", `{"key":"k","limit":2.5,"window":"1m"}`, nil, 400, "invalid-request", "limit", "limit must be an integer, got 2.5"},

		{"body over the limit", "POST", "/v1/locks/fresh", `{"ttl":"5s","pad":"` + strings.Repeat("x", 2*badInputMaxBody) + `"}`, nil,
			413, "payload-too-large", "", "larger than 1024 bytes"},
		{"renew body over the limit", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"` + strings.Repeat("9", 2*badInputMaxBody) + `s"}`,
			[]string{"Lock-Token", tok}, 413, "payload-too-large", "", "larger than 1024 bytes"},
		{"text/plain body", "POST", "/v1/locks/fresh", `{"ttl":"5s"}`, []string{"Content-Type", "text/plain"},
			415, "unsupported-media", "", "must be application/json, got Content-Type text/plain"},
		{"form body on renew", "POST", "/v1/locks/" + victim + "/renew", `ttl=5s`, []string{"Content-Type", "application/x-www-form-urlencoded", "Lock-Token", tok},
			415, "unsupported-media", "", "must be application/json"},

		{"unparsable ttl", "POST", "/v1/locks/fresh", `{"ttl":"soon"}`, nil, 400, "invalid-request", "ttl", `positive duration such as "30s"`},
		{"ttl out of range", "POST", "/v1/locks/fresh", `{"ttl":"9999999h"}`, nil, 400, "invalid-request", "ttl", `ttl is out of range: "9999999h"`},
		{"renew ttl out of range", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"9999999h"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", "ttl is out of range"},
		{"keep-alive ttl under its min", "POST", "/v1/locks/fresh", `{"ttl":"1ms","keepalive":true}`, nil, 400, "invalid-request", "ttl", "ttl of a keep-alive lease must be at least 1s"},
		{"max_hold under the ttl", "POST", "/v1/locks/fresh", `{"ttl":"10s","keepalive":true,"max_hold":"1s"}`, nil, 400, "invalid-request", "max_hold", "max_hold must be at least the ttl (10s), got 1s"},
		{"max_hold under the default ttl", "POST", "/v1/locks/fresh", `{"keepalive":true,"max_hold":"1s"}`, nil, 400, "invalid-request", "max_hold", "max_hold must be at least the ttl (30s)"},
		{"keep-alive re-entry with max_hold under the ttl", "POST", "/v1/locks/" + victim, `{"ttl":"10s","keepalive":true,"max_hold":"1s"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "max_hold", "at least the ttl"},
		{"ttl without unit", "POST", "/v1/locks/fresh", `{"ttl":"30"}`, nil, 400, "invalid-request", "ttl", `got "30"`},
		{"zero ttl", "POST", "/v1/locks/fresh", `{"ttl":"0s"}`, nil, 400, "invalid-request", "ttl", "positive duration"},
		{"negative ttl", "POST", "/v1/locks/fresh", `{"ttl":"-5s"}`, nil, 400, "invalid-request", "ttl", "positive duration"},
		{"ttl over the max", "POST", "/v1/locks/fresh", `{"ttl":"2m"}`, nil, 400, "invalid-request", "ttl", "ttl must be at most 1m0s"},
		{"ttl under the min", "POST", "/v1/locks/fresh", `{"ttl":"500us"}`, nil, 400, "invalid-request", "ttl", "ttl must be at least 1ms"},
		{"reentrant ttl over the max", "POST", "/v1/locks/" + victim, `{"ttl":"1h"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", "at most 1m0s"},
		{"renew ttl over the max", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"90s"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", "at most 1m0s"},
		{"negative renew ttl", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"-1s"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", "positive duration"},
		{"unparsable renew ttl", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"1 minute"}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", "positive duration"},

		// "" is no duration; null is the default (see TestNullDurationsAreDefaults).
		{"empty ttl", "POST", "/v1/locks/fresh", `{"ttl":""}`, nil, 400, "invalid-request", "ttl", `ttl must be a positive duration such as "30s" or "1500ms", got ""`},
		{"empty wait", "POST", "/v1/locks/fresh", `{"wait":""}`, nil, 400, "invalid-request", "wait", `got ""`},
		{"empty max_hold", "POST", "/v1/locks/fresh", `{"keepalive":true,"max_hold":""}`, nil, 400, "invalid-request", "max_hold", `got ""`},
		{"empty heartbeat", "POST", "/v1/locks/fresh", `{"keepalive":true,"heartbeat":""}`, nil, 400, "invalid-request", "heartbeat", `got ""`},
		{"empty ttl on re-entry", "POST", "/v1/locks/" + victim, `{"ttl":""}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", `got ""`},
		{"empty renew ttl", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":""}`, []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", `got ""`},
		{"empty hold ttl", "POST", "/v1/locks/fresh/hold", `{"ttl":""}`, nil, 400, "invalid-request", "ttl", `got ""`},
		{"empty rwlock wait", "POST", "/v1/rwlocks/fresh", `{"mode":"read","wait":""}`, nil, 400, "invalid-request", "wait", `got ""`},
		{"empty semaphore ttl", "POST", "/v1/semaphores/fresh", `{"permits":2,"ttl":""}`, nil, 400, "invalid-request", "ttl", `got ""`},
		{"empty window", "POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":""}`, nil, 400, "invalid-request", "window", `got ""`},
		{"heartbeat under the renewer's poll", "POST", "/v1/locks/fresh", `{"keepalive":true,"heartbeat":"1ms"}`, nil, 400, "invalid-request", "heartbeat", "heartbeat must be at least 100ms"},
		{"empty mode", "POST", "/v1/rwlocks/fresh", `{"mode":""}`, nil, 400, "invalid-request", "mode", `mode must be read or write, got ""`},
		{"permits 0", "POST", "/v1/semaphores/fresh", `{"permits":0}`, nil, 400, "invalid-request", "permits", "permits must be at least 1, got 0"},
		{"5,000-character force", "DELETE", "/v1/locks/" + victim + "?force=" + strings.Repeat("x", 5000), "", []string{"Authorization", "Bearer " + testAdminKey}, 400, "invalid-request", "force", "… (5000 characters)"},

		// A header Latchkey reads is read once; a body in a coding it does not decode is refused.
		{"two Lock-Tokens on release", "DELETE", "/v1/locks/" + victim, "", []string{"Lock-Token", tok, "Lock-Token", tok}, 400, "invalid-request", "Lock-Token", "the Lock-Token header must be sent once, got 2 values"},
		{"two Lock-Tokens on renew", "POST", "/v1/locks/" + victim + "/renew", "", []string{"Lock-Token", tok, "Lock-Token", "other-token-0123456789ab"}, 400, "invalid-request", "Lock-Token", "must be sent once"},
		{"two Lock-Tokens on re-entry", "POST", "/v1/locks/" + victim, "", []string{"Lock-Token", tok, "Lock-Token", tok}, 400, "invalid-request", "Lock-Token", "must be sent once"},
		{"two Authorizations on force-release", "DELETE", "/v1/locks/" + victim + "?force=true", "", []string{"Authorization", "Bearer " + testAdminKey, "Authorization", "Bearer " + testAdminKey}, 400, "invalid-request", "Authorization", "must be sent once"},
		{"two Content-Types", "POST", "/v1/locks/" + victim, `{"ttl":"40s"}`, []string{"Lock-Token", tok, "Content-Type", "application/json", "Content-Type", "application/json"}, 400, "invalid-request", "Content-Type", "must be sent once"},
		{"gzip body on re-entry", "POST", "/v1/locks/" + victim, `{"ttl":"40s"}`, []string{"Lock-Token", tok, "Content-Encoding", "gzip"}, 415, "unsupported-media", "", "does not decode Content-Encoding gzip"},
		{"deflate body on renew", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"40s"}`, []string{"Lock-Token", tok, "Content-Encoding", "deflate"}, 415, "unsupported-media", "", "deflate"},

		{"renew without Lock-Token", "POST", "/v1/locks/" + victim + "/renew", "", nil, 400, "invalid-request", "Lock-Token", "Lock-Token header is required"},
		{"release without Lock-Token", "DELETE", "/v1/locks/" + victim, "", nil, 400, "invalid-request", "Lock-Token", "Lock-Token header is required"},
		{"force that is not a boolean", "DELETE", "/v1/locks/" + victim + "?force=yes", "", []string{"Authorization", "Bearer " + testAdminKey}, 400, "invalid-request", "force", "force must be true or false"},

		// A query parameter a route does not read is refused, not ignored (the gate's excepted).
		{"ttl in the query of an acquire", "POST", "/v1/locks/uq?ttl=5m", "", nil, 400, "invalid-request", "ttl", `unknown query parameter "ttl": this route takes no query parameter`},
		{"ttl in the query of a re-entry", "POST", "/v1/locks/" + victim + "?ttl=59s", "", []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", "unknown query parameter"},
		{"ttl in the query of a renew", "POST", "/v1/locks/" + victim + "/renew?ttl=59s", "", []string{"Lock-Token", tok}, 400, "invalid-request", "ttl", "unknown query parameter"},
		{"misspelt force", "DELETE", "/v1/locks/" + victim + "?forse=true", "", []string{"Lock-Token", tok}, 400, "invalid-request", "forse", `this route takes only "force"`},
		{"mode on a lock release", "DELETE", "/v1/locks/" + victim + "?mode=read", "", []string{"Lock-Token", tok}, 400, "invalid-request", "mode", "unknown query parameter"},
		{"permits in the query of a semaphore acquire", "POST", "/v1/semaphores/fresh?permits=3", `{"permits":2}`, nil, 400, "invalid-request", "permits", "unknown query parameter"},
		{"wait in the query of a rwlock acquire", "POST", "/v1/rwlocks/" + rwVictim + "?wait=5s", `{"mode":"read"}`, nil, 400, "invalid-request", "wait", "unknown query parameter"},
		{"limit in the query of a check", "POST", "/v1/ratelimit/check?limit=1000", `{"key":"k","limit":1,"window":"1m"}`, nil, 400, "invalid-request", "limit", "unknown query parameter"},

		// ?mode= is read as ?force= is: exactly read or write, given at most once.
		{"two modes on rwlock release", "DELETE", "/v1/rwlocks/" + rwVictim + "?mode=read&mode=write", "", []string{"Lock-Token", rwTok}, 400, "invalid-request", "mode", "mode must be given at most once, got it 2 times"},
		{"empty mode on rwlock release", "DELETE", "/v1/rwlocks/" + rwVictim + "?mode=", "", []string{"Lock-Token", rwTok}, 400, "invalid-request", "mode", `mode must be read or write (in lower case), got ""`},
		{"upper-case mode on rwlock release", "DELETE", "/v1/rwlocks/" + rwVictim + "?mode=READ", "", []string{"Lock-Token", rwTok}, 400, "invalid-request", "mode", `got "READ"`},
		{"two modes on rwlock renew", "POST", "/v1/rwlocks/" + rwVictim + "/renew?mode=read&mode=write", `{"ttl":"59s"}`, []string{"Lock-Token", rwTok}, 400, "invalid-request", "mode", "at most once"},
		{"empty mode on rwlock renew", "POST", "/v1/rwlocks/" + rwVictim + "/renew?mode=", `{"ttl":"59s"}`, []string{"Lock-Token", rwTok}, 400, "invalid-request", "mode", `got ""`},
	}
	for desc, bad := range badTokens {
		hdr := []string{"Lock-Token", bad}
		const want = "Lock-Token must be 22-128 base64url characters"
		cases = append(cases,
			tc{"acquire, token " + desc, "POST", "/v1/locks/" + victim, "", hdr, 400, "invalid-request", "Lock-Token", want},
			tc{"inspect, token " + desc, "GET", "/v1/locks/" + victim, "", hdr, 400, "invalid-request", "Lock-Token", want},
			tc{"renew, token " + desc, "POST", "/v1/locks/" + victim + "/renew", "", hdr, 400, "invalid-request", "Lock-Token", want},
			tc{"release, token " + desc, "DELETE", "/v1/locks/" + victim, "", hdr, 400, "invalid-request", "Lock-Token", want},
		)
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pttl := e.RDB.PTTL(t.Context(), e.lockKey(victim)).Val()
			r := e.do(t, c.method, c.path, c.body, c.headers...)
			p := wantProblem(t, r, c.status, c.typ)
			if !strings.Contains(p.Detail, c.detail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, c.detail)
			}
			if len(p.Detail) > 300 {
				t.Errorf("detail of %d bytes, want what the client sent quoted short: %.300s", len(p.Detail), p.Detail)
			}
			if c.field != "" {
				if len(p.Errors) == 0 || p.Errors[0].Field != c.field || p.Errors[0].Rule == "" {
					t.Errorf("errors = %+v, want the first to name field %q and its rule", p.Errors, c.field)
				}
			}
			if strings.Contains(string(r.Body), tok) {
				t.Errorf("problem reveals the victim's token: %s", r.Body)
			}
			if diff := cmp.Diff(before, e.snapshot(t, victim)); diff != "" {
				t.Errorf("Redis changed (-before +after):\n%s", diff)
			}
			if after := e.RDB.PTTL(t.Context(), e.lockKey(victim)).Val(); after > pttl {
				t.Errorf("victim PTTL went from %s to %s: the refused request renewed it", pttl, after)
			}
		})
	}

	// None of that extended the victim's lease (renew to 90s or 1h was refused).
	if pttl, err := e.RDB.PTTL(t.Context(), e.lockKey(victim)).Result(); err != nil || pttl > 50*time.Second {
		t.Errorf("victim PTTL = %s (%v), want at most the 50s it was granted", pttl, err)
	}
	// Nor released or extended the read lease.
	st := e.do(t, "GET", "/v1/rwlocks/"+rwVictim, "", "Lock-Token", rwTok).JSON(t)
	if st["owned"] != true || st["mode"] != "read" || st["hold_count"] != 1.0 || st["ttl_ms"].(float64) > 50000 {
		t.Errorf("read lease after the refusals: %v, want it owned, read, one hold, at most the 50s granted", st)
	}
}

// An empty lock name: chi does not match /v1/locks/ to /v1/locks/{name}, so
// the router's not-found problem answers; it does match /v1/locks//renew to
// /v1/locks/{name}/renew with an empty name, and the service's name check
// answers that. Neither path is in api/openapi.yaml (gorilla/mux, which the
// spec check routes with, matches no empty segment), so these requests go
// through a client that does not check responses against it.
func TestEmptyLockName(t *testing.T) {
	e := newTestEnv(t)
	raw := *e
	raw.Client = &http.Client{}
	held := e.acquire(t, "held", "")
	before := e.snapshot(t, "held")
	for _, method := range []string{"POST", "GET", "DELETE"} {
		r := raw.do(t, method, "/v1/locks/", `{"ttl":"5s"}`, "Lock-Token", held.Token)
		p := wantProblem(t, r, http.StatusNotFound, "not-found")
		if want := "no route for " + method + " /v1/locks/"; p.Detail != want {
			t.Errorf("%s: detail = %q, want %q", method, p.Detail, want)
		}
	}
	r := raw.do(t, "POST", "/v1/locks//renew", `{"ttl":"5s"}`, "Lock-Token", held.Token)
	p := wantProblem(t, r, http.StatusBadRequest, "invalid-request")
	if len(p.Errors) == 0 || p.Errors[0].Field != "name" {
		t.Errorf("renew with an empty name: errors = %+v, want field name", p.Errors)
	}
	if diff := cmp.Diff(before, e.snapshot(t, "held")); diff != "" {
		t.Errorf("requests with an empty name changed Redis (-before +after):\n%s", diff)
	}
}

// TestRequestIDOverHTTP: every answer carries X-Request-Id; a client's
// well-formed ID is kept, and one too long or with other characters is
// replaced (the spec client checks each answer's header against its pattern).
func TestRequestIDOverHTTP(t *testing.T) {
	e := newTestEnv(t)
	for _, tc := range []struct {
		desc, lock, sent string
		kept             bool
	}{
		{"none", "rid-none", "", false},
		{"a UUID", "rid-uuid", "0b5d3a8e-6f0c-4c55-9d7e-0123456789ab", true},
		{"5,000 characters", "rid-long", strings.Repeat("x", 5000), false},
		{"other characters", "rid-chars", "<script>alert(1)</script>", false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var hdr []string
			if tc.sent != "" {
				hdr = []string{"X-Request-Id", tc.sent}
			}
			ok := e.do(t, "POST", "/v1/locks/"+tc.lock, "", hdr...)
			wantStatus(t, ok, http.StatusCreated)
			bad := e.do(t, "POST", "/v1/locks/fresh", `{"ttl":"soon"}`, hdr...)
			p := wantProblem(t, bad, http.StatusBadRequest, "invalid-request")
			for _, r := range []response{ok, bad} {
				got := r.Header.Get("X-Request-Id")
				if got == "" || len(got) > 128 || (tc.kept && got != tc.sent) || (!tc.kept && got == tc.sent) {
					t.Errorf("X-Request-Id = %q (sent %.40q), want kept %v", got, tc.sent, tc.kept)
				}
			}
			if p.RequestID != bad.Header.Get("X-Request-Id") {
				t.Errorf("problem request_id %q, header %q: want the same", p.RequestID, bad.Header.Get("X-Request-Id"))
			}
		})
	}
}

// TestNullDurationsAreDefaults: a duration field sent as null takes its
// default, as when it is absent (where "" is a 400: TestBadInputChangesNothing).
func TestNullDurationsAreDefaults(t *testing.T) {
	e := newTestEnv(t)
	r := e.do(t, "POST", "/v1/locks/nulls", `{"ttl":null,"wait":null,"keepalive":true,"max_hold":null,"heartbeat":null}`)
	wantStatus(t, r, http.StatusCreated)
	l := decodeAs[leaseJSON](t, r)
	if want := locks.DefaultConfig().DefaultTTL.Milliseconds(); l.TTLMS != want {
		t.Errorf("ttl_ms = %d, want the default %d", l.TTLMS, want)
	}
	if l.Keepalive == nil || l.Keepalive.HeartbeatMS != 0 {
		t.Errorf("keepalive = %+v, want a keep-alive lease without a heartbeat", l.Keepalive)
	}
	wantStatus(t, e.do(t, "POST", "/v1/locks/nulls/renew", `{"ttl":null}`, "Lock-Token", l.Token), http.StatusOK)
}

// TestLongInputIsQuotedShort: a detail quotes at most the first 64
// characters of a 5,000-character value, whatever the field, and the
// refused request changes nothing in Redis.
func TestLongInputIsQuotedShort(t *testing.T) {
	e := newTestEnv(t)
	const victim = "victim"
	held := e.acquire(t, victim, `{"ttl":"50s"}`)
	before := e.snapshot(t, victim)
	long, digits := strings.Repeat("x", 5000), strings.Repeat("9", 4999)
	for _, c := range []struct {
		name, method, path, body string
		field, quote             string
	}{
		{"ttl", "POST", "/v1/locks/fresh", `{"ttl":"` + digits + `s"}`, "ttl", `"` + strings.Repeat("9", 64) + `"… (5000 characters)`},
		{"wait", "POST", "/v1/locks/fresh", `{"wait":"` + long + `"}`, "wait", `"` + long[:64] + `"… (5000 characters)`},
		{"renew ttl", "POST", "/v1/locks/" + victim + "/renew", `{"ttl":"` + long + `"}`, "ttl", "… (5000 characters)"},
		{"mode", "POST", "/v1/rwlocks/fresh", `{"mode":"` + long + `"}`, "mode", "… (5000 characters)"},
		{"window", "POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":"` + digits + `s"}`, "window", "… (5000 characters)"},
		{"permits", "POST", "/v1/semaphores/fresh", `{"permits":` + digits + `}`, "permits", strings.Repeat("9", 64) + "… (4999 characters)"},
		{"field name", "POST", "/v1/locks/fresh", `{"` + long + `":1}`, long[:64] + "… (5000 characters)", "… (5000 characters)"},
		{"policy", "POST", "/v1/ratelimit/check", `{"policy":"` + long + `"}`, "policy", "policy name must be 1-64 characters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, c.method, c.path, c.body, "Lock-Token", held.Token)
			p := wantProblem(t, r, http.StatusBadRequest, "invalid-request")
			if !strings.Contains(p.Detail, c.quote) || len(p.Detail) > 300 {
				t.Errorf("detail = %.300q (%d bytes), want it to quote %q and no more", p.Detail, len(p.Detail), c.quote)
			}
			if c.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != c.field) {
				t.Errorf("errors = %.300v, want the first to name %q", p.Errors, c.field)
			}
			if diff := cmp.Diff(before, e.snapshot(t, victim)); diff != "" {
				t.Errorf("Redis changed (-before +after):\n%s", diff)
			}
		})
	}
}
