package grpcapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RateLimits is what the gRPC service needs of the rate-limit domain: the
// HTTP API's decisions, so both share counters.
type RateLimits interface {
	Check(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error)
	Policy(name string) (ratelimit.Policy, error)
}

// MaxDescriptors bounds the descriptors of one request, and
// MaxEntries the entries of one descriptor.
const (
	MaxDescriptors = 16
	MaxEntries     = 8
)

// DomainPolicyPrefix starts the name of the policy a domain's rules are
// decided under: "envoy." + the domain.
const DomainPolicyPrefix = "envoy."

// item is one descriptor of a request on its way to a decision.
type item struct {
	m    match
	key  string // the counter's key, from the descriptor's values
	cost int64
	// left, for a fixed window on the epoch, is the time to its end: the
	// window the counter is created with, so it expires as the window ends.
	left time.Duration
	st   *pb.RateLimitResponse_DescriptorStatus
}

// decide answers req under cfg: each descriptor matched to its rule
// (unmatched and unlimited ones are OK), the rules of the same cost decided
// together in one multi-limit decision of ratelimit.Service (one script,
// so one atomic decision where their keys share a slot; on a Redis Cluster
// one decision per slot), rules naming a policy one decision each. The
// groups are decided in turn and the first denial stops the rest, which
// consume nothing; a group allowed before the denial keeps its count.
func (s *Server) decide(ctx context.Context, cfg *EnvoyConfig, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.Domain == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.Descriptors) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(req.Descriptors) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d descriptors per request, got %d", MaxDescriptors, len(req.Descriptors))
	}
	if cfg == nil || cfg.domains[req.Domain] == nil {
		// envoyproxy/ratelimit answers an unknown domain OK for every
		// descriptor (config_impl.go GetLimit: "unknown domain").
		return okResponse(len(req.Descriptors)), nil
	}
	items := make([]*item, len(req.Descriptors))
	names := map[string]bool{}
	now := s.cfg.Now()
	for i, d := range req.Descriptors {
		if len(d.Entries) > MaxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: at most %d entries, got %d", i, MaxEntries, len(d.Entries))
		}
		it := &item{st: &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}, cost: hitsAddend(req, d)}
		items[i] = it
		m, ok := cfg.lookup(req.Domain, d)
		if !ok || m.rule.Unlimited {
			continue
		}
		it.m, it.key = m, counterKey(m.values)
		switch r := m.rule; {
		case r.Limit.Calendar != nil:
			// The period's counter is named and checked against the Redis
			// clock by the decision; left is this instance's estimate, for
			// a status without one.
			_, end := r.Limit.Calendar.Bounds(now)
			it.left = end.Sub(now)
		case r.Policy == "" && r.Limit.Algorithm == ratelimit.FixedWindow:
			start, left := epochWindow(now, r.Limit.Window)
			it.key, it.left = counterKey(append(m.values, strconv.FormatInt(start, 10))), left
		}
		if m.rule.Name != "" {
			names[m.rule.Name] = true
		}
	}
	// replaces: a matched rule naming another matched rule's name in its
	// replaces takes that rule's place (README "Replaces").
	for _, it := range items {
		if it.m.rule == nil {
			continue
		}
		for _, r := range it.m.rule.Replaces {
			if names[r] {
				for _, o := range items {
					if o.m.rule != nil && o.m.rule.Name == r {
						o.m.rule = nil
					}
				}
			}
		}
	}
	var over bool
	for _, g := range s.groups(req.Domain, items) {
		allowed, err := s.decideGroup(ctx, req.Domain, g)
		if err != nil {
			return nil, err
		}
		if !allowed {
			over = true
			break
		}
	}
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	var tightest *item
	for _, it := range items {
		resp.Statuses = append(resp.Statuses, it.st)
		if it.st.Code == pb.RateLimitResponse_OVER_LIMIT {
			over = true
		}
		if it.st.CurrentLimit != nil && (tightest == nil || it.st.LimitRemaining < tightest.st.LimitRemaining) {
			tightest = it
		}
	}
	if over {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	if s.cfg.ResponseHeaders && tightest != nil {
		resp.ResponseHeadersToAdd = limitHeaders(tightest)
	}
	return resp, nil
}

