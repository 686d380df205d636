package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
)

// fakeListings is the listing part of fakeService: one function field per
// method; a nil field answers errUnexpectedCall.
type fakeListings struct {
	ListLocksFn      func(ctx context.Context, req locks.ListRequest) (locks.Page[locks.LockState], error)
	ListRWLocksFn    func(ctx context.Context, req locks.ListRequest) (locks.Page[locks.RWState], error)
	ListSemaphoresFn func(ctx context.Context, req locks.ListRequest) (locks.Page[locks.SemaphoreState], error)
	ListLostFn       func(ctx context.Context, kind string, req locks.ListRequest) (locks.Page[locks.LostState], error)
}

func (f *fakeListings) ListLost(ctx context.Context, kind string, req locks.ListRequest) (locks.Page[locks.LostState], error) {
	if f.ListLostFn == nil {
		return locks.Page[locks.LostState]{}, errUnexpectedCall
	}
	return f.ListLostFn(ctx, kind, req)
}

func (f *fakeListings) ListLocks(ctx context.Context, req locks.ListRequest) (locks.Page[locks.LockState], error) {
	if f.ListLocksFn == nil {
		return locks.Page[locks.LockState]{}, errUnexpectedCall
	}
	return f.ListLocksFn(ctx, req)
}

func (f *fakeListings) ListRWLocks(ctx context.Context, req locks.ListRequest) (locks.Page[locks.RWState], error) {
	if f.ListRWLocksFn == nil {
		return locks.Page[locks.RWState]{}, errUnexpectedCall
	}
	return f.ListRWLocksFn(ctx, req)
}

func (f *fakeListings) ListSemaphores(ctx context.Context, req locks.ListRequest) (locks.Page[locks.SemaphoreState], error) {
	if f.ListSemaphoresFn == nil {
		return locks.Page[locks.SemaphoreState]{}, errUnexpectedCall
	}
	return f.ListSemaphoresFn(ctx, req)
}

// TestListQuery: the query of a listing reaches the service as it was
// given, limit a whole number of at least 1 in digits only; anything else
// is a 400 naming the parameter, refused before the service.
func TestListQuery(t *testing.T) {
	for _, tt := range []struct {
		query string
		want  locks.ListRequest // when status is 200
		field string            // the field a 400 names
	}{
		{query: "", want: locks.ListRequest{}},
		{query: "?prefix=orders-&limit=5&cursor=abc", want: locks.ListRequest{Prefix: "orders-", Limit: 5, Cursor: "abc"}},
		{query: "?prefix=&cursor=", want: locks.ListRequest{}},
		{query: "?limit=1000", want: locks.ListRequest{Limit: 1000}},
		{query: "?limit=99999999999999999999999", want: locks.ListRequest{Limit: locks.MaxListLimit + 1}},
		{query: "?limit=0", field: "limit"},
		{query: "?limit=-1", field: "limit"},
		{query: "?limit=%2B5", field: "limit"},
		{query: "?limit=", field: "limit"},
		{query: "?limit=ten", field: "limit"},
		{query: "?limit=1&limit=2", field: "limit"},
		{query: "?prefix=a&prefix=b", field: "prefix"},
		{query: "?Cursor=x", field: "Cursor"},
		{query: "?force=true", field: "force"},
	} {
		t.Run(tt.query, func(t *testing.T) {
			var got *locks.ListRequest
			fake := &fakeService{}
			fake.ListLocksFn = func(_ context.Context, req locks.ListRequest) (locks.Page[locks.LockState], error) {
				got = &req
				return locks.Page[locks.LockState]{}, nil
			}
			req := newRequest("GET", "/v1/locks"+tt.query, "")
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), req)
			if tt.field != "" {
				wantField(t, wantProblem(t, rec, req, 400, "invalid-request"), tt.field)
				if got != nil {
					t.Errorf("the service was called with %+v", *got)
				}
				return
			}
			if rec.Code != http.StatusOK || got == nil {
				t.Fatalf("status %d, service called: %v (body %s)", rec.Code, got != nil, rec.Body)
			}
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

// TestListAnswersItemsAsGetDoes: a page's items are the objects GET on
// each name answers, with no owned field (no token was given), and
// next_cursor is absent on the last page.
func TestListAnswersItemsAsGetDoes(t *testing.T) {
	granted := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	fake := &fakeService{}
	fake.ListLocksFn = func(context.Context, locks.ListRequest) (locks.Page[locks.LockState], error) {
		return locks.Page[locks.LockState]{Items: []locks.LockState{{Name: "orders", Held: true, HoldCount: 1,
			TTL: 30 * time.Second, ExpiresAt: expires, Fence: 7, Owner: "worker-1", GrantedAt: granted}},
			NextCursor: "next"}, nil
	}
	fake.ListSemaphoresFn = func(context.Context, locks.ListRequest) (locks.Page[locks.SemaphoreState], error) {
		return locks.Page[locks.SemaphoreState]{Items: []locks.SemaphoreState{{Name: "pool", Permits: 3, InUse: 2, Holders: 2}}}, nil
	}
	router := newTestRouter(t, fake, handlers.Config{})
	for _, tt := range []struct {
		path string
		want string
	}{
		{"/v1/locks", `{"items":[{"name":"orders","held":true,"hold_count":1,"ttl_ms":30000,"expires_at":"2026-11-23T05:00:30Z",` +
			`"fence":7,"waiters":0,"fair":false,"owner":"worker-1","granted_at":"2026-11-23T05:00:00Z"}],"next_cursor":"next"}`},
		{"/v1/semaphores", `{"items":[{"name":"pool","permits":3,"in_use":2,"available":1,"holders":2,"waiters":0,"fair":false,"fence":0,"leases":[],"leases_truncated":false}]}`},
	} {
		rec := serve(t, router, newRequest("GET", tt.path, ""))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d (body %s)", tt.path, rec.Code, rec.Body)
		}
		var got, want any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", tt.path, diff)
		}
	}
}

