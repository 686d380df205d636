package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/client"
)

// Exit statuses of latchkey itself; any other status of `latchkey lock` or
// `latchkey elect` is COMMAND's.
const (
	ExitOK          = 0
	ExitDenied      = 1   // check: the rate limit denied it
	ExitUsage       = 2   // bad command line, or a name or option the server refused as invalid (400)
	ExitUnavailable = 69  // the server could not be reached or refused the request otherwise (EX_UNAVAILABLE)
	ExitHeld        = 75  // lock, elect: not acquired (elected) within -wait (EX_TEMPFAIL: try again later)
	ExitLost        = 76  // lock, elect: the lease (leadership) was lost while COMMAND ran; COMMAND was signalled per -on-lost
	ExitCannotRun   = 126 // lock, elect: COMMAND exists but could not be started
	ExitNotFound    = 127 // lock, elect: COMMAND was not found
)

const usage = `usage: latchkey [-url URL] [-cacert FILE] [-cert FILE [-key FILE]] COMMAND ...

  latchkey lock [-read|-write|-permits N [-count K]] [-ttl 30s] [-wait 0s] [-fair] [-owner TEXT]
                [-on-lost term|kill|ignore] [-grace 10s] NAME -- COMMAND [ARGS...]
  latchkey elect [-value V] [-ttl 30s] [-wait 0s] [-owner TEXT]
                 [-on-lost term|kill|ignore] [-grace 10s] NAME -- COMMAND [ARGS...]
  latchkey observe NAME
  latchkey status NAME
  latchkey release -force NAME
  latchkey check [-cost N] POLICY [KEY]
  latchkey version

lock holds the exclusive lock NAME; with -read or -write, a read or the
write lease of the read/write lock NAME (as flock -s and flock -x); with
-permits N, K permits (default 1) of the semaphore NAME of N permits.
COMMAND gets LATCHKEY_FENCE, LATCHKEY_LOCK_NAME and LATCHKEY_LEASE_VALID_MS.

elect runs COMMAND only while it leads the election NAME with the value V:
candidates wait in arrival order, and the leader resigns when COMMAND exits.
COMMAND gets LATCHKEY_TERM (a fence, greater than every earlier term),
LATCHKEY_ELECTION_NAME and LATCHKEY_LEASE_VALID_MS. Both hold over a stream
the server renews while latchkey runs; when the lease or leadership is lost,
COMMAND gets SIGTERM (then SIGKILL after -grace), SIGKILL at once, or
nothing, as -on-lost says.

observe prints the leader of the election NAME as one JSON line,
{"name":...,"leader":{"value":...,"term":...,"owner":...}} ("leader":null
when vacant), when it starts and on every change, until SIGINT or SIGTERM.

The server is -url, else $LATCHKEY_URL, else http://127.0.0.1:8080; the API
key is $LATCHKEY_API_KEY ($LATCHKEY_ADMIN_KEY, when set, for release -force).
An https server is verified with the CA certificates of -cacert FILE (PEM;
else $LATCHKEY_CACERT), instead of the system's; one that requires a client
certificate (mTLS) gets -cert FILE and its key -key FILE (else $LATCHKEY_CERT,
$LATCHKEY_KEY; without a key, -cert's file holds it too). These flags, and
-url, go before the command or after it.

Exit status: lock and elect exit with COMMAND's status, or 75 when the lock
was not acquired (the leadership not won) within -wait, 76 when the lease
(leadership) was lost while COMMAND ran, 126/127 when COMMAND could not be
started/was not found; check exits 0 when allowed,
1 when denied; every command exits 2 for a usage error or a name or option
the server refused as invalid, and 69 when the server could not be reached
or refused the request otherwise.
`

// env is what run needs of its surroundings.
type env struct {
	getenv         func(string) string
	stdout, stderr io.Writer
	url            string
	tls            tlsFlags
}

// fail prints one line on stderr and returns status.
func (e *env) fail(status int, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "latchkey: "+format+"\n", args...)
	return status
}

// statusOf is the exit status for an error of a request: a request the
// server refused as invalid (a bad name or option) is a usage error.
func statusOf(err error) int {
	switch {
	case errors.Is(err, client.ErrHeld):
		return ExitHeld
	case errors.Is(err, client.ErrInvalidRequest):
		return ExitUsage
	}
	return ExitUnavailable
}

// run is latchkey with its arguments (without the program name); it
// returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	e := &env{getenv: getenv, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("latchkey", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&e.url, "url", "", "server URL")
	e.tls.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return ExitOK
		}
		return e.fail(ExitUsage, "%v (see latchkey -h)", err)
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "lock":
		return e.lock(ctx, rest)
	case "elect":
		return e.elect(ctx, rest)
	case "observe":
		return e.observe(ctx, rest)
	case "status":
		return e.status(ctx, rest)
	case "release":
		return e.release(ctx, rest)
	case "check":
		return e.check(ctx, rest)
	case "version":
		fmt.Fprintln(stdout, "latchkey", version())
		return ExitOK
	case "help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	return e.fail(ExitUsage, "unknown command %q (want lock, elect, observe, status, release, check or version)", cmd)
}