// epochWindow places now in the fixed windows of length w counted from the
// Unix epoch, as envoyproxy/ratelimit does: its cache key ends with
// (now/divider)*divider (src/limiter/cache_key.go GenerateCacheKey) and its
// reset is divider - now%divider (src/utils/utilities.go CalculateReset;
// week, month and year fixed lengths from UnitToDivider). Returns the
// window's start in Unix milliseconds and the time left to its end, at
// least 1ms.
func epochWindow(now time.Time, w time.Duration) (int64, time.Duration) {
	ms, wms := now.UnixMilli(), max(w.Milliseconds(), 1)
	start := ms - ms%wms
	return start, time.Duration(start+wms-ms) * time.Millisecond
}

// okResponse is the answer when no rule applies.
func okResponse(n int) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}
	for range n {
		resp.Statuses = append(resp.Statuses, &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK})
	}
	return resp
}

// hitsAddend is a descriptor's cost, as envoyproxy/ratelimit's
// src/utils/utilities.go GetHitsAddends reads it: the descriptor's own
// hits_addend when set, else the request's, at least 1. A descriptor's
// hits_addend of 0 ("check without counting" there) counts 1 here.
func hitsAddend(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	n := uint64(req.HitsAddend)
	if d.HitsAddend != nil {
		n = d.HitsAddend.Value
	}
	return int64(min(max(n, 1), 1<<31))
}

