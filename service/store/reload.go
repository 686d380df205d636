package store

import (
	"context"
	"os"
	"time"
)

// RunReloads calls reload(false) every interval (0: never by polling) and
// reload(true) on every value from trigger (SIGHUP in the server), until
// ctx ends: the loop of every file a service keeps in step with (the rate
// limit policies, the API keys).
func RunReloads(ctx context.Context, interval time.Duration, trigger <-chan os.Signal, reload func(force bool)) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-trigger:
			reload(true)
		case <-tick:
			reload(false)
		}
	}
}
