package main

import (
	"context"
	"fmt"
)

// semaphorePermits is the capacity of the semaphore scenario's semaphore.
const semaphorePermits = 8

// semaphoreScenario is every client on one semaphore of 8 permits, each
// asking for 1 or 2 of them with a wait, then giving them back: with the
// default 64 connections, permits are what the clients wait for.
func semaphoreScenario(b *bench) scenario {
	return scenario{
		name:        "semaphore",
		description: fmt.Sprintf("every client on one semaphore of %d permits: POST /v1/semaphores/{name} for 1 or 2 with wait, then DELETE", semaphorePermits),
		op: func(ctx context.Context, w *worker) {
			count := 1 + w.next()%2
			b.acquireReleaseAt(ctx, w, "/v1/semaphores/bench-sem",
				fmt.Sprintf(`{"permits":%d,"count":%d,"ttl":"5s","wait":"2s"}`, semaphorePermits, count))
		},
		wrk: wrkCycle("/v1/semaphores/bench-sem", 0,
			fmt.Sprintf(`{"permits":%d,"count":1,"ttl":"5s","wait":"2s"}`, semaphorePermits),
			fmt.Sprintf(`{"permits":%d,"count":2,"ttl":"5s","wait":"2s"}`, semaphorePermits)).settled(),
	}
}