// counterKey is the key of a rule's counter: the request's descriptor
// values joined by '|', or, when that is not a valid Latchkey key (1-256
// printable characters without spaces), '~' and a SHA-256 of them.
func counterKey(values []string) string {
	k := strings.Join(values, "|")
	if ratelimit.ValidateRateLimitKey("key", k) == nil && !strings.HasPrefix(k, "~") {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "~" + hex.EncodeToString(sum[:16])
}

// limitName is the name of a rule's limit in the domain's policy: a hash
// of the rule's path, so every name is valid and any path has one.
func limitName(r *Rule) string {
	sum := sha256.Sum256([]byte(r.Path))
	return "d" + hex.EncodeToString(sum[:8])
}

// group is the items decided in one decision.
type group struct {
	policy string // a policies-file policy, or "" for the domain's rules
	items  []*item
}

// groups splits the matched items into decisions: the domain's own rules
// by cost (and by slot on a cluster), each policy-file rule alone.
func (s *Server) groups(domain string, items []*item) []group {
	var out []group
	at := map[string]int{}
	for _, it := range items {
		if it.m.rule == nil {
			continue
		}
		if it.m.rule.Policy != "" {
			out = append(out, group{policy: it.m.rule.Policy, items: []*item{it}})
			continue
		}
		g := strconv.FormatInt(it.cost, 10)
		if s.cfg.Cluster {
			g += ":" + strconv.Itoa(store.Slot("{"+DomainPolicyPrefix+domain+":"+it.key+"}"))
		}
		i, ok := at[g]
		if !ok || len(out[i].items) == ratelimit.MaxLimitsPerPolicy {
			at[g], i = len(out), len(out)
			out = append(out, group{})
		}
		out[i].items = append(out[i].items, it)
	}
	return out
}

// decideGroup decides one group and fills in its items' statuses.
func (s *Server) decideGroup(ctx context.Context, domain string, g group) (bool, error) {
	var req ratelimit.Request
	if g.policy != "" {
		pol, err := s.rl.Policy(g.policy)
		if err != nil {
			return false, status.Errorf(codes.FailedPrecondition, "descriptor %s names policy %q: %v", g.items[0].m.rule.Path, g.policy, err)
		}
		req = ratelimit.Request{Using: pol, Key: g.items[0].key, Cost: g.items[0].cost}
	} else {
		pol := ratelimit.Policy{Name: DomainPolicyPrefix + domain, DenyStatus: 429, Fail: ratelimit.FailOpen}
		req = ratelimit.Request{Using: pol, Cost: g.items[0].cost}
		for _, it := range g.items {
			r := it.m.rule
			if it.cost > r.Limit.Limit && (r.Limit.Burst == 0 || it.cost > r.Limit.Burst) {
				// More than the limit could ever allow: over, nothing counted.
				it.st = overStatus(it)
				return false, nil
			}
			l := r.Limit
			if it.left > 0 && l.Calendar == nil {
				l.Window = it.left
			}
			// Every limit takes its key from the same source, so each key's
			// hash tag is the policy and the key: the same Redis key whatever
			// other descriptors come with it.
			req.Using.Limits = append(req.Using.Limits, ratelimit.NamedLimit{Name: limitName(r), Limit: l, Key: "descriptor", Shadow: r.Shadow})
			req.Keys = append(req.Keys, it.key)
		}
	}
	d, err := s.rl.Check(ctx, req)
	var ve *store.ValidationError
	switch {
	case errors.As(err, &ve):
		return false, status.Error(codes.InvalidArgument, ve.Detail)
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return false, status.Error(codes.Unavailable, "the rate-limit store is unavailable")
	case err != nil:
		return false, status.FromContextError(err).Err()
	}
	lds := d.Limits
	if lds == nil { // a single-limit policy
		lds = []ratelimit.LimitDecision{{Allowed: d.Allowed || d.WouldDeny, Limit: d.Limit, Window: d.Window,
			Remaining: d.Remaining, ResetAfter: d.ResetAfter}}
	}
	for i, it := range g.items {
		ld := lds[i]
		it.st = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK,
			CurrentLimit:       currentLimit(it.m.rule, ld.Limit, ld.Window),
			LimitRemaining:     uint32(min(max(ld.Remaining, 0), 1<<32-1)),
			DurationUntilReset: resetIn(ld.ResetAfter),
		}
		if !ld.Allowed && !it.m.rule.Shadow { // shadow_mode: OK, never over
			it.st.Code = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	return d.Allowed, nil
}

// resetIn is a duration_until_reset in whole seconds, rounded up as
// envoyproxy/ratelimit's divider - now%divider of whole seconds is.
func resetIn(d time.Duration) *durationpb.Duration {
	return durationpb.New((d + time.Second - 1).Truncate(time.Second))
}

// overStatus is the status of a descriptor whose cost is above its limit.
func overStatus(it *item) *pb.RateLimitResponse_DescriptorStatus {
	r, left := it.m.rule, it.left
	if left == 0 {
		left = r.Limit.Window
	}
	return &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OVER_LIMIT,
		CurrentLimit: currentLimit(r, r.Limit.Limit, r.Limit.Window), DurationUntilReset: resetIn(left)}
}

// currentLimit is the status's current_limit: the rule's envoy unit (a
// calendar window's period), or the unit whose length the window is
// (UNKNOWN for another window).
func currentLimit(r *Rule, limit int64, window time.Duration) *pb.RateLimitResponse_RateLimit {
	cl := &pb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: uint32(min(limit, 1<<32-1))}
	if r.Unit != "" {
		window = unitWindows[r.Unit]
	} else if c := r.Limit.Calendar; c != nil {
		window = unitWindows[c.Period] // a calendar period is the unit of its name
	}
	for name, w := range unitWindows {
		if w == window {
			cl.Unit = pb.RateLimitResponse_RateLimit_Unit(pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(name)])
		}
	}
	return cl
}

// limitHeaders are the headers envoyproxy/ratelimit adds with
// LIMIT_RESPONSE_HEADERS_ENABLED, from the descriptor with the least
// remaining, as src/service/ratelimit.go rateLimitLimitHeader,
// rateLimitRemainingHeader and rateLimitResetHeader write them: the
// requests per unit alone (no quota policy), the remaining count, and the
// seconds until the window's reset (CalculateReset, the epoch-aligned
// divider - now%divider, which is duration_until_reset here).
func limitHeaders(it *item) []*corev3.HeaderValue {
	st := it.st
	return []*corev3.HeaderValue{
		{Key: "x-ratelimit-limit", Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: "x-ratelimit-remaining", Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: "x-ratelimit-reset", Value: strconv.FormatInt(st.DurationUntilReset.GetSeconds(), 10)},
	}
}
