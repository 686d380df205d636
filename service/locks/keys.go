package locks

import (
	"context"
	"strings"

	"github.com/latchkey/latchkey/service/store"
)

// kind is a lock primitive as its Redis keys and keep-alive registry entries
// name it: the exclusive lock is the empty kind, whose keys and entries keep
// the names they had before other primitives existed (an upgrade keeps its
// held leases); every other kind is a short lowercase tag.
type kind string

// The lock primitives.
const (
	kindMutex kind = ""    // the exclusive lock (mutex.go)
	kindRW    kind = "rw"  // the read/write lock (rwlock.go)
	kindSem   kind = "sem" // the semaphore (semaphore.go)
	kindEl    kind = "el"  // the election (election.go)
)

// lockKeys names the keys of one name of one primitive. All share the hash
// tag {name}, so a script touching them stays on one Redis Cluster slot.
// What each key holds is the primitive's (its scripts' headers say); the
// roles are common to every primitive.
type lockKeys struct {
	lock    string // the name's state (exclusive lock: hash of token, count, fence, ttl)
	fence   string // fence counter
	channel string // pub/sub channel for wake-ups
	waiters string // zset: waiter token -> deadline (ms, Redis clock)
	queue   string // list: fair waiters in arrival order
	lost    string // hash: token -> why that token lost its keep-alive lease
	leases  string // hash: per-holder fields; the semaphore only
	name    string // the name (keep-alive registry members carry it)
	kind    kind
	tenant  string // the tenant whose namespace the keys are in, "" for none
}

// regName is the name as keep-alive registry members carry it: the name,
// and for a tenant's lock '@' and the tenant ("orders@billing"). Names hold
// no '@', so the renewer finds the tenant, and with it the keys, of every
// member, whichever instance acquired the lease.
func (k lockKeys) regName() string {
	if k.tenant == "" {
		return k.name
	}
	return k.name + "@" + k.tenant
}

// keyParts are the roles of lockKeys in order; the exclusive lock has the
// first six.
var keyParts = [...]string{"lock:", "fence:", "unlock:", "waiters:", "queue:", "lost:", "leases:"}

// mutexParts is how many keyParts the exclusive lock has.
const mutexParts = 6

// keysOf names the keys of the name of kind k under prefix: prefix, then the
// kind's tag and ':' (none for the exclusive lock), the role and the name
// in braces, e.g. "latchkey:rw:lock:{orders}". It is the one place that
// names a lock's keys. They are cut from one string, one allocation for all
// of them: every lock request needs them.
func keysOf(prefix string, k kind, name string) lockKeys {
	n := len(keyParts)
	if k == kindMutex {
		n = mutexParts
	}
	var sb strings.Builder
	sb.Grow(n * (len(prefix) + len(k) + len(":waiters:{}") + len(name)))
	var ends [len(keyParts) + 1]int
	for i, p := range keyParts[:n] {
		sb.WriteString(prefix)
		if k != kindMutex {
			sb.WriteString(string(k))
			sb.WriteByte(':')
		}
		sb.WriteString(p)
		sb.WriteByte('{')
		sb.WriteString(name)
		sb.WriteByte('}')
		ends[i+1] = sb.Len()
	}
	all := sb.String()
	key := func(i int) string { return all[ends[i]:ends[i+1]] }
	lk := lockKeys{lock: key(0), fence: key(1), channel: key(2), waiters: key(3), queue: key(4), lost: key(5), name: name, kind: k}
	if n > mutexParts {
		lk.leases = key(6)
	}
	return lk
}

// keysIn names the keys of the name of kind k in the namespace of the
// tenant ctx acts for (see store.WithTenant): under the tenant's key prefix,
// so no tenant's request can name another's keys.
func (s *Service) keysIn(ctx context.Context, k kind, name string) lockKeys {
	return tenantKeys(s.prefix, store.TenantOf(ctx), k, name)
}

// tenantKeys names the keys of the name of kind k of tenant ("" for none)
// under the service's key prefix.
func tenantKeys(prefix, tenant string, k kind, name string) lockKeys {
	lk := keysOf(store.TenantPrefix(prefix, tenant), k, name)
	lk.tenant = tenant
	return lk
}

// keys names the keys of the exclusive lock called name, in the namespace
// of the tenant ctx acts for.
func (s *Service) keys(ctx context.Context, name string) lockKeys {
	return s.keysIn(ctx, kindMutex, name)
}

// registryMember names a keep-alive lease of the exclusive lock in the
// registry: "<token>:<name>". Tokens never hold ':', so the first ':'
// separates the token from the lock name.
func registryMember(token, name string) string { return token + ":" + name }

// member names a keep-alive lease of kind k in the registry: the exclusive
// lock's "<token>:<name>" (see registryMember), any other kind's
// "<kind>/<token>:<name>". Neither tokens nor names hold '/', so an entry
// written before other kinds existed stays the exclusive lock's.
func (k kind) member(token, name string) string {
	if k == kindMutex {
		return registryMember(token, name)
	}
	return string(k) + "/" + token + ":" + name
}

// parseMember splits a registry member into its kind, lock name and tenant
// (see lockKeys.regName); ok is false when it is not one Latchkey writes
// (the name is then not turned into keys).
func parseMember(m string) (k kind, name, tenant string, ok bool) {
	if tag, rest, found := strings.Cut(m, "/"); found {
		k, m = kind(tag), rest
	}
	_, name, ok = strings.Cut(m, ":")
	name, tenant, at := strings.Cut(name, "@")
	return k, name, tenant, ok && ValidateName(name) == nil && (!at || validTenant(tenant))
}

// validTenant reports a tenant name as the keys file allows them: 1-32 of
// a-z 0-9 -.
func validTenant(t string) bool { return store.Matches(t, 1, 32, isTenantByte, isTenantByte) }

func isTenantByte(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' }

// memberKeys names the keys of the lease a keep-alive registry member m
// names (see parseMember); ok is false when m is not one Latchkey writes.
func memberKeys(prefix, m string) (k lockKeys, ok bool) {
	kd, name, tenant, ok := parseMember(m)
	if !ok {
		return lockKeys{}, false
	}
	return tenantKeys(prefix, tenant, kd, name), true
}

// Keys are the Redis keys of one lock, as the service names them: for
// whoever looks at a lock's state in Redis from outside the service.
type Keys struct {
	Lock    string // hash: token, count, fence, ttl
	Fence   string // fence counter
	Channel string // pub/sub channel for wake-ups
	Waiters string // zset: waiter token -> deadline
	Queue   string // list: fair waiters in arrival order
	Lost    string // hash: token -> why that token lost its keep-alive lease
}

// KeysOf names the keys of the lock called name under the key prefix.
func KeysOf(prefix, name string) Keys {
	k := keysOf(prefix, kindMutex, name)
	return Keys{Lock: k.lock, Fence: k.fence, Channel: k.channel, Waiters: k.waiters, Queue: k.queue, Lost: k.lost}
}

// RegistryKey names the keep-alive registry under the key prefix.
func RegistryKey(prefix string) string { return prefix + "keepalive" }
