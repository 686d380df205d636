package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// startedLine waits until file holds a line "started ..." and returns its
// fields after "started".
func startedLine(t *testing.T, file string) []string {
	t.Helper()
	var fields []string
	eventually(t, doneGuard, file+" has a started line", func() bool {
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "started" {
				fields = f[1:]
				return true
			}
		}
		return false
	})
	return fields
}

// electScript is a COMMAND that writes "started TERM NAME VALID_MS" when
// it starts and "term" when it gets SIGTERM (then exits 143 at once).
func electScript(file string) string {
	return fmt.Sprintf(`trap 'kill $p; echo term >> %[1]s; exit 143' TERM; `+
		`echo "started $LATCHKEY_TERM $LATCHKEY_ELECTION_NAME $LATCHKEY_LEASE_VALID_MS" >> %[1]s; sleep 60 & p=$!; wait $p; echo not-signalled >> %[1]s`, file)
}

// TestLatchkeyElect: two `latchkey elect` on one name, each through its own
// instance of one deployment. The first's COMMAND runs with its term in
// LATCHKEY_TERM; the second waits as a candidate, its COMMAND not started;
// a third that does not wait exits 75 naming the leader's value. When the
// first's instance dies its hold stream ends: its COMMAND gets SIGTERM and
// its latchkey exits 76, and the second is elected as soon as the first's
// leadership ends, its COMMAND started with a greater term. SIGTERM to
// the second latchkey reaches its COMMAND, and the leader resigns as it
// exits: the election is vacant.
func TestLatchkeyElect(t *testing.T) {
	bin := buildLatchkey(t)
	rdb, _ := newRedis(t)
	a := newClientEnv(t, withRedisClient(rdb, ""))
	b := newClientEnv(t, beside(a.testEnv))
	el := b.c.Election("primary")
	dir := t.TempDir()
	log1, log2 := filepath.Join(dir, "one"), filepath.Join(dir, "two")

	first := startCmd(t, bin, a.URL, nil, "elect", "-value", "one", "-owner", "node-1", "-ttl", "5s", "-wait", "1m",
		"primary", "--", "sh", "-c", electScript(log1))
	started := startedLine(t, log1)
	term1, _ := strconv.ParseInt(started[0], 10, 64)
	if len(started) != 3 || term1 <= 0 || started[1] != "primary" {
		t.Fatalf("the first COMMAND started with %q, want a term above 0 and the name primary", started)
	}
	if ms, _ := strconv.ParseInt(started[2], 10, 64); ms <= 0 || ms > 5000 {
		t.Errorf("LATCHKEY_LEASE_VALID_MS = %s, want in (0, 5000]", started[2])
	}
	if l, err := el.Leader(t.Context()); err != nil || l == nil || l.Value != "one" || l.Owner != "node-1" || l.Term != term1 {
		t.Fatalf("Leader = %+v (err %v), want one (node-1) at term %d", l, err, term1)
	}

	st, _, errOut := runLatchkey(t, bin, b.URL, nil, "elect", "-value", "three", "primary", "--", "true")
	if st != exitHeld || !strings.Contains(errOut, `leads with value "one"`) {
		t.Errorf("elect without -wait while one leads: %d %q, want %d naming the leader's value", st, errOut, exitHeld)
	}

	second := startCmd(t, bin, b.URL, nil, "elect", "-value", "two", "-ttl", "5s", "-wait", "1m",
		"primary", "--", "sh", "-c", electScript(log2))
	eventually(t, doneGuard, "the second latchkey is a candidate", func() bool {
		s, err := el.Status(t.Context())
		return err == nil && s.Candidates == 1
	})
	if _, err := os.Stat(log2); !os.IsNotExist(err) {
		t.Fatalf("the second COMMAND started while the first leads (stat: %v)", err)
	}

	a.kill()
	waitForLine(t, log1, "term")
	st, _, errOut = first.wait(t)
	if st != exitLost || !strings.Contains(errOut, "leadership lost") {
		t.Fatalf("the first latchkey exited %d (%s), want %d and the loss on stderr", st, errOut, exitLost)
	}
	started = startedLine(t, log2)
	term2, _ := strconv.ParseInt(started[0], 10, 64)
	if term2 <= term1 {
		t.Fatalf("the second COMMAND started with term %d, want above the first's %d", term2, term1)
	}
	if l, err := el.Leader(t.Context()); err != nil || l == nil || l.Value != "two" || l.Term != term2 {
		t.Fatalf("Leader = %+v (err %v), want two at term %d", l, err, term2)
	}

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, _, errOut := second.wait(t); st != 143 {
		t.Fatalf("the second latchkey exited %d (%s), want 143 (its COMMAND's, killed by SIGTERM)", st, errOut)
	}
	waitForLine(t, log2, "term")
	if l, err := el.Leader(t.Context()); err != nil || l != nil {
		t.Fatalf("Leader once the second latchkey exited = %+v (err %v), want vacant", l, err)
	}
}

