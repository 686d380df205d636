package integration

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeAdminKey is the admin key the README's sessions start the server
// with.
const readmeAdminKey = "change-me-to-a-long-secret"

// buildServer builds cmd/server into a directory of t's: the binary a user
// runs, configured only by its environment.
func buildServer(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "latchkey-server")
	out, err := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd/server").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/server: %v\n%s", err, out)
	}
	return bin
}

// freePort returns a port of 127.0.0.1 that was free a moment ago, for a
// process that must listen on a port known before it starts.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// environWithout is the test's environment without the variables whose
// names start with one of prefixes, so a child is configured only by what
// the test gives it.
func environWithout(prefixes ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		keep := true
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// serverProcess is cmd/server running as a process of its own, started as
// the README starts it.
type serverProcess struct {
	URL string // http://127.0.0.1:port (https:// with startTLSServerProcess)

	client        *http.Client // asks /healthz; nil: http.DefaultClient
	bin, dir, log string
	env           []string
	cmd           *exec.Cmd
	exited        chan struct{}
}

// startServerProcess starts bin in dir on 127.0.0.1:port, with env added to
// the test's environment (without its LATCHKEY_ variables), and returns once
// /healthz answers 200. Its output goes to a file, shown if it fails to
// start. It is stopped when t ends.
func startServerProcess(t testing.TB, bin, dir, port string, env ...string) *serverProcess {
	t.Helper()
	return newServerProcess(t, bin, dir, port, env).launch(t)
}

// newServerProcess is the process startServerProcess starts, not started.
func newServerProcess(t testing.TB, bin, dir, port string, env []string) *serverProcess {
	return &serverProcess{
		URL: "http://127.0.0.1:" + port,
		bin: bin, dir: dir, log: filepath.Join(t.TempDir(), "server.log"),
		env: append(environWithout("LATCHKEY_"), append([]string{"LATCHKEY_ADDR=127.0.0.1:" + port}, env...)...),
	}
}

// launch starts p, to be stopped when t ends.
func (p *serverProcess) launch(t testing.TB) *serverProcess {
	t.Helper()
	p.start(t)
	t.Cleanup(func() { p.stop(t) })
	return p
}

// startTLSServerProcess is startServerProcess for a server that serves
// HTTPS (env sets LATCHKEY_TLS_CERT and LATCHKEY_TLS_KEY) with a
// certificate roots signed: its URL is https://, and /healthz is asked over
// TLS.
func startTLSServerProcess(t testing.TB, bin, dir, port string, roots *x509.CertPool, env ...string) *serverProcess {
	t.Helper()
	p := newServerProcess(t, bin, dir, port, env)
	p.URL = "https://127.0.0.1:" + port
	p.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	return p.launch(t)
}

// start starts the process and waits until it answers /healthz.
func (p *serverProcess) start(t testing.TB) {
	t.Helper()
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	p.cmd = exec.Command(p.bin)
	p.cmd.Dir, p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = p.dir, p.env, out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(p.cmd, p.exited)
	deadline := time.Now().Add(time.Minute)
	client := p.client
	if client == nil {
		client = http.DefaultClient
	}
	for {
		resp, err := client.Get(p.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("the server exited before it answered /healthz; its output:\n%s", p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not answer /healthz within a minute (%v); its output:\n%s", err, p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// output is what the process has written so far.
func (p *serverProcess) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// signal sends sig to the process and waits for it to exit.
func (p *serverProcess) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("the server did not exit within a minute of %v", sig)
	}
}

// kill stops the process the hard way (SIGKILL), as a crash would.
func (p *serverProcess) kill(t testing.TB) { p.signal(t, syscall.SIGKILL) }

// stop stops the process as an operator would (SIGTERM).
func (p *serverProcess) stop(t testing.TB) { p.signal(t, syscall.SIGTERM) }

// restart stops the process and starts it again with env added to its
// environment.
func (p *serverProcess) restart(t testing.TB, env ...string) {
	t.Helper()
	p.stop(t)
	p.env = append(p.env, env...)
	p.start(t)
}