// TestListLostAsksForEachKind: /v1/lost/locks, /v1/lost/rwlocks and
// /v1/lost/semaphores ask the lock service for the losses of their
// primitive, with the query as a listing's, and answer each name's lost
// leases with reason, time, fence and owner (absent when not known).
func TestListLostAsksForEachKind(t *testing.T) {
	lostAt := time.Date(2026, 11, 23, 5, 0, 30, 0, time.UTC)
	for _, tt := range []struct{ path, kind string }{
		{"/v1/lost/locks", "lock"}, {"/v1/lost/rwlocks", "rwlock"}, {"/v1/lost/semaphores", "semaphore"},
	} {
		fake := &fakeService{}
		var asked string
		var req locks.ListRequest
		fake.ListLostFn = func(_ context.Context, kind string, r locks.ListRequest) (locks.Page[locks.LostState], error) {
			asked, req = kind, r
			return locks.Page[locks.LostState]{Items: []locks.LostState{{Name: "orders", Leases: []locks.LostLease{
				{Reason: "force_released", LostAt: lostAt, Fence: 7, Owner: "worker-1"},
				{Reason: "expired", LostAt: lostAt},
			}}}, NextCursor: "next"}, nil
		}
		rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest("GET", tt.path+"?prefix=ord&limit=5", ""))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d (body %s)", tt.path, rec.Code, rec.Body)
		}
		if asked != tt.kind || req != (locks.ListRequest{Prefix: "ord", Limit: 5}) {
			t.Errorf("GET %s asked for %q %+v, want %q with prefix ord and limit 5", tt.path, asked, req, tt.kind)
		}
		want := `{"items":[{"name":"orders","leases":[` +
			`{"reason":"force_released","lost_at":"2026-11-23T05:00:30Z","fence":7,"owner":"worker-1"},` +
			`{"reason":"expired","lost_at":"2026-11-23T05:00:30Z"}],"leases_truncated":false}],"next_cursor":"next"}`
		var got, wantJSON any
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(want), &wantJSON); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantJSON, got); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", tt.path, diff)
		}
	}
}

// fakeWatches is the watch part of fakeService: a nil WatchFn answers
// errUnexpectedCall.
type fakeWatches struct {
	WatchFn func(ctx context.Context, kind, name, lastID string) (*locks.Watch, error)
}

func (f *fakeWatches) Watch(ctx context.Context, kind, name, lastID string) (*locks.Watch, error) {
	if f.WatchFn == nil {
		return nil, errUnexpectedCall
	}
	return f.WatchFn(ctx, kind, name, lastID)
}
