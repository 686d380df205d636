package locks

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// RWMode is the lease a read/write lock hands out: many readers or one writer.
type RWMode string

// The modes of a read/write lock's leases.
const (
	ModeRead  RWMode = "read"
	ModeWrite RWMode = "write"
)

// RWState is what inspection reveals about a read/write lock. It never
// includes a holder's token.
type RWState struct {
	Name           string
	WriteHeld      bool
	Readers        int64 // read leases that have not expired
	Fence          int64 // the writer's fence when write-held, else the last fence issued
	WaitingReaders int64
	WaitingWriters int64
	Fair           bool // held or waited for in fair mode

	// With a token: what it holds (Mode is write when it holds both, during
	// a downgrade; Modes lists both), and that lease's hold count, TTL,
	// keep-alive and owner text.
	Owned      bool
	Mode       RWMode
	Modes      []RWMode
	HoldCount  int64
	TTL        time.Duration
	ExpiresAt  time.Time
	Keepalive  *Keepalive
	Owner      string
	LostReason string // why the token lost its lease, when it holds none and that is known

	// Leases are the leases held, the writer's first, at most
	// MaxListedLeases of them; LeasesTruncated says more are held.
	Leases          []HeldLease
	LeasesTruncated bool

	At time.Time // when the state was read (Redis clock)
}

// rwlock is the read/write lock as a primitive (see primitive.go).
type rwlock struct{ leaseBase }

func (rwlock) kind() kind { return kindRW }

