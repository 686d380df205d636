package main

import (
	"context"
	"errors"
	"fmt"

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
	fair := fs.Bool("fair", false, "wait in arrival order")
	var h heldFlags
	h.register(fs, "lock")
	if st, ok := e.parse(fs, args); !ok {
		return st
	}
	name, command, st, ok := e.heldArgs("lock", fs.Args(), h)
	if !ok {
		return st
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

	opts := h.holdOptions()
	opts.Fair = *fair
	heldBy := "it is held by another owner"
	acquire := func(ctx context.Context) (*client.Lease, error) { return c.Hold(ctx, name, opts) }
	switch {
	case *read:
		acquire = func(ctx context.Context) (*client.Lease, error) { return c.RWLock(name).RHold(ctx, opts) }
		heldBy = "a writer holds it or waits for it"
	case *write:
		acquire = func(ctx context.Context) (*client.Lease, error) { return c.RWLock(name).Hold(ctx, opts) }
		heldBy = "readers or another writer hold it"
	case *permits > 0:
		acquire = func(ctx context.Context) (*client.Lease, error) {
			return c.Semaphore(name, *permits).Hold(ctx, max(*count, 1), opts)
		}
		heldBy = "too few of its permits are free"
	}
	return e.runHeld(ctx, heldRun{
		verb: "lock", what: "lease", name: name, command: command, flags: h, acquire: acquire,
		refused: func(err error) (int, string, bool) {
			var held *client.HeldError
			var mismatch *client.PermitsMismatchError
			switch {
			case errors.As(err, &held):
				return ExitHeld, fmt.Sprintf("not acquired within %s: %s (retry after %s)", h.wait, heldBy, held.RetryAfter), true
			case errors.As(err, &mismatch) && mismatch.Permits > 0:
				return ExitUsage, fmt.Sprintf("the semaphore has %d permits, not -permits %d", mismatch.Permits, *permits), true
			case errors.As(err, &mismatch):
				return ExitUsage, fmt.Sprintf("the semaphore has another number of permits than -permits %d", *permits), true
			}
			return 0, "", false
		},
		env: func(l *client.Lease) []string {
			return []string{
				"LATCHKEY_FENCE=" + fmt.Sprint(l.Fence),
				"LATCHKEY_LOCK_NAME=" + l.Name,
				"LATCHKEY_LEASE_VALID_MS=" + validMS(l),
			}
		},
	})
}
