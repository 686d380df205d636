package locks

import (
	"slices"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// The lock scripts. Each primitive's ARGV builders and reply statuses are
// beside it (the exclusive lock's in mutex_scripts.go), the keep-alive
// renewer's (and its cluster directory's) here. Every script is declared
// one way, store.NewScript(name, lua.Source(name)), named as its file. The
// state changes a client is told about (a grant, a release, a renewal, a
// forced release) run with store.RunReplicated.
//
// Each script's ARGV is built by one function, one line per ARGV index as
// listed in the script's header comment (scripts/lua/*.lua), and the
// statuses of its reply are constants beside it. A test keeps the number of
// ARGV entries each builder makes equal to its script's header.
//
// Every lease primitive has one script per operation of leaseScripts, in
// files named alike: the exclusive lock's acquire.lua, the read/write
// lock's rw_acquire.lua, the semaphore's sem_acquire.lua.
var (
	mutexScripts = newLeaseScripts("")     // mutex.go
	rwScripts    = newLeaseScripts("rw_")  // rwlock.go
	semScripts   = newLeaseScripts("sem_") // semaphore.go, and semSetPermitsScript
	// The keep-alive renewer's, which serves every primitive (renewer.go).
	keepaliveDueScript = store.NewScript("keepalive_due", lua.Source("keepalive_due"))
	// The directory of the renewer's shards, loaded on a cluster only
	// (renewer_cluster.go).
	keepaliveMarkScript   = store.NewScript("keepalive_mark", lua.Source("keepalive_mark"))
	keepaliveClaimScript  = store.NewScript("keepalive_claim", lua.Source("keepalive_claim"))
	keepaliveSettleScript = store.NewScript("keepalive_settle", lua.Source("keepalive_settle"))
	dirScripts            = []*store.Script{keepaliveMarkScript, keepaliveClaimScript, keepaliveSettleScript}
)

// leaseScripts are a lease primitive's scripts, one per operation.
type leaseScripts struct {
	acquire, release, renew, inspect, forceRelease, leave, renewBatch *store.Script
}

// newLeaseScripts returns the scripts of the primitive whose script files
// are prefix+"acquire.lua", prefix+"release.lua" and so on, each named as
// its file. It panics when one is missing (every test of the package
// fails).
func newLeaseScripts(prefix string) leaseScripts {
	script := func(op string) *store.Script { return store.NewScript(prefix+op, lua.Source(prefix+op)) }
	return leaseScripts{acquire: script("acquire"), release: script("release"), renew: script("renew"),
		inspect: script("inspect"), forceRelease: script("force_release"), leave: script("leave"),
		renewBatch: script("renew_batch")}
}

// lockScripts lists every lock script but the cluster's shard directory's
// (dirScripts), for store.Register.
func lockScripts() []*store.Script {
	return slices.Concat(mutexScripts.all(), []*store.Script{keepaliveDueScript},
		semScripts.all(), []*store.Script{semSetPermitsScript}, rwScripts.all(),
		[]*store.Script{quotaTakeScript, quotaSetScript, quotaReleaseScript})
}

// all lists the scripts.
func (ls leaseScripts) all() []*store.Script {
	return []*store.Script{ls.acquire, ls.release, ls.renew, ls.inspect, ls.forceRelease, ls.leave, ls.renewBatch}
}

// On Redis Cluster every lock script that publishes a wake-up runs in the
// form that publishes it with SPUBLISH (lua.Sharded), heard by the sharded
// subscriptions of the channel's node (subscriber_cluster.go); a single
// node keeps PUBLISH and SUBSCRIBE, which Redis before 7 and the embedded
// store have.
func init() {
	for _, sc := range lockScripts() {
		sc.WithClusterVariant(lua.Sharded)
	}
}

// flag is a boolean as the scripts take it: "1" or "0".
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// truth reads a 1/0 field of a script's reply.
func truth(v int64) bool { return v == 1 }

// keepaliveDueArgs is keepalive_due.lua's ARGV.
func keepaliveDueArgs(limit int) []any {
	return []any{
		limit, // ARGV[1] most entries to return
	}
}

// Codes of renew_batch.lua's reply, one per entry.
const (
	batchSkipped = 0 // no longer due or no longer registered
	batchRenewed = 1 // renewed
	batchMissed  = 2 // heartbeat missed: not renewed, the lease runs out its TTL
	batchLost    = 3 // the lease is gone or taken over; the reason says why
	batchDropped = 4 // no longer kept alive (nothing was lost)
)

// renewBatchArgs is renew_batch.lua's ARGV: one registry member per entry.
func renewBatchArgs(cfg Config, members []string) []any {
	args := make([]any, 1, 1+len(members))
	args[0] = cfg.LostTTL.Milliseconds() // ARGV[1] lost-lease reasons' retention, ms
	for _, m := range members {
		args = append(args, m) // ARGV[1+i] registry member of entry i
	}
	return args
}
