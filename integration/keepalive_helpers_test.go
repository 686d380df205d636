package integration

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// instancePoll is how often the renewer of a keep-alive test instance polls.
const instancePoll = 20 * time.Millisecond

var renewBatchSHA = storetest.ScriptSHA(lua.Source("renew_batch"))

// gatedClient holds every renew_batch call until the test opens the gate,
// after telling the test which call is waiting. Other calls pass through.
type gatedClient struct {
	store.Client
	entered chan []any // the ARGV of a held renew_batch call
	gate    chan struct{}
	ran     chan error // when not nil, the outcome of a held call once it ran
}

func (g *gatedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == renewBatchSHA {
		select {
		case g.entered <- args:
		default:
		}
		<-g.gate
		cmd := g.Client.EvalSha(ctx, sha, keys, args...)
		if g.ran != nil {
			select {
			case g.ran <- cmd.Err():
			default:
			}
		}
		return cmd
	}
	return g.Client.EvalSha(ctx, sha, keys, args...)
}
