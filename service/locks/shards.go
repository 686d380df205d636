package locks

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// On Redis Cluster every key one script touches must share a hash slot. A
// lock's keys share the tag {name}; its keep-alive registry entry lives in
// the registry shard of the same slot, "<prefix>keepalive:{<tag>}", where
// <tag> is the shortest string found whose slot is that slot (slotTags).
// On a single node the registry stays the one key RegistryKey names, as it
// always was. docs/cluster-keys.md describes the layout.

// tagAlphabet is what slot tags are made of: letters and digits, so a tag
// needs no escaping in a key, a SCAN pattern or a log line.
const tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// slotTags returns, for every hash slot, a short tag (at most 4 characters)
// whose slot it is. It is computed once, on first use, by trying the
// strings of tagAlphabet in order of length: about 250 thousand CRC16s of
// 1–3 bytes, a few milliseconds.
var slotTags = sync.OnceValue(func() *[store.ClusterSlots]string {
	var tags [store.ClusterSlots]string
	left := store.ClusterSlots
	var try func(prefix []byte, n int)
	try = func(prefix []byte, n int) {
		if left == 0 {
			return
		}
		if len(prefix) == n {
			if s := store.Slot(string(prefix)); tags[s] == "" {
				tags[s] = string(prefix)
				left--
			}
			return
		}
		for i := 0; i < len(tagAlphabet) && left > 0; i++ {
			try(append(prefix, tagAlphabet[i]), n)
		}
	}
	for n := 1; n <= 4 && left > 0; n++ {
		try(make([]byte, 0, n), n)
	}
	if left > 0 {
		panic("locks: a hash slot has no tag of up to 4 characters")
	}
	return &tags
})

// SlotTag is a short tag whose Redis Cluster hash slot is slot (0 to
// store.ClusterSlots-1): "{<tag>}" in a key puts the key in that slot.
func SlotTag(slot int) string { return slotTags()[slot] }

// ShardKey names the keep-alive registry shard of a hash slot on a Redis
// Cluster: "<prefix>keepalive:{<tag>}".
func ShardKey(prefix string, slot int) string {
	return RegistryKey(prefix) + ":{" + SlotTag(slot) + "}"
}

// RegistryKeyOf names the keep-alive registry key that holds the entries of
// the lock called name (kind tag, "" for the exclusive lock; tenant "" for
// none) under prefix: RegistryKey on a single node, the shard of the
// lock's slot on a cluster.
func RegistryKeyOf(prefix string, cluster bool, tenant, tag, name string) string {
	if !cluster {
		return RegistryKey(prefix)
	}
	return ShardKey(prefix, store.Slot(tenantKeys(prefix, tenant, kind(tag), name).lock))
}

// Directory keys of the registry shards (cluster only): a sorted set of
// slot -> when that slot's shard is next due (ms, Redis clock of the
// directory's node), and a hash slot -> generation, new at every mark.
// Both carry the hash tag {keepalive} and live on one node; a slot leaves
// both when its shard is empty, so they are gone when every shard is.
func dirKeys(prefix string) (due, gens string) {
	return prefix + "keepalive:slots:{keepalive}", prefix + "keepalive:gens:{keepalive}"
}

// shardPattern is the SCAN pattern of every registry shard under prefix,
// the prefix's glob characters escaped.
func shardPattern(prefix string) string {
	var b strings.Builder
	for _, c := range []byte(RegistryKey(prefix) + ":") {
		if strings.IndexByte(`*?[]\`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteString("{*}")
	return b.String()
}

// shardSlot reports the slot of a registry shard key under prefix, and
// false for any other key (a key the pattern matched that Latchkey did not
// name, such as one with another tag).
func shardSlot(prefix, key string) (int, bool) {
	tag, ok := strings.CutPrefix(key, RegistryKey(prefix)+":{")
	if !ok {
		return 0, false
	}
	tag, ok = strings.CutSuffix(tag, "}")
	if !ok || tag == "" {
		return 0, false
	}
	slot := store.Slot(tag)
	if SlotTag(slot) != tag {
		return 0, false
	}
	return slot, true
}

// shardKeys are the registry shard keys of every slot under one prefix,
// named once: every lock call on a cluster needs one, and naming it must
// not allocate.
type shardKeys []string

func newShardKeys(prefix string) shardKeys {
	keys := make(shardKeys, store.ClusterSlots)
	for slot := range keys {
		keys[slot] = ShardKey(prefix, slot)
	}
	return keys
}

// registryKey is the keep-alive registry key that holds the entries of the
// lock whose keys are k: the one registry on a single node, the shard of
// k's slot on a cluster.
func (s *Service) registryKey(k lockKeys) string {
	if s.shards == nil {
		return s.regKey
	}
	return s.shards[store.Slot(k.lock)]
}

// markShard marks the slot of k's registry shard due when the keep-alive
// lease ka (nil: not kept alive, nothing to mark) of ttl, which expires at
// expiresAt, is next renewed: ttl/3 after the grant or renewal, or its
// max-hold deadline when sooner. A no-op on a single node.
//
// It returns once the mark is in the directory, so that a lease handed to
// a client is one every renewer finds even if this instance stops right
// after (a mark sent later would be lost with the instance, and the lease
// found only by a reconciliation, after it ran out). The marks of
// concurrent grants go in one script call. It waits at most the Redis
// timeout, and not once ctx ended: a failed mark is sent again in the
// background after Config.RenewPoll.
func (s *Service) markShard(ctx context.Context, k lockKeys, ka *Keepalive, ttl time.Duration, expiresAt time.Time) {
	if s.dir == nil || ka == nil {
		return
	}
	granted := expiresAt.Add(-ttl)
	in := min(max(ttl/3, time.Millisecond), max(ka.Until.Sub(granted), 0)).Milliseconds()
	sent := s.dir.add(map[int]int64{store.Slot(k.lock): in}, nil, func() { go s.flushMarks() })
	if sent == nil {
		return
	}
	wait := time.NewTimer(s.opTimeout)
	defer wait.Stop()
	select {
	case <-sent:
	case <-ctx.Done():
	case <-wait.C:
	}
}
