package integration

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// maxBytesPerPermitLease is the Redis memory budget of one semaphore lease
// (MEMORY USAGE on real Redis): its entry in the semaphore's leases hash
// (which holds its expiry too), its share of the semaphore's capacity
// record and of the hash's bookkeeping included.
const maxBytesPerPermitLease = 175

func TestMemoryPerPermitLease(t *testing.T) {
	e := newTestEnv(t)
	cases := []struct {
		name   string
		leases int // on one semaphore: 100 stay in Redis's compact encodings, 1000 do not
		req    locks.AcquireRequest
	}{
		{"plain-100", 100, locks.AcquireRequest{TTL: 30 * time.Second}},
		{"plain-1000", 1000, locks.AcquireRequest{TTL: 30 * time.Second}},
		{"fair-100", 100, locks.AcquireRequest{TTL: 30 * time.Second, Fair: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "mem-" + tc.name
			for range tc.leases {
				req := locks.SemaphoreRequest{AcquireRequest: tc.req, Permits: int64(tc.leases), Count: 1}
				if _, err := e.Svc.AcquireSemaphore(t.Context(), name, req); err != nil {
					t.Fatal(err)
				}
			}
			total, keys := memoryOf(t, e.RDB, e.Prefix+"sem:*{"+name+"}")
			per := float64(total) / float64(tc.leases)
			t.Logf("%s: %d keys for %d permit leases, %.0f bytes per lease (budget %d)", tc.name, len(keys), tc.leases, per, maxBytesPerPermitLease)
			if len(keys) != 2 {
				t.Errorf("keys %q, want the capacity record and the leases", keys)
			}
			if per > maxBytesPerPermitLease {
				t.Errorf("%s: %.0f bytes per permit lease, want at most %d", tc.name, per, maxBytesPerPermitLease)
			}
		})
	}
}
