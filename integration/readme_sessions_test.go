package integration

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The sessions of README.md run as a reader pastes them, in order, into one
// bash shell in a copy of the repository (files such as lease.json and
// shell variables carry across blocks), against the server binary started
// as the README says: with the admin key on the embedded store, then on a
// Redis of its own with LATCHKEY_REDIS_URL. Every command's output must be
// the README's, once the parts the README says vary from run to run are
// normalised (readmeVarying).
//
// A <!-- session: ... --> comment before a console block says how to run
// it; its items, separated by ";", are:
//   - "server ENV=VALUE ...": restart the server with these variables added
//     before the block (they stay for the blocks after it);
//   - "redis-only": the block needs Redis; on the embedded store it is not
//     run, and says so;
//   - "redis paused": Redis is frozen (docker pause, as kill -STOP does)
//     while the block runs;
//   - "not run: REASON": the block cannot run here (docker-compose, ...);
//     the test says so with the reason.
//
// The command "kill -9 <server pid>; sleep N; <start the server again>" is
// carried out by the test on the server it started.
func TestREADMESessions(t *testing.T) {
	singleNode(t)
	for _, tool := range []string{"bash", "curl", "jq", "redis-cli", "openssl", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipOrFail(t, "the README's sessions need "+tool+": "+err.Error())
		}
	}
	requireCurl(t, 7, 82) // --json
	if start := "LATCHKEY_ADMIN_KEY=" + readmeAdminKey + " go run ./cmd/server"; !strings.Contains(string(readREADME(t)), start) {
		t.Fatalf("README.md no longer starts the sessions' server with %q, as this test does", start)
	}
	blocks := readmeSessionBlocks(t)
	bin := buildServer(t)

	t.Run("embedded", func(t *testing.T) {
		runREADMESessions(t, bin, blocks, "", nil)
	})
	t.Run("redis", func(t *testing.T) {
		c, url := startRedisContainer(t)
		runREADMESessions(t, bin, blocks, url, func() func() { return pauseContainer(t, c) })
	})
}