// listen: a release may let many readers in at once. A reader is not woken
// when the last reader leaves (hintDrained): only a writer is then let in,
// and a waiting reader is blocked by a writer, holding or queued ahead of
// it, whose release, departure or deadline it waits for.
func (l rwlock) listen(k lockKeys, req AcquireRequest) (wakeups, error) {
	ignore := ""
	if req.Mode == ModeRead {
		ignore = hintDrained
	}
	w, err := l.s.sub.joinIgnoring(k.channel, true, ignore)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// acquireCall is rw_acquire.lua on the lock's keys and its channel.
func (l rwlock) acquireCall(a acquisition, waiterTimeout time.Duration) (*store.Script, []string, []any) {
	s, k := l.s, a.k
	return rwScripts.acquire, []string{k.lock, k.waiters, k.queue, s.registryKey(k), k.lost, k.channel},
		rwAcquireArgs(s.cfg, a.req, k.regName(), waiterTimeout, a.keepTTL, a.ownToken)
}

// leave runs rw_leave.lua, which also counts the waiter out of the state's
// queued waiters.
func (l rwlock) leave(ctx context.Context, k lockKeys, token string) error {
	_, err := l.s.st.Run(ctx, l.ls.leave, []string{k.waiters, k.queue, k.channel, k.lock}, leaveArgs(token)...)
	return err
}

// readAttempt reads acquire.lua's reply, the lease's mode, and an upgrade
// refused as the primitive's own refusal (*UpgradeError).
func (rwlock) readAttempt(a acquisition, res any) (attemptResult, error) {
	r, err := lockAttempt("rw_acquire", res)
	if err != nil {
		return attemptResult{}, err
	}
	r.mode = a.req.Mode
	if r.status == rwUpgradeRefused {
		r.status, r.refused = acquireRefused, &UpgradeError{Name: a.k.name}
	}
	return r, nil
}

func (l rwlock) release(ctx context.Context, k lockKeys, token string) (Released, error) {
	return l.releaseMode(ctx, k, token, "")
}

// releaseMode drops one hold of token's lease of mode ("": its write lease
// when it holds one, else its read lease).
func (l rwlock) releaseMode(ctx context.Context, k lockKeys, token string, mode RWMode) (Released, error) {
	s := l.s
	res, err := s.st.RunReplicated(ctx, rwScripts.release,
		[]string{k.lock, k.channel, s.registryKey(k), k.lost},
		rwReleaseArgs(s.cfg, k.regName(), token, mode)...)
	v, err := ownerReply("rw_release", 3, res, err)
	if err != nil {
		return Released{}, err
	}
	m := modeOf(v[2])
	s.rw.releases.WithLabelValues(string(m), releaseKind(v[1])).Inc()
	s.released(ctx, k, token, v[1])
	return Released{Released: v[1] == 0, HoldCount: v[1], Mode: m}, nil
}

// releaseKind labels a release that leaves holds holds.
func releaseKind(holds int64) string {
	if holds == 0 {
		return "final"
	}
	return "partial"
}

func (l rwlock) renew(ctx context.Context, k lockKeys, token string, ttl time.Duration) (Lease, error) {
	return l.renewMode(ctx, k, token, "", ttl)
}

// renewMode extends token's lease of mode ("": every lease it holds).
func (l rwlock) renewMode(ctx context.Context, k lockKeys, token string, mode RWMode, ttl time.Duration) (Lease, error) {
	s := l.s
	res, err := s.st.RunReplicated(ctx, rwScripts.renew,
		[]string{k.lock, k.lost, s.registryKey(k), k.channel},
		rwRenewArgs(s.cfg, k.regName(), token, mode, ttl)...)
	v, err := ownerReply("rw_renew", 8, res, err)
	if err != nil {
		return Lease{}, err
	}
	var ka *Keepalive
	if v[5] > 0 {
		ka = keepaliveOf(v[5], v[6], v[4]) // the renewal is the heartbeat
	}
	return Lease{
		Name: k.name, Token: token, HoldCount: v[1], Fence: v[2],
		TTL:       time.Duration(v[3]) * time.Millisecond,
		ExpiresAt: time.UnixMilli(v[4] + v[3]).UTC(),
		Keepalive: ka, Mode: modeOf(v[7]),
	}, nil
}

func (l rwlock) lostReason(ctx context.Context, k lockKeys, token string) string {
	st, _ := l.inspect(ctx, k, token) // a failed inspect has no reason
	return st.LostReason
}

func (rwlock) batchKeys(keys []string, k lockKeys) []string {
	return append(keys, k.lock, k.lost)
}

func (l rwlock) inspect(ctx context.Context, k lockKeys, token string) (RWState, error) {
	return l.inspectListing(ctx, k, token, MaxListedLeases)
}

// inspectListing is inspect with up to most leases in the state's Leases.
func (l rwlock) inspectListing(ctx context.Context, k lockKeys, token string, most int) (RWState, error) {
	s := l.s
	res, err := s.st.Run(ctx, rwScripts.inspect,
		[]string{k.lock, k.waiters, k.queue, k.lost, s.registryKey(k)},
		heldInspectArgs(kindRW, k.regName(), token, most)...)
	arr, v, err := inspectReply("rw_inspect", 17, 13, res, err)
	if err != nil {
		return RWState{}, err
	}
	st := RWState{Name: k.name, WriteHeld: truth(v[0]), Readers: v[1], Fence: v[2],
		WaitingReaders: v[4], WaitingWriters: v[5], Fair: truth(v[6]), At: time.UnixMilli(v[3]).UTC()}
	if st.Leases, st.LeasesTruncated, err = heldLeases(kindRW, arr[15], arr[16], v[3]); err != nil {
		return RWState{}, err
	}
	st.LostReason, _ = arr[13].(string)
	if v[7] != 0 {
		st.Owned = true
		st.Mode = ModeRead
		st.Modes = []RWMode{ModeRead}
		switch v[7] {
		case 2:
			st.Mode, st.Modes = ModeWrite, []RWMode{ModeWrite}
		case 3:
			st.Mode, st.Modes = ModeWrite, []RWMode{ModeRead, ModeWrite}
		}
		st.HoldCount = v[8]
		st.TTL = time.Duration(v[9]) * time.Millisecond
		st.ExpiresAt = time.UnixMilli(v[3] + v[9]).UTC()
		st.Keepalive = keepaliveOf(v[10], v[11], v[12])
		st.Owner, _ = arr[14].(string)
	}
	return st, nil
}

// checkMode checks the mode of a read/write acquire (required).
func checkMode(m RWMode) error {
	if m != ModeRead && m != ModeWrite {
		return invalid("mode", "oneof", "mode must be read or write")
	}
	return nil
}

// checkOptionalMode checks a mode naming a lease to release or renew: read,
// write or empty (the token's write lease, else its read lease).
func checkOptionalMode(m RWMode) error {
	if m != "" && m != ModeRead && m != ModeWrite {
		return invalid("mode", "oneof", "mode must be read or write")
	}
	return nil
}

// AcquireRW takes the read or write lease (req.Mode, required) of the
// read/write lock name for req.Token, or re-enters that lease when the
// token holds it. Many readers hold at once, or one writer; the writer may
// also take the read lease with its token (then release the write lease: a
// downgrade). Readers arriving after a waiting writer wait behind it, and
// with req.Fair every lease is granted in arrival order. Each lease has its
// own TTL and fence. Waiting, keep-alive and owner text work as in Acquire.
// Returns Acquire's errors, a *ValidationError for a bad mode, and an
// *UpgradeError (ErrConflict) when the token holds the read lease and asks
// for write.
func (s *Service) AcquireRW(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	if err := ValidateName(name); err != nil {
		return Lease{}, err
	}
	if err := checkMode(req.Mode); err != nil {
		return Lease{}, err
	}
	lease, _, err := s.acquire(ctx, s.rwlock, name, req)
	if err == nil {
		kind := "new"
		if lease.Reentrant {
			kind = "reentrant"
		}
		s.rw.grants.WithLabelValues(string(lease.Mode), kind).Inc()
	}
	return lease, err
}

// RenewRW extends the lease of mode ("" for every lease the token holds:
// its read and write lease during a downgrade) of the read/write lock name
// owned by token, to ttl (zero: each lease's own TTL), as Renew does. The
// lease returned is the write lease when it was renewed, else the read
// lease. Returns ErrNotFound when the token holds no such lease and nobody
// holds the lock, ErrNotOwner when others hold it, a *ValidationError or an
// error wrapping ErrUnavailable.
func (s *Service) RenewRW(ctx context.Context, name, token string, mode RWMode, ttl time.Duration) (Lease, error) {
	if err := s.checkLeaseArgs(name, token, mode); err != nil {
		return Lease{}, err
	}
	if err := s.checkRenewTTL(ttl); err != nil {
		return Lease{}, err
	}
	k := s.keysIn(ctx, kindRW, name)
	lease, err := s.rwLock().renewMode(ctx, k, token, mode, ttl)
	s.renewed(ctx, k, token, ttl, lease, err)
	return lease, err
}

// ReleaseRW drops one hold of token's lease of mode on the read/write lock
// name; an empty mode names its write lease when it holds one, else its
// read lease. The last hold of the write lease, and of the last reader,
// wake the lock's waiters. Returns ErrNotFound, ErrNotOwner, a
// *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) ReleaseRW(ctx context.Context, name, token string, mode RWMode) (Released, error) {
	if err := s.checkLeaseArgs(name, token, mode); err != nil {
		return Released{}, err
	}
	return s.rwLock().releaseMode(ctx, s.keysIn(ctx, kindRW, name), token, mode)
}

