package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/latchkey/latchkey/api"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// waitEnvConfig adjusts a server built by newWaitEnv.
type waitEnvConfig struct {
	client func(*redis.Client) store.Client // wraps the client the service uses
	server func(*http.Server)               // sets HTTP server timeouts
	svc    func(*serviceConfig)
	router func(*handlers.Config)
}

// newWaitEnv starts a Latchkey server on rdb like newTestEnvOn, with the
// adjustments of c, and closes its service (the shared pub/sub connection)
// when t ends.
func newWaitEnv(t testing.TB, rdb *redis.Client, url string, c waitEnvConfig) *testEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	scfg := serviceConfig{storeConfig: storeConfig{KeyPrefix: uniquePrefix(), Registerer: reg}, RateLimit: ratelimit.DefaultConfig()}
	hcfg := handlers.Config{Logger: slog.New(slog.DiscardHandler), Registry: reg, AdminKey: testAdminKey, Store: "redis"}
	if c.svc != nil {
		c.svc(&scfg)
	}
	if c.router != nil {
		c.router(&hcfg)
	}
	var rc store.Client = rdb
	if c.client != nil {
		rc = c.client(rdb)
	}
	svc := newServices(t, rc, scfg)
	t.Cleanup(func() { _ = svc.Close() })
	if err := svc.LoadScripts(t.Context()); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	srv := httptest.NewUnstartedServer(handlers.NewRouter(svc.lockService, svc.limitService, hcfg))
	if c.server != nil {
		c.server(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &testEnv{URL: srv.URL, Client: newSpecClient(t), RDB: rdb, RedisURL: url, Prefix: scfg.KeyPrefix, Svc: svc}
}

// waitResult is the outcome of one request sent from a goroutine.
type waitResult struct {
	Status int
	Token  string
	Fence  int64
	Body   string
	Header http.Header
	Err    error
}

// send sends one request and may be called from any goroutine: it reports
// failures in the result instead of failing the test.
func (e *testEnv) send(ctx context.Context, method, path, body string, headerPairs ...string) waitResult {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, rd)
	if err != nil {
		return waitResult{Err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headerPairs); i += 2 {
		req.Header.Set(headerPairs[i], headerPairs[i+1])
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		return waitResult{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return waitResult{Err: err}
	}
	res := waitResult{Status: resp.StatusCode, Token: resp.Header.Get("Lock-Token"), Body: string(b), Header: resp.Header}
	var v struct {
		Fence int64 `json:"fence"`
	}
	_ = json.Unmarshal(b, &v)
	res.Fence = v.Fence
	return res
}

// mustAcquire takes name at once with body and returns the lease's token.
func (e *testEnv) mustAcquire(t testing.TB, name, body string) (token string, fence int64) {
	t.Helper()
	r := e.send(t.Context(), "POST", "/v1/locks/"+name, body)
	if r.Err != nil || r.Status != http.StatusCreated {
		t.Fatalf("acquire %s: status %d err %v body %s", name, r.Status, r.Err, r.Body)
	}
	return r.Token, r.Fence
}

// mustRelease releases one hold of name.
func (e *testEnv) mustRelease(t testing.TB, name, token string) {
	t.Helper()
	r := e.send(t.Context(), "DELETE", "/v1/locks/"+name, "", "Lock-Token", token)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("release %s: status %d err %v body %s", name, r.Status, r.Err, r.Body)
	}
}

// lockState is GET /v1/locks/{name} decoded.
type lockState struct {
	Held    bool  `json:"held"`
	Fence   int64 `json:"fence"`
	Waiters int64 `json:"waiters"`
	Fair    bool  `json:"fair"`
}

func (e *testEnv) state(t testing.TB, name string) lockState {
	t.Helper()
	r := e.do(t, "GET", "/v1/locks/"+name, "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: status %d body %s", name, r.Status, r.Body)
	}
	var s lockState
	if err := json.Unmarshal(r.Body, &s); err != nil {
		t.Fatalf("GET %s: %v", name, err)
	}
	return s
}

