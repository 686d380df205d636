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

// keys lists the Redis keys of this test's server.
func (e *testEnv) keys(t testing.TB) []string {
	t.Helper()
	ks, err := e.RDB.Keys(t.Context(), e.Prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return ks
}

// lockHashFields names the lock hash's short field names (see acquire.lua).
var lockHashFields = map[string]string{
	"t": "token", "n": "count", "f": "fence", "l": "ttl", "m": "fair",
	"ku": "ka_until", "kh": "ka_hb", "kb": "ka_hb_at",
}

// lockHash reads the lock hash of name straight from Redis, with its fields
// under their long names (token, count, fence, ...).
func (e *testEnv) lockHash(t testing.TB, name string) map[string]string {
	t.Helper()
	h, err := e.RDB.HGetAll(t.Context(), e.lockKey(name)).Result()
	if err != nil {
		t.Fatalf("HGETALL %s: %v", e.lockKey(name), err)
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		long, ok := lockHashFields[k]
		if !ok {
			t.Fatalf("lock hash %s has an unknown field %q", e.lockKey(name), k)
		}
		out[long] = v
	}
	return out
}

// lockOwner reads the token and hold count of name's lock straight from
// Redis ("" when the lock is free).
func (e *testEnv) lockOwner(t testing.TB, name string) (token, count string) {
	t.Helper()
	h := e.lockHash(t, name)
	return h["token"], h["count"]
}

// registrySize is the number of keep-alive leases registered under e's prefix.
func (e *testEnv) registrySize(t testing.TB) int64 {
	t.Helper()
	n, err := e.RDB.ZCard(t.Context(), e.registryKey()).Result()
	if err != nil {
		t.Fatalf("ZCARD: %v", err)
	}
	return n
}

// channelSubscribers is PUBSUB NUMSUB of name's wake-up channel: the
// subscriber connections listening on it.
func (e *testEnv) channelSubscribers(t testing.TB, name string) int64 {
	t.Helper()
	ch := e.lockKeys(name).Channel
	m, err := e.RDB.PubSubNumSub(t.Context(), ch).Result()
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB: %v", err)
	}
	return m[ch]
}
