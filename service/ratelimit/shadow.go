package ratelimit

// count counts a decision under pol in its policy's metrics and returns the
// answer: a denial by a shadow policy becomes an allowed answer marked
// WouldDeny. The script consumed nothing for the denial, so the shadow
// answer consumes nothing either, and a shadow policy counts exactly what
// it would count if it were enforced. An allowed answer already marked
// WouldDeny is one a shadow limit of the policy would have denied (see
// NamedLimit.Shadow); it counts as a would-denial too.
func count(ctr *decisionCounters, pol Policy, d Decision) Decision {
	switch {
	case d.Allowed:
		ctr.allowed.Inc()
		if d.WouldDeny {
			ctr.wouldDeny.Inc()
		}
	case pol.Shadow:
		ctr.wouldDeny.Inc()
		ctr.allowed.Inc()
		d.Allowed, d.WouldDeny, d.RetryAfter, d.Cached = true, true, 0, false
	default:
		ctr.denied.Inc()
	}
	return d
}
