package store

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

// On a cluster, concurrent calls on keys of every primary ride the
// primaries' pipelines and each gets its own reply; a call queued for a
// primary that does not serve its slot (a stale view: the slot moved) is
// answered MOVED there, where nothing ran, and is sent again through the
// cluster client, which follows the redirect: it runs once.
func TestClusterPipelinedClient(t *testing.T) {
	c := clustertest.Shared(t)
	cc := c.Client(t)
	ctx := t.Context()
	incr := NewScript("incr", "return redis.call('INCR', KEYS[1])")
	newOn := func(p *ClusterPipelinedClient) *Store {
		st, err := New(p, Config{})
		if err != nil {
			t.Fatal(err)
		}
		st.Register(incr)
		if err := st.LoadScripts(ctx); err != nil {
			t.Fatal(err)
		}
		return st
	}

	st := newOn(NewClusterPipelinedClient(cc, 0))
	const n = 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("pipelined-%d", i)
		if err := cc.Del(ctx, keys[i]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Go(func() {
			if _, err := st.Run(ctx, incr, []string{keys[i%n]}); err != nil {
				t.Errorf("%s: %v", keys[i%n], err)
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		if got, err := cc.Get(ctx, k).Int(); err != nil || got != 2 {
			t.Errorf("%s = %d, %v after two calls, want 2", k, got, err)
		}
	}

	key := "pipelined-moved"
	if err := cc.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	owner, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var other *redis.Client
	err = cc.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if node.Options().Addr != owner.Options().Addr {
			other = node
		}
		return nil
	})
	if err != nil || other == nil {
		t.Fatalf("another primary than %s's: %v", key, err)
	}
	p := NewClusterPipelinedClient(cc, 0)
	p.masterFor = func(context.Context, string) (*redis.Client, error) { return other, nil }
	st = newOn(p)
	if res, err := st.Run(ctx, incr, []string{key}); err != nil || res != int64(1) {
		t.Errorf("call queued on %s for a key of %s = %v, %v; want 1, run once where the key lives",
			other.Options().Addr, owner.Options().Addr, res, err)
	}
	if got, err := cc.Get(ctx, key).Int(); err != nil || got != 1 {
		t.Errorf("%s = %d, %v; want 1", key, got, err)
	}
}