// TestLatchkeyObserve: latchkey observe prints the leader as one JSON line
// when it starts and on every change (elected, proclaimed, vacant), and
// exits 0 on SIGTERM; a bad name is a usage error.
func TestLatchkeyObserve(t *testing.T) {
	bin := buildLatchkey(t)
	e := newClientEnv(t, withWatchResync(time.Hour))
	ctx := t.Context()
	el := e.c.Election("observed")
	r := startCmd(t, bin, e.URL, nil, "observe", "observed")
	lines := func(n int) []string {
		t.Helper()
		var got []string
		eventually(t, doneGuard, fmt.Sprintf("observe printed %d lines", n), func() bool {
			b, _ := os.ReadFile(r.stdout.Name())
			got = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			return len(b) > 0 && len(got) >= n
		})
		return got
	}
	vacant := `{"name":"observed","leader":null}`
	if got := lines(1); got[0] != vacant {
		t.Fatalf("first line %q, want %s", got[0], vacant)
	}
	l, err := el.TryCampaign(ctx, "10.0.0.7:5432", client.CampaignOptions{TTL: time.Minute, Owner: "db-1"})
	if err != nil {
		t.Fatal(err)
	}
	lines(2)
	if err := el.Proclaim(ctx, l, "10.0.0.9:5432"); err != nil {
		t.Fatal(err)
	}
	lines(3)
	if err := el.Resign(ctx, l); err != nil {
		t.Fatal(err)
	}
	got := lines(4)
	want := []string{vacant,
		fmt.Sprintf(`{"name":"observed","leader":{"value":"10.0.0.7:5432","term":%d,"owner":"db-1"}}`, l.Fence),
		fmt.Sprintf(`{"name":"observed","leader":{"value":"10.0.0.9:5432","term":%d,"owner":"db-1"}}`, l.Fence),
		vacant}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("observe printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, _, errOut := r.wait(t); st != 0 {
		t.Fatalf("observe exited %d (%s) on SIGTERM, want 0", st, errOut)
	}
	if st, _, errOut := runLatchkey(t, bin, e.URL, nil, "observe", "bad{name}"); st != exitUsage || !strings.Contains(errOut, "name") {
		t.Errorf("observe of a bad name: %d %q, want %d naming the name", st, errOut, exitUsage)
	}
}

// TestLatchkeyElectAcrossServerProcesses: two `latchkey elect` on one name,
// each through a server process of its own on one Redis. The leader's
// server is killed (SIGKILL, as a crash): its latchkey's hold stream
// breaks, its COMMAND gets SIGTERM and it exits 76; the dead server renews
// nothing, so the leadership ends with its TTL and the follower, waiting
// through the other server, is elected with a greater term and its COMMAND
// starts.
func TestLatchkeyElectAcrossServerProcesses(t *testing.T) {
	bin, server := buildLatchkey(t), buildServer(t)
	_, url := newRedis(t)
	prefix := uniquePrefix()
	dir := t.TempDir()
	s1 := startServerProcess(t, server, dir, freePort(t), "LATCHKEY_REDIS_URL="+url, "LATCHKEY_KEY_PREFIX="+prefix)
	s2 := startServerProcess(t, server, dir, freePort(t), "LATCHKEY_REDIS_URL="+url, "LATCHKEY_KEY_PREFIX="+prefix)
	c, err := client.New(s2.URL)
	if err != nil {
		t.Fatal(err)
	}
	el := c.Election("primary")
	log1, log2 := filepath.Join(dir, "one"), filepath.Join(dir, "two")

	first := startCmd(t, bin, s1.URL, nil, "elect", "-value", "one", "-ttl", "5s", "-wait", "1m",
		"primary", "--", "sh", "-c", electScript(log1))
	term1, _ := strconv.ParseInt(startedLine(t, log1)[0], 10, 64)
	second := startCmd(t, bin, s2.URL, nil, "elect", "-value", "two", "-ttl", "5s", "-wait", "1m",
		"primary", "--", "sh", "-c", electScript(log2))
	eventually(t, doneGuard, "the second latchkey is a candidate", func() bool {
		s, err := el.Status(t.Context())
		return err == nil && s.Candidates == 1
	})
	if _, err := os.Stat(log2); !os.IsNotExist(err) {
		t.Fatalf("the second COMMAND started while the first leads (stat: %v)", err)
	}

	s1.kill(t)
	waitForLine(t, log1, "term")
	if st, _, errOut := first.wait(t); st != exitLost {
		t.Fatalf("the first latchkey exited %d (%s), want %d once its server died", st, errOut, exitLost)
	}
	term2, _ := strconv.ParseInt(startedLine(t, log2)[0], 10, 64)
	if term1 <= 0 || term2 <= term1 {
		t.Fatalf("terms %d then %d, want increasing", term1, term2)
	}
	if l, err := el.Leader(t.Context()); err != nil || l == nil || l.Value != "two" || l.Term != term2 {
		t.Fatalf("Leader = %+v (err %v), want two at term %d", l, err, term2)
	}
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, _, errOut := second.wait(t); st != 143 {
		t.Fatalf("the second latchkey exited %d (%s), want 143", st, errOut)
	}
}