func (s *Service) checkLeaseArgs(name, token string, mode RWMode) error {
	if err := checkNameToken(name, token); err != nil {
		return err
	}
	return checkOptionalMode(mode)
}

// ForceReleaseRW evicts every holder of the read/write lock name (the
// writer and all readers), bumps its fence so every evicted fence is stale,
// and wakes waiters. It reports whether any lease was removed. Returns a
// *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) ForceReleaseRW(ctx context.Context, name string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	k := s.keysIn(ctx, kindRW, name)
	res, err := s.st.RunReplicated(ctx, rwScripts.forceRelease,
		[]string{k.lock, k.channel, s.registryKey(k), k.lost},
		forceReleaseArgs(s.cfg, k.regName())...)
	if err != nil {
		return false, err
	}
	n, _ := res.(int64)
	if n > 0 {
		s.rw.releases.WithLabelValues("any", "forced").Inc()
		s.evictPlaces(ctx, k)
	}
	return n > 0, nil
}

// InspectRW reads the state of the read/write lock name; with a token it
// also reports what that token holds. Returns a *ValidationError or an
// error wrapping ErrUnavailable.
func (s *Service) InspectRW(ctx context.Context, name, token string) (RWState, error) {
	if err := checkNameOptionalToken(name, token); err != nil {
		return RWState{}, err
	}
	return s.rwLock().inspect(ctx, s.keysIn(ctx, kindRW, name), token)
}

