package locks

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/latchkey/latchkey/service/store"
)

// The sampler counts what every instance holds, as Redis has it, for the
// gauges latchkey_leases_held, latchkey_waiters and
// latchkey_keepalive_leases: each tick it goes on with a walk of the whole
// keyspace under the key prefix (store.Scan: at most sampleCalls SCAN calls
// of COUNT sampleCount, every primary of a cluster in turn), inspects the
// state key of each name it finds, of every tenant, and counts the members
// of each keep-alive registry key (every shard on a cluster). When the walk
// has visited every key the gauges take its totals and a new walk begins.
// A tick thus visits about sampleCalls × sampleCount keys, whatever their
// number: the gauges are as of the last complete walk, up to
// (keys under the prefix ÷ (sampleCalls × sampleCount)) ticks old, plus one.

// Sampler bounds.
const (
	// DefaultSampleEvery is the sampler's tick that the server uses.
	DefaultSampleEvery = time.Second
	sampleCalls        = 4   // SCAN calls a tick
	sampleCount        = 500 // the COUNT hint of each
)

// sampleMetrics are the gauges the sampler sets (latchkey_keepalive_leases
// is the renewer's collector, keepaliveMetrics.tracked).
type sampleMetrics struct {
	held    *prometheus.GaugeVec // kind: lock, rwlock, semaphore, election
	waiters *prometheus.GaugeVec // kind: lock, rwlock, semaphore, election
	passes  prometheus.Counter
}

// sampleKinds are the primitives the gauges count, by their label.
var sampleKinds = [...]kind{kindMutex, kindRW, kindSem, kindEl}

func newSampleMetrics(reg prometheus.Registerer) *sampleMetrics {
	m := &sampleMetrics{
		held: gaugeVec(reg, "latchkey_leases_held",
			"Leases held in Redis by every instance, by kind (lock, rwlock, semaphore, election): a read/write lock's readers and writer and a semaphore's holders count one each. "+
				"Sampled by a walk of the keyspace of at most 2,000 keys a second; as of the last complete walk.", "kind"),
		waiters: gaugeVec(reg, "latchkey_waiters",
			"Waiters of every instance whose wait has not ended, for names that are held, by kind (lock, rwlock, semaphore, election). "+
				"Sampled by a walk of the keyspace of at most 2,000 keys a second; as of the last complete walk.", "kind"),
		passes: counter(reg, "latchkey_sample_passes_total",
			"Complete walks of the keyspace by this instance's sampler, each setting latchkey_leases_held, latchkey_waiters and latchkey_keepalive_leases."),
	}
	for _, k := range sampleKinds {
		m.held.WithLabelValues(k.label())
		m.waiters.WithLabelValues(k.label())
	}
	return m
}

