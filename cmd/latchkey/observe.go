package main

import (
	"context"
	"encoding/json"
	"os/signal"
	"syscall"
)

// observeLine is one line of latchkey observe: the election's leader, or
// null when it is vacant.
type observeLine struct {
	Name   string         `json:"name"`
	Leader *observeLeader `json:"leader"`
}

type observeLeader struct {
	Value string `json:"value"`
	Term  int64  `json:"term"`
	Owner string `json:"owner,omitempty"`
}

// observe prints the leader of the election NAME as one JSON line when it
// starts and again on every change (a new term, a new value, vacant), as
// etcdctl elect -l does, until SIGINT or SIGTERM (then it exits 0).
func (e *env) observe(ctx context.Context, args []string) int {
	fs := e.flags("observe")
	if st, ok := e.parse(fs, args); !ok {
		return st
	}
	if fs.NArg() != 1 {
		return e.fail(ExitUsage, "observe: want one election NAME, got %d arguments", fs.NArg())
	}
	name := fs.Arg(0)
	c, err := e.client()
	if err != nil {
		return e.fail(ExitUsage, "%v", err)
	}
	el := c.Election(name)
	// A bad name, a key that may not read it or a server that cannot be
	// reached is said at once, before the stream.
	if _, err := el.Status(ctx); err != nil {
		return e.fail(statusOf(err), "observe %s: %v", name, err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	enc := json.NewEncoder(e.stdout)
	for l := range el.Observe(ctx) {
		if l.Err != nil {
			return e.fail(statusOf(l.Err), "observe %s: %v", name, l.Err)
		}
		line := observeLine{Name: name}
		if l.Term != 0 {
			line.Leader = &observeLeader{Value: l.Value, Term: l.Term, Owner: l.Owner}
		}
		if err := enc.Encode(line); err != nil {
			return e.fail(ExitCannotRun, "observe %s: %v", name, err)
		}
	}
	return ExitOK // the channel closes without a refusal only when ctx ends
}
