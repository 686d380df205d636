package grpcapi

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match is the rule a request's descriptor matched, with the values that
// key its counter.
type match struct {
	rule   *Rule
	values []string // one per entry; a share_threshold wildcard's own text for the values it matched
}

// lookup finds the rule of descriptor d in domain as envoyproxy/ratelimit's
// src/config/config_impl.go GetLimit does: at each level the entry's
// key_value first, then the level's wildcard values (key_prefix*, in file
// order), then the key alone (any value); the rule is the one reached at
// the descriptor's last entry; a deeper request than the tree, or a
// shallower one, matches nothing. Returns false when nothing matches.
func (c *EnvoyConfig) lookup(domain string, d *rlv3.RateLimitDescriptor) (match, bool) {
	n := c.domains[domain]
	if n == nil || len(d.Entries) == 0 {
		return match{}, false
	}
	values := make([]string, 0, len(d.Entries))
	for i, e := range d.Entries {
		final := e.Key + "_" + e.Value
		next, value := n.children[final], e.Value
		if next == nil {
			for _, w := range n.wildcards {
				if strings.HasPrefix(final, strings.TrimSuffix(w, "*")) {
					next = n.children[w]
					if next.share {
						// share_threshold: every value the wildcard matches
						// counts against one limit, at any level of the path
						// (config_impl.go GetLimit shareThresholdPatterns; the
						// cache key holds the pattern with its '*', as
						// base_limiter.go GenerateCacheKeys writes it).
						value = strings.TrimPrefix(w, e.Key+"_")
					}
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.Key]
		}
		if next == nil {
			return match{}, false
		}
		values = append(values, value)
		if i == len(d.Entries)-1 {
			if next.rule == nil {
				return match{}, false
			}
			return match{rule: next.rule, values: values}, true
		}
		n = next
	}
	return match{}, false
}
