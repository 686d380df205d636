package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// answer serves one fixed answer to every request.
func answer(t *testing.T, status int, contentType, body string, headers ...string) *client.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, client.WithRetry(client.Retry{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Each problem type comes back as its sentinel, and as the typed error that
// carries its data.
func TestProblemTypes(t *testing.T) {
	const pj = "application/problem+json"
	tests := []struct {
		name   string
		status int
		body   string
		hdr    []string
		is     error
		check  func(t *testing.T, err error)
	}{
		{"held", 409, `{"type":"lock-held","status":409,"detail":"held"}`, []string{"Retry-After", "7"}, client.ErrHeld,
			func(t *testing.T, err error) {
				var h *client.HeldError
				if !errors.As(err, &h) || h.RetryAfter != 7*time.Second {
					t.Errorf("%v: want a *HeldError with RetryAfter 7s", err)
				}
			}},
		{"permits unavailable", 409, `{"type":"permits-unavailable","status":409}`, []string{"Retry-After", "3"}, client.ErrHeld,
			func(t *testing.T, err error) {
				var h *client.HeldError
				if !errors.As(err, &h) || h.RetryAfter != 3*time.Second {
					t.Errorf("%v: want a *HeldError with RetryAfter 3s", err)
				}
			}},
		{"permits mismatch", 409, `{"type":"permits-mismatch","status":409}`, nil, client.ErrPermitsMismatch,
			func(t *testing.T, err error) {
				var pm *client.PermitsMismatchError
				if !errors.As(err, &pm) {
					t.Errorf("%v: want a *PermitsMismatchError", err)
				}
			}},
		{"upgrade not supported", 409, `{"type":"upgrade-not-supported","status":409}`, nil, client.ErrUpgradeNotSupported, nil},
		{"mode mismatch", 409, `{"type":"lock-mode-mismatch","status":409}`, nil, client.ErrModeMismatch, nil},
		{"not owner", 409, `{"type":"not-owner","status":409}`, nil, client.ErrNotOwner, nil},
		{"lease not found", 404, `{"type":"lease-not-found","status":404}`, nil, client.ErrLeaseNotFound, nil},
		{"unavailable", 503, `{"type":"store-unavailable","status":503}`, nil, client.ErrUnavailable, nil},
		{"invalid", 400, `{"type":"invalid-request","status":400,"errors":[{"field":"ttl","rule":"max"}]}`, nil, client.ErrInvalidRequest,
			func(t *testing.T, err error) {
				var ie *client.InvalidRequestError
				if !errors.As(err, &ie) || ie.Field != "ttl" || ie.Rule != "max" {
					t.Errorf("%v: want an *InvalidRequestError for ttl/max", err)
				}
			}},
		{"rate limited", 429, `{"type":"rate-limited","status":429}`, []string{"Retry-After", "2"}, client.ErrRateLimited,
			func(t *testing.T, err error) {
				var re *client.RateLimitedError
				if !errors.As(err, &re) || re.RetryAfter != 2*time.Second {
					t.Errorf("%v: want a *RateLimitedError with RetryAfter 2s", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := answer(t, tt.status, pj, tt.body, tt.hdr...)
			_, err := c.Status(t.Context(), "x")
			if !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want errors.Is %v", err, tt.is)
			}
			var p *client.Problem
			if !errors.As(err, &p) || p.Status != tt.status {
				t.Fatalf("err = %v, want a *Problem with status %d", err, tt.status)
			}
			if tt.check != nil {
				tt.check(t, err)
			}
		})
	}
}

// A connection refused is ErrUnavailable, retried per the policy.
func TestConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := client.New(url, client.WithRetry(client.Retry{Attempts: 2, MinBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(t.Context(), "x"); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// Retries are bounded by Attempts, and only where safe: a rate-limit check
// answered 503 is not sent again (it could count twice); an inspection is.
func TestRetryOnlyWhereSafe(t *testing.T) {
	var calls = map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls[r.Method]++
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(503)
		_, _ = w.Write([]byte(`{"type":"store-unavailable","status":503}`))
	}))
	t.Cleanup(srv.Close)
	c, _ := client.New(srv.URL, client.WithRetry(client.Retry{Attempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	_, _ = c.Status(t.Context(), "x")
	_, _ = c.Limiter().Check(t.Context(), "p", "k", 1)
	srv.Close() // no handler runs any more: calls may be read
	if calls["GET"] != 3 || calls["POST"] != 1 {
		t.Fatalf("calls = %v, want 3 GETs (retried) and 1 POST (not)", calls)
	}
}

// The API key goes out as a bearer token.
func TestAPIKey(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"x","held":false}`))
	}))
	t.Cleanup(srv.Close)
	c, _ := client.New(srv.URL, client.WithAPIKey("s3cret"))
	if _, err := c.Status(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a != "Bearer s3cret" {
		t.Fatalf("Authorization = %q", a)
	}
}

func TestNewRefusesBadURL(t *testing.T) {
	for _, u := range []string{"127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) = nil error", u)
		}
	}
}

func TestNewToken(t *testing.T) {
	a, b := client.NewToken(), client.NewToken()
	if len(a) != 22 || a == b {
		t.Fatalf("tokens %q %q: want 22 characters, distinct", a, b)
	}
}
