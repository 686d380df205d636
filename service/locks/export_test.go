package locks

import (
	"context"
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
	if k.holders != "" {
		ks = append(ks, k.holders, k.leases)
	}
	return ks
}

// RegistryMember names a keep-alive lease of the primitive tagged kind in
// the registry.
func RegistryMember(tag, token, name string) string { return kind(tag).member(token, name) }

// ParseMember is parseMember, with the kind as its tag.
func ParseMember(m string) (tag, name string, ok bool) {
	k, name, ok := parseMember(m)
	return string(k), name, ok
}
