package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/latchkey/latchkey/client"
)

// lock runs COMMAND while it holds the lock NAME over a hold stream: the
// exclusive lock, or with -read or -write the read/write lock NAME (as
// flock -s and flock -x), or with -permits N the semaphore NAME of N
// permits, -count of them (as consul lock -n).
func (e *env) lock(ctx context.Context, args []string) int {
	fs := e.flags("lock")
	read := fs.Bool("read", false, "take a read lease of the read/write lock NAME (shared with other readers)")
	write := fs.Bool("write", false, "take the write lease of the read/write lock NAME")
	permits := fs.Int64("permits", 0, "take permits of the semaphore NAME of this many permits (as every holder of NAME says)")
	count := fs.Int64("count", 0, "with -permits: how many permits to take (default 1)")
	ttl := fs.Duration("ttl", 30*time.Second, "lease TTL; the server renews it every TTL/3 while latchkey runs")
	wait := fs.Duration("wait", 0, "how long to wait for the lock (0: do not wait)")
	fair := fs.Bool("fair", false, "wait in arrival order")
	owner := fs.String("owner", "", "who holds the lock, shown by latchkey status NAME (at most 128 printable characters)")
	onLost := fs.String("on-lost", "term", "what to do to COMMAND if the lease is lost: term, kill or ignore")
	grace := fs.Duration("grace", 10*time.Second, "after -on-lost term, how long COMMAND has before it is killed")
	if st, ok := e.parse(fs, args); !ok {
		return st
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return e.fail(ExitUsage, "lock: want NAME -- COMMAND [ARGS...]")
	}
	name, command := rest[0], rest[1:]
	if len(command) > 0 && command[0] == "--" {
		command = command[1:]
	}
	if len(command) == 0 {
		return e.fail(ExitUsage, "lock %s: want a COMMAND to run after --", name)
	}
	switch *onLost {
	case "term", "kill", "ignore":
	default:
		return e.fail(ExitUsage, "lock: -on-lost must be term, kill or ignore, got %q", *onLost)
	}
	switch {
	case *read && *write:
		return e.fail(ExitUsage, "lock: give -read or -write, not both")
	case *permits != 0 && (*read || *write):
		return e.fail(ExitUsage, "lock: -permits takes a semaphore, -read and -write a read/write lock: give one kind")
	case *permits < 0:
		return e.fail(ExitUsage, "lock: -permits must be at least 1, got %d", *permits)
	case *count != 0 && *permits == 0:
		return e.fail(ExitUsage, "lock: -count goes with -permits")
	case *count < 0 || *count > *permits:
		return e.fail(ExitUsage, "lock: -count must be from 1 to -permits (%d), got %d", *permits, *count)
	}
	c, err := e.client()
	if err != nil {
		return e.fail(ExitUsage, "%v", err)
	}

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
	opts := client.HoldOptions{TTL: *ttl, Wait: *wait, Fair: *fair, Owner: *owner}
	if *wait <= 0 {
		opts.Wait = -1
	}
	var lease *client.Lease
	heldBy := "it is held by another owner"
	switch {
	case *read:
		lease, err = c.RWLock(name).RHold(actx, opts)
		heldBy = "a writer holds it or waits for it"
	case *write:
		lease, err = c.RWLock(name).Hold(actx, opts)
		heldBy = "readers or another writer hold it"
	case *permits > 0:
		lease, err = c.Semaphore(name, *permits).Hold(actx, max(*count, 1), opts)
		heldBy = "too few of its permits are free"
	default:
		lease, err = c.Hold(actx, name, opts)
	}
	if err != nil {
		var held *client.HeldError
		var mismatch *client.PermitsMismatchError
		switch {
		case errors.As(err, &held):
			return e.fail(ExitHeld, "lock %s: not acquired within %s: %s (retry after %s)", name, *wait, heldBy, held.RetryAfter)
		case errors.As(err, &mismatch):
			if mismatch.Permits > 0 {
				return e.fail(ExitUsage, "lock %s: the semaphore has %d permits, not -permits %d", name, mismatch.Permits, *permits)
			}
			return e.fail(ExitUsage, "lock %s: the semaphore has another number of permits than -permits %d", name, *permits)
		case actx.Err() != nil && ctx.Err() == nil:
			sig := (<-sigs).(syscall.Signal)
			return e.fail(128+int(sig), "lock %s: %v while waiting", name, context.Cause(actx))
		}
		return e.fail(statusOf(err), "lock %s: %v", name, err)
	}
	cancel(nil) // from here on, signals go to COMMAND

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(),
		"LATCHKEY_FENCE="+strconv.FormatInt(lease.Fence, 10),
		"LATCHKEY_LOCK_NAME="+lease.Name,
		"LATCHKEY_LEASE_VALID_MS="+strconv.FormatInt(max(time.Until(lease.ValidUntil()).Milliseconds(), 0), 10),
	)
	if err := cmd.Start(); err != nil {
		e.unlock(lease)
		status := ExitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			status = ExitNotFound
		}
		return e.fail(status, "lock %s: cannot run %s: %v", name, command[0], err)
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
				lost = errors.New("the lease was released by someone else with its token")
			} else {
				lost = lease.Err()
			}
			fmt.Fprintf(e.stderr, "latchkey: lock %s: lease lost while %s runs: %v (-on-lost %s)\n", name, command[0], lost, *onLost)
			switch *onLost {
			case "term":
				_ = cmd.Process.Signal(syscall.SIGTERM)
				kill = time.After(*grace)
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