// requireCurl skips (or fails, when Redis is required) unless curl is at
// least major.minor.
func requireCurl(t *testing.T, major, minor int) {
	t.Helper()
	out, err := exec.Command("curl", "--version").Output()
	if err != nil {
		skipOrFail(t, "curl --version: "+err.Error())
	}
	m := regexp.MustCompile(`^curl (\d+)\.(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("curl --version printed %q", out)
	}
	maj, _ := strconv.Atoi(string(m[1]))
	mnr, _ := strconv.Atoi(string(m[2]))
	if maj < major || maj == major && mnr < minor {
		skipOrFail(t, fmt.Sprintf("the README's sessions need curl %d.%d or later (--json), have %s.%s", major, minor, m[1], m[2]))
	}
}

// readmeCommand is one "$ " line of a console block (with its "> "
// continuation lines) and the output the README shows for it.
type readmeCommand struct {
	Line int    // README.md line of the "$ "
	Text string // the command, continuation lines joined by newlines
	Want string // the output shown, lines joined by newlines
}

// readmeSession is a console block split into commands.
type readmeSession struct {
	readmeBlock
	Commands []readmeCommand
}

// readmeSessionBlocks returns README.md's console blocks, split into
// commands.
func readmeSessionBlocks(t *testing.T) []readmeSession {
	t.Helper()
	var sessions []readmeSession
	for _, b := range readmeBlocks(readREADME(t)) {
		if b.Lang != "console" {
			continue
		}
		s := readmeSession{readmeBlock: b}
		var want []string
		flush := func() {
			if n := len(s.Commands); n > 0 {
				s.Commands[n-1].Want = strings.Join(want, "\n")
			}
			want = nil
		}
		continued := false
		for i, l := range b.Lines {
			switch cmd, isCmd := strings.CutPrefix(l, "$ "); {
			case isCmd:
				flush()
				s.Commands = append(s.Commands, readmeCommand{Line: b.Line + 1 + i, Text: cmd})
				continued = true
			case continued && strings.HasPrefix(l, "> "):
				s.Commands[len(s.Commands)-1].Text += "\n" + strings.TrimPrefix(l, "> ")
			case len(s.Commands) == 0:
				if strings.TrimSpace(l) != "" {
					t.Errorf("README.md:%d: console block shows output (%q) before its first command: begin it with \"$ \"", b.Line+1+i, l)
				}
			default:
				continued = false
				want = append(want, l)
			}
		}
		flush()
		sessions = append(sessions, s)
	}
	if len(sessions) < 20 {
		t.Fatalf("README.md has %d console blocks; the sessions test expects every session's", len(sessions))
	}
	return sessions
}

// readmeRestartRE is the README's placeholder for a crashed and restarted
// server.
var readmeRestartRE = regexp.MustCompile(`^kill -9 <server pid>; sleep (\d+); <start the server again>$`)

// runREADMESessions runs every console block on one store: redisURL ""
// for the embedded one. pause freezes that Redis and returns the function
// that thaws it.
func runREADMESessions(t *testing.T, bin string, sessions []readmeSession, redisURL string, pause func() func()) {
	dir := copyRepository(t)
	tmp := t.TempDir()
	port, tenantPort := freePort(t), freePort(t)
	env := []string{"LATCHKEY_ADMIN_KEY=" + readmeAdminKey}
	shellEnv := append(environWithout("LATCHKEY_", "TMPDIR=", "PATH=", "GOFLAGS="),
		"TMPDIR="+tmp, "PATH="+filepath.Join(runtime.GOROOT(), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		// The sessions' go build shares the build cache with buildServer's
		// (and the other store's) whatever directory the copy is in.
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"))
	if redisURL != "" {
		env = append(env, "LATCHKEY_REDIS_URL="+redisURL)
		shellEnv = append(shellEnv, "LATCHKEY_REDIS_URL="+redisURL)
	}
	srv := startServerProcess(t, bin, dir, port, env...)
	sh := startShell(t, dir, shellEnv)
	// The reader's addresses and paths, and the ones of this run.
	toRun := strings.NewReplacer("127.0.0.1:18080", "127.0.0.1:"+tenantPort, "localhost:18080", "localhost:"+tenantPort,
		"127.0.0.1:8080", "127.0.0.1:"+port, "localhost:8080", "localhost:"+port, "/tmp/", tmp+"/")
	fromRun := strings.NewReplacer(":"+tenantPort, ":18080", ":"+port, ":8080", tmp+"/", "/tmp/")

	ran, notRun := 0, 0
	for _, s := range sessions {
		d := parseSessionDirective(t, s)
		switch {
		case d.notRun != "":
			t.Logf("README.md:%d: not run: %s", s.Line, d.notRun)
			notRun++
			continue
		case d.redisOnly && redisURL == "":
			t.Logf("README.md:%d: not run on the embedded store: the block needs Redis", s.Line)
			continue
		}
		if len(d.serverEnv) > 0 {
			srv.restart(t, d.serverEnv...)
		}
		var thaw func()
		if d.paused {
			if redisURL == "" {
				t.Fatalf("README.md:%d: \"redis paused\" without \"redis-only\"", s.Line)
			}
			thaw = pause()
		}
		for _, c := range s.Commands {
			if m := readmeRestartRE.FindStringSubmatch(c.Text); m != nil {
				srv.kill(t)
				secs, _ := strconv.Atoi(m[1])
				time.Sleep(time.Duration(secs) * time.Second) // the README's own sleep: the lease outlives no instance
				srv.start(t)
				continue
			}
			got := fromRun.Replace(sh.run(t, c, toRun.Replace(c.Text)))
			if g, w := normaliseREADME(c.Text, got), normaliseREADME(c.Text, c.Want); g != w {
				t.Errorf("README.md:%d (console block at line %d) differs on %s store:\n$ %s\n--- README shows:\n%s\n--- the command printed:\n%s\n--- normalised, README:\n%s\n--- normalised, printed:\n%s",
					c.Line, s.Line, storeName(redisURL), c.Text, c.Want, got, w, g)
			}
		}
		if thaw != nil {
			thaw()
		}
		ran++
	}
	t.Logf("%d console blocks ran on the %s store, %d are marked not runnable here", ran, storeName(redisURL), notRun)
	if notRun > 2 {
		t.Errorf("%d console blocks of README.md are marked not runnable: make them run here", notRun)
	}
}

func storeName(redisURL string) string {
	if redisURL == "" {
		return "embedded"
	}
	return "Redis"
}

// sessionDirective is what a <!-- session: ... --> comment asks for.
type sessionDirective struct {
	serverEnv []string
	redisOnly bool
	paused    bool
	notRun    string
}

func parseSessionDirective(t *testing.T, s readmeSession) sessionDirective {
	t.Helper()
	var d sessionDirective
	if s.Directive == "" {
		return d
	}
	for _, item := range strings.Split(s.Directive, ";") {
		item = strings.TrimSpace(item)
		switch {
		case item == "redis-only":
			d.redisOnly = true
		case item == "redis paused":
			d.redisOnly, d.paused = true, true
		case strings.HasPrefix(item, "server "):
			d.serverEnv = strings.Fields(strings.TrimPrefix(item, "server "))
		case strings.HasPrefix(item, "not run: "):
			d.notRun = strings.TrimPrefix(item, "not run: ")
		default:
			t.Errorf("README.md:%d: unknown session directive %q (know: server ENV=VALUE..., redis-only, redis paused, not run: REASON)", s.Line, item)
		}
	}
	return d
}

// readmeVarying are the parts of an output that vary from run to run, as
// the README's sessions section lists them: tokens, fences, times (ttl_ms,
// expires_at, granted_at, reset_ms, Date, the keep-alive deadlines, the
// command's durations, and the seconds left in Retry-After and in problem
// details), request IDs, and Content-Length, which follows from them.
var readmeVarying = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`("(?:token|fence|ttl_ms|expires_at|reset_ms|retry_after_ms|granted_at|max_hold_until|heartbeat_due|request_id|waited_ms)":\s*)("[^"]*"|-?[0-9.]+)`), "${1}<v>"},
	{regexp.MustCompile(`(?m)^(Lock-Token|X-Request-Id|Date|Retry-After|Content-Length): .*$`), "${1}: <v>"},
	{regexp.MustCompile(`;t=\d+`), ";t=<n>"},
	{regexp.MustCompile(`retry after \d+s`), "retry after <n>s"},
	{regexp.MustCompile(`\b\d{13,}\b`), "<n>"},
	{regexp.MustCompile(`\b(ttl|reset|retry_after|granted_at)=\S+`), "${1}=<v>"},
	{regexp.MustCompile(`\b\d+ ms left`), "<n> ms left"},
}

// normaliseREADME replaces the varying parts of out, the output of cmd, by
// placeholders, and drops trailing blank lines.
func normaliseREADME(cmd, out string) string {
	for _, v := range readmeVarying {
		out = v.re.ReplaceAllString(out, v.repl)
	}
	if strings.Contains(cmd, " pttl ") { // a key's remaining TTL
		out = regexp.MustCompile(`(?m)^\d+$`).ReplaceAllString(out, "<n>")
	}
	return strings.TrimRight(out, "\n")
}

// copyRepository copies the repository's files (not .git) into a directory
// of t's, where the sessions write their files.
func copyRepository(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "latchkey")
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		switch {
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatalf("copy the repository: %v", err)
	}
	return dst
}

