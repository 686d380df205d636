package locks

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Elections: a leader's lease is one more primitive on the acquire machine
// (acquire.go). A campaign is a fair acquire (candidates are served in
// arrival order), the lease's fence is the leader's term, and the lease
// holds the leader's value, which the leader may change (Proclaim) without
// giving up its term. Resigning is a release; keep-alive, holds, renewals,
// force-releases and lost leases are the lock's. Its scripts are
// el_*.lua; the leadership hash has a lock's fields (acquire.lua) but the
// hold count and the mode, and the value beside them, so that an election
// costs Redis no more than a lock holding the same value would.

// MaxValueBytes is the most bytes a leader's value may have.
const MaxValueBytes = 4096

// ValidateValue checks a leader's value: valid UTF-8 of at most
// MaxValueBytes bytes; empty means none. Returns a *ValidationError naming
// value otherwise.
func ValidateValue(value string) error {
	switch {
	case len(value) > MaxValueBytes:
		return invalid("value", "max", "value must be at most %d bytes", MaxValueBytes)
	case !utf8.ValidString(value):
		return invalid("value", "utf8", "value must be valid UTF-8 text")
	}
	return nil
}

// Leader is an election's leader as anyone may see it. It never holds the
// leader's token.
type Leader struct {
	Value     string
	Term      int64 // the leadership lease's fence
	Owner     string
	Since     time.Time // when the term began (Redis clock)
	TTL       time.Duration
	ExpiresAt time.Time
}

// ElectionState is what inspection reveals about an election. It never
// includes the leader's token.
type ElectionState struct {
	Name   string
	Leader *Leader // nil when the leadership is vacant
	// Term is the leader's term, or the last term issued when vacant (0
	// when none is known).
	Term int64
	// Candidates counts the candidates waiting, in every process.
	Candidates int64
	Owned      bool       // the token given to InspectElection leads
	Keepalive  *Keepalive // the leader's lease is kept alive by the service
	// LostReason says why the token given to InspectElection lost its
	// leadership (one of the Lost* constants), when known.
	LostReason string
	At         time.Time // when the state was read (Redis clock)
}

// ElectionHeldError reports a campaign that was not elected: another
// token leads, or (Leader nil) the leadership is vacant while a candidate
// that came first takes it. It wraps ErrConflict.
type ElectionHeldError struct {
	Name       string
	RetryAfter time.Duration // the leader's remaining TTL, or when to look again
	Leader     *Leader
}

func (e *ElectionHeldError) Error() string { return "locks: election " + e.Name + " has a leader" }

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *ElectionHeldError) Unwrap() error { return store.ErrConflict }

var (
	elScripts = newLeaseScripts("el_") // election.go
	// elProclaimScript sets the leader's value (Proclaim).
	elProclaimScript = store.NewScript("el_proclaim", lua.Source("el_proclaim"))
)

// election is the election as a primitive (see primitive.go).
type election struct{ leaseBase }

// elect is the election as a primitive, on its scripts.
func (s *Service) elect() election { return election{leaseBase{s, &elScripts}} }

// elMetrics are the election's Prometheus collectors.
type elMetrics struct {
	grants    *prometheus.CounterVec // kind: new, reentrant
	conflicts prometheus.Counter
	releases  *prometheus.CounterVec // kind: resigned, forced
	waits     *prometheus.CounterVec // outcome: acquired, timeout, canceled, conflict, error
}

func newElMetrics(reg prometheus.Registerer) *elMetrics {
	m := &elMetrics{
		grants:    counterVec(reg, "latchkey_election_grants_total", "Leaderships granted, by kind (new: elected, reentrant: the leader campaigned again).", "kind"),
		conflicts: counter(reg, "latchkey_election_conflicts_total", "Campaign attempts refused because another token led or a candidate ahead took the leadership."),
		releases:  counterVec(reg, "latchkey_election_releases_total", "Leaderships ended through the API, by kind (resigned, forced).", "kind"),
		waits:     counterVec(reg, "latchkey_election_waits_total", "Campaigns that waited, by outcome (acquired, timeout, canceled, conflict, error).", "outcome"),
	}
	for _, k := range []string{"new", "reentrant"} {
		m.grants.WithLabelValues(k)
	}
	for _, k := range []string{"resigned", "forced"} {
		m.releases.WithLabelValues(k)
	}
	return m
}

