package main

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// startEmbedded runs an in-memory Redis-compatible store inside the process
// (miniredis, Lua and pub/sub included) on a loopback port. Its TTLs are
// advanced in real time until ctx ends. The returned stop function closes it.
func startEmbedded(ctx context.Context) (addr string, stop func(), err error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return "", nil, fmt.Errorf("start embedded store: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		const tick = 10 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return m.Addr(), func() { cancel(); <-done; m.Close() }, nil
}
