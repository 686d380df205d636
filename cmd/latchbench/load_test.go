package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Load is only ever sent to this machine.
func TestCheckLoopback(t *testing.T) {
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:8080", true},
		{"http://127.0.0.2:8080", true},
		{"http://localhost:8080", true},
		{"http://[::1]:8080", true},
		{"http://10.0.0.1:8080", false},
		{"http://192.168.1.10:8080", false},
		{"http://example.com:8080", false},
		{"127.0.0.1:8080", false}, // no scheme: no host to check
		{"", false},
	} {
		if err := checkLoopback(tt.url); (err == nil) != tt.ok {
			t.Errorf("checkLoopback(%q) = %v, want ok %v", tt.url, err, tt.ok)
		}
	}
}

func TestSummarize(t *testing.T) {
	var samples []sample
	for i := 1; i <= 1000; i++ { // 1ms..1000ms, all 200
		samples = append(samples, sample{latency: time.Duration(i) * time.Millisecond, status: 200})
	}
	samples = append(samples, sample{latency: time.Millisecond, status: 409}, sample{latency: time.Millisecond, status: 409},
		sample{latency: time.Second}) // a transport error
	got := summarize("lock", samples, 2*time.Second)
	want := Result{Scenario: "lock", Requests: 1002, Seconds: 2, RPS: 501, Errors: 1,
		Non2xx: map[string]int{"409": 2}, P50MS: 499, P90MS: 899, P99MS: 989, P999MS: 998}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summarize mismatch (-want +got):\n%s", diff)
	}
}