// HoldRW acquires a lease of the read/write lock name as AcquireRW does and
// keeps it alive until Close or until it is lost, as Hold does. Returns the
// errors of AcquireRW.
func (s *Service) HoldRW(ctx context.Context, name string, req AcquireRequest) (*Hold, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := checkMode(req.Mode); err != nil {
		return nil, err
	}
	return s.hold(ctx, s.rwlock, name, req, s.AcquireRW)
}

// RWKeys are the Redis keys of one read/write lock, as the service names
// them: for whoever looks at its state in Redis from outside the service.
type RWKeys struct {
	State   string // hash: the writer's fields, fairness, one field per reader (with its expiry), their count, the fence counter
	Channel string // pub/sub channel for wake-ups
	Waiters string // zset: waiter token -> deadline
	Queue   string // list: "r<token>" / "w<token>" of waiters in arrival order
	Lost    string // hash: token -> why that token lost its keep-alive lease
}

// RWKeysOf names the keys of the read/write lock called name under the key prefix.
func RWKeysOf(prefix, name string) RWKeys {
	k := keysOf(prefix, kindRW, name)
	return RWKeys{State: k.lock, Channel: k.channel,
		Waiters: k.waiters, Queue: k.queue, Lost: k.lost}
}

// rwMetrics are the read/write lock's Prometheus collectors.
type rwMetrics struct {
	grants   *prometheus.CounterVec // mode: read, write; kind: new, reentrant
	releases *prometheus.CounterVec // mode: read, write, any; kind: partial, final, forced
}

func newRWMetrics(reg prometheus.Registerer) *rwMetrics {
	return &rwMetrics{
		grants: counterVec(reg, "latchkey_rwlock_grants_total",
			"Read/write lock leases granted, by mode (read, write) and kind (new, reentrant).", "mode", "kind"),
		releases: counterVec(reg, "latchkey_rwlock_releases_total",
			"Read/write lock releases, by mode (read, write; any for forced) and kind (partial, final, forced).", "mode", "kind"),
	}
}

// Status of rw_acquire.lua's reply besides acquire.lua's.
const rwUpgradeRefused = -4 // the token holds the read lease and asked for write

// modeArg is a mode as the scripts take it: "r", "w", or "" for any.
func modeArg(m RWMode) string {
	switch m {
	case ModeRead:
		return "r"
	case ModeWrite:
		return "w"
	}
	return ""
}

// modeOf reads the mode field of a script's reply: 1 read, 2 write.
func modeOf(v int64) RWMode {
	switch v {
	case 1:
		return ModeRead
	case 2:
		return ModeWrite
	}
	return ""
}

// rwAcquireArgs is rw_acquire.lua's ARGV: acquire.lua's, then the mode
// and whether the service made the token for this acquire.
func rwAcquireArgs(cfg Config, req AcquireRequest, name string, waiterTimeout time.Duration, keepTTL, ownToken bool) []any {
	return append(acquireArgs(cfg, kindRW, req, name, waiterTimeout, keepTTL, 2),
		modeArg(req.Mode), // ARGV[13] mode: "r" or "w"
		flag(ownToken),    // ARGV[14] "1": no earlier lease of the token to clear up after
	)
}

// rwReleaseArgs is rw_release.lua's ARGV.
func rwReleaseArgs(cfg Config, name, token string, mode RWMode) []any {
	return []any{
		token,                       // ARGV[1] token
		modeArg(mode),               // ARGV[2] mode: "r", "w", "" for the token's write lease, else its read lease
		kindRW.member(token, name),  // ARGV[3] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[4] fence retention, ms
	}
}

// rwRenewArgs is rw_renew.lua's ARGV: renew.lua's, then the mode. A ttl of
// 0 renews for each lease's own TTL.
func rwRenewArgs(cfg Config, name, token string, mode RWMode, ttl time.Duration) []any {
	return append(renewArgs(cfg, kindRW, name, token, ttl, 1),
		modeArg(mode), // ARGV[6] mode: "r", "w", "" for every lease of the token
	)
}
