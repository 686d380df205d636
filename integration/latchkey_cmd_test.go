package integration

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
	"github.com/latchkey/latchkey/internal/testca"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// Exit statuses documented by cmd/latchkey.
const (
	exitHeld        = 75
	exitLost        = 76
	exitUnavailable = 69
	exitNotFound    = 127
	exitUsage       = 2
)

// buildLatchkey builds cmd/latchkey into a directory of t's.
func buildLatchkey(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "latchkey")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/latchkey").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/latchkey: %v\n%s", err, out)
	}
	return bin
}

// latchkeyRun is a latchkey process against one server.
type latchkeyRun struct {
	cmd    *exec.Cmd
	stdout *os.File
	stderr *os.File
}

// startCmd starts bin with args against url. Its output goes to files
// (a child left behind must not keep a pipe of the test open).
func startCmd(t *testing.T, bin, url string, env []string, args ...string) *latchkeyRun {
	t.Helper()
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "LATCHKEY_URL=" + url}, env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &latchkeyRun{cmd: cmd, stdout: stdout, stderr: stderr}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = r.cmd.Wait()
	})
	return r
}

// wait waits for the process (bounded by doneGuard) and returns its exit
// status, its stdout and its stderr.
func (r *latchkeyRun) wait(t *testing.T) (int, string, string) {
	t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- r.cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(doneGuard):
		t.Fatalf("latchkey %v still running after %s", r.cmd.Args[1:], doneGuard)
	}
	r.cmd = &exec.Cmd{Process: r.cmd.Process} // Cleanup's Wait then returns at once
	status := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(r.stdout.Name())
	errOut, _ := os.ReadFile(r.stderr.Name())
	return status, string(out), string(errOut)
}

// runLatchkey runs bin to the end and returns its exit status and output.
func runLatchkey(t *testing.T, bin, url string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return startCmd(t, bin, url, env, args...).wait(t)
}

// waitForLine waits until file holds a line equal to line.
func waitForLine(t *testing.T, file, line string) {
	t.Helper()
	eventually(t, doneGuard, file+" has the line "+line, func() bool {
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n") {
			if l == line {
				return true
			}
		}
		return false
	})
}

// trapScript is a COMMAND that says when it starts, and when it gets
// SIGTERM (then exits 143 at once).
func trapScript(file string) string {
	return fmt.Sprintf(`trap 'kill $p; echo term >> %[1]s; exit 143' TERM; echo started >> %[1]s; sleep 60 & p=$!; wait $p; echo not-signalled >> %[1]s`, file)
}

