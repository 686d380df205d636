package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/latchkey/latchkey/client"
)

// heldFlags are the flags of a command that runs COMMAND while it holds a
// lease: lock and elect.
type heldFlags struct {
	ttl, wait, grace time.Duration
	owner, onLost    string
}

// register adds the flags to fs; what names what is held in their help.
func (h *heldFlags) register(fs *flag.FlagSet, what string) {
	fs.DurationVar(&h.ttl, "ttl", 30*time.Second, "lease TTL; the server renews it every TTL/3 while latchkey runs")
	fs.DurationVar(&h.wait, "wait", 0, "how long to wait for the "+what+" (0: do not wait)")
	fs.StringVar(&h.owner, "owner", "", "who holds the "+what+", shown to anyone who asks (at most 128 printable characters)")
	fs.StringVar(&h.onLost, "on-lost", "term", "what to do to COMMAND if the "+what+" is lost: term, kill or ignore")
	fs.DurationVar(&h.grace, "grace", 10*time.Second, "after -on-lost term, how long COMMAND has before it is killed")
}

// holdOptions is the hold the flags ask for: -wait 0 does not wait.
func (h *heldFlags) holdOptions() client.HoldOptions {
	opts := client.HoldOptions{TTL: h.ttl, Wait: h.wait, Owner: h.owner}
	if h.wait <= 0 {
		opts.Wait = -1
	}
	return opts
}

// heldRun is COMMAND run while a lease is held.
type heldRun struct {
	verb    string // the latchkey command, for messages: "lock", "elect"
	what    string // what the lease is, for messages: "lease", "leadership"
	name    string
	command []string
	flags   heldFlags
	// acquire takes the lease (over a hold stream: the server ends it when
	// latchkey dies).
	acquire func(ctx context.Context) (*client.Lease, error)
	// refused says why acquire failed when the command has its own words
	// for it (a *HeldError above all); ok is false for the others.
	refused func(err error) (status int, msg string, ok bool)
	// env is COMMAND's environment beside latchkey's own.
	env func(l *client.Lease) []string
}

// heldArgs reads NAME -- COMMAND [ARGS...] from the arguments left after the
// flags, and checks -on-lost; ok is false after a usage error, printed.
func (e *env) heldArgs(verb string, rest []string, h heldFlags) (name string, command []string, status int, ok bool) {
	if len(rest) == 0 {
		return "", nil, e.fail(ExitUsage, "%s: want NAME -- COMMAND [ARGS...]", verb), false
	}
	name, command = rest[0], rest[1:]
	if len(command) > 0 && command[0] == "--" {
		command = command[1:]
	}
	if len(command) == 0 {
		return "", nil, e.fail(ExitUsage, "%s %s: want a COMMAND to run after --", verb, name), false
	}
	switch h.onLost {
	case "term", "kill", "ignore":
	default:
		return "", nil, e.fail(ExitUsage, "%s: -on-lost must be term, kill or ignore, got %q", verb, h.onLost), false
	}
	return name, command, 0, true
}

// runHeld takes r's lease, runs r's COMMAND while it is held and returns
// latchkey's exit status: COMMAND's, or ExitHeld when the lease was not
// granted within -wait, ExitLost when it was lost while COMMAND ran
// (COMMAND is then signalled as -on-lost says), 128+n when signal n
// interrupted the wait. Signals latchkey gets while COMMAND runs are passed
// on to it.
func (e *env) runHeld(ctx context.Context, r heldRun) int {
	// Signals are caught before the wait, so that one during the wait ends
	// it (and the hold request) cleanly.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case sig := <-sigs:
			cancel(fmt.Errorf("interrupted by %v", sig))
			sigs <- sig // for the exit status below
		case <-actx.Done():
		}
	}()
	lease, err := r.acquire(actx)
	if err != nil {
		if st, msg, ok := r.refused(err); ok {
			return e.fail(st, "%s %s: %s", r.verb, r.name, msg)
		}
		if actx.Err() != nil && ctx.Err() == nil {
			sig := (<-sigs).(syscall.Signal)
			return e.fail(128+int(sig), "%s %s: %v while waiting", r.verb, r.name, context.Cause(actx))
		}
		return e.fail(statusOf(err), "%s %s: %v", r.verb, r.name, err)
	}
	cancel(nil) // from here on, signals go to COMMAND

	command := r.command
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(), r.env(lease)...)
	if err := cmd.Start(); err != nil {
		e.unlock(lease)
		status := ExitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			status = ExitNotFound
		}
		return e.fail(status, "%s %s: cannot run %s: %v", r.verb, r.name, command[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var lost error
	var kill <-chan time.Time
	done := lease.Done()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-done:
			done = nil
			if errors.Is(lease.Err(), client.ErrReleased) {
				lost = fmt.Errorf("the %s was released by someone else with its token", r.what)
			} else {
				lost = lease.Err()
			}
			fmt.Fprintf(e.stderr, "latchkey: %s %s: %s lost while %s runs: %v (-on-lost %s)\n",
				r.verb, r.name, r.what, command[0], lost, r.flags.onLost)
			switch r.flags.onLost {
			case "term":
				_ = cmd.Process.Signal(syscall.SIGTERM)
				kill = time.After(r.flags.grace)
			case "kill":
				_ = cmd.Process.Kill()
			}
		case <-kill:
			_ = cmd.Process.Kill()
		case err := <-exited:
			if lost != nil {
				return ExitLost
			}
			e.unlock(lease)
			return exitStatus(err)
		}
	}
}

// validMS is the lease's validity left, in milliseconds, for COMMAND's
// environment.
func validMS(l *client.Lease) string {
	return strconv.FormatInt(max(time.Until(l.ValidUntil()).Milliseconds(), 0), 10)
}

// unlock releases the lease, saying on stderr when that fails (the lease
// then ends with its TTL, or at once as the hold's connection closes).
func (e *env) unlock(l *client.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, client.ErrLeaseNotFound) {
		fmt.Fprintf(e.stderr, "latchkey: release %s: %v\n", l.Name, err)
	}
}

// exitStatus is the status a shell would report for a finished COMMAND.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return ExitCannotRun
		}
		return ExitOK
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}
