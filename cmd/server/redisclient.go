package main

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// newRedisClient returns the client for rawURL: a single Redis node
// (redis://, rediss://, unix://), or, when the URL names a master with
// master_name, the master that Redis Sentinel reports, followed across
// failovers:
//
//	redis://sentinel-1:26379/0?master_name=latchkey&addr=sentinel-2:26379&addr=sentinel-3:26379
//
// In a Sentinel URL the user and password are the Sentinels'; the master's
// go in the username and password parameters. Either way every dial, read,
// write and pool wait is bounded by timeout, request deadlines reach the
// socket, and nothing is resent: a command whose connection broke after it
// was written may already have run, and the lock scripts are not
// idempotent. The error names what in the URL is wrong.
func newRedisClient(rawURL string, timeout time.Duration) (*redis.Client, error) {
	if err := checkRedisURL(rawURL); err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Query().Has("master_name") {
		opts, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, err
		}
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = timeout, timeout, timeout, timeout
		opts.ContextTimeoutEnabled = true
		opts.MaxRetries = -1
		opts.DialerRetries, opts.DialerRetryTimeout = dialerRetries, dialerRetryTimeout
		opts.Protocol = protocolOr2(opts.Protocol)
		return redis.NewFailoverClient(opts), nil
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = timeout, timeout, timeout, timeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialerRetries, opts.DialerRetryTimeout = dialerRetries, dialerRetryTimeout
	opts.Protocol = protocolOr2(opts.Protocol)
	return redis.NewClient(opts), nil
}

// redisURLForms lists the URLs -redis-url accepts.
const redisURLForms = "redis://[user:password@]host:port[/db], rediss://... (TLS), unix:///path/to/redis.sock[?db=N], " +
	"or a Sentinel's: redis://sentinel:26379[/db]?master_name=NAME[&addr=sentinel-2:26379...]"

// checkRedisURL reports what is wrong with rawURL, repeating it (without its
// password) and listing the accepted forms.
func checkRedisURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error repeats the value, password included.
		return fmt.Errorf("the value is not a URL; want %s", redisURLForms)
	}
	shown := strconv.Quote(u.Redacted())
	switch u.Scheme {
	case "redis", "rediss", "unix":
	case "":
		return fmt.Errorf("%s has no scheme; want %s", shown, redisURLForms)
	default:
		return fmt.Errorf("%s: the scheme is %s, not redis, rediss or unix; want %s", shown, u.Scheme, redisURLForms)
	}
	if u.Query().Has("master_name") {
		opts, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return fmt.Errorf("%s: %v; want %s", shown, err, redisURLForms)
		}
		if opts.MasterName == "" {
			return fmt.Errorf("%s: master_name must not be empty; want %s", shown, redisURLForms)
		}
		return nil
	}
	if _, err := redis.ParseURL(rawURL); err != nil {
		return fmt.Errorf("%s: %v; want %s", shown, err, redisURLForms)
	}
	return nil
}

// Two dial attempts, not go-redis's five 100ms apart: with Redis down a
// request should get its 503 at once, not after half a second.
const (
	dialerRetries      = 2
	dialerRetryTimeout = 50 * time.Millisecond
)

// protocolOr2 is RESP2 unless the URL asked for another (?protocol=3):
// Latchkey reads no push notifications (pub/sub works on RESP2), and under
// RESP3 go-redis looks for pending ones before every reply of a pipeline.
func protocolOr2(p int) int {
	if p == 0 {
		return 2
	}
	return p
}
