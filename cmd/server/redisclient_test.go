package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// Every client, single node, Sentinel-followed or cluster, is bounded the same way:
// the timeout on every dial, read, write and pool wait, request deadlines on
// the socket, nothing resent, two quick dial attempts, and RESP2 unless the
// URL asks for another protocol. The rest of the URL is kept.
func TestNewRedisClientBoundsEveryConnection(t *testing.T) {
	tests := []struct {
		url          string
		protocol, db int
		addr, user   string
		password     string
	}{
		{"redis://127.0.0.1:6390/3", 2, 3, "127.0.0.1:6390", "", ""},
		{"redis://u:p%40ss@127.0.0.1:6390/0?protocol=3&read_timeout=9s&max_retries=4", 3, 0, "127.0.0.1:6390", "u", "p@ss"},
		{"unix:///run/redis.sock?db=2", 2, 2, "/run/redis.sock", "", ""},
		{"redis://127.0.0.1:26390/1?master_name=latchkey&addr=127.0.0.1:26391&username=m&password=p%26w", 2, 1, "FailoverClient", "m", "p&w"},
		{"redis://u:pw@127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002&protocol=3", 3, 0, "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", "u", "pw"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			rdb, err := newRedisClient(tt.url, 1500*time.Millisecond, false)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			o := optionsOf(t, rdb)
			got := map[string]any{
				"dial": o.DialTimeout, "read": o.ReadTimeout, "write": o.WriteTimeout, "pool": o.PoolTimeout,
				"context": o.ContextTimeoutEnabled, "retries": o.MaxRetries,
				"dialer retries": o.DialerRetries, "dialer retry timeout": o.DialerRetryTimeout,
				"protocol": o.Protocol, "db": o.DB, "addr": o.Addr, "user": o.Username,
				"password": o.Password,
			}
			d := 1500 * time.Millisecond
			want := map[string]any{
				"dial": d, "read": d, "write": d, "pool": d, "context": true, "retries": 0, // -1 (none), as go-redis keeps it
				"dialer retries": 2, "dialer retry timeout": 50 * time.Millisecond,
				"protocol": tt.protocol, "db": tt.db, "addr": tt.addr, "user": tt.user,
				"password": tt.password,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

// optionsOf returns the options of a single-node or Sentinel client, or
// the node options a cluster client derives from its own (its seeds joined
// as Addr).
func optionsOf(t *testing.T, rdb redis.UniversalClient) *redis.Options {
	t.Helper()
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options()
	case *redis.ClusterClient:
		co := c.Options()
		if co.NewClient == nil {
			t.Error("the cluster client's node clients have no noResend hook")
		}
		return &redis.Options{
			DialTimeout: co.DialTimeout, ReadTimeout: co.ReadTimeout, WriteTimeout: co.WriteTimeout,
			PoolTimeout: co.PoolTimeout, ContextTimeoutEnabled: co.ContextTimeoutEnabled,
			MaxRetries:    max(co.MaxRetries, 0), // -1 (none): a node's client keeps it as 0
			DialerRetries: co.DialerRetries, DialerRetryTimeout: co.DialerRetryTimeout,
			Protocol: co.Protocol, Addr: strings.Join(co.Addrs, ","), Username: co.Username, Password: co.Password,
		}
	}
	t.Fatalf("client %T", rdb)
	return nil
}

// -redis-cluster serves a URL of one node as a cluster's seed; a URL with
// seeds in addr is a cluster's without it; a URL naming a Sentinel master
// cannot be a cluster's, nor can a cluster's name a database other than 0.
func TestRedisClusterURLs(t *testing.T) {
	for _, tt := range []struct {
		url     string
		cluster bool
		want    string // the client's type, or the start of the error
	}{
		{"redis://127.0.0.1:7000", true, "*redis.ClusterClient"},
		{"rediss://u:p@127.0.0.1:7000?addr=127.0.0.1:7001", false, "*redis.ClusterClient"},
		{"redis://127.0.0.1:7000", false, "*redis.Client"},
		{"redis://127.0.0.1:26379?master_name=m", true, `"redis://127.0.0.1:26379?master_name=m" names a Sentinel master`},
		{"redis://127.0.0.1:7000/2?addr=127.0.0.1:7001", false, `"redis://127.0.0.1:7000/2?addr=127.0.0.1:7001": a Redis Cluster has database 0 only`},
		{"unix:///run/redis.sock", true, `"unix:///run/redis.sock": redis: invalid URL scheme: unix`},
	} {
		rdb, err := newRedisClient(tt.url, time.Second, tt.cluster)
		got := fmt.Sprintf("%T", rdb)
		if err != nil {
			got = err.Error()
		} else {
			_ = rdb.Close()
		}
		if !strings.HasPrefix(got, tt.want) {
			t.Errorf("newRedisClient(%q, cluster %v) = %s, want %s", tt.url, tt.cluster, got, tt.want)
		}
	}
}