func TestLatchkeyCommand(t *testing.T) {
	bin := buildLatchkey(t)
	rdb, _ := newRedis(t)
	server := func(t *testing.T, opts ...envOption) *clientEnv {
		return newClientEnv(t, append(opts, withRedisClient(rdb, ""))...)
	}

	// Two jobs started together run one after the other, never
	// overlapping, the second with a higher fence; each gets the lease's
	// fence, name and validity in its environment.
	t.Run("jobs in turn", func(t *testing.T) {
		e := server(t)
		log := filepath.Join(t.TempDir(), "log")
		job := fmt.Sprintf(`echo "start $LATCHKEY_FENCE $LATCHKEY_LOCK_NAME $LATCHKEY_LEASE_VALID_MS" >> %[1]s; sleep 0.3; echo "end $LATCHKEY_FENCE" >> %[1]s`, log)
		a := startCmd(t, bin, e.URL, nil, "lock", "-wait", "10s", "-ttl", "5s", "job", "--", "sh", "-c", job)
		b := startCmd(t, bin, e.URL, nil, "lock", "-wait", "10s", "-ttl", "5s", "job", "--", "sh", "-c", job)
		for _, r := range []*latchkeyRun{a, b} {
			if st, _, errOut := r.wait(t); st != 0 {
				t.Fatalf("latchkey exited %d: %s", st, errOut)
			}
		}
		raw, _ := os.ReadFile(log)
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) != 4 {
			t.Fatalf("log:\n%s\nwant 4 lines", raw)
		}
		var fences [2]int64
		for i := range 2 {
			start, end := strings.Fields(lines[2*i]), strings.Fields(lines[2*i+1])
			if len(start) != 4 || start[0] != "start" || start[2] != "job" || len(end) != 2 || end[0] != "end" || end[1] != start[1] {
				t.Fatalf("log:\n%s\nwant start/end pairs of one fence each, never interleaved", raw)
			}
			fences[i], _ = strconv.ParseInt(start[1], 10, 64)
			if ms, _ := strconv.ParseInt(start[3], 10, 64); ms <= 0 || ms > 5000 {
				t.Errorf("LATCHKEY_LEASE_VALID_MS = %s, want in (0, 5000]", start[3])
			}
		}
		if fences[0] <= 0 || fences[1] <= fences[0] {
			t.Fatalf("fences %v: want increasing", fences)
		}
		wantFree(t, e.c, "job")
	})

	// -read leases of one read/write lock are held together and -write is
	// refused while they are; -permits 2 lets two jobs in together and not
	// a third; a -permits other than the semaphore's, or a -count above
	// -permits, is a usage error. Each job of a pair says it started, then
	// runs until the other one started too and the test says go: only two
	// leases held at once let both finish.
	t.Run("read, write and permits", func(t *testing.T) {
		e := server(t)
		dir := t.TempDir()
		pairJob := func(me, other, goFile string) []string {
			return []string{"sh", "-c", fmt.Sprintf(`echo started > %[1]s/%[2]s
i=0; until [ -e %[1]s/%[3]s ] && [ -e %[1]s/%[4]s ]; do i=$((i+1)); [ $i -gt 600 ] && exit 9; sleep 0.1; done`, dir, me, other, goFile)}
		}
		held := func(t *testing.T, args ...string) {
			t.Helper()
			st, _, errOut := runLatchkey(t, bin, e.URL, nil, append(append([]string{"lock"}, args...), "--", "true")...)
			if st != exitHeld || !strings.Contains(errOut, "not acquired") {
				t.Errorf("latchkey lock %v while the pair holds: %d %q, want %d", args, st, errOut, exitHeld)
			}
		}
		pair := func(t *testing.T, kind []string, name string) (a, b *latchkeyRun) {
			t.Helper()
			goFile := name + "-go"
			a = startCmd(t, bin, e.URL, nil, append(append([]string{"lock"}, kind...), append([]string{"-wait", "30s", name, "--"}, pairJob(name+"-1", name+"-2", goFile)...)...)...)
			b = startCmd(t, bin, e.URL, nil, append(append([]string{"lock"}, kind...), append([]string{"-wait", "30s", name, "--"}, pairJob(name+"-2", name+"-1", goFile)...)...)...)
			waitForLine(t, filepath.Join(dir, name+"-1"), "started")
			waitForLine(t, filepath.Join(dir, name+"-2"), "started")
			return a, b
		}
		finish := func(t *testing.T, name string, runs ...*latchkeyRun) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(dir, name+"-go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if st, _, errOut := r.wait(t); st != 0 {
					t.Errorf("a job of the pair exited %d: %s", st, errOut)
				}
			}
		}

		r1, r2 := pair(t, []string{"-read"}, "rw")
		held(t, "-write", "rw")
		if st, out, errOut := runLatchkey(t, bin, e.URL, nil, "lock", "-read", "rw", "--", "sh", "-c", "echo reading $LATCHKEY_FENCE"); st != 0 || !strings.HasPrefix(out, "reading ") {
			t.Errorf("a third reader while two read: %d %q %q, want it run", st, out, errOut)
		}
		finish(t, "rw", r1, r2)
		if st, out, errOut := runLatchkey(t, bin, e.URL, nil, "lock", "-write", "rw", "--", "echo", "writing"); st != 0 || out != "writing\n" {
			t.Errorf("the writer once the readers are done: %d %q %q, want it run", st, out, errOut)
		}
		st, _, errOut := runLatchkey(t, bin, e.URL, nil, "lock", "-read", "-write", "rw", "--", "true")
		if st != exitUsage || !strings.Contains(errOut, "not both") {
			t.Errorf("-read -write: %d %q, want %d", st, errOut, exitUsage)
		}

		s1, s2 := pair(t, []string{"-permits", "2"}, "sem")
		held(t, "-permits", "2", "sem")
		st, _, errOut = runLatchkey(t, bin, e.URL, nil, "lock", "-permits", "3", "-wait", "0s", "sem", "--", "true")
		if st != exitUsage || !strings.Contains(errOut, "has 2 permits") {
			t.Errorf("-permits 3 on a semaphore of 2: %d %q, want %d naming its 2 permits", st, errOut, exitUsage)
		}
		finish(t, "sem", s1, s2)
		st, _, errOut = runLatchkey(t, bin, e.URL, nil, "lock", "-permits", "2", "-count", "3", "sem", "--", "true")
		if st != exitUsage || !strings.Contains(errOut, "-count") {
			t.Errorf("-count 3 of -permits 2: %d %q, want %d", st, errOut, exitUsage)
		}
		if st, out, errOut := runLatchkey(t, bin, e.URL, nil, "lock", "-permits", "2", "-count", "2", "sem", "--", "echo", "both"); st != 0 || out != "both\n" {
			t.Errorf("both permits once the pair is done: %d %q %q, want it run", st, out, errOut)
		}
	})

	// SIGTERM to latchkey reaches COMMAND; latchkey exits with COMMAND's
	// status and the lock is free as soon as it has exited.
	t.Run("SIGTERM is forwarded", func(t *testing.T) {
		e := server(t)
		log := filepath.Join(t.TempDir(), "log")
		r := startCmd(t, bin, e.URL, nil, "lock", "-ttl", "1m", "sig", "--", "sh", "-c", trapScript(log))
		waitForLine(t, log, "started")
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		st, _, errOut := r.wait(t)
		if st != 143 {
			t.Fatalf("exit status %d (%s), want 143 (COMMAND's, killed by SIGTERM)", st, errOut)
		}
		waitForLine(t, log, "term")
		wantFree(t, e.c, "sig")
	})

	// A lease lost while COMMAND runs (force-released, or the server gone)
	// sends COMMAND SIGTERM and latchkey exits 76.
	for _, end := range []struct {
		name string
		do   func(t *testing.T, e *clientEnv)
	}{
		{"force-release", func(t *testing.T, e *clientEnv) {
			st, out, errOut := runLatchkey(t, bin, e.URL, []string{"LATCHKEY_ADMIN_KEY=" + testAdminKey}, "release", "-force", "lost")
			if st != 0 || !strings.Contains(out, "force-released") {
				t.Fatalf("release -force: %d %q %q", st, out, errOut)
			}
		}},
		{"server killed", func(t *testing.T, e *clientEnv) { e.kill() }},
	} {
		t.Run("lost by "+end.name, func(t *testing.T) {
			e := server(t)
			log := filepath.Join(t.TempDir(), "log")
			r := startCmd(t, bin, e.URL, nil, "lock", "-ttl", "1m", "lost", "--", "sh", "-c", trapScript(log))
			waitForLine(t, log, "started")
			end.do(t, e)
			st, _, errOut := r.wait(t)
			if st != exitLost || !strings.Contains(errOut, "lease lost") {
				t.Fatalf("exit status %d (%s), want %d and the loss on stderr", st, errOut, exitLost)
			}
			waitForLine(t, log, "term")
		})
	}

	// -on-lost kill: a lost lease kills COMMAND with SIGKILL at once, so
	// its TERM trap never runs; -on-lost term: COMMAND gets SIGTERM, and
	// one that carries on past -grace is then killed. Either way latchkey
	// exits 76. The COMMAND's sleep outlives a shell killed with SIGKILL: it
	// is long (a COMMAND left running would reach the hang guard, not its
	// "survived" line) and killed at the end.
	for _, tt := range []struct {
		name     string
		args     []string
		wantTerm bool
	}{
		{"lost with -on-lost kill", []string{"-on-lost", "kill"}, false},
		{"lost, TERM ignored past -grace", []string{"-grace", "1s"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := server(t)
			dir := t.TempDir()
			log, pidFile := filepath.Join(dir, "log"), filepath.Join(dir, "sleep.pid")
			script := fmt.Sprintf(`trap 'echo term >> %[1]s' TERM; sleep 600 & p=$!; echo $p > %[2]s; echo started >> %[1]s; `+
				`while kill -0 $p 2>/dev/null; do wait $p; done; echo survived >> %[1]s`, log, pidFile)
			args := append(append([]string{"lock", "-ttl", "1m"}, tt.args...), "lost", "--", "sh", "-c", script)
			r := startCmd(t, bin, e.URL, nil, args...)
			waitForLine(t, log, "started")
			t.Cleanup(func() {
				if pid, err := os.ReadFile(pidFile); err == nil {
					if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil {
						_ = syscall.Kill(n, syscall.SIGKILL)
					}
				}
			})
			st, out, errOut := runLatchkey(t, bin, e.URL, []string{"LATCHKEY_ADMIN_KEY=" + testAdminKey}, "release", "-force", "lost")
			if st != 0 || !strings.Contains(out, "force-released") {
				t.Fatalf("release -force: %d %q %q", st, out, errOut)
			}
			st, _, errOut = r.wait(t)
			if st != exitLost || !strings.Contains(errOut, "lease lost") {
				t.Fatalf("exit status %d (%s), want %d and the loss on stderr", st, errOut, exitLost)
			}
			// latchkey exits only once COMMAND has: its log is complete.
			raw, _ := os.ReadFile(log)
			want := "started\n"
			if tt.wantTerm {
				want += "term\n"
			}
			if string(raw) != want {
				t.Fatalf("COMMAND's log %q, want %q (no \"survived\": it was killed)", raw, want)
			}
		})
	}

	// The documented statuses, and the other commands.
	t.Run("statuses", func(t *testing.T) {
		e := server(t, withPolicies(policy("once", ratelimit.FixedWindow, 1, time.Hour)))
		l, err := e.c.Lock(t.Context(), "busy", client.LockOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			desc   string
			env    []string
			args   []string
			status int
			stdout string // a substring of stdout
			stderr string // a substring of stderr
		}{
			{"held, no wait", nil, []string{"lock", "busy", "--", "true"}, exitHeld, "", "not acquired"},
			{"held past the wait", nil, []string{"lock", "-wait", "200ms", "busy", "--", "true"}, exitHeld, "", "held by another owner"},
			{"COMMAND's status", nil, []string{"lock", "free", "--", "sh", "-c", "exit 3"}, 3, "", ""},
			{"COMMAND not found", nil, []string{"lock", "free", "--", "/no/such/command"}, exitNotFound, "", "cannot run"},
			{"no COMMAND", nil, []string{"lock", "free"}, exitUsage, "", "COMMAND"},
			{"bad -on-lost", nil, []string{"lock", "-on-lost", "maybe", "free", "--", "true"}, exitUsage, "", "-on-lost"},
			{"bad name", nil, []string{"lock", "bad{name}", "--", "true"}, exitUsage, "", "name"},
			{"bad option", nil, []string{"lock", "-ttl", "10000h", "free", "--", "true"}, exitUsage, "", "ttl"},
			{"status held", nil, []string{"status", "busy"}, 0, fmt.Sprintf("busy held fence=%d", l.Fence), ""},
			{"status free", nil, []string{"status", "free"}, 0, "free free", ""},
			{"check allowed", nil, []string{"check", "once", "k"}, 0, "allowed policy=once key=k", ""},
			{"check denied", nil, []string{"check", "once", "k"}, 1, "denied", ""},
			{"force without the admin key", nil, []string{"release", "-force", "busy"}, exitUnavailable, "", "403"},
			{"release without -force", nil, []string{"release", "busy"}, exitUsage, "", "-force"},
			{"server unreachable", []string{"LATCHKEY_URL=http://127.0.0.1:1"}, []string{"status", "busy"}, exitUnavailable, "", "unavailable"},
			{"version", nil, []string{"version"}, 0, "latchkey ", ""},
		}
		for _, tt := range tests {
			url := e.URL
			if len(tt.env) > 0 {
				url = strings.TrimPrefix(tt.env[0], "LATCHKEY_URL=")
			}
			st, out, errOut := runLatchkey(t, bin, url, nil, tt.args...)
			if st != tt.status || !strings.Contains(out, tt.stdout) || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("%s: latchkey %v = %d, stdout %q, stderr %q; want %d, %q, %q",
					tt.desc, tt.args, st, out, errOut, tt.status, tt.stdout, tt.stderr)
			}
			if n := bytes.Count([]byte(errOut), []byte("\n")); n > 1 {
				t.Errorf("%s: stderr has %d lines, want one: %q", tt.desc, n, errOut)
			}
		}
		if st, _ := e.c.Status(t.Context(), "busy"); !st.Held || st.Fence != l.Fence {
			t.Errorf("busy after the failed force-release: %+v, want still held", st)
		}
	})
}

