package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// newRedisClient returns the client for rawURL: a single Redis node
// (redis://, rediss://, unix://), or, when the URL names a master with
// master_name, the master that Redis Sentinel reports, followed across
// failovers:
//
//	redis://sentinel-1:26379/0?master_name=latchkey&addr=sentinel-2:26379&addr=sentinel-3:26379
//
// or, when cluster is set or the URL names more nodes with addr (and no
// master_name), a Redis Cluster whose slots are read from those seed nodes:
//
//	redis://node-1:6379?addr=node-2:6379&addr=node-3:6379
//
// In a Sentinel URL the user and password are the Sentinels'; the master's
// go in the username and password parameters. Every kind is bounded by
// boundCalls. It does no I/O; see openRedis for the detection of a cluster
// node. The error names what in the URL is wrong.
func newRedisClient(rawURL string, timeout time.Duration, cluster bool) (redis.UniversalClient, error) {
	if err := checkRedisURL(rawURL, cluster); err != nil {
		return nil, err
	}
	switch redisKind(rawURL, cluster) {
	case kindCluster:
		opts, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, err
		}
		boundCalls(timeout, callBounds{&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.PoolTimeout,
			&opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, &opts.DialerRetryTimeout, &opts.Protocol})
		opts.NewClient = store.NewClusterNodeClient
		return redis.NewClusterClient(opts), nil
	case kindSentinel:
		opts, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, err
		}
		boundCalls(timeout, callBounds{&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.PoolTimeout,
			&opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, &opts.DialerRetryTimeout, &opts.Protocol})
		return redis.NewFailoverClient(opts), nil
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	boundCalls(timeout, callBounds{&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.PoolTimeout,
		&opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, &opts.DialerRetryTimeout, &opts.Protocol})
	return redis.NewClient(opts), nil
}

// callBounds points at the fields of one go-redis options type (a single
// node's, Sentinel's or a cluster's) that bound its calls.
type callBounds struct {
	dial, read, write, pool *time.Duration
	contextTimeout          *bool
	maxRetries              *int
	dialerRetries           *int
	dialerRetryTimeout      *time.Duration
	protocol                *int
}

// boundCalls bounds every dial, read, write and pool wait by timeout,
// makes request deadlines reach the socket, and resends nothing: a command
// whose connection broke after it was written may already have run, and
// the lock scripts are not idempotent. Dials are tried twice, quickly, and
// the protocol is RESP2 unless the URL asked for another.
func boundCalls(timeout time.Duration, b callBounds) {
	*b.dial, *b.read, *b.write, *b.pool = timeout, timeout, timeout, timeout
	*b.contextTimeout = true
	*b.maxRetries = -1
	*b.dialerRetries, *b.dialerRetryTimeout = dialerRetries, dialerRetryTimeout
	*b.protocol = protocolOr2(*b.protocol)
}

// The kinds of Redis deployment a URL can name.
const (
	kindSingle = iota
	kindSentinel
	kindCluster
)

// redisKind tells which deployment rawURL names: Sentinel's with
// master_name, a cluster's when forced or with seed nodes in addr, a single
// node's otherwise (which may still turn out to be a cluster node: see
// openRedis).
func redisKind(rawURL string, cluster bool) int {
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return kindSingle
	case u.Query().Has("master_name"):
		return kindSentinel
	case cluster || u.Query().Has("addr"):
		return kindCluster
	}
	return kindSingle
}

// redisURLForms lists the URLs -redis-url accepts.
const redisURLForms = "redis://[user:password@]host:port[/db], rediss://... (TLS), unix:///path/to/redis.sock[?db=N], " +
	"a Sentinel's: redis://sentinel:26379[/db]?master_name=NAME[&addr=sentinel-2:26379...], " +
	"or a Redis Cluster's seed nodes: redis[s]://[user:password@]node-1:6379[?addr=node-2:6379...]"

// checkRedisURL reports what is wrong with rawURL, repeating it (without its
// password) and listing the accepted forms. cluster is -redis-cluster.
func checkRedisURL(rawURL string, cluster bool) error {
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
	switch redisKind(rawURL, cluster) {
	case kindSentinel:
		if cluster {
			return fmt.Errorf("%s names a Sentinel master (master_name), not a Redis Cluster; drop -redis-cluster or master_name", shown)
		}
		opts, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return fmt.Errorf("%s: %v; want %s", shown, err, redisURLForms)
		}
		if opts.MasterName == "" {
			return fmt.Errorf("%s: master_name must not be empty; want %s", shown, redisURLForms)
		}
		return nil
	case kindCluster:
		if _, err := redis.ParseClusterURL(rawURL); err != nil {
			return fmt.Errorf("%s: %v; want %s", shown, err, redisURLForms)
		}
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return fmt.Errorf("%s: a Redis Cluster has database 0 only; want %s", shown, redisURLForms)
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
