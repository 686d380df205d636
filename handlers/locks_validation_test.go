package handlers_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// offlineLocks is the real lock service on a Redis client that fails the
// test if it ever dials: what it answers, it answers without Redis.
func offlineLocks(t *testing.T) *locks.Service {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr: "redis.invalid:6379",
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			t.Errorf("the lock service called Redis for input it should have refused")
			return nil, errors.New("no redis in this test")
		},
		MaxRetries: -1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := locks.New(st, locks.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	return svc
}

// The problem answers to a bad lock name, Lock-Token and owner, as clients
// have always seen them (request_id fixed by the request's X-Request-Id).
const (
	badNameProblem = `{"type":"invalid-request","title":"Invalid request","status":400,` +
		`"detail":"lock name must be 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit",` +
		`"instance":"%s","request_id":"golden",` +
		`"errors":[{"field":"name","rule":"format","detail":"lock name must be 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit"}]}` + "\n"
	badTokenProblem = `{"type":"invalid-request","title":"Invalid request","status":400,` +
		`"detail":"Lock-Token must be 22-128 base64url characters (A-Z a-z 0-9 - _)",` +
		`"instance":"%s","request_id":"golden",` +
		`"errors":[{"field":"Lock-Token","rule":"format","detail":"Lock-Token must be 22-128 base64url characters (A-Z a-z 0-9 - _)"}]}` + "\n"
	badOwnerProblem = `{"type":"invalid-request","title":"Invalid request","status":400,` +
		`"detail":"owner must be printable characters: character 4 is U+000A, a control or non-printable character",` +
		`"instance":"%s","request_id":"golden",` +
		`"errors":[{"field":"owner","rule":"printable","detail":"owner must be printable characters: character 4 is U+000A, a control or non-printable character"}]}` + "\n"
)

// TestBadLockInputIsTheServicesAnswer: the lock service is the one place
// that checks lock names, tokens and owners; the handlers pass the request's
// values through (the name percent-decoded once). On the real service,
// without Redis, every lock route answers a bad name, a bad token and a bad
// owner with the same problem body, byte for byte, as before the checks
// moved out of the handlers, and never calls Redis. A hold answers with the
// problem, not a stream. A force-release checks the admin credential first:
// without it the answer is 403 whatever the name (access before input, as
// Consul and etcd check their ACLs), with it a bad name is the service's 400.
func TestBadLockInputIsTheServicesAnswer(t *testing.T) {
	const admin = "Bearer " + adminKey
	tests := []struct {
		desc     string
		method   string
		target   string
		body     string
		headers  []string
		status   int
		want     string // the body, with %s for the instance; "" to check the type only
		typ      string
		instance string
	}{
		{desc: "acquire, bad name", method: "POST", target: "/v1/locks/a%7Bb", status: 400, want: badNameProblem, instance: "/v1/locks/a{b"},
		{desc: "hold, bad name", method: "POST", target: "/v1/locks/a%7Bb/hold", status: 400, want: badNameProblem, instance: "/v1/locks/a{b/hold"},
		{desc: "inspect, bad name", method: "GET", target: "/v1/locks/.hidden", status: 400, want: badNameProblem, instance: "/v1/locks/.hidden"},
		{desc: "renew, bad name", method: "POST", target: "/v1/locks/a%20b/renew", headers: []string{"Lock-Token", tokenA},
			status: 400, want: badNameProblem, instance: "/v1/locks/a b/renew"},
		{desc: "release, bad name", method: "DELETE", target: "/v1/locks/" + strings.Repeat("n", 129), headers: []string{"Lock-Token", tokenA},
			status: 400, want: badNameProblem, instance: "/v1/locks/" + strings.Repeat("n", 129)},
		{desc: "force-release, bad name", method: "DELETE", target: "/v1/locks/%7D?force=true", headers: []string{"Authorization", admin},
			status: 400, want: badNameProblem, instance: "/v1/locks/}"},

		{desc: "acquire, bad token", method: "POST", target: "/v1/locks/orders", headers: []string{"Lock-Token", "short"},
			status: 400, want: badTokenProblem, instance: "/v1/locks/orders"},
		{desc: "hold, bad token", method: "POST", target: "/v1/locks/orders/hold", headers: []string{"Lock-Token", "short"},
			status: 400, want: badTokenProblem, instance: "/v1/locks/orders/hold"},
		{desc: "inspect, bad token", method: "GET", target: "/v1/locks/orders", headers: []string{"Lock-Token", "has+plus/and=pad-00000"},
			status: 400, want: badTokenProblem, instance: "/v1/locks/orders"},
		{desc: "renew, bad token", method: "POST", target: "/v1/locks/orders/renew", headers: []string{"Lock-Token", strings.Repeat("t", 129)},
			status: 400, want: badTokenProblem, instance: "/v1/locks/orders/renew"},
		{desc: "release, bad token", method: "DELETE", target: "/v1/locks/orders", headers: []string{"Lock-Token", "short"},
			status: 400, want: badTokenProblem, instance: "/v1/locks/orders"},

		{desc: "acquire, bad owner", method: "POST", target: "/v1/locks/orders", body: `{"owner":"job\nforged"}`,
			status: 400, want: badOwnerProblem, instance: "/v1/locks/orders"},
		{desc: "hold, bad owner", method: "POST", target: "/v1/locks/orders/hold", body: `{"owner":"job\nforged"}`,
			status: 400, want: badOwnerProblem, instance: "/v1/locks/orders/hold"},

		// The credential comes before the name.
		{desc: "force-release, bad name, no credential", method: "DELETE", target: "/v1/locks/%7D?force=true",
			status: 403, typ: "forbidden", instance: "/v1/locks/}"},
		{desc: "force-release, bad name, wrong credential", method: "DELETE", target: "/v1/locks/%7D?force=true",
			headers: []string{"Authorization", admin + "x"}, status: 403, typ: "forbidden", instance: "/v1/locks/}"},
		// A missing token is the HTTP layer's to refuse, before the name.
		{desc: "release, bad name, no token", method: "DELETE", target: "/v1/locks/%7D",
			status: 400, typ: "invalid-request", instance: "/v1/locks/}"},
	}
	svc := offlineLocks(t)
	router := handlers.NewRouter(svc, &fakeService{}, handlers.Config{AdminKey: adminKey})
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			req := newRequest(tt.method, tt.target, tt.body, append([]string{"X-Request-Id", "golden"}, tt.headers...)...)
			rec := serve(t, router, req)
			if tt.want == "" {
				p := wantProblem(t, rec, req, tt.status, tt.typ)
				if p.Instance != tt.instance {
					t.Errorf("instance = %q, want %q", p.Instance, tt.instance)
				}
				return
			}
			wantProblem(t, rec, req, tt.status, "invalid-request")
			if want := strings.Replace(tt.want, "%s", tt.instance, 1); rec.Body.String() != want {
				t.Errorf("body\n got %s\nwant %s", rec.Body, want)
			}
		})
	}
	if subs, _ := svc.Subscriptions(); subs != 0 {
		t.Errorf("a refused hold left %d subscriptions", subs)
	}
}