// readmeShell is one bash process that runs commands in turn, as a reader's
// terminal does.
type readmeShell struct {
	stdin io.Writer
	lines chan string
	n     int
}

// startShell starts bash in dir with env; it and every process it started
// (background jobs, a server) are killed when t ends.
func startShell(t *testing.T, dir string, env []string) *readmeShell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	sh := &readmeShell{stdin: stdin, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			sh.lines <- sc.Text()
		}
		close(sh.lines)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the shell's process group: its jobs too
		_ = cmd.Wait()
		r.Close()
	})
	return sh
}

// run runs one command (its stdin empty, as nothing types into it) and
// returns what it printed on stdout and stderr.
func (sh *readmeShell) run(t *testing.T, c readmeCommand, text string) string {
	t.Helper()
	sh.n++
	marker := fmt.Sprintf("@@readme-command-%d-done@@", sh.n)
	if _, err := fmt.Fprintf(sh.stdin, "{ %s\n} </dev/null\nprintf '\\n%%s\\n' '%s'\n", text, marker); err != nil {
		t.Fatalf("README.md:%d: the shell is gone: %v", c.Line, err)
	}
	var out []string
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-sh.lines:
			if !ok {
				t.Fatalf("README.md:%d: the shell exited during\n$ %s\nafter printing:\n%s", c.Line, c.Text, strings.Join(out, "\n"))
			}
			if l == marker {
				return strings.Join(out, "\n")
			}
			out = append(out, l)
		case <-timeout:
			t.Fatalf("README.md:%d: no end in 2 minutes of\n$ %s\nafter printing:\n%s", c.Line, c.Text, strings.Join(out, "\n"))
		}
	}
}
