package locks

import "time"

// Keep-alive leases are renewed by the service every ttl/3 until they are
// released, lost, reach their max-hold deadline or — with a heartbeat —
// their holder stops calling renew. Their state lives in Redis only:
//
//   - the lock hash holds the bounds: ka_until (max-hold deadline, ms),
//     ka_hb (heartbeat interval, ms, 0 for none) and ka_hb_at (last
//     heartbeat, ms);
//   - the registry, one sorted set per key prefix (per hash slot on a
//     cluster), maps a member naming the
//     lease ("<token>:<name>" for the exclusive lock, "<kind>/<token>:<name>"
//     for the others, see kind.member) to the time the next renewal is due;
//     any instance's renewer renews the due entries, each with its
//     primitive's batch script (see renewer.go);
//   - the lost hash of a lock maps a token to why it lost its lease, for
//     Config.LostTTL.
//
// On a single node the registry is one key for every lock. On Redis Cluster
// it is split by hash slot, so a lease and its registry entry share a slot
// (see shards.go and renewer_cluster.go).

// Reasons a keep-alive lease was lost, as reported by Inspect, besides
// LostExpired (the TTL ran out before a renewal, e.g. while no instance was
// running) and LostForceReleased (see hold.go).
const (
	LostMaxHold         = "max_hold"         // the lease reached its max-hold deadline
	LostHeartbeatMissed = "heartbeat_missed" // the holder stopped calling renew within its heartbeat
)

// Keepalive describes the keep-alive of a lease.
type Keepalive struct {
	// Until is the max-hold deadline: the lease ends then at the latest.
	Until time.Time
	// Heartbeat is the interval within which the holder must call renew for
	// the service to keep renewing; zero means no heartbeat is required.
	Heartbeat time.Duration
	// HeartbeatDue is when the next heartbeat is due (zero without heartbeat).
	HeartbeatDue time.Time
}

// keepaliveOf decodes the keep-alive fields of a script reply (ms values;
// until 0 means the lease is not kept alive).
func keepaliveOf(untilMS, heartbeatMS, heartbeatAtMS int64) *Keepalive {
	if untilMS <= 0 {
		return nil
	}
	ka := &Keepalive{Until: time.UnixMilli(untilMS).UTC(), Heartbeat: time.Duration(heartbeatMS) * time.Millisecond}
	if heartbeatMS > 0 && heartbeatAtMS > 0 {
		ka.HeartbeatDue = time.UnixMilli(heartbeatAtMS + heartbeatMS).UTC()
	}
	return ka
}
