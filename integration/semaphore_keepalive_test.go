package integration

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// envSemChild names the Redis URL, key prefix and semaphore of the child
// Latchkey instance run by TestSemaphoreKeepaliveSurvivesAKilledInstance.
const envSemChild = "LATCHKEY_TEST_SEM_CHILD"

// TestSemaphoreChildInstance is not a test of its own: the killed-instance
// test runs it in a child process, a Latchkey instance (with its renewer)
// that takes a keep-alive permit lease, prints its token and waits to be
// killed.
func TestSemaphoreChildInstance(t *testing.T) {
	spec := os.Getenv(envSemChild)
	if spec == "" {
		t.Skip("runs only as the child process of TestSemaphoreKeepaliveSurvivesAKilledInstance")
	}
	parts := strings.SplitN(spec, " ", 3)
	e := newTestEnv(t, withRedis(parts[0]), withPrefix(parts[1]), withRenewer(instancePoll))
	l := e.semAcquire(t, parts[2], `{"permits": 4, "count": 3, "ttl": "1s", "keepalive": true}`)
	fmt.Printf("TOKEN=%s\n", l.Token)
	<-t.Context().Done() // killed before the test's deadline
}

// TestSemaphoreKeepaliveSurvivesAKilledInstance: the instance that granted
// a keep-alive permit lease dies (SIGKILL); the other instance's renewer
// keeps the lease, and its 3 permits, for many TTLs, and the owner's
// release through it gives them back.
func TestSemaphoreKeepaliveSurvivesAKilledInstance(t *testing.T) {
	b := newTestEnv(t, withRenewer(instancePoll))
	child := exec.Command(os.Args[0], "-test.run=^TestSemaphoreChildInstance$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), envSemChild+"="+b.RedisURL+" "+b.Prefix+" ka-sem")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	var token string
	for sc := bufio.NewScanner(out); token == "" && sc.Scan(); {
		if tok, ok := strings.CutPrefix(sc.Text(), "TOKEN="); ok {
			token = tok
		}
	}
	if token == "" {
		t.Fatal("the child instance printed no token")
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	before := metricValue(t, b, "latchkey_keepalive_renewals_total")
	eventually(t, 30*time.Second, "b renews the lease 5 times (5 TTLs/3)", func() bool {
		return metricValue(t, b, "latchkey_keepalive_renewals_total")-before >= 5
	})
	st := b.semState(t, "ka-sem", "Lock-Token", token)
	if st.Owned == nil || !*st.Owned || st.InUse != 3 || st.Lease == nil || st.Lease.Keepalive == nil {
		t.Fatalf("after its instance was killed and b renewed it: %+v, want owned, 3 permits in use, kept alive", st)
	}
	b.semRelease(t, "ka-sem", token)
	if st := b.semState(t, "ka-sem"); st.InUse != 0 {
		t.Errorf("in use after the release = %d, want 0", st.InUse)
	}
	if n := b.registrySize(t); n != 0 {
		t.Errorf("registry holds %d leases after the release, want 0", n)
	}
}

// TestSemaphoreKeepaliveExpiresWhenNoInstanceRuns: with no renewer, a
// keep-alive permit lease runs out; its permits come back, and the owner
// learns it expired.
func TestSemaphoreKeepaliveExpiresWhenNoInstanceRuns(t *testing.T) {
	a := newTestEnv(t)
	l := a.semAcquire(t, "ka-sem-down", `{"permits": 2, "count": 2, "ttl": "1s", "keepalive": true}`)
	eventually(t, 10*time.Second, "the unrenewed lease's permits are back", func() bool {
		return a.semState(t, "ka-sem-down").Available == 2
	})
	b := newTestEnv(t, beside(a), withRenewer(instancePoll))
	eventually(t, 10*time.Second, "b's renewer counts the expiry", func() bool {
		return metricValue(t, b, `latchkey_keepalive_renewal_failures_total{reason="expired"}`) >= 1
	})
	if got := b.semState(t, "ka-sem-down", "Lock-Token", l.Token).LostReason; got != locks.LostExpired {
		t.Errorf("lost_reason = %q, want expired", got)
	}
}

// TestSemaphoreHoldStream: a hold stream of permits is renewed while open,
// reports a force-release as lost, and gives its permits back when the
// client closes it.
func TestSemaphoreHoldStream(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	h := e.openHoldAt(t, semPath("held")+"/hold", `{"permits": 3, "count": 2, "ttl": "300ms"}`)
	if h.Status != http.StatusOK {
		t.Fatalf("hold: %d %s", h.Status, h.Body)
	}
	if ev := h.next(t, eventGuard, false); ev.Name != "acquired" || ev.Data["hold_count"] != 2.0 {
		t.Fatalf("first event %+v, want acquired holding 2 permits", ev)
	}
	for range 3 {
		if ev := h.next(t, eventGuard, false); ev.Name != "renewed" {
			t.Fatalf("event %+v, want renewed", ev)
		}
	}
	if st := e.semState(t, "held"); st.InUse != 2 {
		t.Fatalf("in use while held = %d, want 2", st.InUse)
	}
	h.close()
	eventually(t, eventGuard, "closing the stream gives the permits back", func() bool {
		return metricValue(t, e, `latchkey_semaphore_releases_total{kind="released"}`) == 1
	})

	h = e.openHoldAt(t, semPath("held")+"/hold", `{"permits": 3, "ttl": "30s"}`)
	if ev := h.next(t, eventGuard, false); ev.Name != "acquired" {
		t.Fatalf("event %+v, want acquired", ev)
	}
	wantStatus(t, e.do(t, http.MethodDelete, semPath("held")+"?force=true", "", "Authorization", "Bearer "+testAdminKey), 204)
	for {
		ev := h.next(t, eventGuard, false)
		if ev.Name == "renewed" {
			continue
		}
		if ev.Name != "lost" || ev.Data["reason"] != locks.LostForceReleased {
			t.Fatalf("event %+v, want lost (force_released)", ev)
		}
		break
	}
}

// TestSemaphoreHoldWithCurlKilled: `curl -N` holds permits; when the curl
// process is killed (SIGKILL), the permits are given back, not left to
// expire.
func TestSemaphoreHoldWithCurlKilled(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		skipOrFail(t, "curl is not installed (Debian: apt-get install curl)")
	}
	e := newTestEnv(t, withShortStreams())
	cmd := exec.Command(curl, "-sS", "-N", "--max-time", "60", "-X", "POST", "-H", "Content-Type: application/json",
		"-d", `{"permits":2,"count":2,"ttl":"30s"}`, e.URL+semPath("curl")+"/hold")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var seen []string
	for lines := bufio.NewScanner(out); len(seen) < 1 && lines.Scan(); {
		if l, ok := strings.CutPrefix(lines.Text(), "event: "); ok {
			seen = append(seen, l)
		}
	}
	if !slices.Equal(seen, []string{"acquired"}) {
		t.Fatalf("curl -N printed events %v, want acquired", seen)
	}
	if st := e.semState(t, "curl"); st.InUse != 2 {
		t.Fatalf("in use while curl holds = %d, want 2", st.InUse)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The 30s TTL is far off: only the release frees the permits in time.
	eventually(t, eventGuard, "the permits are released once curl is killed", func() bool {
		return e.semState(t, "curl").InUse == 0
	})
}
