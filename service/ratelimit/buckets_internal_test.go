package ratelimit

import (
	"fmt"
	"testing"

	"github.com/latchkey/latchkey/service/store"
)

// A policy's buckets are ClusterBuckets distinct slots spread evenly over
// the primaries of a cluster whose primaries serve equal ranges of slots
// (as redis-cli --cluster create splits them), for 1 to 6 primaries of
// which 12 is a multiple, whatever the policy's name.
func TestBucketTagsSpreadEvenly(t *testing.T) {
	for _, name := range []string{"api", "per-ip", InlinePolicyName, "envoy.edge", "a", "a-much-longer-policy-name.v2"} {
		tags := newBucketTags(name)
		slots := map[int]bool{}
		for b, tag := range tags {
			if want := "{rl:" + name + ":"; len(tag) < len(want) || tag[:len(want)] != want || tag[len(tag)-2:] != "}:" {
				t.Fatalf("%s: bucket %d tag %q, want %s<label>}:", name, b, tag, want)
			}
			slots[store.Slot(tag)] = true
		}
		if len(slots) != ClusterBuckets {
			t.Errorf("%s: %d distinct slots, want %d", name, len(slots), ClusterBuckets)
		}
		for _, primaries := range []int{1, 2, 3, 4, 6} {
			per := make([]int, primaries)
			for slot := range slots {
				per[slot*primaries/store.ClusterSlots]++ // primary i serves [i*16384/n, (i+1)*16384/n)
			}
			for i, n := range per {
				if n != ClusterBuckets/primaries {
					t.Errorf("%s on %d primaries: primary %d has %d buckets, want %d (%v)", name, primaries, i, n, ClusterBuckets/primaries, per)
				}
			}
		}
	}
}

// Keys spread over every bucket: 10,000 keys of one policy fill each bucket
// with about a twelfth of them, and one key is always in the same bucket.
func TestBucketOfSpreadsKeys(t *testing.T) {
	per := make([]int, ClusterBuckets)
	for i := range 10000 {
		k := fmt.Sprintf("client-%d", i)
		if bucketOf(k) != bucketOf(k) {
			t.Fatalf("%s changes bucket", k)
		}
		per[bucketOf(k)]++
	}
	for b, n := range per {
		if n < 10000/ClusterBuckets*8/10 || n > 10000/ClusterBuckets*12/10 {
			t.Errorf("bucket %d holds %d of 10000 keys, want %d ± 20%% (%v)", b, n, 10000/ClusterBuckets, per)
		}
	}
}
