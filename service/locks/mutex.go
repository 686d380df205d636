package locks

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// Released is the outcome of a release.
type Released struct {
	Released  bool   // true when the lease is now gone (the lock free, for the exclusive lock)
	HoldCount int64  // holds that remain
	Mode      RWMode // a read/write lock's lease that was released; else empty
}

// LockState is what inspection reveals about a lock. It never includes the
// owner's token.
type LockState struct {
	Name      string
	Held      bool
	HoldCount int64
	TTL       time.Duration
	ExpiresAt time.Time
	Fence     int64      // the holder's fence, or the last fence issued when free
	Owned     bool       // the token given to Inspect owns the lease
	Waiters   int64      // waiters whose wait has not ended, in every process
	Fair      bool       // held by a fair lease, or fair waiters are queued
	Keepalive *Keepalive // set when the lease is kept alive by the service
	Owner     string     // the owner text the lease was granted with, when held and given
	GrantedAt time.Time  // when the lease was granted (Redis clock), when held
	// LostReason says why the token given to Inspect lost its lease (one of
	// the Lost* constants), when it does not own it and that is known.
	LostReason string
	At         time.Time // when the state was read (Redis clock)
}

// Acquire takes the lock name for req.Token, or re-enters it when req.Token
// already owns it (incrementing the hold count and refreshing the TTL). With
// req.Wait it waits up to that long for the lock (see acquireWaiting).
// Returns a *ValidationError (ErrInvalid) for a bad name, token, TTL, wait or owner,
// a *HeldError (ErrConflict) when another token holds the lock (after the
// wait), a *ModeError (ErrConflict) when req.Fair differs from the lock's
// mode, a *store.QuotaError (ErrConflict) when the tenant ctx acts for is at
// its lease or waiter quota (see quota.go), ctx's error when ctx ends
// first, or an error wrapping ErrUnavailable when Redis cannot be reached
// or does not answer in time.
// On ctx's error or ErrUnavailable the caller holds nothing it was told of:
// a lease the script granted anyway is given back, best effort, when the
// service generated the token; under a token the caller chose, it is the
// caller's to release (see giveBack).
func (s *Service) Acquire(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	lease, _, err := s.acquire(ctx, s.mutex, name, req)
	return lease, err
}

// mutex is the exclusive lock as a primitive (see primitive.go).
type mutex struct{ leaseBase }

func (mutex) kind() kind { return kindMutex }

// listen: one release lets one waiter in; fair waiters all hear it, as
// only the queue's head may take the lock.
func (m mutex) listen(k lockKeys, req AcquireRequest) (wakeups, error) {
	return m.join(k, req.Fair)
}

// acquireCall is acquire.lua on the lock's keys and its channel.
func (m mutex) acquireCall(a acquisition, waiterTimeout time.Duration) (*store.Script, []string, []any) {
	s, k := m.s, a.k
	return mutexScripts.acquire, []string{k.lock, k.fence, k.waiters, k.queue, s.registryKey(k), k.lost, k.channel},
		acquireArgs(s.cfg, kindMutex, a.req, k.regName(), waiterTimeout, a.keepTTL, 0)
}

func (mutex) readAttempt(_ acquisition, res any) (attemptResult, error) {
	return lockAttempt("acquire", res)
}

// Renew extends the lease on name owned by token to ttl (zero: the lease's
// own TTL). A keep-alive lease is renewed at most to its max-hold deadline,
// the renewal counts as its heartbeat, a new ttl sets the interval of the
// service's renewals (ttl/3), and the lease returned carries its Keepalive.
// A ttl that ends the lease sooner wakes the lock's waiters and hold streams
// to re-check. Returns ErrNotFound when no lease exists, ErrNotOwner
// (ErrConflict) when another token holds it, a *ValidationError for bad
// input, or an error wrapping ErrUnavailable.
func (s *Service) Renew(ctx context.Context, name, token string, ttl time.Duration) (Lease, error) {
	if err := s.checkRenew(name, token, ttl); err != nil {
		return Lease{}, err
	}
	k := s.keys(ctx, name)
	lease, err := s.mutex.renew(ctx, k, token, ttl)
	s.renewed(ctx, k, token, ttl, lease, err)
	return lease, err
}

