package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestElectionInvariantAcrossInstanceKills: TestElectionInvariantUnderConcurrency's
// 32 candidates, with keep-alive, over two cmd/server processes of one
// deployment, and four watchers, two on each. While they campaign, Redis is
// paused (every primary on a cluster), its pub/sub connections are killed,
// and the second process is SIGKILLed (while one of its candidates leads,
// when one does within a few seconds) and started again: its leader's
// renewals, its waiting candidates and its watchers die with it. Its
// watchers move to the first process with the id of the last event they
// read (Last-Event-ID), and one comes back to the second once it is up.
// Periodic re-reads are off.
//
// Never two leaders at once (each leadership from its answer to its
// resignation about to be sent; one whose resignation failed, only its TTL
// from its campaign's sending); terms strictly increase in grant order;
// every candidate of the first process is elected within its wait (the
// dead process's waiters do not hold up the queue past their
// registration); once the last leader resigns the election is vacant with
// nobody waiting; every watcher's terms increase and every watcher reaches
// that final state.
func TestElectionInvariantAcrossInstanceKills(t *testing.T) {
	pr := newPausableRedis(t)
	server := buildServer(t)
	dir := t.TempDir()
	env := []string{"LATCHKEY_REDIS_URL=" + pr.URL, "LATCHKEY_WATCH_RESYNC=1h"}
	procs := []*serverProcess{
		startServerProcess(t, server, dir, freePort(t), env...),
		startServerProcess(t, server, dir, freePort(t), env...),
	}
	var envs []*testEnv
	for _, p := range procs {
		envs = append(envs, &testEnv{URL: p.URL, Client: &http.Client{Transport: &specTransport{t: t, router: loadSpecRouter(t),
			base: &http.Transport{MaxIdleConnsPerHost: 32}}}, RDB: pr.RDB})
	}
	const name = "killed-inv"
	watchers := watchEachInstance(t, envs, name)

	mid := func() {
		watchers[0].awaitElected(4)
		pr.pauseFor(500 * time.Millisecond)
		watchers[0].awaitElected(8)
		pr.killSubscribers()
		watchers[0].awaitElected(12)
		// Killed while one of its candidates leads, when that comes soon.
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
			r := envs[0].send(t.Context(), http.MethodGet, electionPath(name), "")
			var st electionStateJSON
			if r.Status == http.StatusOK && json.Unmarshal(r.Body, &st) == nil && st.Leader != nil && leadsFromSecond(st.Leader.Value) {
				break
			}
		}
		procs[1].kill(t)
		watchers[1].moveTo(envs[0])
		watchers[3].moveTo(envs[0])
		procs[1].start(t)
		watchers[0].awaitElected(20)
		watchers[3].switchTo(envs[1])
	}
	records, abandoned := runElection(t, envs, name, electionRun{mid: mid, killed: true})
	if t.Failed() {
		return
	}
	wantPermitsNeverExceeded(t, records, 1)
	wantFencesInGrantOrder(t, records)
	eventually(t, time.Minute, "the election vacant, nobody waiting", func() bool {
		st := envs[0].election(t, name)
		return st.Leader == nil && st.Candidates == 0
	})

	last := envs[1].campaign(t, name, `{"value": "last", "ttl": "30s"}`)
	wantStatus(t, envs[1].do(t, http.MethodDelete, electionPath(name), "", "Lock-Token", last.Token), http.StatusOK)
	t.Logf("%d leaderships, %d campaigns abandoned, final term %d", len(records), abandoned, last.Term)
	wantWatchersAtVacancy(t, watchers, last.Term)
}

// leadsFromSecond reports whether value (runElection's "c<i>-r<round>") is
// that of a candidate of the second instance (odd i).
func leadsFromSecond(value string) bool {
	var i, round int
	_, err := fmt.Sscanf(value, "c%d-r%d", &i, &round)
	return err == nil && i%2 == 1
}