// eventually polls cond every 10ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForWaiters waits until Redis counts n waiters on name.
func (e *testEnv) waitForWaiters(t testing.TB, name string, n int64) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%s has %d waiters", name, n), func() bool {
		return e.state(t, name).Waiters == n
	})
}

// channelSubscribers is PUBSUB NUMSUB of name's wake-up channel: the
// subscriber connections listening on it.
func (e *testEnv) channelSubscribers(t testing.TB, name string) int64 {
	t.Helper()
	ch := e.Prefix + "unlock:{" + name + "}"
	m, err := e.RDB.PubSubNumSub(t.Context(), ch).Result()
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB: %v", err)
	}
	return m[ch]
}

// sseEvent is one Server-Sent Event, or a comment line when Comment is set.
type sseEvent struct {
	Name    string
	Data    map[string]any
	Comment string
}

// holdStream is an open POST /v1/locks/{name}/hold.
type holdStream struct {
	Status int
	Header http.Header
	Body   string // the problem body when Status is not 200
	Events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
}

// openHold starts a hold of name with body. The stream is read in the
// background into Events until close or the end of the stream.
func (e *testEnv) openHold(t testing.TB, name, body string, headerPairs ...string) *holdStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := e.Client.Do(e.newRequest(t, ctx, "POST", "/v1/locks/"+name+"/hold", body, headerPairs...))
	if err != nil {
		cancel()
		t.Fatalf("hold %s: %v", name, err)
	}
	h := &holdStream{Status: resp.StatusCode, Header: resp.Header, Events: make(chan sseEvent, 64), cancel: cancel, done: make(chan struct{})}
	t.Cleanup(h.close)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h.Body = string(b)
		close(h.Events)
		close(h.done)
		return h
	}
	go func() {
		defer close(h.done)
		defer close(h.Events)
		defer resp.Body.Close()
		emit := func(ev sseEvent) {
			select {
			case h.Events <- ev:
			case <-ctx.Done():
			}
		}
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ":"):
				emit(sseEvent{Comment: strings.TrimSpace(strings.TrimPrefix(line, ":"))})
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.Data)
			case line == "" && ev.Name != "":
				emit(ev)
				ev = sseEvent{}
			}
		}
	}()
	return h
}

// next returns the next event (skipping comments unless withComments), or
// fails the test after d.
func (h *holdStream) next(t testing.TB, d time.Duration, withComments bool) sseEvent {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-h.Events:
			if !ok {
				t.Fatalf("hold stream ended while waiting for an event")
			}
			if ev.Comment != "" && !withComments {
				continue
			}
			if ev.Comment == "" {
				wantEventSchema(t, ev)
			}
			return ev
		case <-timer.C:
			t.Fatalf("no hold event within %s", d)
		}
	}
}

// close disconnects the client and waits for the reader to stop.
func (h *holdStream) close() {
	h.cancel()
	<-h.done
}

// ended reports whether the server ended the stream within d.
func (h *holdStream) ended(d time.Duration) bool {
	select {
	case <-h.done:
		return true
	case <-time.After(d):
		return false
	}
}

// holdEventSchemas names the api/openapi.yaml schema of each hold event's data.
var holdEventSchemas = map[string]string{
	"acquired": "HoldAcquiredEvent", "renewed": "Lease", "lost": "HoldLostEvent", "released": "HoldReleasedEvent",
}

// wantEventSchema checks a hold event's data against its schema in
// api/openapi.yaml (the harness checks a stream's headers only).
func wantEventSchema(t testing.TB, ev sseEvent) {
	t.Helper()
	name, ok := holdEventSchemas[ev.Name]
	if !ok {
		t.Errorf("hold event %q is not documented in api/openapi.yaml", ev.Name)
		return
	}
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	ref := doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		t.Fatalf("api/openapi.yaml has no schema %s", name)
	}
	data := map[string]any{}
	for k, v := range ev.Data {
		data[k] = v
	}
	if err := ref.Value.VisitJSON(data); err != nil {
		t.Errorf("%s event data %v does not match schema %s: %v", ev.Name, ev.Data, name, err)
	}
}
