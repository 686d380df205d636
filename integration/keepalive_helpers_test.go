package integration

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"testing"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/redis/go-redis/v9"
)

// instancePoll is how often the renewer of a keep-alive test instance polls.
const instancePoll = 20 * time.Millisecond

// acquireKeepalive takes a keep-alive lease through e and returns its token.
func (e *testEnv) acquireKeepalive(t testing.TB, name, body string) string {
	t.Helper()
	l := e.acquire(t, name, body)
	if l.Keepalive == nil {
		t.Fatalf("acquire %s %s: no keepalive in the lease", name, body)
	}
	return l.Token
}

// waitFree polls name until it is not held, failing after within.
func (e *testEnv) waitFree(t testing.TB, name string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		st := e.inspect(t, name)
		if !st.Held {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s still held after %s: %v", name, within, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scriptSHA is the EVALSHA digest of a script source.
func scriptSHA(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

var renewBatchSHA = scriptSHA(lua.RenewBatch)

// gatedClient holds every renew_batch call until the test opens the gate,
// after telling the test which call is waiting. Other calls pass through.
type gatedClient struct {
	*redis.Client
	entered chan []any // the ARGV of a held renew_batch call
	gate    chan struct{}
}

func (g *gatedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == renewBatchSHA {
		select {
		case g.entered <- args:
		default:
		}
		<-g.gate
	}
	return g.Client.EvalSha(ctx, sha, keys, args...)
}
