package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one redis-server of a cluster.
type Node struct {
	Addr string // 127.0.0.1:Port
	Port int
	// Dir holds the node's nodes.conf, redis.log and redis.pid; empty on a
	// cluster this package did not start.
	Dir string
}

// PID is the node's process id, from its pid file. The error says the
// node is not one this package started, or has no pid file (killed by
// Kill, or never started).
func (n Node) PID() (int, error) {
	if n.Dir == "" {
		return 0, fmt.Errorf("node %s: not started by clustertest", n.Addr)
	}
	b, err := os.ReadFile(filepath.Join(n.Dir, "redis.pid"))
	if err != nil {
		return 0, fmt.Errorf("node %s: %w", n.Addr, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Node is the node at addr (127.0.0.1:port); it fails t when c has none.
func (c *Cluster) Node(t testing.TB, addr string) Node {
	t.Helper()
	i := slices.IndexFunc(c.Nodes, func(n Node) bool { return n.Addr == addr })
	if i < 0 {
		t.Fatalf("no node %s in the cluster", addr)
	}
	return c.Nodes[i]
}

// Kill SIGKILLs the node at addr and returns its pid. It removes the pid
// file, so that stopping the cluster never signals a process that reused
// the pid; Restart writes a new one. It fails t when the node has no pid.
func (c *Cluster) Kill(t testing.TB, addr string) int {
	t.Helper()
	n := c.Node(t, addr)
	pid, err := n.PID()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill node %s (pid %d): %v", addr, pid, err)
	}
	_ = os.Remove(filepath.Join(n.Dir, "redis.pid"))
	return pid
}

// Restart starts the node at addr again in its directory (it rejoins the
// cluster from its nodes.conf) and returns once it answers PING as the
// process it started. It fails t when the node does not start.
func (c *Cluster) Restart(t testing.TB, addr string) {
	t.Helper()
	n := c.Node(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", script(), "node", c.dir, strconv.Itoa(n.Port)).CombinedOutput(); err != nil {
		t.Fatalf("restart node %s: %v: %s", addr, err, out)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer func() { _ = rdb.Close() }()
	for {
		err := errors.New("no pid file")
		if pid, perr := n.PID(); perr == nil {
			var info string
			if info, err = rdb.Info(ctx, "server").Result(); err == nil && !strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r") {
				err = fmt.Errorf("another process (not pid %d) answers", pid)
			}
		}
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("restart node %s: %v (%v)", addr, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Pause SIGSTOPs the node at addr: it keeps its connections open and
// answers nothing, as a hung machine does, until Resume; it is resumed when
// t ends at the latest, so that the cluster can be stopped. It fails t when
// the node has no pid.
func (c *Cluster) Pause(t testing.TB, addr string) {
	t.Helper()
	c.signal(t, addr, syscall.SIGSTOP)
	t.Cleanup(func() {
		if pid, err := c.Node(t, addr).PID(); err == nil {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

// Resume SIGCONTs the node at addr after Pause. It fails t when the node
// has no pid.
func (c *Cluster) Resume(t testing.TB, addr string) {
	t.Helper()
	c.signal(t, addr, syscall.SIGCONT)
}

func (c *Cluster) signal(t testing.TB, addr string, sig syscall.Signal) {
	t.Helper()
	pid, err := c.Node(t, addr).PID()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("signal %v to node %s (pid %d): %v", sig, addr, pid, err)
	}
}
