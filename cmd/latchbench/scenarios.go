package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/latchkey/latchkey/service/store"
)

// scenario is one kind of load. op runs one iteration on a worker; it may
// send several requests, each recorded on its own.
type scenario struct {
	name        string
	description string
	op          func(ctx context.Context, w *worker)
	// setup runs once before the load (e.g. takes the leases that stay held
	// while the load runs) and returns a cleanup.
	setup func(ctx context.Context, b *bench) (func(), error)
	// run, when set, replaces the closed loop with a shape of its own.
	run func(ctx context.Context) (Result, error)
	// metered says run meters its own measured part (Result.Usage), so the
	// streams it opens before it are not counted.
	metered bool
	// wrk, when set, is the same load for wrk (-wrk); nil: wrk cannot
	// express it.
	wrk *wrkLoad
}

// bench holds what the scenarios need to know about the server.
type bench struct {
	base        string
	gatePolicy  string
	checkPolicy string
	ips         int           // distinct client IPs for gate and check
	names       int           // distinct lock names for lock
	hotNames    int           // lock names for contended
	leases      int           // keep-alive leases held during keepalive
	leaseTTL    time.Duration // their TTL: renewed every third of it
	leaseSlots  int           // hash slots the leases' names fall in; 0: any
	waiters     int           // concurrent waiters in waiters
	waiterNames int           // locks they wait on
	watchers    int           // watch streams open in watchers
	watchNames  int           // locks they watch
	nginxBin    string        // nginx for the nginx scenario
	caddyBin    string        // caddy for the caddy scenario
	run         *options      // the run's options, for the gateway scenarios' paired rounds
	grpcAddr    string        // the server's gRPC port for grpc1 and grpc3; "": none
	grpcConns   int           // HTTP/2 connections the gRPC scenarios share out their calls over
	// grpc are the clients of those connections while a gRPC scenario runs.
	grpc []pb.RateLimitServiceClient
}

