package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// watchPrefix is the watched locks' names: watch-bench-0, watch-bench-1...
const watchPrefix = "watch-bench-"

// readEvents reads a Server-Sent Event stream and calls on with the type of
// each event (its "event:" field, "message" when it has none) once the blank
// line ending it arrives. Comment lines (": ping") and ids are skipped. It
// returns when the stream ends or fails.
func readEvents(r io.Reader, on func(typ string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<10), 1<<20)
	typ, data := "", false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if typ != "" || data {
				if typ == "" {
					typ = "message"
				}
				on(typ)
			}
			typ, data = "", false
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = true
		}
	}
	return sc.Err()
}

// watchTally is what the watchers' streams received, counted as it
// arrives.
type watchTally struct {
	states  atomic.Int64 // streams that got their first state event
	changes atomic.Int64 // events after the state event (acquired, released...)
	again   atomic.Int64 // state events after the first: a watch told the state anew
	refused atomic.Int64 // streams answered other than 200
	failed  atomic.Int64 // streams that could not be opened or ended early
}

// deliveryNote says what fraction of the expected events arrived: each of
// the watchers of a name should see each change of it.
func deliveryNote(delivered, changes, watchersPerName int64) string {
	want := changes * watchersPerName
	if want == 0 {
		return "no change made: nothing expected"
	}
	missing := want - delivered
	if missing < 0 {
		missing = 0
	}
	return fmt.Sprintf("%d of %d expected events delivered (%.4f), %d missing: %d changes × %d watchers each",
		delivered, want, float64(delivered)/float64(want), missing, changes, watchersPerName)
}

// raiseNoFile raises this process's soft limit of open files to at least
// want (up to the hard limit), as every stream is a connection of its own.
// It returns the soft limit in force afterwards.
func raiseNoFile(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}

