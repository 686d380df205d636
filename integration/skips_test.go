package integration

import (
	"strings"
	"testing"
)

func TestSkipSummary(t *testing.T) {
	var s skipCounter
	if got := s.summary(); got != "" {
		t.Errorf("no skips: summary %q, want none", got)
	}
	s.add("no Docker engine")
	if got, want := s.summary(), "integration: 1 tests skipped: no Docker engine ["; !strings.HasPrefix(got, want) {
		t.Errorf("summary %q, want prefix %q", got, want)
	}
	for range 2 {
		s.add("no Docker engine")
	}
	s.add("nginx is not installed")
	got := s.summary()
	for _, want := range []string{"integration: 4 tests skipped, 3 of them because: no Docker engine",
		"1 for 1 other reasons", envRequireRedis + "=1"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "\n") {
		t.Errorf("summary %q is more than one line", got)
	}
}
