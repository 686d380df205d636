package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
)

// electionService answers every election call with success and records the
// campaigns it was given.
func electionService(got *[]locks.AcquireRequest) *fakeService {
	lease := func(name, token string) locks.Lease {
		return locks.Lease{Name: name, Token: token, Fence: 77, HoldCount: 1, Value: "v1", Owner: "db-1",
			TTL: 30 * time.Second, ExpiresAt: expires}
	}
	leader := &locks.Leader{Value: "v1", Term: 77, Owner: "db-1", Since: expires.Add(-time.Minute), TTL: 30 * time.Second, ExpiresAt: expires}
	return &fakeService{fakeElections: fakeElections{
		CampaignFn: func(_ context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
			if got != nil {
				*got = append(*got, req)
			}
			return lease(name, tokenA), nil
		},
		ProclaimFn: func(_ context.Context, name, token, value string) (locks.Lease, error) {
			l := lease(name, token)
			l.Value = value
			return l, nil
		},
		RenewElectionFn: func(_ context.Context, name, token string, _ time.Duration) (locks.Lease, error) {
			return lease(name, token), nil
		},
		ResignFn: func(context.Context, string, string) (locks.Released, error) {
			return locks.Released{Released: true}, nil
		},
		ForceResignFn: func(context.Context, string) (bool, error) { return true, nil },
		InspectElectionFn: func(_ context.Context, name, token string) (locks.ElectionState, error) {
			if name == "vacant" {
				return locks.ElectionState{Name: name, Term: 76}, nil
			}
			return locks.ElectionState{Name: name, Leader: leader, Term: 77, Candidates: 2, Owned: token == tokenA}, nil
		},
	}}
}

// A campaign's body reaches the service as the campaign it asks (always
// fair), and the answer is the leadership with its token, term and value.
func TestCampaignRoute(t *testing.T) {
	var got []locks.AcquireRequest
	h := newTestRouter(t, electionService(&got), handlers.Config{})
	req := newRequest(http.MethodPost, "/v1/elections/primary",
		`{"value": "10.0.0.7", "ttl": "10s", "wait": "2s", "keepalive": true, "max_hold": "1m", "heartbeat": "20s", "owner": "db-1"}`)
	rec := serve(t, h, req)
	if rec.Code != http.StatusCreated || rec.Header().Get("Lock-Token") != tokenA || rec.Header().Get("Location") != "/v1/elections/primary" {
		t.Fatalf("campaign = %d, Lock-Token %q, Location %q (body %s)", rec.Code, rec.Header().Get("Lock-Token"), rec.Header().Get("Location"), rec.Body)
	}
	want := locks.AcquireRequest{TTL: 10 * time.Second, Wait: 2 * time.Second, Keepalive: true, MaxHold: time.Minute,
		Heartbeat: 20 * time.Second, Owner: "db-1", Value: "10.0.0.7"}
	if diff := cmp.Diff([]locks.AcquireRequest{want}, got); diff != "" {
		t.Errorf("service request (-want +got):\n%s", diff)
	}
	body := decodeBody(t, rec)
	for k, v := range map[string]any{"token": tokenA, "term": 77.0, "fence": 77.0, "value": "v1", "owner": "db-1", "ttl_ms": 30000.0} {
		if body[k] != v {
			t.Errorf("body[%q] = %v, want %v (%s)", k, body[k], v, rec.Body)
		}
	}
}