func (election) kind() kind { return kindEl }

// listen: every candidate of the process hears every wake-up, as only the
// queue's head may take the leadership (a fair lock's rule).
func (e election) listen(k lockKeys, _ AcquireRequest) (wakeups, error) { return e.join(k, true) }

// acquireCall is el_acquire.lua on the election's keys.
func (e election) acquireCall(a acquisition, waiterTimeout time.Duration) (*store.Script, []string, []any) {
	s, k := e.s, a.k
	return elScripts.acquire, []string{k.lock, k.fence, k.waiters, k.queue, s.registryKey(k), k.lost, k.channel},
		append(acquireArgs(s.cfg, kindEl, a.req, k.regName(), waiterTimeout, a.keepTTL, 1),
			a.req.Value, // ARGV[13] the value to lead with
		)
}

// readAttempt reads el_acquire.lua's reply: the nine fields of
// acquire.lua's, then the leader's owner, since (µs) and value, which
// make the leader: the caller's when granted, else the refusal's.
func (election) readAttempt(_ acquisition, res any) (attemptResult, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) != 12 {
		return attemptResult{}, fmt.Errorf("el_acquire: unexpected reply %T %v", res, res)
	}
	r, err := lockAttempt("el_acquire", arr[:9])
	if err != nil {
		return r, err
	}
	owner, _ := arr[9].(string)
	since, _ := arr[10].(int64)
	value, _ := arr[11].(string)
	if r.fence > 0 && r.ttl > 0 {
		r.leader = &Leader{Value: value, Term: r.fence, Owner: owner, Since: time.UnixMicro(since).UTC(),
			TTL: r.ttl, ExpiresAt: time.UnixMilli(r.nowMS + r.ttl.Milliseconds()).UTC()}
	}
	return r, nil
}

// refusal: another token leads, or a candidate ahead takes the vacant
// leadership (*ElectionHeldError).
func (e election) refusal(name string, r attemptResult) error {
	e.s.el.conflicts.Inc()
	retry := r.ttl
	if retry <= 0 {
		retry = r.recheck
	}
	if r.status != acquireNotGranted { // el_acquire.lua answers no other refusal
		return fmt.Errorf("locks: election %s: unexpected status %d: %w", name, r.status, store.ErrConflict)
	}
	return &ElectionHeldError{Name: name, RetryAfter: retry, Leader: r.leader}
}

func (e election) countGrant(reentrant bool) {
	if reentrant {
		e.s.el.grants.WithLabelValues("reentrant").Inc()
	} else {
		e.s.el.grants.WithLabelValues("new").Inc()
	}
}

func (e election) countWait(err error) { e.s.el.waits.WithLabelValues(waitOutcome(err)).Inc() }

func (e election) lostReason(ctx context.Context, k lockKeys, token string) string {
	st, _ := e.inspect(ctx, k, token) // a failed inspect has no reason
	return st.LostReason
}

// leave also takes the leadership hash: a candidate leaving a vacant
// election wakes the next.
func (e election) leave(ctx context.Context, k lockKeys, token string) error {
	_, err := e.s.st.Run(ctx, elScripts.leave, []string{k.lock, k.waiters, k.queue, k.channel}, leaveArgs(token)...)
	return err
}

func (election) batchKeys(keys []string, k lockKeys) []string { return append(keys, k.lock, k.lost) }

