package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Every client, single node or Sentinel-followed, is bounded the same way:
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
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			rdb, err := newRedisClient(tt.url, 1500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rdb.Close() })
			o := rdb.Options()
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