func TestElectionRoutes(t *testing.T) {
	auth := "Bearer " + adminKey
	long := `{"value": "` + strings.Repeat("é", locks.MaxValueBytes/2+1) + `"}`
	tests := []struct {
		desc   string
		req    *http.Request
		status int
		typ    string // problem type; "" for a success
		field  string
		want   string // a fragment of the body
	}{
		{"fair is not a campaign's", newRequest(http.MethodPost, "/v1/elections/primary", `{"fair": true}`), 400, "invalid-request", "fair", ""},
		{"value too long", newRequest(http.MethodPost, "/v1/elections/primary", long), 400, "invalid-request", "value", ""},
		{"value not a string", newRequest(http.MethodPost, "/v1/elections/primary", `{"value": 7}`), 400, "invalid-request", "value", ""},
		{"bad name", newRequest(http.MethodPost, "/v1/elections/a%7Bb%7D", `{}`), 400, "invalid-request", "name", ""},
		{"get", newRequest(http.MethodGet, "/v1/elections/primary", ""), 200, "", "", `"leader":{"value":"v1","term":77,"owner":"db-1"`},
		{"get vacant", newRequest(http.MethodGet, "/v1/elections/vacant", ""), 200, "", "", `"leader":null,"term":76`},
		{"get with token", newRequest(http.MethodGet, "/v1/elections/primary", "", "Lock-Token", tokenA), 200, "", "", `"owned":true`},
		{"proclaim", newRequest(http.MethodPut, "/v1/elections/primary/value", `{"value": "v2"}`, "Lock-Token", tokenA), 200, "", "", `"value":"v2"`},
		{"proclaim without token", newRequest(http.MethodPut, "/v1/elections/primary/value", `{"value": "v2"}`), 400, "invalid-request", "Lock-Token", ""},
		{"proclaim without value", newRequest(http.MethodPut, "/v1/elections/primary/value", `{}`, "Lock-Token", tokenA), 400, "invalid-request", "value", ""},
		{"proclaim value too long", newRequest(http.MethodPut, "/v1/elections/primary/value", long, "Lock-Token", tokenA), 400, "invalid-request", "value", ""},
		{"renew", newRequest(http.MethodPost, "/v1/elections/primary/renew", `{"ttl": "5s"}`, "Lock-Token", tokenA), 200, "", "", `"term":77`},
		{"resign", newRequest(http.MethodDelete, "/v1/elections/primary", "", "Lock-Token", tokenA), 200, "", "", `{"released":true}`},
		{"resign without token", newRequest(http.MethodDelete, "/v1/elections/primary", ""), 400, "invalid-request", "Lock-Token", ""},
		{"force without credential", newRequest(http.MethodDelete, "/v1/elections/primary?force=true", ""), 403, "forbidden", "", ""},
		{"force spelled 1", newRequest(http.MethodDelete, "/v1/elections/primary?force=1", "", "Authorization", auth), 400, "invalid-request", "force", ""},
		{"force", newRequest(http.MethodDelete, "/v1/elections/primary?force=true", "", "Authorization", auth), 204, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newTestRouter(t, electionService(nil), handlers.Config{AdminKey: adminKey})
			rec := serve(t, h, tt.req)
			if tt.typ != "" {
				p := wantProblem(t, rec, tt.req, tt.status, tt.typ)
				if tt.field != "" {
					wantField(t, p, tt.field)
				}
				return
			}
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("status %d, body %s; want %d with %s", rec.Code, rec.Body, tt.status, tt.want)
			}
			if strings.Contains(rec.Body.String(), tokenA) {
				t.Errorf("answer holds the token: %s", rec.Body)
			}
		})
	}
}

// A campaign that is not elected is a 409 election-held with the leader's
// public state and Retry-After.
func TestElectionHeldProblem(t *testing.T) {
	svc := electionService(nil)
	svc.CampaignFn = func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
		return locks.Lease{}, &locks.ElectionHeldError{Name: "primary", RetryAfter: 2500 * time.Millisecond,
			Leader: &locks.Leader{Value: "v1", Term: 77, Owner: "db-1", TTL: 2500 * time.Millisecond, Since: expires, ExpiresAt: expires}}
	}
	h := newTestRouter(t, svc, handlers.Config{})
	req := newRequest(http.MethodPost, "/v1/elections/primary", `{"value": "mine"}`)
	rec := serve(t, h, req)
	wantProblem(t, rec, req, http.StatusConflict, "election-held")
	if got := rec.Header().Get("Retry-After"); got != "3" {
		t.Errorf("Retry-After = %q, want 3 (2.5s rounded up)", got)
	}
	if !strings.Contains(rec.Body.String(), `"leader":{"value":"v1","term":77,"owner":"db-1"`) {
		t.Errorf("problem lacks the leader: %s", rec.Body)
	}
}
