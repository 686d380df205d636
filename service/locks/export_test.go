package locks

import (
	"context"
	"time"
)

// LoadScripts loads the scripts of s's store.
func LoadScripts(ctx context.Context, s *Service) error { return s.st.LoadScripts(ctx) }

// KeyPrefix is the key prefix of s's store.
func KeyPrefix(s *Service) string { return s.prefix }

// KeysOfKind names the keys of name of the primitive tagged kind ("" for the
// exclusive lock), in keysOf's order.
func KeysOfKind(prefix, tag, name string) []string {
	k := keysOf(prefix, kind(tag), name)
	ks := []string{k.lock, k.fence, k.channel, k.waiters, k.queue, k.lost}
	if k.leases != "" {
		ks = append(ks, k.leases)
	}
	return ks
}

// RegistryMember names a keep-alive lease of the primitive tagged kind in
// the registry.
func RegistryMember(tag, token, name string) string { return kind(tag).member(token, name) }

// ParseMember is parseMember, with the kind as its tag.
func ParseMember(m string) (tag, name string, ok bool) {
	k, name, _, ok := parseMember(m)
	return string(k), name, ok
}

// ParseTenantMember is parseMember, with the kind as its tag and the tenant.
func ParseTenantMember(m string) (tag, name, tenant string, ok bool) {
	k, name, tenant, ok := parseMember(m)
	return string(k), name, tenant, ok
}

// WatchSnapshot is a watched name's state as the diff of a lease sees it:
// its holders, last fence and the Redis time it was read at.
type WatchSnapshot struct {
	Holders []WatchHolder
	Last    int64
	At      time.Time
}

// LeaseDiff is leaseDiff on snapshots; lost gives the recorded reasons by fence.
func LeaseDiff(prev, next WatchSnapshot, lost map[int64]string) []WatchEvent {
	conv := func(s WatchSnapshot) watchSnapshot { return watchSnapshot{holders: s.Holders, last: s.Last, at: s.At} }
	return leaseDiff(conv(prev), conv(next), func(f int64) string { return lost[f] })
}

// StateID is the id of the state of a snapshot.
func StateID(s WatchSnapshot) string {
	return stateID(watchSnapshot{holders: s.Holders, last: s.Last, at: s.At})
}