func newRequest(ctx context.Context, method, url, body string) *http.Request {
	var req *http.Request
	if body == "" {
		req, _ = http.NewRequestWithContext(ctx, method, url, nil)
	} else {
		req, _ = http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// clientIP maps n onto a 10.x.y.z address used only as a header value: the
// load generator never sends traffic anywhere but the server's loopback URL.
func clientIP(n uint64) string {
	return fmt.Sprintf("10.%d.%d.%d", (n>>16)&0xff, (n>>8)&0xff, n&0xff)
}

func (b *bench) scenarios() []scenario {
	healthz := func(ctx context.Context, w *worker) {
		w.do(newRequest(ctx, http.MethodGet, b.base+"/healthz", ""), false)
	}
	return append([]scenario{
		{
			name:        "ceiling",
			description: "GET /healthz: the same server's trivial route, the throughput ceiling",
			op:          healthz,
			wrk:         &wrkCeiling,
		},
		{
			name:        "gate",
			description: "GET /v1/ratelimit/gate/{policy} with many client IPs in a trusted X-Forwarded-For",
			op:          b.gate,
			wrk:         b.wrkGate(b.gatePolicy, false),
		},
		{
			name:        "check",
			description: "POST /v1/ratelimit/check with a JSON body naming a policy and a key",
			op: func(ctx context.Context, w *worker) {
				body := fmt.Sprintf(`{"policy":%q,"key":"user-%d"}`, b.checkPolicy, w.next()%uint64(b.ips))
				w.do(newRequest(ctx, http.MethodPost, b.base+"/v1/ratelimit/check", body), false)
			},
			wrk: &wrkLoad{script: "check.lua", path: "/", args: []string{b.checkPolicy, strconv.Itoa(b.ips)}},
		},
		{
			name:        "lock",
			description: "POST /v1/locks/{random name} then DELETE with its token (each request counted)",
			op: func(ctx context.Context, w *worker) {
				b.acquireRelease(ctx, w, fmt.Sprintf("bench-%d", w.next()%uint64(b.names)), `{"ttl":"10s"}`)
			},
			wrk: wrkCycle("/v1/locks/bench-", b.names, `{"ttl":"10s"}`),
		},
		{
			name: "rwread",
			description: "POST /v1/rwlocks/{random name} for a read lease, then DELETE with its token (each request " +
				"counted): the read/write lock's cycle, to compare with lock's (not in the default list)",
			op: func(ctx context.Context, w *worker) {
				b.acquireReleaseAt(ctx, w, "/v1/rwlocks/"+fmt.Sprintf("bench-%d", w.next()%uint64(b.names)),
					`{"mode":"read","ttl":"10s"}`)
			},
			wrk: wrkCycle("/v1/rwlocks/bench-", b.names, `{"mode":"read","ttl":"10s"}`),
		},
		{
			name: "semcycle",
			description: fmt.Sprintf("POST /v1/semaphores/{random name} for 1 of %d permits, then DELETE with its token "+
				"(each request counted): the semaphore's cycle, to compare with lock's (not in the default list)", semaphorePermits),
			op: func(ctx context.Context, w *worker) {
				b.acquireReleaseAt(ctx, w, "/v1/semaphores/"+fmt.Sprintf("bench-%d", w.next()%uint64(b.names)),
					fmt.Sprintf(`{"permits":%d,"ttl":"10s"}`, semaphorePermits))
			},
			wrk: wrkCycle("/v1/semaphores/bench-", b.names, fmt.Sprintf(`{"permits":%d,"ttl":"10s"}`, semaphorePermits)),
		},
		{
			name: "election",
			description: "POST /v1/elections/{random name} with a value, then DELETE with its token: campaign/resign " +
				"cycles, to compare with lock's (not in the default list)",
			op: func(ctx context.Context, w *worker) {
				b.acquireReleaseAt(ctx, w, "/v1/elections/"+fmt.Sprintf("bench-%d", w.next()%uint64(b.names)),
					`{"value":"10.0.0.7:5432","ttl":"10s"}`)
			},
			wrk: wrkCycle("/v1/elections/bench-", b.names, `{"value":"10.0.0.7:5432","ttl":"10s"}`),
		},
		{
			name:        "contended",
			description: "many clients, few names: POST /v1/locks/{hot name} with wait, then DELETE",
			op: func(ctx context.Context, w *worker) {
				b.acquireRelease(ctx, w, fmt.Sprintf("hot-%d", w.next()%uint64(b.hotNames)), `{"ttl":"5s","wait":"2s"}`)
			},
			wrk: wrkCycle("/v1/locks/hot-", b.hotNames, `{"ttl":"5s","wait":"2s"}`).settled(),
		},
		{
			name:        "rwlock",
			description: "read-mostly: POST /v1/rwlocks/{hot name} with wait, 90% read and 10% write leases, then DELETE",
			op: func(ctx context.Context, w *worker) {
				n := w.next()
				mode := "read"
				if n%10 == 0 {
					mode = "write"
				}
				b.acquireReleaseAt(ctx, w, "/v1/rwlocks/"+fmt.Sprintf("hot-%d", n%uint64(b.hotNames)),
					`{"mode":"`+mode+`","ttl":"5s","wait":"2s"}`)
			},
			// Nine read bodies to one write body: 90% read leases.
			wrk: wrkCycle("/v1/rwlocks/hot-", b.hotNames, append(slices.Repeat([]string{`{"mode":"read","ttl":"5s","wait":"2s"}`}, 9),
				`{"mode":"write","ttl":"5s","wait":"2s"}`)...).settled(),
		},
		{
			name:        "keepalive",
			description: "gate traffic while keep-alive leases are held and renewed by the server",
			setup:       b.holdKeepaliveLeases,
			op:          b.gate,
			wrk:         b.wrkGate(b.gatePolicy, false),
		},
		{
			name: "keepidle",
			description: "keep-alive leases held and renewed by the server under the ceiling's traffic only: " +
				"the Redis cost of renewing alone (not in the default list)",
			setup: b.holdKeepaliveLeases,
			op:    healthz,
			wrk:   &wrkCeiling,
		},
		{
			name:        "waiters",
			description: "many concurrent waiters (POST with wait) queued on a few held locks, handed on one by one",
			run:         b.runWaiters,
		},
		{
			name: "watchers",
			description: "many watch streams (GET /v1/locks/{name}/events) on a few locks, each lock acquired or released " +
				"once a second: events delivered a second and Redis commands per change (not in the default list)",
			run:     b.runWatchers,
			metered: true,
		},
		semaphoreScenario(b),
	}, append(b.gatewayScenarios(), b.grpcScenarios()...)...)
}

// gate asks the gate policy about the next of many client IPs.
func (b *bench) gate(ctx context.Context, w *worker) {
	req := newRequest(ctx, http.MethodGet, b.base+"/v1/ratelimit/gate/"+b.gatePolicy, "")
	req.Header.Set("X-Forwarded-For", clientIP(w.next()%uint64(b.ips)))
	w.do(req, false)
}

// wrkGate is gate.lua's load: GET the policy's gate with one of b.ips client
// IPs in X-Forwarded-For and, with apiKey, the X-Api-Key of the same number.
func (b *bench) wrkGate(policy string, apiKey bool) *wrkLoad {
	key := "0"
	if apiKey {
		key = "1"
	}
	return &wrkLoad{script: "gate.lua", path: "/", args: []string{"/v1/ratelimit/gate/" + policy, strconv.Itoa(b.ips), key}}
}

// wrkCycle is cycle.lua's load: acquire prefix+N (N below names; names 0:
// prefix itself) with one of bodies, release with its token.
func wrkCycle(prefix string, names int, bodies ...string) *wrkLoad {
	return &wrkLoad{script: "cycle.lua", path: "/", args: append([]string{prefix, strconv.Itoa(names)}, bodies...)}
}

// settled is l with settle set to every one of its cycle's names: few
// names, on which what a stopped run left held would block the next.
func (l *wrkLoad) settled() *wrkLoad {
	prefix, names := l.args[0], l.args[1]
	n, _ := strconv.Atoi(names)
	if n == 0 {
		l.settle = []string{prefix}
	}
	for i := range n {
		l.settle = append(l.settle, prefix+strconv.Itoa(i))
	}
	return l
}

// acquireRelease acquires name with body and, when granted, releases it
// with its token; both requests are recorded.
func (b *bench) acquireRelease(ctx context.Context, w *worker, name, body string) {
	b.acquireReleaseAt(ctx, w, "/v1/locks/"+name, body)
}

// acquireReleaseAt is acquireRelease of the lock at path (any primitive's).
func (b *bench) acquireReleaseAt(ctx context.Context, w *worker, path, body string) {
	status, h, _ := w.do(newRequest(ctx, http.MethodPost, b.base+path, body), false)
	if status != http.StatusCreated {
		return
	}
	req := newRequest(ctx, http.MethodDelete, b.base+path, "")
	req.Header.Set("Lock-Token", h.Get("Lock-Token"))
	w.do(req, false)
}

// holdKeepaliveLeases takes b.leases keep-alive leases (16 clients at a
// time) before the load and releases them after it.
func (b *bench) holdKeepaliveLeases(ctx context.Context, _ *bench) (func(), error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	const parallel = 16
	names := leaseNames(b.leases, b.leaseSlots)
	tokens := make([]string, b.leases)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for p := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < b.leases; i += parallel {
				status, token, err := acquireOnce(ctx, client, b.base, names[i],
					`{"ttl":"`+b.leaseTTL.String()+`","keepalive":true,"max_hold":"10m"}`)
				if err != nil || status != http.StatusCreated {
					errs <- fmt.Errorf("keep-alive lease %s: status %d, %v", names[i], status, err)
					return
				}
				tokens[i] = token
			}
		}()
	}
	wg.Wait()
	release := func() {
		var wg sync.WaitGroup
		for p := range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := p; i < len(tokens); i += parallel {
					if tokens[i] == "" {
						continue
					}
					req := newRequest(context.Background(), http.MethodDelete, b.base+"/v1/locks/"+names[i], "")
					req.Header.Set("Lock-Token", tokens[i])
					if resp, err := client.Do(req); err == nil {
						resp.Body.Close()
					}
				}
			}()
		}
		wg.Wait()
	}
	select {
	case err := <-errs:
		release()
		return nil, err
	default:
	}
	return release, nil
}

// leaseNames returns n keep-alive lease names. With slots > 0 every name
// falls in one of the hash slots 0..slots-1 (a lock's keys are tagged with
// its name), so that on a cluster each registry shard holds about n/slots
// leases, as it would with many more leases spread over all 16,384 slots.
func leaseNames(n, slots int) []string {
	names := make([]string, 0, n)
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprintf("ka-%d", i)
		if slots <= 0 || store.Slot(name) < slots {
			names = append(names, name)
		}
	}
	return names
}
