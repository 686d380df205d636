package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/latchkey/latchkey/client"
)

// elect runs COMMAND only while it leads the election NAME, over the
// election's hold stream, as lock runs one while it holds a lock: the
// candidates wait in arrival order, and the leader resigns as soon as
// COMMAND exits or latchkey dies.
func (e *env) elect(ctx context.Context, args []string) int {
	fs := e.flags("elect")
	value := fs.String("value", "", "the leader's value, shown to anyone who asks who leads (an address, a node name)")
	var h heldFlags
	h.register(fs, "leadership")
	if st, ok := e.parse(fs, args); !ok {
		return st
	}
	name, command, st, ok := e.heldArgs("elect", fs.Args(), h)
	if !ok {
		return st
	}
	c, err := e.client()
	if err != nil {
		return e.fail(ExitUsage, "%v", err)
	}
	el := c.Election(name)
	return e.runHeld(ctx, heldRun{
		verb: "elect", what: "leadership", name: name, command: command, flags: h,
		acquire: func(ctx context.Context) (*client.Lease, error) { return el.Lead(ctx, *value, h.holdOptions()) },
		refused: func(err error) (int, string, bool) {
			var held *client.HeldError
			if !errors.As(err, &held) {
				return 0, "", false
			}
			leads := "another candidate leads or is about to"
			if l := held.Leader; l != nil {
				leads = fmt.Sprintf("term %d leads with value %q", l.Term, l.Value)
				if l.Owner != "" {
					leads += fmt.Sprintf(" (owner %q)", l.Owner)
				}
			}
			return ExitHeld, fmt.Sprintf("not elected within %s: %s (retry after %s)", h.wait, leads, held.RetryAfter), true
		},
		env: func(l *client.Lease) []string {
			return []string{
				"LATCHKEY_TERM=" + strconv.FormatInt(l.Fence, 10),
				"LATCHKEY_ELECTION_NAME=" + l.Name,
				"LATCHKEY_LEASE_VALID_MS=" + validMS(l),
			}
		},
	})
}
