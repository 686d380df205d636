package integration

import (
	"testing"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

type (
	storeConfig  = store.Config
	locksConfig  = locks.Config
	lockService  = locks.Service
	limitService = ratelimit.Service
)

// serviceConfig configures the services of a test server, as cmd/server
// does: the store's fields (KeyPrefix, OpTimeout, ...) and the locks' (MaxWait,
// RenewPoll, ...) are promoted; Registerer is set for all three by
// newServices.
type serviceConfig struct {
	storeConfig
	locksConfig
	RateLimit ratelimit.Config
}

// services are the store and the two domains of a test server, their
// methods promoted (the store's LoadScripts, the locks' Acquire, ...).
type services struct {
	*store.Store
	*lockService
	*limitService
}

// newServices builds the store and both domains on client, as cmd/server
// does.
func newServices(t testing.TB, client store.Client, cfg serviceConfig) *services {
	t.Helper()
	cfg.locksConfig.Registerer = cfg.storeConfig.Registerer // one registry, as in cmd/server
	cfg.RateLimit.Registerer = cfg.storeConfig.Registerer
	st, err := store.New(client, cfg.storeConfig)
	if err != nil {
		t.Fatalf("store.New: %v", err)
	}
	lk, err := locks.New(st, cfg.locksConfig)
	if err != nil {
		t.Fatalf("locks.New: %v", err)
	}
	rl, err := ratelimit.New(st, cfg.RateLimit)
	if err != nil {
		t.Fatalf("ratelimit.New: %v", err)
	}
	return &services{Store: st, lockService: lk, limitService: rl}
}
