package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// semCommands are the Redis commands (script calls and the commands they
// run, as INFO commandstats counts them) a semaphore request may cost on
// its common paths, beside leases held by other holders, under a token the
// service made: a grant reads the capacity record and the leases hash once
// each and writes them, a release reads and writes the leases hash only, a
// refusal only reads. The exclusive lock's acquire costs 9, its release 7.
var semCommands = map[bool]struct{ grant, release, refusal int64 }{
	// grant: EVALSHA, TIME, 2 reads, the capacity record, the lease, the
	// record's expiry (once a millisecond: a later grant's lease ends
	// later), PUBLISH; release: EVALSHA, TIME, the read, the lease, the
	// permits in use, PUBLISH (the last lease's: the hash, and the record's
	// expiry); refusal: EVALSHA, TIME, 2 reads
	false: {grant: 8, release: 6, refusal: 4},
	// and the fair queue's head
	true: {grant: 9, release: 6, refusal: 5},
}

// background reports whether cmd (as INFO commandstats names it, a
// subcommand after "|") is one no lock script runs: the count's own INFO,
// and what the clients send beside the requests (PINGs, connection set-up,
// a cluster client's CLUSTER SLOTS, which every count of the primaries
// asks for).
func background(cmd string) bool {
	name, _, _ := strings.Cut(cmd, "|")
	switch name {
	case "info", "ping", "cluster", "client", "hello", "command", "readonly", "select":
		return true
	}
	return false
}

// TestSemaphoreRedisCommandsPerRequest: a granted acquire, a release and a
// refused attempt each cost Redis at most their budget of commands, plain
// and fair, whatever the number of leases held: no script walks the
// holders on these paths. Averaged over many cycles, so the service's own
// background calls (the keep-alive renewer's look, the subscriber's PING)
// do not count.
func TestSemaphoreRedisCommandsPerRequest(t *testing.T) {
	e := newTestEnv(t)
	const cycles = 50
	commands := func() int64 {
		var n int64
		for cmd, calls := range redisCalls(t, e.RDB) {
			if !background(cmd) {
				n += calls
			}
		}
		return n
	}
	for _, fair := range []bool{false, true} {
		name, budget := "cmds-plain", semCommands[fair]
		if fair {
			name = "cmds-fair"
		}
		t.Run(name, func(t *testing.T) {
			req := func(count int64) locks.SemaphoreRequest {
				return locks.SemaphoreRequest{AcquireRequest: locks.AcquireRequest{TTL: time.Minute, Fair: fair},
					Permits: 20, Count: count}
			}
			// 10 leases stay held while the cycles run: 10 of 20 permits
			for range 10 {
				if _, err := e.Svc.AcquireSemaphore(t.Context(), name, req(1)); err != nil {
					t.Fatal(err)
				}
			}
			var grants, releases, refusals int64
			for range cycles {
				before := commands()
				l, err := e.Svc.AcquireSemaphore(t.Context(), name, req(1))
				if err != nil {
					t.Fatal(err)
				}
				mid := commands()
				if _, err := e.Svc.ReleaseSemaphore(t.Context(), name, l.Token); err != nil {
					t.Fatal(err)
				}
				after := commands()
				_, err = e.Svc.AcquireSemaphore(t.Context(), name, req(11))
				if !errors.As(err, new(*locks.PermitsUnavailableError)) {
					t.Fatalf("acquire 11 of the 10 free = %v, want too few permits free", err)
				}
				grants, releases, refusals = grants+mid-before, releases+after-mid, refusals+commands()-after
			}
			t.Logf("%s: %.2f commands per grant, %.2f per release, %.2f per refusal", name,
				float64(grants)/cycles, float64(releases)/cycles, float64(refusals)/cycles)
			for _, c := range []struct {
				what        string
				got, budget int64
			}{
				{"grant", grants, budget.grant},
				{"release", releases, budget.release},
				{"refusal", refusals, budget.refusal},
			} {
				// a few commands of slack in all, for the service's own calls
				if c.got > c.budget*cycles+cycles/10 {
					t.Errorf("%s: %.2f commands per %s, want at most %d", name, float64(c.got)/cycles, c.what, c.budget)
				}
			}
		})
	}
}
