// Package locks is Latchkey's lock leases and their Redis model. Every
// state change is one Lua script from scripts/lua, run through the store.
//
// One acquire machine serves every primitive (acquire.go): the request
// checked and completed (check.go), one attempt with the lease's place in
// its tenant's quota (quota.go), or a wait woken by pub/sub, then the grant
// handed out or given back; the ARGV and reply every acquire script shares
// are its own. Each primitive supplies only what differs (primitive.go),
// each in one file with its scripts' own ARGV and replies: the exclusive
// lock in mutex.go, the read/write lock in rwlock.go (its scripts are
// rw_*.lua, run with lib/rw.lua), the semaphore in semaphore.go, the
// election in election.go (its scripts are el_*.lua). What serves every
// primitive beside it: the service
// and its config, the checks of every request's input (check.go), the key
// layout and the keep-alive registry's members (keys.go), the pub/sub
// subscriber (subscriber.go; sharded pub/sub on a Redis Cluster in
// subscriber_cluster.go), keep-alive leases and their renewer
// (keepalive.go, renewer.go with its scripts; on a cluster the registry's
// shards and their marks, shards.go, and the directory's renewer,
// renewer_cluster.go), connection-held leases (hold.go), watching a name
// without holding it (watch.go), the lease
// scripts with the ARGV and replies the primitives share (scripts.go), the
// listings of what is held (list.go) and the sampler behind the gauges of
// it (sampler.go).
//
// # Adding a primitive
//
// A new primitive provides, in one file set beside the others and with no
// loop of its own:
//   - a kind (keys.go): the tag that keysOf puts in every key of its names,
//     all under the name's hash tag {name}, and that its keep-alive
//     registry members carry ("<kind>/<token>:<name>", see kind.member);
//   - its scripts, one per operation of leaseScripts (scripts.go), in files
//     named alike with a prefix of its own (rw_acquire.lua, ...), built
//     with the ARGV builders the primitives share (acquireHead in
//     acquire.go, the others in scripts.go);
//   - an implementation of the primitive interface (primitive.go) on them,
//     embedding leaseBase, which gives it leave (a waiter gives up) and a
//     lock's refusals and counts:
//     listen (who a wake-up reaches), acquireCall and readAttempt (the
//     acquire script, its keys and ARGV, which the machine runs, registering
//     waiters and queueing fair ones as acquire.lua does, and its reply read
//     into the shared statuses), release of a token's lease,
//     renew, the recorded lost reason of a token, and the keys the batch
//     script takes per entry; the scripts follow the rules listed with the
//     interface (wake-up messages, registry entries, lost reasons, reply
//     shapes);
//   - its case in Service.renewal (renewer.go), so the renewer dispatches
//     its due registry entries to its batch script;
//   - its entry in watchables (watch.go): its state reader, so Watch
//     streams its changes, and a diff of its own when its events are not
//     a lease's (acquired, released, expired, lost, force-released);
//   - exported methods that validate their own input and call the shared
//     machinery with it: acquire (s.acquire: trying once or waiting,
//     handing out or giving back a grant), hold (a connection-held lease),
//     and its own inspect and force release.
package locks

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// Service hands out lock leases backed by Redis.
type Service struct {
	st        *store.Store
	cfg       Config
	metrics   *metrics
	ka        *keepaliveMetrics
	sub       *subscriber
	mutex     primitive // the exclusive lock (mutex.go)
	rwlock    primitive // the read/write lock (rwlock.go)
	election  primitive // the election (election.go)
	rw        *rwMetrics
	regKey    string        // the keep-alive registry's key, named once
	shards    shardKeys     // on a cluster: the registry's shard of every slot (shards.go)
	dir       *shardDir     // on a cluster: the shards' directory (renewer_cluster.go)
	prefix    string        // the store's key prefix
	opTimeout time.Duration // the store's bound on a Redis call

	semMetrics *semMetrics // the semaphore's (semaphore.go)
	el         *elMetrics  // the election's (election.go)
	semWakes   *semWakes

	listSecret listSecret     // signs listing cursors (list.go)
	sampled    *sampleMetrics // what the sampler saw in Redis (sampler.go)

	watchMu      sync.Mutex
	hubs         map[string]*watchHub // watched names by channel (watch.go)
	watchClosed  bool
	watchMetrics *watchMetrics

	// onRecheck, when set, learns every re-check time a wait sets (see
	// Service.pause); nil but in tests (export_test.go), set before any wait.
	onRecheck func(after time.Duration, byNotice bool)
}

// New returns a Service on st and registers its scripts with it. It does no
// I/O; call st.LoadScripts at start-up. Returns an error if cfg is invalid.
func New(st *store.Store, cfg Config) (*Service, error) {
	if st == nil {
		return nil, fmt.Errorf("locks: nil store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("locks: %w", err)
	}
	cfg = cfg.withDefaults()
	m := newMetrics(cfg.Registerer)
	sc := st.Config()
	s := &Service{st: st, cfg: cfg, metrics: m, regKey: RegistryKey(sc.KeyPrefix),
		prefix: sc.KeyPrefix, opTimeout: sc.OpTimeout}
	s.mutex, s.rwlock, s.election = mutex{leaseBase{s, &mutexScripts}}, s.rwLock(), s.elect()
	if sc.Cluster {
		s.shards, s.dir = newShardKeys(sc.KeyPrefix), newShardDir(sc.KeyPrefix)
		st.Register(dirScripts...)
	}
	s.rw = newRWMetrics(cfg.Registerer)
	s.ka = newKeepaliveMetrics(cfg.Registerer)
	s.sub = newSubscriber(st.Client(), sc.Cluster, sc.OpTimeout, cfg.SubscriberPing, m)
	s.semMetrics, s.semWakes = newSemMetrics(cfg.Registerer), &semWakes{sub: s.sub}
	s.el = newElMetrics(cfg.Registerer)
	st.Register(lockScripts()...)
	st.Register(listSecretScript, lostListScript)
	s.sampled = newSampleMetrics(cfg.Registerer)
	s.hubs, s.watchMetrics = map[string]*watchHub{}, newWatchMetrics(cfg.Registerer)
	return s, nil
}

// rwLock is the read/write lock as a primitive, on its scripts.
func (s *Service) rwLock() rwlock { return rwlock{leaseBase{s, &rwScripts}} }

// semaphore is the semaphore as a primitive, on its scripts.
func (s *Service) semaphore() semaphore { return semaphore{leaseBase: leaseBase{s, &semScripts}} }

// Close ends every watch (see Watch) and closes the shared pub/sub connections. Waiters still waiting fall
// back to timed re-checks; new waits fail with ErrUnavailable. On a cluster
// the shard marks not sent yet are dropped (see markShard). It does not
// close rdb.
func (s *Service) Close() error {
	s.closeWatches()
	if s.dir != nil {
		s.dir.close()
	}
	return s.sub.close()
}

// Subscriptions reports the lock channels this process is subscribed to and
// the listeners (waiters and hold streams) on them.
func (s *Service) Subscriptions() (channels, listeners int) { return s.sub.count() }

// Config returns the effective configuration, defaults filled in.
func (s *Service) Config() Config { return s.cfg }

// Ready checks that Redis answers and runs scripts: store.Ready (PING,
// SCRIPT LOAD of every script), then one read-only script call. Returns an
// error wrapping ErrUnavailable when Redis cannot be reached.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.st.Ready(ctx); err != nil {
		return err
	}
	_, err := s.Inspect(ctx, "latchkey-readyz", "")
	return err
}