// flags returns a flag set for a subcommand, with -url.
func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&e.url, "url", e.url, "server URL")
	e.tls.register(fs)
	return fs
}

// parse parses a subcommand's flags; ok is false after a usage error,
// printed, with status.
func (e *env) parse(fs *flag.FlagSet, args []string) (status int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.stdout, usage)
			return ExitOK, false
		}
		return e.fail(ExitUsage, "%s: %v (see latchkey -h)", fs.Name(), err), false
	}
	return 0, true
}

// client returns a client of the server, authenticated with the key in the
// environment variable keyVar (then LATCHKEY_API_KEY), over TLS as
// -cacert, -cert and -key say.
func (e *env) client(keyVars ...string) (*client.Client, error) {
	url := e.url
	if url == "" {
		url = e.getenv("LATCHKEY_URL")
	}
	var key string
	for _, v := range append(keyVars, "LATCHKEY_API_KEY") {
		if key = e.getenv(v); key != "" {
			break
		}
	}
	opts := []client.Option{client.WithAPIKey(key)}
	hc, err := e.tls.httpClient(e.getenv)
	if err != nil {
		return nil, err
	}
	if hc != nil {
		opts = append(opts, client.WithHTTPClient(hc))
	}
	return client.New(url, opts...)
}

func (e *env) status(ctx context.Context, args []string) int {
	fs := e.flags("status")
	if st, ok := e.parse(fs, args); !ok {
		return st
	}
	if fs.NArg() != 1 {
		return e.fail(ExitUsage, "status: want one lock NAME, got %d arguments", fs.NArg())
	}
	c, err := e.client()
	if err != nil {
		return e.fail(ExitUsage, "%v", err)
	}
	st, err := c.Status(ctx, fs.Arg(0))
	if err != nil {
		return e.fail(statusOf(err), "status %s: %v", fs.Arg(0), err)
	}
	if !st.Held {
		fmt.Fprintf(e.stdout, "%s free fence=%d waiters=%d\n", st.Name, st.Fence, st.Waiters)
		return ExitOK
	}
	line := fmt.Sprintf("%s held fence=%d hold_count=%d ttl=%s waiters=%d fair=%t keepalive=%t",
		st.Name, st.Fence, st.HoldCount, st.TTL, st.Waiters, st.Fair, st.KeepAlive != nil)
	if st.GrantedAt != nil {
		line += " granted_at=" + st.GrantedAt.Format(time.RFC3339Nano)
	}
	if st.Owner != "" {
		line += " owner=" + strconv.Quote(st.Owner) // last: free text, quoted
	}
	fmt.Fprintln(e.stdout, line)
	return ExitOK
}

func (e *env) release(ctx context.Context, args []string) int {
	fs := e.flags("release")
	force := fs.Bool("force", false, "free the lock whoever holds it (admin)")
	if st, ok := e.parse(fs, args); !ok {
		return st
	}
	if fs.NArg() != 1 {
		return e.fail(ExitUsage, "release: want one lock NAME, got %d arguments", fs.NArg())
	}
	if !*force {
		return e.fail(ExitUsage, "release: only -force is possible here: a lease is released by its holder, the only one with its token")
	}
	c, err := e.client("LATCHKEY_ADMIN_KEY")
	if err != nil {
		return e.fail(ExitUsage, "%v", err)
	}
	if err := c.ForceRelease(ctx, fs.Arg(0)); err != nil {
		return e.fail(statusOf(err), "release -force %s: %v", fs.Arg(0), err)
	}
	fmt.Fprintf(e.stdout, "%s force-released\n", fs.Arg(0))
	return ExitOK
}

func (e *env) check(ctx context.Context, args []string) int {
	fs := e.flags("check")
	cost := fs.Int64("cost", 1, "units to use")
	if st, ok := e.parse(fs, args); !ok {
		return st
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return e.fail(ExitUsage, "check: want POLICY [KEY], got %d arguments", fs.NArg())
	}
	c, err := e.client()
	if err != nil {
		return e.fail(ExitUsage, "%v", err)
	}
	d, err := c.Limiter().Check(ctx, fs.Arg(0), fs.Arg(1), *cost)
	if err != nil {
		return e.fail(statusOf(err), "check %s: %v", fs.Arg(0), err)
	}
	verdict := "allowed"
	if !d.Allowed {
		verdict = "denied"
	}
	fmt.Fprintf(e.stdout, "%s policy=%s key=%s limit=%d remaining=%d reset=%s retry_after=%s\n",
		verdict, d.Policy, d.Key, d.Limit, d.Remaining, d.Reset, d.RetryAfter)
	if !d.Allowed {
		return ExitDenied
	}
	return ExitOK
}

// version is the module version latchkey was built from, with its VCS
// revision when known.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v
}
