package handlers

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// ClientIPConfig says how to find a client's address behind proxies.
type ClientIPConfig struct {
	// TrustedProxies are the networks whose forwarding headers are believed.
	// A request from any other peer is keyed by the peer's own address,
	// whatever headers it sends.
	TrustedProxies []netip.Prefix
	// UseRealIP takes the client from X-Real-IP (when a trusted peer sends
	// one) instead of walking X-Forwarded-For.
	UseRealIP bool
	// IPv6Prefix groups IPv6 clients by this many leading bits, so one host
	// cannot dodge its limit by changing addresses within its network.
	// Default 64; 128 keys every address on its own.
	IPv6Prefix int
}

// ClientIP returns the client address of r: the socket peer, unless the
// peer is a trusted proxy; then X-Real-IP (when UseRealIP is set), else
// X-Forwarded-For walked right to left, skipping trusted hops, up to the
// first untrusted address. IPv4-mapped IPv6 addresses are folded to IPv4.
// Returns an error when the peer address cannot be parsed.
func (c ClientIPConfig) ClientIP(r *http.Request) (netip.Addr, error) {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, errors.New("cannot parse the client address " + strconv.Quote(r.RemoteAddr))
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	if c.UseRealIP {
		if a, ok := parseHop(strings.TrimSpace(r.Header.Get("X-Real-IP"))); ok {
			return a, nil
		}
	}
	// X-Forwarded-For walked right to left across all its lines, without
	// splitting it into a slice: this runs on every gateway request.
	addr := peer
	values := r.Header.Values("X-Forwarded-For")
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		for {
			hop := rest
			j := strings.LastIndexByte(rest, ',')
			if j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			}
			a, ok := parseHop(strings.TrimSpace(hop))
			if !ok {
				// Nothing left of a malformed hop can be trusted: the last
				// proxy that forwarded it is the client as far as we can tell.
				return addr, nil
			}
			addr = a
			if !c.trusted(a) {
				return a, nil
			}
			if j < 0 {
				break
			}
		}
	}
	return addr, nil
}

// Key returns the rate-limit key of a client address: the IPv4 address, or
// the IPv6 network of IPv6Prefix bits (the address itself at 128).
func (c ClientIPConfig) Key(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	bits := c.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = 64
	}
	if bits == 128 {
		return a.String()
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// ClientKey is Key(ClientIP(r)).
func (c ClientIPConfig) ClientKey(r *http.Request) (string, error) {
	a, err := c.ClientIP(r)
	if err != nil {
		return "", err
	}
	return c.Key(a), nil
}

func (c ClientIPConfig) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop parses an address as it appears in RemoteAddr or a forwarding
// header: "ip", "ip:port", "[ipv6]:port", with IPv4-mapped IPv6 folded and
// zones dropped.
func parseHop(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	// Try the form the text has first: parsing a wrong guess costs an error.
	if s[0] == '[' || strings.Count(s, ":") == 1 {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap().WithZone(""), true
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// ParseTrustedProxies parses a comma-separated list of CIDRs or single
// addresses. Returns an error naming the first bad entry.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, errors.New("trusted proxy " + strconv.Quote(f) + " is not a CIDR such as 10.0.0.0/8 or an address")
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
