package client_test

import (
	"log"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/client"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	lkstore "github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// exampleAdminKey is the admin credential of exampleServer.
const exampleAdminKey = "admin-secret"

// exampleServer starts a Latchkey server on an in-memory store (the
// server's embedded mode, whose TTLs run in real time), with a rate-limit
// policy "per-user" of 10 calls a minute and the admin key exampleAdminKey,
// and returns its URL and a function that stops it.
func exampleServer() (url string, stop func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	stopClock := make(chan struct{})
	clockDone := make(chan struct{})
	go func() { // advance the store's TTLs in real time, as the embedded mode does
		defer close(clockDone)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stopClock:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	st, err := lkstore.New(rdb, lkstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	lk, err := locks.New(st, locks.Config{})
	if err != nil {
		log.Fatal(err)
	}
	rl, err := ratelimit.New(st, ratelimit.Config{Policies: []ratelimit.Policy{{
		Name: "per-user", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 10, Window: time.Minute},
	}}})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(handlers.NewRouter(lk, rl, handlers.Config{AdminKey: exampleAdminKey}))
	return srv.URL, func() {
		srv.Close()
		_ = lk.Close()
		_ = rdb.Close()
		close(stopClock)
		<-clockDone
		m.Close()
	}
}

// testClient returns a client of a fresh exampleServer, stopped when the
// test ends, with opts.
func testClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	url, stop := exampleServer()
	t.Cleanup(stop)
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually waits, generously, until cond holds, and fails the test if it
// never does.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never came true: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
