package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// lossyProxy forwards every request to a fresh exampleServer, but answers
// the next lose POSTs to path with a 503 in place of the server's answer:
// the server acted on them, the client never learns how.
type lossyProxy struct {
	mu   sync.Mutex
	path string
	lose int
	lost int
}

func (p *lossyProxy) setLose(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = n
}

func (p *lossyProxy) lostCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// lossyClient returns a client (retrying quickly, attempts times) through a
// lossyProxy for POSTs to path.
func lossyClient(t *testing.T, path string, attempts int) (*client.Client, *lossyProxy) {
	t.Helper()
	target, stop := exampleServer()
	t.Cleanup(stop)
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{path: path}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodPost || resp.Request.URL.Path != p.path {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.lose == 0 {
			return nil
		}
		p.lose--
		p.lost++
		_ = resp.Body.Close()
		body := []byte(`{"type":"store-unavailable","status":503}`)
		resp.StatusCode = http.StatusServiceUnavailable
		resp.Header = http.Header{"Content-Type": {"application/problem+json"}, "Content-Length": {strconv.Itoa(len(body))}}
		resp.ContentLength = int64(len(body))
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, client.WithRetry(client.Retry{Attempts: attempts, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

// A semaphore acquire whose answer was lost was granted: the retry with the
// same token meets it (token-in-use), gives it back and takes the permits
// once. No second lease is left holding permits.
func TestSemaphoreAcquireAnswerLost(t *testing.T) {
	ctx := t.Context()
	c, p := lossyClient(t, "/v1/semaphores/jobs", 3)
	p.setLose(1)
	s := c.Semaphore("jobs", 2)
	l := mustLease(t)(s.TryAcquire(ctx, 1, client.LockOptions{TTL: time.Minute}))
	if p.lostCount() != 1 {
		t.Fatalf("%d answers lost, want 1", p.lostCount())
	}
	if st, err := s.Status(ctx); err != nil || st.Holders != 1 || st.InUse != 1 {
		t.Fatalf("status = %+v (err %v), want 1 lease of 1 permit", st, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Status(ctx); err != nil || st.InUse != 0 {
		t.Fatalf("status = %+v (err %v), want every permit free", st, err)
	}
}

// A read lease whose first answer was lost comes back reentrant on the
// retry; the extra hold is given back, so one Unlock frees the lock.
func TestRWLockAcquireAnswerLost(t *testing.T) {
	ctx := t.Context()
	c, p := lossyClient(t, "/v1/rwlocks/catalog", 3)
	p.setLose(1)
	rw := c.RWLock("catalog")
	r := mustLease(t)(rw.TryRLock(ctx, client.LockOptions{TTL: time.Minute}))
	if p.lostCount() != 1 {
		t.Fatalf("%d answers lost, want 1", p.lostCount())
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := rw.Status(ctx); err != nil || st.Readers != 0 {
		t.Fatalf("status = %+v (err %v) after Unlock, want no reader (no hold left over)", st, err)
	}
}

// A downgrade that gives up after lost answers releases the read leases it
// was granted, and only those: the write lease it came from is still held.
func TestRWLockDowngradeGivesUp(t *testing.T) {
	ctx := t.Context()
	c, p := lossyClient(t, "/v1/rwlocks/catalog", 2)
	rw := c.RWLock("catalog")
	w := mustLease(t)(rw.TryLock(ctx, client.LockOptions{TTL: time.Minute}))
	p.setLose(10)
	_, err := rw.Downgrade(ctx, w, client.LockOptions{TTL: time.Minute})
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if p.lostCount() != 2 {
		t.Fatalf("%d answers lost, want 2 (the attempts made)", p.lostCount())
	}
	if st, err := rw.Status(ctx); err != nil || !st.WriteHeld || st.Readers != 0 {
		t.Fatalf("status = %+v (err %v), want write-held and no reader", st, err)
	}
	if st, err := w.Inspect(ctx); err != nil || !st.Owned {
		t.Fatalf("Inspect = %+v (err %v), want the write lease owned", st, err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
