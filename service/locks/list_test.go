package locks_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// listAll pages through svc's listing of locks with req until the last
// page and returns the names listed.
func listAll(t *testing.T, svc *locks.Service, ctxTenant string, req locks.ListRequest) []string {
	t.Helper()
	ctx := store.WithTenant(t.Context(), ctxTenant)
	var names []string
	for range 100 {
		p, err := svc.ListLocks(ctx, req)
		if err != nil {
			t.Fatalf("ListLocks(%+v) = %v", req, err)
		}
		if len(p.Items) > max(req.Limit, 1) && req.Limit > 0 {
			t.Fatalf("page of %d items, limit %d", len(p.Items), req.Limit)
		}
		for _, st := range p.Items {
			names = append(names, st.Name)
		}
		if p.NextCursor == "" {
			slices.Sort(names)
			return names
		}
		req.Cursor = p.NextCursor
	}
	t.Fatal("100 pages and no end")
	return nil
}

// TestListCursorIsSharedAndScoped: a cursor sealed by one instance opens
// on another of the same Redis (the secret is in Redis), for the same
// tenant, kind and prefix only; a made-up cursor is an ErrInvalid naming
// cursor. When Redis lost the secret, an instance that makes a new one
// refuses cursors of the old, and an instance still holding the old reads
// the new one again when given a cursor of it.
func TestListCursorIsSharedAndScoped(t *testing.T) {
	m, rdb := newTestRedis(t)
	one, two := mustNew(t, rdb, locks.Config{}), mustNew(t, rdb, locks.Config{})
	for i := range 5 {
		mustAcquire(t, one, fmt.Sprintf("job-%d", i), locks.AcquireRequest{TTL: time.Minute})
	}
	if got := listAll(t, one, "", locks.ListRequest{Prefix: "job-", Limit: 2}); len(got) != 5 {
		t.Fatalf("listed %v, want job-0..job-4", got)
	}
	p, err := one.ListLocks(t.Context(), locks.ListRequest{Limit: 2})
	if err != nil || p.NextCursor == "" {
		t.Fatalf("first page: %+v, %v; want a next cursor", p, err)
	}
	if _, err := two.ListLocks(t.Context(), locks.ListRequest{Limit: 2, Cursor: p.NextCursor}); err != nil {
		t.Errorf("another instance refuses the cursor: %v", err)
	}
	wantCursorRefused := func(desc string, err error) {
		t.Helper()
		var ve *store.ValidationError
		if !errors.As(err, &ve) || ve.Field != "cursor" {
			t.Errorf("%s: %v, want a validation error naming cursor", desc, err)
		}
	}
	_, err = two.ListLocks(store.WithTenant(t.Context(), "a"), locks.ListRequest{Limit: 2, Cursor: p.NextCursor})
	wantCursorRefused("another tenant", err)
	_, err = two.ListRWLocks(t.Context(), locks.ListRequest{Limit: 2, Cursor: p.NextCursor})
	wantCursorRefused("another kind", err)
	_, err = two.ListLocks(t.Context(), locks.ListRequest{Prefix: "job", Limit: 2, Cursor: p.NextCursor})
	wantCursorRefused("another prefix", err)
	_, err = two.ListLocks(t.Context(), locks.ListRequest{Cursor: "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
	wantCursorRefused("made up", err)

	m.FlushAll() // Redis restarted empty: a new instance makes a new secret
	three := mustNew(t, rdb, locks.Config{})
	for i := range 3 {
		mustAcquire(t, three, fmt.Sprintf("job-%d", i), locks.AcquireRequest{TTL: time.Minute})
	}
	_, err = three.ListLocks(t.Context(), locks.ListRequest{Limit: 2, Cursor: p.NextCursor})
	wantCursorRefused("a cursor of the old secret", err)
	p, err = three.ListLocks(t.Context(), locks.ListRequest{Limit: 2})
	if err != nil || p.NextCursor == "" {
		t.Fatalf("first page: %+v, %v; want a next cursor", p, err)
	}
	if _, err := one.ListLocks(t.Context(), locks.ListRequest{Limit: 2, Cursor: p.NextCursor}); err != nil {
		t.Errorf("an instance holding the old secret refuses a cursor of the new one: %v", err)
	}
}

// TestListLimitAndPrefix: limit and prefix are checked before Redis is
// asked, each a validation error naming its field.
func TestListLimitAndPrefix(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	for _, tt := range []struct {
		req   locks.ListRequest
		field string
	}{
		{locks.ListRequest{Limit: -1}, "limit"},
		{locks.ListRequest{Limit: locks.MaxListLimit + 1}, "limit"},
		{locks.ListRequest{Prefix: "a*"}, "prefix"},
		{locks.ListRequest{Prefix: ".a"}, "prefix"},
		{locks.ListRequest{Prefix: "a{b}"}, "prefix"},
	} {
		_, err := svc.ListSemaphores(t.Context(), tt.req)
		var ve *store.ValidationError
		if !errors.As(err, &ve) || ve.Field != tt.field {
			t.Errorf("%+v: %v, want a validation error naming %s", tt.req, err, tt.field)
		}
	}
}
