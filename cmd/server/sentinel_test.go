package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRunFollowsTheSentinelMaster runs the server on a Sentinel URL over a
// real primary, replica and Sentinel (local redis-server processes on
// 127.0.0.1), fails the primary over, and checks that the server keeps
// granting leases on the new primary, with the lease granted before the
// failover still held there.
func TestRunFollowsTheSentinelMaster(t *testing.T) {
	bin := redisServerBinary(t)
	primary, _ := startRedisProcess(t, bin)
	replica, _ := startRedisProcess(t, bin, "--replicaof", "127.0.0.1", strconv.Itoa(primary))
	sentinel, _ := startRedisProcess(t, bin, "--sentinel",
		"--sentinel", "monitor", "latchkey", "127.0.0.1", strconv.Itoa(primary), "1",
		"--sentinel", "down-after-milliseconds", "latchkey", "1000",
		"--sentinel", "failover-timeout", "latchkey", "5000")
	sc := redis.NewSentinelClient(&redis.Options{Addr: addrOf(sentinel)})
	t.Cleanup(func() { _ = sc.Close() })
	waitFor(t, "the replica to be in sync", func() bool { return replicaInSync(t, primary, replica) })
	waitFor(t, "the Sentinel to see the replica", func() bool {
		rs, err := sc.Replicas(t.Context(), "latchkey").Result()
		return err == nil && len(rs) == 1
	})

	s := startServer(t, "-redis-url", fmt.Sprintf("redis://%s/0?master_name=latchkey", addrOf(sentinel)),
		"-redis-timeout", "500ms")
	resp, before := s.call(t, http.MethodPost, "/v1/locks/before-failover", `{"ttl":"5m"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire before the failover = %d %v, want 201", resp.StatusCode, before)
	}
	waitFor(t, "the replica to have the lease", func() bool { return replicaInSync(t, primary, replica) })

	// The Sentinel answers NOGOODSLAVE until it has a fresh INFO from the
	// replica, which it asks for on its own schedule.
	waitFor(t, "the Sentinel to start a failover", func() bool {
		return sc.Failover(t.Context(), "latchkey").Err() == nil
	})
	waitFor(t, "the Sentinel to name the replica as the primary", func() bool {
		addr, err := sc.GetMasterAddrByName(t.Context(), "latchkey").Result()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica)
	})

	// During the switch a request may get a 503, or land on the old primary
	// before the client hears of the new one (a write the failover loses,
	// as the README's Safety section says); the server must settle on the
	// new primary by itself.
	newPrimary := redis.NewClient(&redis.Options{Addr: addrOf(replica)})
	t.Cleanup(func() { _ = newPrimary.Close() })
	if role, err := newPrimary.Do(t.Context(), "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
		t.Fatalf("ROLE of the promoted replica = %v, %v; want master", role, err)
	}
	attempt := 0
	waitFor(t, "a lease granted on the new primary", func() bool {
		attempt++
		name := fmt.Sprintf("after-failover-%d", attempt)
		resp, _ := s.call(t, http.MethodPost, "/v1/locks/"+name, `{"ttl":"5m"}`)
		if resp.StatusCode != http.StatusCreated {
			return false
		}
		keys, err := newPrimary.Keys(t.Context(), "*"+name+"}*").Result()
		return err == nil && len(keys) > 0
	})
	resp, state := s.call(t, http.MethodGet, "/v1/locks/before-failover", "")
	if resp.StatusCode != http.StatusOK || state["held"] != true || state["fence"] != before["fence"] {
		t.Errorf("the lease granted before the failover = %d %v, want held with fence %v", resp.StatusCode, state, before["fence"])
	}
}

// redisServerBinary finds redis-server, or skips the test (fails it when
// LATCHKEY_REQUIRE_REDIS=1, as CI sets).
func redisServerBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("LATCHKEY_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server is not on the PATH, and LATCHKEY_REQUIRE_REDIS=1")
		}
		t.Skip("redis-server is not on the PATH (Debian: apt-get install redis-server); set LATCHKEY_REQUIRE_REDIS=1 to fail instead")
	}
	return bin
}

// startRedisProcess runs redis-server on a free loopback port with no
// persistence, in a directory of its own (a Sentinel rewrites its config
// file), until the test ends. It returns the port and a function that
// kills the process sooner.
func startRedisProcess(t *testing.T, bin string, args ...string) (int, func()) {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	full := append([]string{conf, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"}, args...)
	if len(args) > 0 && args[0] == "--sentinel" {
		// A Sentinel takes no persistence options.
		full = append([]string{conf, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir}, args...)
	}
	cmd := exec.Command(bin, full...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(func() {
		kill()
		if t.Failed() {
			t.Logf("redis-server %v output:\n%s", args, out.String())
		}
	})
	c := redis.NewClient(&redis.Options{Addr: addrOf(port)})
	defer c.Close()
	waitFor(t, fmt.Sprintf("redis-server %v to answer", args), func() bool { return c.Ping(t.Context()).Err() == nil })
	return port, kill
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func addrOf(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// replicaInSync reports whether the replica's link is up and it has
// everything the primary wrote.
func replicaInSync(t *testing.T, primary, replica int) bool {
	offset := func(port int, field string) (string, bool) {
		c := redis.NewClient(&redis.Options{Addr: addrOf(port)})
		defer c.Close()
		info, err := c.Info(t.Context(), "replication").Result()
		if err != nil {
			return "", false
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				return v, true
			}
		}
		return "", false
	}
	link, _ := offset(replica, "master_link_status")
	want, ok1 := offset(primary, "master_repl_offset")
	got, ok2 := offset(replica, "slave_repl_offset")
	return link == "up" && ok1 && ok2 && want == got
}

// waitFor polls cond until it holds, failing the test after a bound that
// only a hang reaches.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