// TestLatchkeyCommandTLS: latchkey talks to an https server whose
// certificate a private CA signed when given that CA (-cacert or
// LATCHKEY_CACERT), and to one that requires a client certificate (mTLS)
// when given one (-cert and -key, or LATCHKEY_CERT and LATCHKEY_KEY),
// before or after the command, for a request and for a hold. Without them
// the handshake fails (69); a file that cannot serve is a usage error (2).
func TestLatchkeyCommandTLS(t *testing.T) {
	bin := buildLatchkey(t)
	rdb, _ := newRedis(t)
	ca, other := testca.New(t), testca.New(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	serverCert, serverKey := ca.Issue(t, "server", true)
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := write("ca.pem", ca.PEM)
	clientCert, clientKey := ca.Issue(t, "client", false)
	certFile, keyFile := write("client.pem", clientCert), write("client-key.pem", clientKey)
	bothFile := write("client-both.pem", append(append([]byte{}, clientCert...), clientKey...))
	otherCert, otherKey := other.Issue(t, "stranger", false)
	otherCertFile, otherKeyFile := write("other.pem", otherCert), write("other-key.pem", otherKey)
	notPEM := write("not.pem", []byte("not a certificate\n"))

	private := newTestEnv(t, withRedisClient(rdb, ""), withTLS(&tls.Config{Certificates: []tls.Certificate{pair}}))
	mtls := newTestEnv(t, withRedisClient(rdb, ""), withTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}))
	if !strings.HasPrefix(private.URL, "https://") || !strings.HasPrefix(mtls.URL, "https://") {
		t.Fatalf("servers at %s and %s, want https", private.URL, mtls.URL)
	}
	job := `echo "fence=$LATCHKEY_FENCE"`
	tests := []struct {
		desc   string
		url    string
		env    []string
		args   []string
		status int
		stdout string // a substring of stdout
		stderr string // a substring of stderr
	}{
		{"private CA, not trusted", private.URL, nil, []string{"status", "job"}, exitUnavailable, "", "certificate signed by unknown authority"},
		{"private CA, -cacert", private.URL, nil, []string{"status", "-cacert", caFile, "job"}, 0, "job free", ""},
		{"private CA, -cacert before the command", private.URL, nil, []string{"-cacert", caFile, "status", "job"}, 0, "job free", ""},
		{"private CA, LATCHKEY_CACERT, a hold", private.URL, []string{"LATCHKEY_CACERT=" + caFile}, []string{"lock", "job", "--", "sh", "-c", job}, 0, "fence=", ""},
		{"mTLS, no client certificate", mtls.URL, nil, []string{"status", "-cacert", caFile, "job"}, exitUnavailable, "", "unavailable"},
		{"mTLS, another CA's certificate", mtls.URL, nil, []string{"status", "-cacert", caFile, "-cert", otherCertFile, "-key", otherKeyFile, "job"}, exitUnavailable, "", "unavailable"},
		{"mTLS, -cert and -key", mtls.URL, nil, []string{"status", "-cacert", caFile, "-cert", certFile, "-key", keyFile, "job"}, 0, "job free", ""},
		{"mTLS, one file with both", mtls.URL, nil, []string{"-cacert", caFile, "-cert", bothFile, "status", "job"}, 0, "job free", ""},
		{"mTLS, the environment, a hold", mtls.URL, []string{"LATCHKEY_CACERT=" + caFile, "LATCHKEY_CERT=" + certFile, "LATCHKEY_KEY=" + keyFile},
			[]string{"lock", "job", "--", "sh", "-c", job}, 0, "fence=", ""},
		{"-cacert without a certificate", private.URL, nil, []string{"status", "-cacert", notPEM, "job"}, exitUsage, "", "-cacert " + notPEM + ": no PEM certificate"},
		{"-cacert missing", private.URL, nil, []string{"status", "-cacert", filepath.Join(dir, "none.pem"), "job"}, exitUsage, "", "-cacert: open"},
		{"-key without -cert", mtls.URL, nil, []string{"status", "-cacert", caFile, "-key", keyFile, "job"}, exitUsage, "", "needs -cert"},
		{"-cert without its key", mtls.URL, nil, []string{"status", "-cacert", caFile, "-cert", certFile, "job"}, exitUsage, "", "-cert " + certFile},
	}
	for _, tt := range tests {
		st, out, errOut := runLatchkey(t, bin, tt.url, tt.env, tt.args...)
		if st != tt.status || !strings.Contains(out, tt.stdout) || !strings.Contains(errOut, tt.stderr) {
			t.Errorf("%s: latchkey %v = %d, stdout %q, stderr %q; want %d, %q, %q",
				tt.desc, tt.args, st, out, errOut, tt.status, tt.stdout, tt.stderr)
		}
		if n := strings.Count(errOut, "\n"); n > 1 {
			t.Errorf("%s: stderr has %d lines, want at most one: %q", tt.desc, n, errOut)
		}
	}
	// The holds took and gave back the lock: each server granted it (a
	// fence), and it is free again.
	c := mustClient(t, mtls.URL, client.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{mustKeyPair(t, clientCert, clientKey)}}}}))
	st, err := c.Status(t.Context(), "job")
	if err != nil || st.Held || st.Fence == 0 {
		t.Errorf("status of job after the holds = %+v, %v; want free, with the fence of a grant", st, err)
	}
}

func mustKeyPair(t *testing.T, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}
