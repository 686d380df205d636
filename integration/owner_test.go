package integration

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/client"
)

// TestOwnerOverHTTP: an acquire's owner is stored with the lease in Redis
// and shown by GET with the grant time to anyone, a re-entry keeps the
// first owner and grant time, a bad owner is a 400 that changes nothing,
// and a lease without owner stores no owner field.
func TestOwnerOverHTTP(t *testing.T) {
	e := newTestEnv(t)
	const name = "invoices"
	const owner = `nightly-billing on worker-3 "blue" (pid 4711) é`
	body := fmt.Sprintf(`{"ttl":"50s","owner":%s}`, strconv.Quote(owner))

	held := e.acquire(t, name, body)
	st := e.inspect(t, name)
	if st.Owner != owner || st.GrantedAt == nil {
		t.Fatalf("GET while held: owner %q, granted_at %v; want %q and a time", st.Owner, st.GrantedAt, owner)
	}
	// granted_at is Redis TIME at the grant: the same clock reading the
	// lease's expires_at was computed from (to the millisecond), and the
	// fence's µs unless the lock hash says otherwise.
	if got, want := st.GrantedAt.Truncate(time.Millisecond).Add(50*time.Second), held.ExpiresAt; !got.Equal(want) {
		t.Errorf("granted_at %s + ttl = %s, want the lease's expires_at %s", st.GrantedAt, got, want)
	}
	h := e.lockHash(t, name)
	if h.Owner != owner {
		t.Errorf("lock hash owner = %q, want %q (stored with the lease)", h.Owner, owner)
	}
	if h.GrantedAt == "" && !st.GrantedAt.Equal(time.UnixMicro(held.Fence)) {
		t.Errorf("granted_at = %s, want the fence's time %s", st.GrantedAt, time.UnixMicro(held.Fence).UTC())
	}
	// Shown to anyone, with or without a token; the token never.
	for _, tok := range []string{held.Token, "some-other-token-0123456789"} {
		r := e.do(t, "GET", "/v1/locks/"+name, "", "Lock-Token", tok)
		wantStatus(t, r, http.StatusOK)
		other := decodeAs[stateJSON](t, r)
		if other.Owner != owner || other.GrantedAt == nil || !other.GrantedAt.Equal(*st.GrantedAt) {
			t.Errorf("GET with a token: owner %q, granted_at %v; want as without", other.Owner, other.GrantedAt)
		}
		if strings.Contains(string(r.Body), held.Token) {
			t.Errorf("GET reveals the token: %s", r.Body)
		}
	}

	// A re-entry keeps the first owner and grant time.
	r := e.do(t, "POST", "/v1/locks/"+name, `{"owner":"someone else"}`, "Lock-Token", held.Token)
	wantStatus(t, r, http.StatusOK)
	if again := e.inspect(t, name); again.HoldCount != 2 || again.Owner != owner || !again.GrantedAt.Equal(*st.GrantedAt) {
		t.Errorf("after a re-entry: hold_count %d, owner %q, granted_at %v; want 2, %q, %s",
			again.HoldCount, again.Owner, again.GrantedAt, owner, st.GrantedAt)
	}

	// Bad owners: a 400 naming owner, on acquire (new and re-entry) and
	// hold, and Redis is as it was.
	before := e.snapshot(t, name)
	bad := []struct{ desc, json string }{
		{"129 characters", strconv.Quote(strings.Repeat("x", 129))},
		{"a newline", `"job\nforged"`},
		{"an escape sequence", `"\u001b[2J"`},
		{"a bidi override", `"job\u202e"`},
		{"NUL", `"job\u0000"`},
	}
	for _, b := range bad {
		for _, req := range []struct {
			path    string
			headers []string
		}{
			{"/v1/locks/fresh", nil},
			{"/v1/locks/" + name, []string{"Lock-Token", held.Token}},
			{"/v1/locks/fresh/hold", nil},
		} {
			r := e.do(t, "POST", req.path, `{"ttl":"10s","owner":`+b.json+`}`, req.headers...)
			p := wantProblem(t, r, http.StatusBadRequest, "invalid-request")
			if len(p.Errors) != 1 || p.Errors[0].Field != "owner" || !strings.Contains(p.Detail, "owner") {
				t.Errorf("%s on %s: problem %+v, want one error naming owner", b.desc, req.path, p)
			}
		}
	}
	if diff := cmp.Diff(before, e.snapshot(t, name)); diff != "" {
		t.Errorf("bad owners changed Redis (-before +after):\n%s", diff)
	}

	// Released: no owner, no grant time.
	for range 2 {
		wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", held.Token), http.StatusOK)
	}
	if st := e.inspect(t, name); st.Held || st.Owner != "" || st.GrantedAt != nil {
		t.Errorf("GET after release: %+v, want free without owner or granted_at", st)
	}

	// No owner given: none stored, none shown; a first grant of a name
	// has its fence at Redis TIME, so the grant time costs no field either.
	plain := e.acquire(t, "plain", `{"ttl":"50s"}`)
	if h := e.lockHash(t, "plain"); h != (redisLock{Token: h.Token, Count: h.Count, Fence: h.Fence, TTL: h.TTL}) ||
		h.Token == "" || h.Count == "" || h.Fence == "" || h.TTL == "" {
		t.Errorf("lock hash of a lease without owner = %+v, want only token, count, fence and ttl", h)
	}
	if st := e.inspect(t, "plain"); st.Owner != "" || st.GrantedAt == nil || !st.GrantedAt.Equal(time.UnixMicro(plain.Fence)) {
		t.Errorf("GET of a lease without owner: owner %q, granted_at %v; want none and %s", st.Owner, st.GrantedAt, time.UnixMicro(plain.Fence).UTC())
	}
}

// TestOwnerFromClientAndCommand: LockOptions.Owner and `latchkey lock
// -owner` reach GET, and `latchkey status` prints them.
func TestOwnerFromClientAndCommand(t *testing.T) {
	e := newClientEnv(t)
	l, err := e.c.Lock(t.Context(), "report", client.LockOptions{TTL: time.Minute, Owner: "reporting service (go client)"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.c.Status(t.Context(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if st.Owner != "reporting service (go client)" || st.GrantedAt == nil || st.GrantedAt.IsZero() {
		t.Errorf("Status: Owner %q, GrantedAt %v; want the owner and a grant time", st.Owner, st.GrantedAt)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}

	// COMMAND runs `latchkey status` on its own lock while it holds it.
	bin := buildLatchkey(t)
	st2, stdout, errOut := runLatchkey(t, bin, e.URL, nil,
		"lock", "-owner", "cron: backup.sh on db-2", "backup", "--", "sh", "-c", `"$0" status backup`, bin)
	if st2 != 0 {
		t.Fatalf("latchkey lock exited %d: %s", st2, errOut)
	}
	if !strings.Contains(stdout, "backup held ") || !strings.Contains(stdout, ` owner="cron: backup.sh on db-2"`) ||
		!strings.Contains(stdout, " granted_at=") {
		t.Errorf("latchkey status while held by latchkey lock -owner: %q, want held with granted_at= and the owner", stdout)
	}
	wantFree(t, e.c, "backup")
}
