package client_test

import (
	"log"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	lkstore "github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// exampleServer starts a Latchkey server on an in-memory store (the
// server's embedded mode), with a rate-limit policy "per-user" of 10 calls
// a minute, and returns its URL and a function that stops it.
func exampleServer() (url string, stop func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
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
	srv := httptest.NewServer(handlers.NewRouter(lk, rl, handlers.Config{}))
	return srv.URL, func() {
		srv.Close()
		_ = lk.Close()
		_ = rdb.Close()
		m.Close()
	}
}
