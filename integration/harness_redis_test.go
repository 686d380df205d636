package integration

// The harness's readers of a server's state in Redis, for what the API does
// not show. Key names come from the service (locks.KeysOf).

import (
	"testing"

	"github.com/latchkey/latchkey/service/locks"
)

// lockKeys are the Redis keys of the lock called name on e's server.
func (e *testEnv) lockKeys(name string) locks.Keys { return locks.KeysOf(e.Prefix, name) }

// lockKey is the Redis key of the lock hash of name.
func (e *testEnv) lockKey(name string) string { return e.lockKeys(name).Lock }

// fenceKey is the Redis key of the fence counter of name.
func (e *testEnv) fenceKey(name string) string { return e.lockKeys(name).Fence }

// registryKey is the Redis key of the keep-alive registry of e's server.
func (e *testEnv) registryKey() string { return locks.RegistryKey(e.Prefix) }

// keys lists the Redis keys of this test's server, on every primary.
func (e *testEnv) keys(t testing.TB) []string {
	t.Helper()
	return allKeys(t, e.RDB, e.Prefix+"*")
}

// redisLock is the lock hash of one lock as Redis holds it (see
// acquire.lua), its fields under their long names, as stored (strings);
// "" when absent.
type redisLock struct {
	Token, Count, Fence, TTL, Fair string
	KeepaliveUntil                 string // ku: max-hold deadline
	Heartbeat, HeartbeatAt         string // kh, kb: heartbeat interval and last heartbeat
	Owner, GrantedAt               string // o, g: the owner text, and the grant time when the fence is not it
}

// lockHash reads the lock hash of name straight from Redis; an unknown
// field fails t.
func (e *testEnv) lockHash(t testing.TB, name string) redisLock {
	t.Helper()
	h, err := e.RDB.HGetAll(t.Context(), e.lockKey(name)).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", e.lockKey(name), err)
	}
	var l redisLock
	fields := map[string]*string{
		"t": &l.Token, "n": &l.Count, "f": &l.Fence, "l": &l.TTL, "m": &l.Fair,
		"ku": &l.KeepaliveUntil, "kh": &l.Heartbeat, "kb": &l.HeartbeatAt,
		"o": &l.Owner, "g": &l.GrantedAt,
	}
	for k, v := range h {
		f, ok := fields[k]
		if !ok {
			t.Fatalf("lock hash %s has an unknown field %q", e.lockKey(name), k)
		}
		*f = v
	}
	return l
}

// registryKeys are the keep-alive registry keys of e's server: the one
// registry on a single node; on a cluster, the registry shards
// (locks.ShardKey: the registry key, a colon and a slot's hash tag) that
// hold entries.
func (e *testEnv) registryKeys(t testing.TB) []string {
	t.Helper()
	if !e.Svc.Store.Config().Cluster {
		return []string{e.registryKey()}
	}
	return allKeys(t, e.RDB, e.registryKey()+":{*}")
}

// registrySize is the number of keep-alive leases registered under e's prefix.
func (e *testEnv) registrySize(t testing.TB) int64 {
	t.Helper()
	var total int64
	for _, k := range e.registryKeys(t) {
		n, err := e.RDB.ZCard(t.Context(), k).Result()
		if err != nil {
			t.Fatalf("ZCARD %s: %v", k, err)
		}
		total += n
	}
	return total
}

// channelSubscribers is the number of subscriber connections listening on
// name's wake-up channel (sharded or not), over every node.
func (e *testEnv) channelSubscribers(t testing.TB, name string) int64 {
	t.Helper()
	ch := e.lockKeys(name).Channel
	return subscribers(t, e.RDB, ch)[ch]
}

// dump is every Redis key of e's server with its value as DUMP serializes
// it (not its TTL), to show byte for byte that a request changed nothing.
func (e *testEnv) dump(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range e.keys(t) {
		v, err := e.RDB.Dump(t.Context(), k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		out[k] = v
	}
	return out
}
