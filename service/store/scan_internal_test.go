package store

import "testing"

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
		{"the same primary", ScanPosition{Slot: 5461, Node: "b", Cursor: 77, Skip: 3}, ScanPosition{Slot: 5461, Node: "b", Cursor: 77, Skip: 3}, 1},
		{"another node at the slot", ScanPosition{Slot: 5461, Node: "old-b", Cursor: 77, Skip: 3}, ScanPosition{Slot: 5461, Node: "b"}, 1},
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