// Campaign asks for the leadership of the election name with req.Value as
// the leader's value, waiting up to req.Wait in arrival order behind the
// candidates that came first (req.Fair is always set). The lease's Fence is
// the term: strictly greater than every earlier term of the name, also
// across a Redis restart that lost the counter (as a lock's fence). The
// leading token campaigning again re-enters (Reentrant, same term) and
// proclaims req.Value. Returns a *ValidationError for a bad name, value,
// token, TTL, wait or owner, an *ElectionHeldError (ErrConflict) when
// another token leads after the wait, a *store.QuotaError, ctx's error or
// an error wrapping ErrUnavailable, as Acquire does.
func (s *Service) Campaign(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	if err := ValidateName(name); err != nil {
		return Lease{}, err
	}
	if err := ValidateValue(req.Value); err != nil {
		return Lease{}, err
	}
	req.Fair, req.Mode = true, ""
	lease, r, err := s.acquire(ctx, s.election, name, req)
	if err != nil {
		return Lease{}, err
	}
	lease.Value = req.Value
	if r.leader != nil {
		lease.Owner = r.leader.Owner // a re-entry's is the first grant's
	}
	return lease, nil
}

// HoldElection campaigns as Campaign does and leads for as long as the
// hold lasts, as Hold keeps a lock. Returns the errors of Campaign, and
// ErrHoldLapsed.
func (s *Service) HoldElection(ctx context.Context, name string, req AcquireRequest) (*Hold, error) {
	return s.hold(ctx, s.election, name, req, s.Campaign)
}

// Proclaim sets the value of the election name that token leads, keeping
// its term and TTL, and wakes the election's watchers. Returns
// ErrNotFound when nobody leads under the token's lease (it expired or
// was released), ErrNotOwner (ErrConflict) when another token leads, a
// *ValidationError for bad input, or an error wrapping ErrUnavailable.
func (s *Service) Proclaim(ctx context.Context, name, token, value string) (Lease, error) {
	if err := checkNameToken(name, token); err != nil {
		return Lease{}, err
	}
	if err := ValidateValue(value); err != nil {
		return Lease{}, err
	}
	k := s.keysIn(ctx, kindEl, name)
	res, err := s.st.RunReplicated(ctx, elProclaimScript, []string{k.lock, k.channel},
		token, // ARGV[1] token
		value, // ARGV[2] the new value
	)
	v, err := ownerReply("el_proclaim", 4, res, err)
	if err != nil {
		return Lease{}, err
	}
	return Lease{Name: name, Token: token, Fence: v[1], HoldCount: 1, Value: value,
		TTL: time.Duration(v[2]) * time.Millisecond, ExpiresAt: time.UnixMilli(v[3] + v[2]).UTC()}, nil
}

// RenewElection extends the leadership lease on name owned by token, as
// Renew does a lock's. Returns the errors of Renew.
func (s *Service) RenewElection(ctx context.Context, name, token string, ttl time.Duration) (Lease, error) {
	if err := s.checkRenew(name, token, ttl); err != nil {
		return Lease{}, err
	}
	k := s.keysIn(ctx, kindEl, name)
	lease, err := s.election.renew(ctx, k, token, ttl)
	s.renewed(ctx, k, token, ttl, lease, err)
	return lease, err
}

func (e election) renew(ctx context.Context, k lockKeys, token string, ttl time.Duration) (Lease, error) {
	s := e.s
	res, err := s.st.RunReplicated(ctx, elScripts.renew, []string{k.lock, k.lost, s.registryKey(k), k.channel, k.fence},
		renewArgs(s.cfg, kindEl, k.regName(), token, ttl, 0)...)
	v, err := ownerReply("el_renew", 7, res, err)
	if err != nil {
		return Lease{}, err
	}
	return Lease{
		Name: k.name, Token: token, HoldCount: 1, Fence: v[2],
		TTL:       time.Duration(v[3]) * time.Millisecond,
		ExpiresAt: time.UnixMilli(v[4] + v[3]).UTC(),
		Keepalive: keepaliveOf(v[5], v[6], v[4]),
	}, nil
}

// Resign gives up the leadership of the election name that token holds:
// the election is vacant at once and the next candidate is elected.
// Returns ErrNotFound, ErrNotOwner, a *ValidationError or an error
// wrapping ErrUnavailable.
func (s *Service) Resign(ctx context.Context, name, token string) (Released, error) {
	if err := checkNameToken(name, token); err != nil {
		return Released{}, err
	}
	return s.election.release(ctx, s.keysIn(ctx, kindEl, name), token)
}