func gaugeVec(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.GaugeVec {
	return registered(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// sampleWalk is a walk in progress and its counts so far.
type sampleWalk struct {
	pos       store.ScanPosition
	held      [len(sampleKinds)]int64
	waiters   [len(sampleKinds)]int64
	keepalive int64
}

// RunSampler walks the keyspace a step every tick and sets the gauges after
// each complete walk, until ctx ends. A step that fails (Redis unreachable)
// is tried again at the next tick from where it stood.
func (s *Service) RunSampler(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var w sampleWalk
	for {
		if done, err := s.sampleStep(ctx, &w); err == nil && done {
			for i, k := range sampleKinds {
				s.sampled.held.WithLabelValues(k.label()).Set(float64(w.held[i]))
				s.sampled.waiters.WithLabelValues(k.label()).Set(float64(w.waiters[i]))
			}
			s.ka.tracked.Set(float64(w.keepalive))
			s.sampled.passes.Inc()
			w = sampleWalk{}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleCounts are one name's leases and waiters.
type sampleCounts struct {
	kind            int // index in sampleKinds
	leases, waiters int64
}

// zcarder is a client that counts a sorted set's members.
type zcarder interface {
	ZCard(ctx context.Context, key string) *redis.IntCmd
}

// sampleStep goes on with w by one bounded step and reports whether the
// walk is complete. Returns the errors of store.Scan and of the inspects.
func (s *Service) sampleStep(ctx context.Context, w *sampleWalk) (bool, error) {
	page, err := s.st.Scan(ctx, store.ScanRequest{Match: store.GlobEscape(s.prefix) + "*", From: w.pos,
		Want: 2 * sampleCalls * sampleCount, Count: sampleCount, MaxCalls: sampleCalls})
	if err != nil {
		return false, err
	}
	var found []sampleName
	for _, key := range page.Keys {
		if key == s.regKey || strings.HasPrefix(key, s.regKey+":{") {
			n, err := s.registrySize(ctx, key)
			if err != nil {
				return false, err
			}
			w.keepalive += n
			continue
		}
		if n, ok := parseStateKey(s.prefix, key); ok {
			found = append(found, n)
		}
	}
	counts, _, err := inspectAll(ctx, found, s.countName)
	if err != nil {
		return false, err
	}
	for _, c := range counts {
		w.held[c.kind] += c.leases
		w.waiters[c.kind] += c.waiters
	}
	w.pos = page.Next
	return page.Done, nil
}

// registrySize is the number of entries of a keep-alive registry key.
func (s *Service) registrySize(ctx context.Context, key string) (int64, error) {
	zc, ok := s.st.Client().(zcarder)
	if !ok {
		return 0, nil
	}
	n, err := zc.ZCard(ctx, key).Result()
	if err != nil {
		return 0, s.st.Err(ctx, "zcard", err)
	}
	return n, nil
}

// sampleName is a name found by the sampler: its tenant, kind and name.
type sampleName struct {
	tenant string
	kind   int // index in sampleKinds
	name   string
}

// parseStateKey reads the tenant, kind and name of a name's state key
// under prefix ("<prefix>[t:<tenant>:][<tag>:]lock:{<name>}"); ok is false
// for any other key.
func parseStateKey(prefix, key string) (sampleName, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return sampleName{}, false
	}
	var n sampleName
	if t, ok := strings.CutPrefix(rest, "t:"); ok {
		i := strings.IndexByte(t, ':')
		if i < 0 {
			return sampleName{}, false
		}
		n.tenant, rest = t[:i], t[i+1:]
	}
	for i, k := range sampleKinds {
		if name, ok := strings.CutPrefix(rest, stateKeyHead("", "", k)); ok {
			if name, ok = strings.CutSuffix(name, "}"); ok && ValidateName(name) == nil {
				n.kind, n.name = i, name
				return n, true
			}
		}
	}
	return sampleName{}, false
}

// countName inspects a name found by the sampler, in its tenant's
// namespace, and counts its leases and waiters.
func (s *Service) countName(ctx context.Context, n sampleName) (sampleCounts, bool, error) {
	ctx = store.WithTenant(ctx, n.tenant)
	c := sampleCounts{kind: n.kind}
	switch sampleKinds[n.kind] {
	case kindRW:
		st, err := s.InspectRW(ctx, n.name, "")
		if st.WriteHeld {
			c.leases = 1
		}
		c.leases += st.Readers
		c.waiters = st.WaitingReaders + st.WaitingWriters
		return c, true, err
	case kindSem:
		st, err := s.InspectSemaphore(ctx, n.name, "")
		c.leases, c.waiters = st.Holders, st.Waiters
		return c, true, err
	case kindEl:
		st, err := s.InspectElection(ctx, n.name, "")
		if st.Leader != nil {
			c.leases = 1
		}
		c.waiters = st.Candidates
		return c, true, err
	}
	st, err := s.Inspect(ctx, n.name, "")
	if st.Held {
		c.leases = 1
	}
	c.waiters = st.Waiters
	return c, true, err
}
