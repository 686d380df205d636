package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/store"
)

func TestParseInfo(t *testing.T) {
	info := "# Stats\r\ntotal_commands_processed:120\r\ninstantaneous_ops_per_sec:3\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=40,usec=900,usec_per_call=22.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n"
	got := parseInfo(info)
	want := nodeSnapshot{cmds: 120, cpu: 3.75, calls: map[string]int64{"evalsha": 40, "info": 7}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(nodeSnapshot{})); diff != "" {
		t.Errorf("parseInfo mismatch (-want +got):\n%s", diff)
	}
}

// Per-node usage is the difference of two readings without latchbench's own
// INFO, and rounds add up node by node, also when a node first answers in a
// later round.
func TestNodeUsagesAddUp(t *testing.T) {
	before := map[string]nodeSnapshot{
		"127.0.0.1:7000": {cmds: 100, cpu: 1, calls: map[string]int64{"evalsha": 10, "info": 1}},
		"127.0.0.1:7001": {cmds: 50, cpu: 2, calls: map[string]int64{"evalsha": 5}},
	}
	after := map[string]nodeSnapshot{
		"127.0.0.1:7001": {cmds: 61, cpu: 2.5, calls: map[string]int64{"evalsha": 15, "info": 1}},
		"127.0.0.1:7000": {cmds: 131, cpu: 1.25, calls: map[string]int64{"evalsha": 40, "spublish": 3, "info": 2}},
		"127.0.0.1:7002": {cmds: 9, cpu: 9, calls: map[string]int64{"evalsha": 9}}, // not read before: left out
	}
	round := nodeUsages(before, after)
	want := []nodeUsage{
		{Addr: "127.0.0.1:7000", Commands: 30, CPUSeconds: 0.25, Calls: map[string]int64{"evalsha": 30, "spublish": 3}},
		{Addr: "127.0.0.1:7001", Commands: 10, CPUSeconds: 0.5, Calls: map[string]int64{"evalsha": 10}},
	}
	if diff := cmp.Diff(want, round); diff != "" {
		t.Fatalf("nodeUsages mismatch (-want +got):\n%s", diff)
	}
	later := []nodeUsage{
		{Addr: "127.0.0.1:7002", Commands: 4, CPUSeconds: 1, Calls: map[string]int64{"evalsha": 4}},
		{Addr: "127.0.0.1:7000", Commands: 2, CPUSeconds: 0.5, Calls: map[string]int64{"evalsha": 2}},
	}
	total := addNodeUsages(addNodeUsages(nil, round), later)
	want = []nodeUsage{
		{Addr: "127.0.0.1:7000", Commands: 32, CPUSeconds: 0.75, Calls: map[string]int64{"evalsha": 32, "spublish": 3}},
		{Addr: "127.0.0.1:7001", Commands: 10, CPUSeconds: 0.5, Calls: map[string]int64{"evalsha": 10}},
		{Addr: "127.0.0.1:7002", Commands: 4, CPUSeconds: 1, Calls: map[string]int64{"evalsha": 4}},
	}
	if diff := cmp.Diff(want, total); diff != "" {
		t.Errorf("addNodeUsages mismatch (-want +got):\n%s", diff)
	}
	notes := nodeNotes(total, 2)
	if len(notes) != 4 || notes[1] != "redis :7000: 375000.0 µs CPU/req, 16.00 cmds/req (70% of commands); evalsha 16.00, spublish 1.50" {
		t.Errorf("nodeNotes = %q", notes)
	}
}

func TestOpenRedisNodesLoopbackOnly(t *testing.T) {
	for _, tt := range []struct {
		url     string
		cluster bool
		ok      bool
	}{
		{"redis://127.0.0.1:6379/0", false, true},
		{"redis://10.0.0.1:6379/0", false, false},
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", true, true},
		{"redis://127.0.0.1:7000?addr=10.0.0.2:7001", true, false},
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001", false, false}, // a cluster URL is not one node's
	} {
		n, err := openRedisNodes(tt.url, tt.cluster)
		if (err == nil) != tt.ok {
			t.Errorf("openRedisNodes(%q, %v) = %v, want ok %v", tt.url, tt.cluster, err, tt.ok)
		}
		if n != nil {
			n.Close()
		}
	}
}

// -lease-slots puts every keep-alive lease name in the first N hash slots,
// each name once; without it the names are ka-0, ka-1, ...
func TestLeaseNames(t *testing.T) {
	if got := leaseNames(3, 0); !cmp.Equal(got, []string{"ka-0", "ka-1", "ka-2"}) {
		t.Errorf("leaseNames(3, 0) = %q", got)
	}
	names := leaseNames(500, 8)
	seen := map[string]bool{}
	slots := map[int]bool{}
	for _, n := range names {
		if seen[n] {
			t.Fatalf("%s twice", n)
		}
		seen[n] = true
		s := store.Slot(n)
		if s >= 8 {
			t.Fatalf("%s is in slot %d, want < 8", n, s)
		}
		slots[s] = true
	}
	if len(names) != 500 || len(slots) < 2 {
		t.Errorf("%d names over %d slots, want 500 over several", len(names), len(slots))
	}
}
