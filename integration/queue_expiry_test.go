package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// TestQueuedWaitersOfExpiringLeasesAreAllGranted: n waiters queue on one
// name, and each, once granted, lets its short lease expire unreleased (its
// holder gone), which publishes nothing. A waiter behind the queue's head
// is told to re-check at the head's deadline, the whole wait away; every
// grant's notice brings that re-check forward to the new lease's end, so
// every waiter is granted within its wait, one after the other. Before
// grants published their notice, 3 to 5 of 40 rwlock writers were granted
// in 30 s. The wait is a hang guard: the test counts grants, not time.
func TestQueuedWaitersOfExpiringLeasesAreAllGranted(t *testing.T) {
	const n = 16
	for _, tt := range []struct {
		desc, path, body string
	}{
		{"fair lock", "/v1/locks/expiring", `{"ttl":"100ms","wait":"50s","fair":true}`},
		{"rwlock writers", "/v1/rwlocks/expiring", `{"mode":"write","ttl":"100ms","wait":"50s"}`},
		{"fair semaphore", "/v1/semaphores/expiring", `{"permits":1,"ttl":"100ms","wait":"50s","fair":true}`},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			e := newTestEnv(t)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				fences  = map[int64]bool{}
				refused []string
			)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := e.send(t.Context(), "POST", tt.path, tt.body)
					mu.Lock()
					defer mu.Unlock()
					if r.Err != nil || r.Status != http.StatusCreated {
						var p problemJSON
						_ = json.Unmarshal(r.Body, &p)
						answer := fmt.Sprintf("%d %s", r.Status, p.Type)
						if r.Err != nil {
							answer = r.Err.Error()
						}
						refused = append(refused, answer)
						return
					}
					fences[r.Fence()] = true
				}()
			}
			wg.Wait()
			if len(fences) != n {
				t.Errorf("%d of %d waiters granted a lease with a fence of its own, want all; the others were answered %q", len(fences), n, refused)
			}
		})
	}
}
