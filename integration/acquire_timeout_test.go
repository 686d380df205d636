package integration

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// slowProxy forwards TCP connections to a Redis and, on connections that
// have sent a script call (EVALSHA), holds every reply for a settable delay.
// Requests reach Redis at once, so a script runs while its caller is still
// waiting for the answer: a Redis whose replies are slow, as seen by a
// client whose timeout is shorter than the delay. New connections still
// complete their handshake (HELLO) in time.
type slowProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// newSlowProxy starts a proxy to the Redis at url and returns it with the
// address to dial. It stops when t ends.
func newSlowProxy(t testing.TB, url string) (*slowProxy, string) {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, target: opts.Addr}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p, ln.Addr().String()
}

// setDelay holds every reply that arrives from now on for d.
func (p *slowProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *slowProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		scripted := new(atomic.Bool)
		p.wg.Go(func() {
			requests(c, up, scripted)
			_ = up.Close()
		})
		p.wg.Go(func() { p.replies(c, up, scripted) })
	}
}

// chunk is a piece of a reply and when it may be passed on.
type chunk struct {
	due  time.Time
	data []byte
}

// requests passes what the client sends on to Redis at once, noting when
// it sends a script call.
func requests(c, up net.Conn, scripted *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) {
				scripted.Store(true)
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies passes what Redis sends on to the client, in order, each piece
// once its delay has passed when the connection calls scripts.
func (p *slowProxy) replies(c, up net.Conn, scripted *atomic.Bool) {
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := up.Read(buf)
			if n > 0 {
				due := time.Now()
				if scripted.Load() {
					due = due.Add(time.Duration(p.delay.Load()))
				}
				queue <- chunk{due: due, data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range queue {
		time.Sleep(time.Until(ch.due))
		if _, err := c.Write(ch.data); err != nil {
			break
		}
	}
	_ = c.Close()
	for range queue { // let the reader finish once up is closed
	}
}

func (p *slowProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Reply delays of the tests below: far above the service's Redis timeout, so
// every call through the proxy times out after its script ran.
const (
	slowReply     = 800 * time.Millisecond
	slowOpTimeout = 300 * time.Millisecond
)

// newSlowEnv starts a server whose Redis replies slowly once the returned
// proxy's delay is set (the scripts are loaded before that). The env's RDB
// reaches Redis directly, without delay.
func newSlowEnv(t *testing.T, wrap func(testing.TB, redis.UniversalClient) store.Client, opTimeout time.Duration) (*testEnv, *slowProxy) {
	t.Helper()
	_, url := startRedisContainer(t)
	p, addr := newSlowProxy(t, url)
	e := newTestEnv(t, withRedis(url), withServerClient(opTimeout), withServerAddr(addr), withClient(wrap))
	return e, p
}

// wantFreed polls Redis until name's lock and its keep-alive registry entry
// are gone. The bound only detects a lease that stays: the lease asked for
// lives far longer.
func (e *testEnv) wantFreed(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tok := e.lockHash(t, name).Token
		n, err := e.RDB.ZCard(t.Context(), e.registryKey()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if tok == "" && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock %s still held (token %q, %d keep-alive entries) after the acquire failed: "+
				"a lease nobody was told about", name, tok, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantGranted polls Redis until the acquire of name has run and granted the
// lock (only a grant sets the fence counter), or fails: a test of what a
// timed-out acquire leaves behind proves nothing if the script never ran.
// With the pipelined client the script may reach Redis after the caller's
// 503, queued behind an earlier batch that waits for its slow reply.
func (e *testEnv) wantGranted(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := e.RDB.Exists(t.Context(), e.fenceKey(name)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fence counter for %s: the acquire never ran, the test proves nothing", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantStoreUnavailable sends one request and wants 503 store-unavailable,
// answered well before a hang guard.
func wantStoreUnavailable(t *testing.T, e *testEnv, method, path, body string, headerPairs ...string) {
	t.Helper()
	start := time.Now()
	wantProblem(t, e.do(t, method, path, body, headerPairs...), http.StatusServiceUnavailable, "store-unavailable")
	if took := time.Since(start); took > 20*slowOpTimeout {
		t.Errorf("%s %s took %s with a Redis timeout of %s: it hangs", method, path, took, slowOpTimeout)
	}
}

// An acquire whose reply times out answers 503, and leaves no lease behind:
// the script ran, so the service gives the lease it cannot hand out back.
func TestAcquireTimeoutLeavesNoLease(t *testing.T) {
	for _, c := range serverClients {
		t.Run(c.name, func(t *testing.T) {
			e, p := newSlowEnv(t, c.wrap, slowOpTimeout)
			p.setDelay(slowReply)
			cases := []struct{ name, body string }{
				{"try-once", `{"ttl":"30s"}`},
				{"keepalive", `{"ttl":"30s","keepalive":true}`},
				{"waiting", `{"ttl":"30s","wait":"5s"}`},
				{"waiting-keepalive", `{"ttl":"30s","wait":"5s","keepalive":true}`},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					wantStoreUnavailable(t, e, "POST", "/v1/locks/"+tc.name, tc.body)
					e.wantGranted(t, tc.name)
					e.wantFreed(t, tc.name)
				})
			}
		})
	}
}

// A client that sends its own token may already hold the lock: the service
// cannot tell whether its re-entry ran, so it gives nothing back, and the
// holds the client had stay (the client owns the token and can release).
func TestAcquireTimeoutKeepsTheClientsHolds(t *testing.T) {
	e, p := newSlowEnv(t, serverClients[1].wrap, slowOpTimeout)
	held := e.acquire(t, "mine", `{"ttl":"30s"}`)
	p.setDelay(slowReply)
	wantStoreUnavailable(t, e, "POST", "/v1/locks/mine", `{"ttl":"30s"}`, "Lock-Token", held.Token)
	time.Sleep(slowReply) // a release of the re-entry, had one been sent, has run by now
	if h := e.lockHash(t, "mine"); h.Token != held.Token || h.Count != "2" {
		t.Fatalf("after a timed-out re-entry: token %q, hold count %q; want the client's token, "+
			"its hold and the re-entry's (the client releases what it does not want)", h.Token, h.Count)
	}
	p.setDelay(0)
	for range 2 {
		wantStatus(t, e.do(t, "DELETE", "/v1/locks/mine", "", "Lock-Token", held.Token), http.StatusOK)
	}
}

// A client that goes away while its acquire's script runs gets nothing, and
// the lease the script granted is given back.
func TestAcquireCancelledMidScriptLeavesNoLease(t *testing.T) {
	for _, c := range serverClients {
		t.Run(c.name, func(t *testing.T) {
			// The Redis timeout is above the delay: the reply arrives, late.
			e, p := newSlowEnv(t, c.wrap, 5*slowReply)
			p.setDelay(slowReply)
			for _, body := range []string{`{"ttl":"30s"}`, `{"ttl":"30s","keepalive":true}`} {
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() {
					resp, err := e.Client.Do(e.newRequest(t, ctx, "POST", "/v1/locks/gone", body))
					if err == nil {
						_ = resp.Body.Close()
						err = errors.New(resp.Status)
					}
					done <- err
				}()
				// Once Redis has run the script, the client gives up.
				eventually(t, 5*time.Second, "the acquire script ran", func() bool {
					return e.lockHash(t, "gone").Token != ""
				})
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("%s: the client got %v, want its own cancellation (it answered before the "+
						"client went away: the test proves nothing)", body, err)
				}
				e.wantFreed(t, "gone")
			}
		})
	}
}
