package locks

import (
	"fmt"
	"slices"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// The lock scripts. The ARGV builders and reply statuses of what every
// primitive's scripts take and answer alike are here (release, renew,
// force release, inspect, leave) or, for acquire, with the acquire machine
// (acquire.go); those only one primitive's take are in its file
// (rwlock.go, semaphore.go). The keep-alive renewer's scripts (its cluster
// directory's too) are declared with it, in renewer.go, with their ARGV and
// reply codes. Every script is declared one way, store.NewScript(name,
// lua.Source(name)), named as its file. The state changes a client is told
// about (a grant, a release, a renewal, a forced release) run with
// store.RunReplicated.
//
// Each script's ARGV is built by one function, one line per ARGV index as
// listed in the script's header comment (scripts/lua/*.lua), and the
// statuses of its reply are constants beside it. A test keeps the number of
// ARGV entries each builder makes equal to its script's header.
//
// Every lease primitive has one script per operation of leaseScripts, in
// files named alike: the exclusive lock's acquire.lua, the read/write
// lock's rw_acquire.lua, the semaphore's sem_acquire.lua, the election's
// el_acquire.lua.
var (
	mutexScripts = newLeaseScripts("")     // mutex.go
	rwScripts    = newLeaseScripts("rw_")  // rwlock.go
	semScripts   = newLeaseScripts("sem_") // semaphore.go, and semSetPermitsScript
	// elScripts, the election's, are election.go's, with elProclaimScript.
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
		elScripts.all(), []*store.Script{elProclaimScript},
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

// Statuses of release.lua's and renew.lua's replies.
const (
	ownerDone    = 1  // released (release.lua) or renewed (renew.lua)
	ownerNoLease = -1 // no such lease (expired or released)
	ownerOther   = -2 // held by another token
)

// ownerStatus maps the statuses of the release and renew scripts to errors.
func ownerStatus(status int64) error {
	switch status {
	case ownerNoLease:
		return store.ErrNotFound
	case ownerOther:
		return ErrNotOwner
	}
	return nil // ownerDone
}

// ownerReply decodes the reply of a release or renew script (op): n
// integers, the first an owner status. A non-nil err, the script's run's,
// comes back as it is. Returns ErrNotFound, ErrNotOwner, or an error for a
// reply of another shape.
func ownerReply(op string, n int, res any, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	v, err := store.Int64s(op, res, n)
	if err != nil {
		return nil, err
	}
	return v, ownerStatus(v[0])
}

// inspectReply decodes the reply of an inspect script (op): n fields, the
// first ints of them integers (v), the rest read from arr. A non-nil err,
// the script's run's, comes back as it is; so does an error for a reply of
// another shape.
func inspectReply(op string, n, ints int, res any, err error) (arr []any, v []int64, _ error) {
	if err != nil {
		return nil, nil, err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != n {
		return nil, nil, fmt.Errorf("%s: unexpected reply %T %v", op, res, res)
	}
	v, err = store.Int64s(op, arr[:ints], ints)
	return arr, v, err
}

// releaseArgs is release.lua's and sem_release.lua's ARGV. name is the
// lock's registry name (regName).
func releaseArgs(cfg Config, kd kind, name, token string) []any {
	return []any{
		token,                       // ARGV[1] token
		kd.member(token, name),      // ARGV[2] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[3] fence retention, ms
	}
}

// renewArgs is renew.lua's and sem_renew.lua's ARGV, and the first five of
// rw_renew.lua's. A ttl of 0 renews for the lease's own TTL.
// extra more are room for the rest of rw_renew.lua's.
func renewArgs(cfg Config, kd kind, name, token string, ttl time.Duration, extra int) []any {
	return append(make([]any, 0, 5+extra),
		token,                       // ARGV[1] token
		ttl.Milliseconds(),          // ARGV[2] new lease TTL, ms (0: the lease's own)
		cfg.LostTTL.Milliseconds(),  // ARGV[3] lost-lease reasons' retention, ms
		kd.member(token, name),      // ARGV[4] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[5] fence retention, ms
	)
}

// Statuses of force_release.lua's reply.
const (
	forceRemoved = 1 // a lease was removed
	forceFree    = 0 // the lock was free
)

// forceReleaseArgs is force_release.lua's and rw_force_release.lua's ARGV.
func forceReleaseArgs(cfg Config, name string) []any {
	return []any{
		cfg.FenceTTL.Milliseconds(), // ARGV[1] fence retention, ms
		cfg.LostTTL.Milliseconds(),  // ARGV[2] lost-lease reasons' retention, ms
		name,                        // ARGV[3] lock name
	}
}

// inspectArgs is the ARGV of every primitive's inspect script (inspect.lua,
// rw_inspect.lua, sem_inspect.lua). An empty token asks about no token.
func inspectArgs(kd kind, name, token string) []any {
	member := ""
	if token != "" {
		member = kd.member(token, name)
	}
	return []any{
		token,  // ARGV[1] token to report on, or ""
		member, // ARGV[2] the token's keep-alive registry member, or ""
	}
}

// leaveArgs is the ARGV of every primitive's leave script (leave.lua,
// rw_leave.lua, sem_leave.lua).
func leaveArgs(token string) []any {
	return []any{
		token, // ARGV[1] waiter token
	}
}
