package store_test

import (
	"fmt"
	"testing"

	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
)

// TestScanWalksEveryPrimaryOnce: on a Redis Cluster a walk of bounded
// steps returns every key matching, on every primary, exactly once, each
// step within its bounds (keys wanted, SCAN calls), and then says it is
// done; keys that do not match are not returned.
func TestScanWalksEveryPrimaryOnce(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	rdb := c.Client(t)
	st := newStore(t, rdb, store.Config{})
	const n = 600
	for i := range n {
		for _, k := range []string{fmt.Sprintf("scan-walk:{%d}", i), fmt.Sprintf("scan-other:{%d}", i)} {
			if err := rdb.Set(t.Context(), k, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	seen := map[string]int{}
	var pos store.ScanPosition
	slots := map[int]bool{}
	for steps := 0; ; steps++ {
		if steps > 10*n {
			t.Fatal("the walk does not end")
		}
		page, err := st.Scan(t.Context(), store.ScanRequest{Match: "scan-walk:*", From: pos, Want: 50, Count: 40, MaxCalls: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Keys) > 50 || page.Calls > 3 || page.Calls < 1 {
			t.Fatalf("step %d: %d keys in %d calls, want at most 50 in 1 to 3", steps, len(page.Keys), page.Calls)
		}
		for _, k := range page.Keys {
			seen[k]++
		}
		if page.Done {
			break
		}
		pos = page.Next
		slots[pos.Slot] = true
	}
	if len(seen) != n {
		t.Errorf("%d keys returned, want %d", len(seen), n)
	}
	for k, times := range seen {
		if times != 1 {
			t.Errorf("%s returned %d times", k, times)
		}
	}
	if len(slots) != 3 {
		t.Errorf("the walk stood on the primaries of slots %v, want 3 primaries", slots)
	}
}
