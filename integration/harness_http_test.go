package integration

// The harness's requests (send, do) and the assertions on their answers.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// response is a finished HTTP exchange, or the error that ended it (Err,
// from send only).
type response struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// Token is the Lock-Token header of the response.
func (r response) Token() string { return r.Header.Get("Lock-Token") }

// Fence is the fence of a lease in the body (0 when there is none).
func (r response) Fence() int64 {
	var v struct {
		Fence int64 `json:"fence"`
	}
	_ = json.Unmarshal(r.Body, &v)
	return v.Fence
}

// JSON decodes the body into a map.
func (r response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// newRequest builds a request to the server; a non-empty body is sent as
// application/json unless headers set another Content-Type. Header pairs are
// name, value, name, value...
func (e *testEnv) newRequest(t testing.TB, ctx context.Context, method, path, body string, headerPairs ...string) *http.Request {
	t.Helper()
	req, err := e.buildRequest(ctx, method, path, body, headerPairs...)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func (e *testEnv) buildRequest(ctx context.Context, method, path, body string, headerPairs ...string) (*http.Request, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	named := map[string]bool{}
	for i := 0; i+1 < len(headerPairs); i += 2 {
		if name := http.CanonicalHeaderKey(headerPairs[i]); named[name] {
			req.Header.Add(name, headerPairs[i+1]) // a header named twice is sent twice
		} else {
			req.Header.Set(name, headerPairs[i+1])
			named[name] = true
		}
	}
	return req, nil
}

// send sends one request through the spec-checking client and reads the
// whole answer. It may be called from any goroutine: a failure to send or
// read is reported in Err, never by failing the test.
func (e *testEnv) send(ctx context.Context, method, path, body string, headerPairs ...string) response {
	req, err := e.buildRequest(ctx, method, path, body, headerPairs...)
	if err != nil {
		return response{Err: err}
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		return response{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}
}

// do sends one request, as send does, and fails t if it gets no answer.
func (e *testEnv) do(t testing.TB, method, path, body string, headerPairs ...string) response {
	t.Helper()
	r := e.send(t.Context(), method, path, body, headerPairs...)
	if r.Err != nil {
		t.Fatalf("%s %s: %v", method, path, r.Err)
	}
	return r
}

// leaseJSON is the Lease schema of api/openapi.yaml.
type leaseJSON struct {
	Name      string         `json:"name"`
	Token     string         `json:"token"`
	Fence     int64          `json:"fence"`
	HoldCount int64          `json:"hold_count"`
	TTLMS     int64          `json:"ttl_ms"`
	ExpiresAt time.Time      `json:"expires_at"`
	Reentrant bool           `json:"reentrant"`
	Keepalive *keepaliveJSON `json:"keepalive"`
	WaitedMS  int64          `json:"waited_ms"` // present when the acquire waited
}

// keepaliveJSON is the Keepalive schema of api/openapi.yaml.
type keepaliveJSON struct {
	MaxHoldUntil time.Time  `json:"max_hold_until"`
	HeartbeatMS  int64      `json:"heartbeat_ms"`
	HeartbeatDue *time.Time `json:"heartbeat_due"`
}

// stateJSON is the LockState schema of api/openapi.yaml.
type stateJSON struct {
	Name       string         `json:"name"`
	Held       bool           `json:"held"`
	HoldCount  int64          `json:"hold_count"`
	TTLMS      int64          `json:"ttl_ms"`
	ExpiresAt  *time.Time     `json:"expires_at"`
	Fence      int64          `json:"fence"`
	Owned      *bool          `json:"owned"`
	Waiters    int64          `json:"waiters"`
	Fair       bool           `json:"fair"`
	Keepalive  *keepaliveJSON `json:"keepalive"`
	LostReason string         `json:"lost_reason"`
	Owner      string         `json:"owner"`
	GrantedAt  *time.Time     `json:"granted_at"`
}

// ownedIs reports whether the state says owned, and says want: the token
// sent owns the lease (true) or not (false).
func (s stateJSON) ownedIs(want bool) bool { return s.Owned != nil && *s.Owned == want }

// String shows the state as its JSON.
func (s stateJSON) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// releaseJSON is the ReleaseResult schema of api/openapi.yaml.
type releaseJSON struct {
	Released  bool  `json:"released"`
	HoldCount int64 `json:"hold_count"`
}

// problemJSON is the Problem schema of api/openapi.yaml.
type problemJSON struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Instance  string `json:"instance"`
	RequestID string `json:"request_id"`
	Errors    []struct {
		Field  string `json:"field"`
		Rule   string `json:"rule"`
		Detail string `json:"detail"`
	} `json:"errors"`
	Leader map[string]any `json:"leader"` // an election-held answer's
}

// decodeAs decodes a response body strictly into T.
func decodeAs[T any](t testing.TB, r response) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(string(r.Body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("body %s does not decode as %T: %v", r.Body, v, err)
	}
	return v
}

// wantStatus fails t unless r has the wanted status.
func wantStatus(t testing.TB, r response, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status = %d, want %d; body %s", r.Status, want, r.Body)
	}
}

// wantProblem checks that r is a problem+json of the given status and type
// and returns it.
func wantProblem(t testing.TB, r response, status int, typ string) problemJSON {
	t.Helper()
	wantStatus(t, r, status)
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	p := decodeAs[problemJSON](t, r)
	if p.Type != typ || p.Status != status {
		t.Errorf("problem type/status = %q/%d, want %q/%d (detail %q)", p.Type, p.Status, typ, status, p.Detail)
	}
	return p
}

// acquire takes name for a new token and returns the lease (201 required).
func (e *testEnv) acquire(t testing.TB, name, body string, headerPairs ...string) leaseJSON {
	t.Helper()
	r := e.do(t, "POST", "/v1/locks/"+name, body, headerPairs...)
	wantStatus(t, r, http.StatusCreated)
	l := decodeAs[leaseJSON](t, r)
	if got := r.Header.Get("Lock-Token"); got != l.Token {
		t.Fatalf("Lock-Token header %q differs from body token %q", got, l.Token)
	}
	return l
}

// acquireKeepalive takes a keep-alive lease through e and returns its token.
func (e *testEnv) acquireKeepalive(t testing.TB, name, body string) string {
	t.Helper()
	l := e.acquire(t, name, body)
	if l.Keepalive == nil {
		t.Fatalf("acquire %s %s: no keepalive in the lease", name, body)
	}
	return l.Token
}

// release releases one hold of name (200 required).
func (e *testEnv) release(t testing.TB, name, token string, headerPairs ...string) releaseJSON {
	t.Helper()
	r := e.do(t, "DELETE", "/v1/locks/"+name, "", append([]string{"Lock-Token", token}, headerPairs...)...)
	wantStatus(t, r, http.StatusOK)
	return decodeAs[releaseJSON](t, r)
}

// inspect reads the state of name (GET /v1/locks/{name}), with a token when
// one is given.
func (e *testEnv) inspect(t testing.TB, name string, headerPairs ...string) stateJSON {
	t.Helper()
	r := e.do(t, "GET", "/v1/locks/"+name, "", headerPairs...)
	wantStatus(t, r, http.StatusOK)
	return decodeAs[stateJSON](t, r)
}

// inspectAs reads the state of name as the holder of token sees it.
func (e *testEnv) inspectAs(t testing.TB, name, token string) stateJSON {
	t.Helper()
	return e.inspect(t, name, "Lock-Token", token)
}

// eventually polls cond every 10ms until it holds, failing t after d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForWaiters waits until Redis counts n waiters on name.
func (e *testEnv) waitForWaiters(t testing.TB, name string, n int64) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%s has %d waiters", name, n), func() bool {
		return e.inspect(t, name).Waiters == n
	})
}

// metrics fetches /metrics over HTTP and returns every sample by its series,
// written as in the exposition format: name{label="value",...}, labels in
// alphabetical order except a histogram's le, which comes last.
func metrics(t testing.TB, e *testEnv) map[string]float64 {
	t.Helper()
	r := e.do(t, "GET", "/metrics", "")
	wantStatus(t, r, http.StatusOK)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("/metrics: cannot parse %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// metricValue returns one sample from /metrics; a missing series is 0.
func metricValue(t testing.TB, e *testEnv, series string) float64 {
	t.Helper()
	return metrics(t, e)[series]
}

// retryAfter is the Retry-After header of r in whole seconds.
func retryAfter(t testing.TB, r response) int {
	t.Helper()
	n, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After = %q, want whole seconds", r.Header.Get("Retry-After"))
	}
	return n
}

// waitFree polls name until it is not held, failing after within.
func (e *testEnv) waitFree(t testing.TB, name string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		st := e.inspect(t, name)
		if !st.Held {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s still held after %s: %v", name, within, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
