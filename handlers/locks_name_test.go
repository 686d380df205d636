package handlers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// heldOnHold answers every lock call as grantingService does, and a hold
// with lock-held (a stream is not what these tests look at).
func heldOnHold() *fakeService {
	f := grantingService()
	f.HoldFn = func(_ context.Context, name string, _ locks.AcquireRequest) (*locks.Hold, error) {
		return nil, &locks.HeldError{Name: name, RetryAfter: time.Second}
	}
	return f
}

// TestLockNamePercentEncoded: the {name} of every lock route means the same
// whether a client percent-encodes it or not (encodeURIComponent and
// Swagger UI send job:42 as job%3A42). The name is decoded once only and
// reaches the service decoded, which checks it, so an encoded character
// that is not allowed in a name is still refused. Location headers and
// problem instances name the lock the same way, in its plain form.
func TestLockNamePercentEncoded(t *testing.T) {
	const admin = "Bearer " + adminKey
	tests := []struct {
		desc     string
		method   string
		target   string
		headers  []string
		status   int
		wantName string // the name the service got
		location string // the Location header, when one is wanted
		typ      string // problem type, for an error answer
		instance string // the problem's instance
	}{
		{desc: "acquire, plain", method: "POST", target: "/v1/locks/job:42",
			status: 201, wantName: "job:42", location: "/v1/locks/job:42"},
		{desc: "acquire, colon encoded", method: "POST", target: "/v1/locks/job%3A42",
			status: 201, wantName: "job:42", location: "/v1/locks/job:42"},
		{desc: "acquire, lower-case escape", method: "POST", target: "/v1/locks/job%3a42",
			status: 201, wantName: "job:42", location: "/v1/locks/job:42"},
		{desc: "acquire, letters encoded", method: "POST", target: "/v1/locks/%6A%6F%62",
			status: 201, wantName: "job", location: "/v1/locks/job"},
		{desc: "inspect", method: "GET", target: "/v1/locks/job%3A42",
			status: 200, wantName: "job:42"},
		{desc: "renew", method: "POST", target: "/v1/locks/job%3A42/renew", headers: []string{"Lock-Token", tokenA},
			status: 200, wantName: "job:42"},
		{desc: "release", method: "DELETE", target: "/v1/locks/job%3A42", headers: []string{"Lock-Token", tokenA},
			status: 200, wantName: "job:42"},
		{desc: "force-release", method: "DELETE", target: "/v1/locks/job%3A42?force=true", headers: []string{"Authorization", admin},
			status: 204, wantName: "job:42"},
		{desc: "hold", method: "POST", target: "/v1/locks/job%3A42/hold",
			status: 409, wantName: "job:42", typ: "lock-held", instance: "/v1/locks/job:42/hold"},

		// Refused by the service, which gets them decoded.
		{desc: "encoded slash", method: "POST", target: "/v1/locks/a%2Fb",
			status: 400, wantName: "a/b", typ: "invalid-request", instance: "/v1/locks/a/b"},
		{desc: "encoded slash, renew", method: "POST", target: "/v1/locks/a%2Fb/renew", headers: []string{"Lock-Token", tokenA},
			status: 400, wantName: "a/b", typ: "invalid-request", instance: "/v1/locks/a/b/renew"},
		{desc: "encoded brace", method: "GET", target: "/v1/locks/a%7Bb%7D",
			status: 400, wantName: "a{b}", typ: "invalid-request", instance: "/v1/locks/a{b}"},
		{desc: "encoded brace with an encoded colon", method: "GET", target: "/v1/locks/job%3A%7B42%7D",
			status: 400, wantName: "job:{42}", typ: "invalid-request", instance: "/v1/locks/job:{42}"},
		{desc: "encoded leading dot", method: "DELETE", target: "/v1/locks/%2Ehidden", headers: []string{"Lock-Token", tokenA},
			status: 400, wantName: ".hidden", typ: "invalid-request", instance: "/v1/locks/.hidden"},
		{desc: "encoded percent is not decoded twice", method: "POST", target: "/v1/locks/job%253A42",
			status: 400, wantName: "job%3A42", typ: "invalid-request", instance: "/v1/locks/job%3A42"},
		{desc: "encoded percent with an encoded colon", method: "POST", target: "/v1/locks/job%3A%253A42",
			status: 400, wantName: "job:%3A42", typ: "invalid-request", instance: "/v1/locks/job:%3A42"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := heldOnHold()
			router := newTestRouter(t, fake, handlers.Config{AdminKey: adminKey})
			req := newRequest(tt.method, tt.target, "", tt.headers...)
			rec := serveUnchecked(router, req)
			if tt.typ != "" {
				p := wantProblem(t, rec, req, tt.status, tt.typ)
				if tt.typ == "invalid-request" {
					wantField(t, p, "name")
				}
				if p.Instance != tt.instance {
					t.Errorf("problem instance = %q, want %q", p.Instance, tt.instance)
				}
			} else if rec.Code != tt.status {
				t.Errorf("status = %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if got := fake.Names(); len(got) != 1 || got[0] != tt.wantName {
				t.Errorf("service got names %q, want [%q]", got, tt.wantName)
			}
			if tt.location != "" {
				if loc := rec.Header().Get("Location"); loc != tt.location {
					t.Errorf("Location = %q, want %q", loc, tt.location)
				}
			}
		})
	}
}

// TestLockNameLocationIsTheProblemInstance: the Location of a lease and the
// instance of a problem about that lease are the same path, however the
// client spelled the name.
func TestLockNameLocationIsTheProblemInstance(t *testing.T) {
	fake := grantingService()
	fake.ReleaseFn = func(context.Context, string, string) (locks.Released, error) {
		return locks.Released{}, store.ErrNotFound
	}
	router := newTestRouter(t, fake, handlers.Config{})
	for _, target := range []string{"/v1/locks/job:42", "/v1/locks/job%3A42"} {
		rec := serve(t, router, newRequest("POST", target, ""))
		if rec.Code != http.StatusCreated {
			t.Fatalf("acquire %s: status = %d, want 201 (body %s)", target, rec.Code, rec.Body)
		}
		loc := rec.Header().Get("Location")
		req := newRequest("DELETE", loc, "", "Lock-Token", tokenA)
		p := wantProblem(t, serve(t, router, req), req, http.StatusNotFound, "lease-not-found")
		if p.Instance != loc || loc != "/v1/locks/job:42" {
			t.Errorf("acquire %s: Location %q, problem instance %q; want both /v1/locks/job:42", target, loc, p.Instance)
		}
	}
}