func (m mutex) renew(ctx context.Context, k lockKeys, token string, ttl time.Duration) (Lease, error) {
	s := m.s
	res, err := s.st.RunReplicated(ctx, mutexScripts.renew, []string{k.lock, k.lost, s.registryKey(k), k.channel, k.fence},
		renewArgs(s.cfg, kindMutex, k.regName(), token, ttl, 0)...)
	v, err := ownerReply("renew", 7, res, err)
	if err != nil {
		return Lease{}, err
	}
	return Lease{
		Name: k.name, Token: token, HoldCount: v[1], Fence: v[2],
		TTL:       time.Duration(v[3]) * time.Millisecond,
		ExpiresAt: time.UnixMilli(v[4] + v[3]).UTC(),
		Keepalive: keepaliveOf(v[5], v[6], v[4]), // the renewal is the heartbeat
	}, nil
}

// Release drops one hold of the lease on name owned by token; the last hold
// frees the lock and wakes its waiters. Returns ErrNotFound, ErrNotOwner, a
// *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) Release(ctx context.Context, name, token string) (Released, error) {
	if err := checkNameToken(name, token); err != nil {
		return Released{}, err
	}
	return s.mutex.release(ctx, s.keys(ctx, name), token)
}

func (m mutex) release(ctx context.Context, k lockKeys, token string) (Released, error) {
	s := m.s
	res, err := s.st.RunReplicated(ctx, mutexScripts.release, []string{k.lock, k.channel, s.registryKey(k), k.lost, k.fence},
		releaseArgs(s.cfg, kindMutex, k.regName(), token)...)
	v, err := ownerReply("release", 2, res, err)
	if err != nil {
		return Released{}, err
	}
	s.countRelease(v[1])
	s.released(ctx, k, token, v[1])
	return Released{Released: v[1] == 0, HoldCount: v[1]}, nil
}

// countRelease counts a release that leaves holds holds.
func (s *Service) countRelease(holds int64) {
	if holds == 0 {
		s.metrics.releases.WithLabelValues("final").Inc()
	} else {
		s.metrics.releases.WithLabelValues("partial").Inc()
	}
}

// ForceRelease frees the lock name whoever holds it, bumps its fence so the
// evicted holder's fence is stale, and wakes waiters. It reports whether a
// lease was removed. Returns a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) ForceRelease(ctx context.Context, name string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	k := s.keys(ctx, name)
	res, err := s.st.RunReplicated(ctx, mutexScripts.forceRelease, []string{k.lock, k.fence, k.channel, s.registryKey(k), k.lost},
		forceReleaseArgs(s.cfg, k.regName())...)
	if err != nil {
		return false, err
	}
	status, _ := res.(int64)
	removed := status == forceRemoved // else forceFree
	if removed {
		s.metrics.releases.WithLabelValues("forced").Inc()
		s.evictPlaces(ctx, k)
	}
	return removed, nil
}

// Inspect reads the state of lock name; with a token it also reports whether
// that token owns the lease. Returns a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) Inspect(ctx context.Context, name, token string) (LockState, error) {
	if err := checkNameOptionalToken(name, token); err != nil {
		return LockState{}, err
	}
	k := s.keys(ctx, name)
	res, err := s.st.Run(ctx, mutexScripts.inspect, []string{k.lock, k.fence, k.waiters, k.queue, k.lost, s.registryKey(k)},
		inspectArgs(kindMutex, k.regName(), token)...)
	arr, v, err := inspectReply("inspect", 14, 11, res, err)
	if err != nil {
		return LockState{}, err
	}
	st := LockState{Name: name, Held: truth(v[0]), HoldCount: v[1], Fence: v[3], Owned: truth(v[4]),
		Waiters: v[6], Fair: truth(v[7]), At: time.UnixMilli(v[5]).UTC()}
	st.LostReason, _ = arr[11].(string)
	if st.Held {
		st.Owner, _ = arr[12].(string)
		if us, ok := arr[13].(int64); ok && us > 0 {
			st.GrantedAt = time.UnixMicro(us).UTC()
		}
		st.TTL = time.Duration(v[2]) * time.Millisecond
		st.ExpiresAt = time.UnixMilli(v[5] + v[2]).UTC()
		st.Keepalive = keepaliveOf(v[8], v[9], v[10])
	}
	return st, nil
}

func (m mutex) lostReason(ctx context.Context, k lockKeys, token string) string {
	st, _ := m.s.Inspect(ctx, k.name, token) // a failed inspect has no reason
	return st.LostReason
}

// leave also takes the lock: a waiter leaving a free lock wakes the next.
func (m mutex) leave(ctx context.Context, k lockKeys, token string) error {
	_, err := m.s.st.Run(ctx, m.ls.leave, []string{k.lock, k.waiters, k.queue, k.channel}, leaveArgs(token)...)
	return err
}

func (mutex) batchKeys(keys []string, k lockKeys) []string { return append(keys, k.lock, k.lost) }