func (e election) release(ctx context.Context, k lockKeys, token string) (Released, error) {
	s := e.s
	res, err := s.st.RunReplicated(ctx, elScripts.release, []string{k.lock, k.channel, s.registryKey(k), k.lost, k.fence},
		releaseArgs(s.cfg, kindEl, k.regName(), token)...)
	if _, err := ownerReply("el_release", 2, res, err); err != nil {
		return Released{}, err
	}
	s.el.releases.WithLabelValues("resigned").Inc()
	s.released(ctx, k, token, 0)
	return Released{Released: true}, nil
}

// ForceResign removes the leader of the election name whoever it is (an
// administrator's action), bumps the term counter so the evicted leader's
// term is stale, and wakes the candidates. It reports whether a leader was
// removed. Returns a *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) ForceResign(ctx context.Context, name string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	k := s.keysIn(ctx, kindEl, name)
	res, err := s.st.RunReplicated(ctx, elScripts.forceRelease, []string{k.lock, k.fence, k.channel, s.registryKey(k), k.lost},
		forceReleaseArgs(s.cfg, k.regName())...)
	if err != nil {
		return false, err
	}
	status, _ := res.(int64)
	removed := status == forceRemoved
	if removed {
		s.el.releases.WithLabelValues("forced").Inc()
		s.evictPlaces(ctx, k)
	}
	return removed, nil
}

// InspectElection reads the state of the election name; with a token it
// also reports whether that token leads. Returns a *ValidationError or an
// error wrapping ErrUnavailable.
func (s *Service) InspectElection(ctx context.Context, name, token string) (ElectionState, error) {
	if err := checkNameOptionalToken(name, token); err != nil {
		return ElectionState{}, err
	}
	return s.elect().inspect(ctx, s.keysIn(ctx, kindEl, name), token)
}

func (e election) inspect(ctx context.Context, k lockKeys, token string) (ElectionState, error) {
	s := e.s
	res, err := s.st.Run(ctx, elScripts.inspect, []string{k.lock, k.fence, k.waiters, k.queue, k.lost, s.registryKey(k)},
		inspectArgs(kindEl, k.regName(), token)...)
	arr, v, err := inspectReply("el_inspect", 13, 9, res, err)
	if err != nil {
		return ElectionState{}, err
	}
	st := ElectionState{Name: k.name, Term: v[1], Owned: truth(v[3]), Candidates: v[5], At: time.UnixMilli(v[4]).UTC()}
	st.LostReason, _ = arr[9].(string)
	if truth(v[0]) {
		l := &Leader{Term: v[1], TTL: time.Duration(v[2]) * time.Millisecond,
			ExpiresAt: time.UnixMilli(v[4] + v[2]).UTC()}
		l.Owner, _ = arr[10].(string)
		if us, ok := arr[11].(int64); ok && us > 0 {
			l.Since = time.UnixMicro(us).UTC()
		}
		l.Value, _ = arr[12].(string)
		st.Leader = l
		st.Keepalive = keepaliveOf(v[6], v[7], v[8])
	}
	return st, nil
}

// ListElections returns a page of the elections with a leader, each as
// InspectElection without a token answers it. Returns the errors of
// ListLocks.
func (s *Service) ListElections(ctx context.Context, req ListRequest) (Page[ElectionState], error) {
	return listHeld(ctx, s, kindEl, req, func(ctx context.Context, name string) (ElectionState, bool, error) {
		st, err := s.InspectElection(ctx, name, "")
		return st, st.Leader != nil, err
	})
}

// ElectionKeysOf names the keys of the election called name under the key
// prefix, as KeysOf names a lock's: the leadership hash (Lock), the term
// counter (Fence), the channel, the candidates (Waiters, Queue) and the
// lost-lease reasons.
func ElectionKeysOf(prefix, name string) Keys {
	k := keysOf(prefix, kindEl, name)
	return Keys{Lock: k.lock, Fence: k.fence, Channel: k.channel, Waiters: k.waiters, Queue: k.queue, Lost: k.lost}
}
