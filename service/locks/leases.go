package locks

import (
	"fmt"
	"time"
)

// MaxListedLeases is the most leases a read/write lock's or a semaphore's
// state describes one by one (RWState.Leases, SemaphoreState.Leases); the
// state says when more are held (LeasesTruncated).
const MaxListedLeases = 100

// HeldLease is one lease of a read/write lock or a semaphore as its state
// describes it to anyone: never its token.
type HeldLease struct {
	Owner     string    // the owner text the lease was granted with
	GrantedAt time.Time // when the lease was granted (Redis clock): its fence's time
	TTL       time.Duration
	ExpiresAt time.Time
	Mode      RWMode // a read/write lock's lease: read or write
	Count     int64  // a semaphore's lease: the permits it holds
	Fence     int64  // the lease's fence
}

// maxWatchedLeases is the most leases of a read/write lock or a semaphore
// a watch follows one by one (see watchSnapshot.partial).
const maxWatchedLeases = 1000

// heldInspectArgs is rw_inspect.lua's and sem_inspect.lua's ARGV: inspect.lua's,
// and the most leases to describe (MaxListedLeases for a state's reader).
func heldInspectArgs(kd kind, name, token string, most int) []any {
	return append(inspectArgs(kd, name, token),
		most, // ARGV[3] the most leases to describe
	)
}

// listedLeases trims leases, which a read may have asked more of, to the
// MaxListedLeases a state lists, saying so in truncated.
func listedLeases(leases []HeldLease, truncated bool) ([]HeldLease, bool) {
	if len(leases) > MaxListedLeases {
		return leases[:MaxListedLeases:MaxListedLeases], true
	}
	return leases, truncated
}

// heldLeases decodes the leases and leases_truncated members of an inspect
// reply (each lease {owner, fence, ttl_ms, mode or count}), read at now_ms.
func heldLeases(kd kind, leases, truncated any, nowMS int64) ([]HeldLease, bool, error) {
	rows, ok := leases.([]any)
	if !ok {
		return nil, false, fmt.Errorf("inspect: unexpected leases %T", leases)
	}
	out := make([]HeldLease, 0, len(rows))
	for _, row := range rows {
		f, ok := row.([]any)
		if !ok || len(f) != 4 {
			return nil, false, fmt.Errorf("inspect: unexpected lease %v", row)
		}
		owner, _ := f[0].(string)
		fence, _ := f[1].(int64)
		ttl, _ := f[2].(int64)
		n, _ := f[3].(int64)
		l := HeldLease{Owner: owner, Fence: fence, GrantedAt: time.UnixMicro(fence).UTC(),
			TTL: time.Duration(ttl) * time.Millisecond, ExpiresAt: time.UnixMilli(nowMS + ttl).UTC()}
		switch {
		case kd != kindRW:
			l.Count = n
		case n == 2:
			l.Mode = ModeWrite
		default:
			l.Mode = ModeRead
		}
		out = append(out, l)
	}
	t, _ := truncated.(int64)
	return out, t == 1, nil
}
