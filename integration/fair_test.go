package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// TestFairOrder: 20 fair waiters arriving in a known order acquire in that
// order; one that disconnects mid-queue is skipped at once, not after its
// 60s wait.
func TestFairOrder(t *testing.T) {
	e := newTestEnv(t)
	holder := e.acquire(t, "fifo", `{"ttl":"30s","fair":true}`).Token

	const n, gone = 20, 5
	var (
		mu     sync.Mutex
		order  []int
		wg     sync.WaitGroup
		cancel context.CancelFunc
		failed = make([]response, n)
	)
	for i := range n {
		ctx := t.Context()
		if i == gone {
			ctx, cancel = context.WithCancel(ctx)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.send(ctx, "POST", "/v1/locks/fifo", `{"ttl":"10s","wait":"60s","fair":true}`)
			if r.Status != http.StatusCreated {
				failed[i] = r
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			failed[i] = e.send(t.Context(), "DELETE", "/v1/locks/fifo", "", "Lock-Token", r.Token())
		}()
		e.waitForWaiters(t, "fifo", int64(i+1)) // arrival order is queue order
	}
	cancel()
	e.waitForWaiters(t, "fifo", n-1)

	start := time.Now()
	e.release(t, "fifo", holder)
	wg.Wait()
	elapsed := time.Since(start)

	var want []int
	for i := range n {
		if i != gone {
			want = append(want, i)
		}
	}
	if !slices.Equal(order, want) {
		t.Errorf("grant order = %v, want %v", order, want)
	}
	for i, r := range failed {
		if i != gone && (r.Err != nil || r.Status != http.StatusOK) {
			t.Errorf("waiter %d: status %d err %v body %s, want acquired and released", i, r.Status, r.Err, r.Body)
		}
	}
	if failed[gone].Err == nil {
		t.Errorf("the disconnected waiter got an answer: %d %s", failed[gone].Status, failed[gone].Body)
	}
	if elapsed > 20*time.Second {
		t.Errorf("the queue drained in %s, want far less than the departed waiter's 60s wait", elapsed)
	}
	if st := e.inspect(t, "fifo"); st.Waiters != 0 || st.Held || st.Fair {
		t.Errorf("state after the queue drained = %+v, want free, not fair, no waiters", st)
	}
}

// TestFairModeMismatch: a lock is fair or not while anyone holds or waits
// for it; asking for the other mode is a 409 lock-mode-mismatch, while the
// owner can re-enter in either mode.
func TestFairModeMismatch(t *testing.T) {
	e := newTestEnv(t)
	fairTok := e.acquire(t, "fair", `{"fair":true}`).Token
	plainTok := e.acquire(t, "plain", `{}`).Token
	tests := []struct {
		name, body string
		headers    []string
		status     int
		typ        string
	}{
		{"plain", `{"fair":true}`, nil, http.StatusConflict, `"lock-mode-mismatch"`},
		{"plain", `{"fair":true,"wait":"100ms"}`, nil, http.StatusConflict, `"lock-mode-mismatch"`},
		{"fair", `{}`, nil, http.StatusConflict, `"lock-mode-mismatch"`},
		{"fair", `{"wait":"100ms"}`, nil, http.StatusConflict, `"lock-mode-mismatch"`},
		{"fair", `{"fair":true}`, nil, http.StatusConflict, `"lock-held"`},
		{"fair", `{}`, []string{"Lock-Token", fairTok}, http.StatusOK, `"reentrant":true`},
		{"plain", `{"fair":true}`, []string{"Lock-Token", plainTok}, http.StatusOK, `"reentrant":true`},
	}
	for _, tt := range tests {
		r := e.send(t.Context(), "POST", "/v1/locks/"+tt.name, tt.body, tt.headers...)
		if r.Status != tt.status || !strings.Contains(string(r.Body), tt.typ) {
			t.Errorf("%s %s: %d %s, want %d with %s", tt.name, tt.body, r.Status, r.Body, tt.status, tt.typ)
		}
	}
	if st := e.inspect(t, "fair"); !st.Fair {
		t.Errorf("GET fair lock: fair = false, want true")
	}
	if st := e.inspect(t, "plain"); st.Fair {
		t.Errorf("GET plain lock: fair = true, want false")
	}
}

// TestFairWaiterClientKilled: the client process of the first fair waiter
// (curl) is killed with SIGKILL; the server sees the connection drop, the
// waiter leaves the queue at once, and the next one gets the lock as soon
// as it is released, not when the killed waiter's 60s wait would have ended.
func TestFairWaiterClientKilled(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		skipOrFail(t, "curl is not installed (Debian: apt-get install curl)")
	}
	e := newTestEnv(t)
	holder := e.acquire(t, "killed-client", `{"ttl":"30s","fair":true}`).Token

	cmd := exec.Command(curl, "-sS", "-N", "--max-time", "120", "-X", "POST", "-H", "Content-Type: application/json",
		"-d", `{"wait":"60s","fair":true}`, e.URL+"/v1/locks/killed-client")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	e.waitForWaiters(t, "killed-client", 1)
	got := make(chan response, 1)
	go func() {
		got <- e.send(t.Context(), "POST", "/v1/locks/killed-client", `{"wait":"60s","fair":true}`)
	}()
	e.waitForWaiters(t, "killed-client", 2)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	e.waitForWaiters(t, "killed-client", 1)
	e.release(t, "killed-client", holder)
	select {
	case r := <-got:
		if r.Status != http.StatusCreated {
			t.Fatalf("second waiter: %d %s, want 201", r.Status, r.Body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("second waiter not granted 20s after the release, want at once: the killed waiter's place must not hold the queue until its 60s wait ends")
	}
}

// envChildInstance names the Redis URL, key prefix and lock of a child
// Latchkey instance run by TestFairInstanceKilled.
const envChildInstance = "LATCHKEY_TEST_CHILD_INSTANCE"

// TestFairChildInstance is not a test of its own: TestFairInstanceKilled
// runs it in a child process as a second Latchkey instance whose fair waiter
// is queued when the process is killed.
func TestFairChildInstance(t *testing.T) {
	spec := os.Getenv(envChildInstance)
	if spec == "" {
		t.Skip("runs only as the child process of TestFairInstanceKilled")
	}
	parts := strings.SplitN(spec, " ", 3)
	svc := newTestEnv(t, withRedis(parts[0]), withPrefix(parts[1])).Svc
	// Long enough for the parent to queue its own waiter behind this one and
	// kill this process, however slowly the machine runs.
	_, err := svc.Acquire(t.Context(), parts[2], locks.AcquireRequest{Wait: 40 * time.Second, Fair: true})
	t.Fatalf("the child instance was not killed while it waited: %v", err)
}

// TestFairInstanceKilled: the Latchkey process of a queued fair waiter dies
// (SIGKILL, so it never leaves the queue). Its registration, which a live
// wait renews, ends within its 6 s lease (plus the 250ms grace), not at the
// end of its 40 s wait. The waiter behind it is not blocked beyond the
// dead waiter's deadline, and not let past it earlier either: FIFO stays
// honest.
func TestFairInstanceKilled(t *testing.T) {
	e := newTestEnv(t)
	holder := e.acquire(t, "dead-instance", `{"ttl":"30s","fair":true}`).Token

	child := exec.Command(os.Args[0], "-test.run=^TestFairChildInstance$", "-test.count=1")
	child.Env = append(os.Environ(), envChildInstance+"="+e.RedisURL+" "+e.Prefix+" dead-instance")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	e.waitForWaiters(t, "dead-instance", 1)
	got := make(chan response, 1)
	go func() {
		got <- e.send(t.Context(), "POST", "/v1/locks/dead-instance", `{"wait":"40s","fair":true}`)
	}()
	e.waitForWaiters(t, "dead-instance", 2)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	// The dead waiter is the queue's head; its deadline is its score.
	queue, waiters := e.lockKeys("dead-instance").Queue, e.lockKeys("dead-instance").Waiters
	head, err := e.RDB.LIndex(t.Context(), queue, 0).Result()
	if err != nil {
		t.Fatalf("queue head: %v", err)
	}
	deadline, err := e.RDB.ZScore(t.Context(), waiters, head).Result()
	if err != nil {
		t.Fatalf("dead waiter's deadline: %v", err)
	}
	now, err := e.RDB.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	blockedFor := time.Duration(int64(deadline)-now.UnixMilli()) * time.Millisecond
	if registration := 6*time.Second + 250*time.Millisecond; blockedFor > registration {
		t.Errorf("the dead waiter stays queued %s more, want at most its registration's %s: a dead process's waiter blocks the queue for its whole wait", blockedFor, registration)
	}

	start := time.Now()
	e.release(t, "dead-instance", holder)
	r := <-got
	elapsed := time.Since(start)
	if r.Status != http.StatusCreated {
		t.Fatalf("waiter behind the dead one: %d %s, want 201", r.Status, r.Body)
	}
	t.Logf("the dead waiter's deadline was %s after the release; the next waiter acquired after %s", blockedFor, elapsed)
	if elapsed < blockedFor-100*time.Millisecond {
		t.Errorf("acquired %s after the release, before the dead waiter's deadline (%s): it jumped the queue", elapsed, blockedFor)
	}
	if elapsed > blockedFor+15*time.Second {
		t.Errorf("acquired %s after the release, want soon after the dead waiter's deadline (%s)", elapsed, blockedFor)
	}
}
