package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScanPositionFindsItsPrimaryBySlot: a position names its primary by
// the lowest slot it serves and its node ID, not by its place in the node
// list. The same primary goes on from the position; another node serving
// the slot (a failover, a slot move) is walked again from its beginning;
// a slot no one serves goes on with the primary of the next slot.
func TestScanPositionFindsItsPrimaryBySlot(t *testing.T) {
	nodes := scanNodes{list: []scanNode{
		{slot: 0, id: "a", ranges: [][2]int{{0, 5460}}},
		{slot: 5461, id: "b", ranges: [][2]int{{5461, 10922}}},
		{slot: 12000, id: "c", ranges: [][2]int{{12000, 16383}}},
	}}
	for _, tt := range []struct {
		desc string
		from ScanPosition
		want ScanPosition
		node int
	}{
		{"the beginning", ScanPosition{}, ScanPosition{Slot: 0, Node: "a"}, 0},
		{"the same primary", ScanPosition{Slot: 5461, Node: "b", Cursor: 77, After: "k"}, ScanPosition{Slot: 5461, Node: "b", Cursor: 77, After: "k"}, 1},
		{"another node at the slot", ScanPosition{Slot: 5461, Node: "old-b", Cursor: 77, After: "k"}, ScanPosition{Slot: 5461, Node: "b"}, 1},
		{"a slot its primary no longer starts at", ScanPosition{Slot: 6000, Node: "b2", Cursor: 9}, ScanPosition{Slot: 5461, Node: "b"}, 1},
		{"a slot no one serves", ScanPosition{Slot: 11000, Node: "x", Cursor: 9}, ScanPosition{Slot: 12000, Node: "c"}, 2},
	} {
		pos := tt.from
		if i := nodes.find(&pos); i != tt.node || pos != tt.want {
			t.Errorf("%s: find(%+v) = node %d at %+v, want node %d at %+v", tt.desc, tt.from, i, pos, tt.node, tt.want)
		}
	}
}

// TestGlobEscape: every character a SCAN pattern gives a meaning matches
// itself once escaped.
func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{
		"latchkey:":   "latchkey:",
		`a*b?c[d]e\f`: `a\*b\?c\[d\]e\\f`,
	} {
		if got := GlobEscape(in); got != want {
			t.Errorf("GlobEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

// rehashingScanner answers SCAN from a script of steps: the step at a
// cursor answers its keys, and the same cursor asked again answers them
// in another order with more keys of the same buckets (as Redis does after
// its table grew: one step of the smaller table is two of the larger).
type rehashingScanner struct {
	Client
	calls map[uint64]int
}

func (f *rehashingScanner) Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd {
	f.calls[cursor]++
	cmd := redis.NewScanCmd(ctx, nil)
	switch {
	case cursor == 0 && f.calls[0] == 1:
		cmd.SetVal([]string{"k3", "k1", "k5"}, 8)
	case cursor == 0:
		cmd.SetVal([]string{"k5", "k2", "k4", "k1", "k3"}, 8)
	default:
		cmd.SetVal([]string{"k9"}, 0)
	}
	return cmd
}

// TestScanGoesOnAfterTheLastKeyOfAStep: a page that ends inside a SCAN
// step goes on, on the next page, after the last key it returned, so a
// step answered again in another order, with more keys of its buckets,
// returns each of its keys once across the two pages; counting the keys
// already returned would skip k2 and return k3 again.
func TestScanGoesOnAfterTheLastKeyOfAStep(t *testing.T) {
	st := &Store{rdb: &rehashingScanner{calls: map[uint64]int{}}, cfg: Config{OpTimeout: time.Second}}
	first, err := st.Scan(t.Context(), ScanRequest{Match: "k*", Want: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"k1", "k3"}; !slices.Equal(first.Keys, want) || first.Done {
		t.Fatalf("first page %v (done %v), want %v and more", first.Keys, first.Done, want)
	}
	if first.Next.After != "k3" || first.Next.Cursor != 0 {
		t.Fatalf("first page ends at %+v, want after k3 of the step at cursor 0", first.Next)
	}
	second, err := st.Scan(t.Context(), ScanRequest{Match: "k*", From: first.Next, Want: 10})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"k4", "k5", "k9"}; !slices.Equal(second.Keys, want) || !second.Done {
		t.Fatalf("second page %v (done %v), want %v and done", second.Keys, second.Done, want)
	}
}