// runWatchers measures watch streams: it opens b.watchers streams
// (GET /v1/locks/{name}/events) spread over b.watchNames locks, waits until
// each got its state event, then for the measured duration changes every
// name once a second (acquired on one tick, released on the next) and
// counts the events the streams receive. The result's requests are the
// changes (so Redis commands per request are per change) and its rate the
// events delivered a second.
func (b *bench) runWatchers(ctx context.Context) (Result, error) {
	o := b.run
	if o == nil {
		return Result{}, fmt.Errorf("watchers needs -start or -url")
	}
	var notes []string
	// The streams' connections, plus the meter's and the changes'.
	if lim, err := raiseNoFile(uint64(b.watchers) + 1024); err != nil || lim < uint64(b.watchers)+256 {
		return Result{}, fmt.Errorf("%d streams need as many open files, the limit is %d (%v)", b.watchers, lim, err)
	}
	open := o.meter.read(ctx)

	streamsCtx, closeStreams := context.WithCancel(ctx)
	defer closeStreams()
	// One connection per stream: HTTP/1.1 carries one response at a time,
	// and an SSE response never ends.
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: -1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var tally watchTally
	var wg sync.WaitGroup
	dialing := make(chan struct{}, 64) // streams being opened at once
	for i := range b.watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dialing <- struct{}{}
			gotState := false
			release := func() {
				if !gotState {
					gotState = true
					<-dialing
				}
			}
			defer release()
			url := b.base + "/v1/locks/" + watchPrefix + fmt.Sprint(i%b.watchNames) + "/events"
			resp, err := client.Do(newRequest(streamsCtx, http.MethodGet, url, ""))
			if err != nil {
				if streamsCtx.Err() == nil {
					tally.failed.Add(1)
				}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				tally.refused.Add(1)
				return
			}
			first := true
			_ = readEvents(resp.Body, func(typ string) {
				switch {
				case first && typ == "state":
					first = false
					tally.states.Add(1)
					release()
				case typ == "state":
					tally.again.Add(1)
				default:
					tally.changes.Add(1)
				}
			})
			if streamsCtx.Err() == nil {
				tally.failed.Add(1) // the server ended the stream
			}
		}()
	}
	// Wait for every stream's state, or for the ones left to have failed.
	guard := time.Now().Add(2 * time.Minute)
	for tally.states.Load()+tally.refused.Load()+tally.failed.Load() < int64(b.watchers) && time.Now().Before(guard) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	opened := tally.states.Load()
	if opened < int64(b.watchers) {
		closeStreams()
		wg.Wait()
		return Result{}, fmt.Errorf("%d of %d streams got their state (%d refused, %d failed): raise the server's -watch-max-streams and -watch-max-streams-per-client",
			opened, b.watchers, tally.refused.Load(), tally.failed.Load())
	}
	held := o.meter.read(ctx)
	if rss := held.rss - open.rss; rss > 0 {
		notes = append(notes, fmt.Sprintf("server RSS %.1f MiB with the streams open, %.1f MiB more than before: %.1f KiB per watcher",
			held.rss/(1<<20), rss/(1<<20), rss/1024/float64(b.watchers)))
	}
	if o.meter.redis != nil {
		channels := make([]string, b.watchNames)
		for i := range channels {
			channels[i] = "latchkey:unlock:{" + watchPrefix + fmt.Sprint(i) + "}"
		}
		if subs, err := o.meter.redis.numSub(ctx, channels); err == nil {
			notes = append(notes, fmt.Sprintf("%d subscriptions in Redis to the %d names' channels (one per name per instance: %d)",
				subs, b.watchNames, b.watchNames))
		}
	}

	// The changes: each name acquired on one tick and released on the next.
	changer := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer changer.CloseIdleConnections()
	tokens := make([]string, b.watchNames)
	var changes atomic.Int64
	tick := func() {
		var wg sync.WaitGroup
		for p := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := p; i < b.watchNames; i += 16 {
					path := b.base + "/v1/locks/" + watchPrefix + fmt.Sprint(i)
					if tokens[i] == "" {
						resp, err := changer.Do(newRequest(ctx, http.MethodPost, path, `{"ttl":"60s"}`))
						if err != nil {
							continue
						}
						resp.Body.Close()
						if resp.StatusCode == http.StatusCreated {
							tokens[i] = resp.Header.Get("Lock-Token")
							changes.Add(1)
						}
						continue
					}
					req := newRequest(ctx, http.MethodDelete, path, "")
					req.Header.Set("Lock-Token", tokens[i])
					resp, err := changer.Do(req)
					if err != nil {
						continue
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						tokens[i] = ""
						changes.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	before := o.meter.read(ctx)
	start := time.Now()
	ticks := int(o.duration / time.Second)
	if ticks < 1 {
		ticks = 1
	}
	for t := range ticks {
		if ctx.Err() != nil {
			break
		}
		tick()
		if next := start.Add(time.Duration(t+1) * time.Second); t+1 < ticks {
			time.Sleep(time.Until(next))
		}
	}
	// Let the last changes' events arrive: until all have, or none came
	// for two seconds.
	perName := int64(b.watchers / b.watchNames)
	want := changes.Load() * perName
	last, quiet := tally.changes.Load(), time.Now()
	for tally.changes.Load() < want && time.Since(quiet) < 2*time.Second && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		if n := tally.changes.Load(); n != last {
			last, quiet = n, time.Now()
		}
	}
	elapsed := time.Since(start)
	after := o.meter.read(ctx)
	delivered := tally.changes.Load()
	nChanges := int(changes.Load())

	// Put every lock back, then close every stream.
	for i, token := range tokens {
		if token == "" {
			continue
		}
		req := newRequest(context.Background(), http.MethodDelete, b.base+"/v1/locks/"+watchPrefix+fmt.Sprint(i), "")
		req.Header.Set("Lock-Token", token)
		if resp, err := changer.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	closeStreams()
	wg.Wait()

	res := Result{Scenario: "watchers", Requests: nChanges, Seconds: elapsed.Seconds(), Non2xx: map[string]int{}}
	res.RPS = float64(delivered) / elapsed.Seconds()
	res.Usage = o.meter.usage(before, after, nChanges)
	res.Notes = append(notes,
		fmt.Sprintf("%d watchers on %d locks; %d changes in %.1fs (each name acquired, then released, once a second); req/s is events delivered a second, r ops/q Redis commands per change",
			b.watchers, b.watchNames, nChanges, elapsed.Seconds()),
		deliveryNote(delivered, int64(nChanges), perName))
	if n := tally.again.Load(); n > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d state events after the first (a watch told the whole state anew)", n))
	}
	if n := tally.failed.Load(); n > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d streams ended before latchbench closed them", n))
	}
	if nChanges == 0 {
		return res, fmt.Errorf("no change succeeded")
	}
	return res, nil
}
