// Package integration drives Latchkey end to end over HTTP against a real
// Redis. See redis_test.go for how the tests find one, and
// harness_cluster_test.go for the same tests on a Redis Cluster.
package integration

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/latchkey/latchkey/service/store/clustertest"
)

// containerDefaults are testcontainers-go settings this suite needs unless
// the environment says otherwise:
//   - no reaper: its image cannot be pulled where there is no registry, and
//     every test registers its own container cleanup;
//   - published ports are reached on 127.0.0.1: inside a container
//     testcontainers would otherwise dial the default gateway, which is not
//     where a local engine publishes them.
var containerDefaults = map[string]string{
	"TESTCONTAINERS_RYUK_DISABLED": "true",
	"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
}

func TestMain(m *testing.M) {
	for k, v := range containerDefaults {
		if _, ok := os.LookupEnv(k); !ok {
			_ = os.Setenv(k, v)
		}
	}
	code := m.Run()
	clustertest.Stop()
	if line := skips.summary(); line != "" {
		w, closeW := summaryWriter()
		fmt.Fprintln(w, line)
		closeW()
	}
	os.Exit(code)
}

// skips counts the tests skipped for want of Redis, Docker or a tool, by
// reason, so that a run that skipped them says so even without -v.
var skips skipCounter

type skipCounter struct {
	mu       sync.Mutex
	byReason map[string]int
}

// add records one skipped test.
func (s *skipCounter) add(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byReason == nil {
		s.byReason = map[string]int{}
	}
	s.byReason[reason]++
}

// summary is one line: how many tests skipped, the most common reason, and
// how many skipped for other reasons; empty when none did.
func (s *skipCounter) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	reasons := make([]string, 0, len(s.byReason))
	for r, n := range s.byReason {
		total += n
		reasons = append(reasons, r)
	}
	if total == 0 {
		return ""
	}
	sort.Slice(reasons, func(i, j int) bool {
		if s.byReason[reasons[i]] != s.byReason[reasons[j]] {
			return s.byReason[reasons[i]] > s.byReason[reasons[j]]
		}
		return reasons[i] < reasons[j]
	})
	top := reasons[0]
	line := fmt.Sprintf("integration: %d tests skipped: %s", total, top)
	if rest := total - s.byReason[top]; rest > 0 {
		line = fmt.Sprintf("integration: %d tests skipped, %d of them because: %s; %d for %d other reasons (go test -v ./integration shows each)",
			total, s.byReason[top], top, rest, len(reasons)-1)
	}
	return line + fmt.Sprintf(" [%s=1 makes this a failure]", envRequireRedis)
}

// summaryWriter is where the skip summary goes. `go test ./...` shows a
// passing package's output only with -v, so without -v the line goes to the
// terminal, when there is one; otherwise (-v, `go test` in this directory,
// CI logs) to stdout.
func summaryWriter() (io.Writer, func()) {
	if testing.Verbose() {
		return os.Stdout, func() {}
	}
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return os.Stdout, func() {}
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		return tty, func() { _ = tty.Close() }
	}
	return os.Stdout, func() {}
}
