package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// A policy's buckets are DefaultClusterBuckets distinct slots spread evenly over
// the primaries of a cluster whose primaries serve equal ranges of slots
// (as redis-cli --cluster create splits them), for 1 to 6 primaries of
// which 12 is a multiple, whatever the policy's name.
func TestBucketTagsSpreadEvenly(t *testing.T) {
	for _, name := range []string{"api", "per-ip", InlinePolicyName, "envoy.edge", "a", "a-much-longer-policy-name.v2"} {
		tags := newBucketTags(name, DefaultClusterBuckets)
		slots := map[int]bool{}
		for b, tag := range tags {
			if want := "{rl:" + name + ":"; len(tag) < len(want) || tag[:len(want)] != want || tag[len(tag)-2:] != "}:" {
				t.Fatalf("%s: bucket %d tag %q, want %s<label>}:", name, b, tag, want)
			}
			slots[store.Slot(tag)] = true
		}
		if len(slots) != DefaultClusterBuckets {
			t.Errorf("%s: %d distinct slots, want %d", name, len(slots), DefaultClusterBuckets)
		}
		for _, primaries := range []int{1, 2, 3, 4, 6} {
			per := make([]int, primaries)
			for slot := range slots {
				per[slot*primaries/store.ClusterSlots]++ // primary i serves [i*16384/n, (i+1)*16384/n)
			}
			for i, n := range per {
				if n != DefaultClusterBuckets/primaries {
					t.Errorf("%s on %d primaries: primary %d has %d buckets, want %d (%v)", name, primaries, i, n, DefaultClusterBuckets/primaries, per)
				}
			}
		}
	}
}

// Keys spread over every bucket: 10,000 keys of one policy fill each bucket
// with about a twelfth of them, and one key is always in the same bucket.
func TestBucketOfSpreadsKeys(t *testing.T) {
	per := make([]int, DefaultClusterBuckets)
	for i := range 10000 {
		k := fmt.Sprintf("client-%d", i)
		if bucketOf(k, DefaultClusterBuckets) != bucketOf(k, DefaultClusterBuckets) {
			t.Fatalf("%s changes bucket", k)
		}
		per[bucketOf(k, DefaultClusterBuckets)]++
	}
	for b, n := range per {
		if n < 10000/DefaultClusterBuckets*8/10 || n > 10000/DefaultClusterBuckets*12/10 {
			t.Errorf("bucket %d holds %d of 10000 keys, want %d ± 20%% (%v)", b, n, 10000/DefaultClusterBuckets, per)
		}
	}
}

// The number of buckets is the configuration's: the keys of a policy on a
// cluster fall in exactly that many slots, one per range; more buckets than
// a cluster has slots are refused.
func TestClusterBucketsAreConfigured(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	pol := Policy{Name: "api", Key: "ip", Limit: Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Minute}}
	for _, n := range []int{1, 5, 48} {
		s, err := New(st, Config{ClusterBuckets: n, Policies: []Policy{pol}})
		if err != nil {
			t.Fatal(err)
		}
		slots := map[int]bool{}
		for i := range 2000 {
			slots[store.Slot(s.Keys(pol, []string{fmt.Sprintf("client-%d", i)})[0])] = true
		}
		if len(slots) != n {
			t.Errorf("%d buckets: the keys fall in %d slots, want %d", n, len(slots), n)
		}
		for slot := range slots {
			b := slot * n / store.ClusterSlots
			if lo, hi := b*store.ClusterSlots/n, (b+1)*store.ClusterSlots/n; slot < lo || slot >= hi {
				t.Errorf("%d buckets: slot %d outside its range", n, slot)
			}
		}
	}
	if err := (Config{ClusterBuckets: store.ClusterSlots + 1}).Validate(); err == nil {
		t.Errorf("%d buckets accepted, want refused", store.ClusterSlots+1)
	}
}
