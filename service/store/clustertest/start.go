package clustertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// nodes is the cluster's size: three primaries, three replicas.
	nodes = 6
	// busOffset is how far above its port a node listens for the cluster bus.
	busOffset = 10000
	// attempts is how many port ranges start tries: another process may
	// take a port between the check and the node's start.
	attempts = 5
	// lowPort..highPort is where a cluster's ports are picked; their bus
	// ports stay below the kernel's ephemeral range (32768 and up), where
	// outgoing connections would take them.
	lowPort, highPort = 10000, 22000
)

// start starts a cluster in a new directory on free ports, trying other
// ports when a node or redis-cli --cluster create fails, and returns once
// every node is ok and lists every replica. The error says why not (no free
// ports, the script's own message, the replicas never in sync, ctx done).
func start(ctx context.Context) (*Cluster, error) {
	var errs []error
	for range attempts {
		c, err := startOnce(ctx)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func startOnce(ctx context.Context) (*Cluster, error) {
	base, err := freeBase()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "latchkey-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	for i := range nodes {
		p := base + i
		c.Nodes = append(c.Nodes, Node{Addr: "127.0.0.1:" + strconv.Itoa(p), Port: p, Dir: filepath.Join(dir, strconv.Itoa(p))})
	}
	out, err := exec.CommandContext(ctx, "bash", script(), "start", dir, strconv.Itoa(base)).Output()
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("redis-cluster.sh start on ports %d..%d: %w: %s", base, base+nodes-1, err, stderrOf(err))
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		c.stop()
		return nil, errors.New("redis-cluster.sh printed no URL")
	}
	c.URL = fields[len(fields)-1]
	if err := c.waitReplicas(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// freeBase picks a port P such that P..P+5 and their bus ports P+10000..
// can be listened on at 127.0.0.1 now.
func freeBase() (int, error) {
	for range 100 {
		base := lowPort + rand.IntN(highPort-lowPort)
		if portsFree(base) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d free ports (and bus ports) in %d..%d", nodes, lowPort, highPort)
}

func portsFree(base int) bool {
	for i := range nodes {
		for _, p := range []int{base + i, base + i + busOffset} {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				return false
			}
			_ = ln.Close()
		}
	}
	return true
}

// waitReplicas waits until every primary's replica is in sync (its link
// online) and every node's slot table lists all six nodes: only then does
// WAIT count the replica, and does a client see the replicas whichever node
// it asks (CLUSTER SLOTS leaves out a replica still in its first sync).
func (c *Cluster) waitReplicas(ctx context.Context) error {
	for {
		if replicasReady(ctx, c.Nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replicas did not come in sync: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func replicasReady(ctx context.Context, ns []Node) bool {
	for _, n := range ns {
		node := redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		slots, err := node.ClusterSlots(ctx).Result()
		info, infoErr := node.Info(ctx, "replication").Result()
		_ = node.Close()
		if err != nil || infoErr != nil {
			return false
		}
		listed := 0
		for _, s := range slots {
			listed += len(s.Nodes)
		}
		if listed != len(ns) {
			return false
		}
		if strings.Contains(info, "role:master") && !strings.Contains(info, "state=online") {
			return false
		}
	}
	return true
}

// stop kills the cluster's processes and removes its directory; it does
// nothing on a cluster this package did not start.
func (c *Cluster) stop() {
	if c.dir == "" {
		return
	}
	_ = exec.Command("bash", script(), "stop", c.dir).Run()
	// A node stopped with SIGTERM may still be writing its log: retry.
	for range 100 {
		if os.RemoveAll(c.dir) == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// script is .ci/redis-cluster.sh of the module the test runs in.
func script() string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".ci", "redis-cluster.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join(".ci", "redis-cluster.sh")
		}
		dir = parent
	}
}
