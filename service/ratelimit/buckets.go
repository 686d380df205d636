package ratelimit

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/latchkey/latchkey/service/store"
)

// DefaultClusterBuckets is Config.ClusterBuckets's default, B: the number
// of buckets a policy's single-limit counters are spread over on a Redis
// Cluster. A counter's key carries the hash tag of its bucket, hash(key)
// mod B, so the concurrent decisions of one bucket share one script call
// there (a call may only name keys of one slot), as all of them share one
// on a single node. 12 buckets spread evenly over 1, 2, 3, 4, 6 or 12
// primaries of equal slot ranges; a policy's decisions use at most B
// primaries.
const DefaultClusterBuckets = 12

// bucketTags are the hash tags of a policy's buckets, each followed by ':'
// as it goes into a key: bucket b's is "{rl:<name>:<label>}:".
type bucketTags []string

// newBucketTags finds the labels of name's n buckets: bucket b's label is
// the smallest number whose tag "rl:<name>:<label>" has its slot in the
// middle half of the b-th of n equal ranges of slots, so the buckets
// spread evenly over primaries that serve equal ranges, and a bucket stays
// in its slot (it moves with it when the cluster reshards). It takes about
// 2n·ln(n) CRC16s of short strings (about a hundred for 12).
func newBucketTags(name string, n int) bucketTags {
	t := make(bucketTags, n)
	for label, left := 0, n; left > 0; label++ {
		tag := "{rl:" + name + ":" + strconv.Itoa(label) + "}"
		slot := store.Slot(tag)
		b := slot * n / store.ClusterSlots
		lo, hi := b*store.ClusterSlots/n, (b+1)*store.ClusterSlots/n
		quarter := (hi - lo) / 4
		if t[b] != "" || slot < lo+quarter || slot >= hi-quarter {
			continue
		}
		t[b] = tag + ":"
		left--
	}
	return t
}

// bucketOf is key's bucket of n: FNV-1a (32 bits) of the request's key,
// modulo n.
func bucketOf(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// maxBucketNames bounds the names whose tags a bucketCache keeps; past it
// a name's tags are found again for each decision (policies passed in a
// Request's Using that are not in the set, beyond this many, only).
const maxBucketNames = 4096

// bucketCache keeps the bucket tags of each policy name it was asked for,
// found once: the Service's, on a cluster only (nil on a single node,
// whose keys carry no bucket).
type bucketCache struct {
	buckets int      // B
	m       sync.Map // policy name -> bucketTags
	n       atomic.Int32
}

// tags returns name's bucket tags.
func (c *bucketCache) tags(name string) bucketTags {
	if v, ok := c.m.Load(name); ok {
		return v.(bucketTags)
	}
	t := newBucketTags(name, c.buckets)
	if c.n.Load() < maxBucketNames {
		if v, loaded := c.m.LoadOrStore(name, t); loaded {
			return v.(bucketTags)
		}
		c.n.Add(1)
	}
	return t
}

// tag returns the hash tag (with its ':') that the key of a single-limit
// decision under the policy named name for the request's key carries: ""
// on a single node (c is nil).
func (c *bucketCache) tag(name, key string) string {
	if c == nil {
		return ""
	}
	return c.tags(name)[bucketOf(key, c.buckets)]
}
