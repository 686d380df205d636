package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redisLogger carries go-redis's own log lines into the server's log at
// debug level. go-redis logs every failed dial on stderr; with Redis down
// that is a line per request, drowning the server's own messages, which
// already report the outage (503s, and the fail-open warning once per
// -ratelimit-log-interval).
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

var setRedisLoggerOnce sync.Once

// setRedisLogger installs log as go-redis's logger. go-redis has one logger
// per process, so only the first call counts.
func setRedisLogger(log *slog.Logger) {
	setRedisLoggerOnce.Do(func() { redis.SetLogger(redisLogger{log: log}) })
}
