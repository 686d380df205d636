package handlers_test

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
)

func TestClientKey(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	tests := []struct {
		name    string
		cfg     handlers.ClientIPConfig
		peer    string
		xff     []string // one entry per header line
		realIP  string
		wantKey string
	}{
		{"no proxies: the peer", handlers.ClientIPConfig{}, "203.0.113.5:4000", nil, "", "203.0.113.5"},
		{"spoofed XFF from an untrusted peer", handlers.ClientIPConfig{TrustedProxies: trusted}, "203.0.113.5:4000",
			[]string{"198.51.100.1"}, "", "203.0.113.5"},
		{"spoofed X-Real-IP from an untrusted peer", handlers.ClientIPConfig{TrustedProxies: trusted, UseRealIP: true},
			"203.0.113.5:4000", nil, "198.51.100.1", "203.0.113.5"},
		{"trusted peer: last XFF hop", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"203.0.113.9"}, "", "203.0.113.9"},
		{"trusted chain skipped right to left", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"198.51.100.66, 203.0.113.9, 10.9.9.9, 10.0.0.3"}, "", "203.0.113.9"},
		{"several XFF header lines", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"198.51.100.66", "203.0.113.9, 10.0.0.3"}, "", "203.0.113.9"},
		{"client-forged hop left of the real one is ignored", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"10.0.0.99, 203.0.113.9"}, "", "203.0.113.9"},
		{"all hops trusted: the leftmost", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"10.1.1.1, 10.2.2.2"}, "", "10.1.1.1"},
		{"no XFF from a trusted peer: the peer", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			nil, "", "10.0.0.2"},
		{"garbage hop stops the walk", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"203.0.113.9, not-an-ip, 10.0.0.3"}, "", "10.0.0.3"},
		{"hop with a port", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"203.0.113.9:5555"}, "", "203.0.113.9"},
		{"bracketed IPv6 hop with a port", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"[2001:db8:1:2::7]:443"}, "", "2001:db8:1:2::/64"},
		{"X-Real-IP when configured", handlers.ClientIPConfig{TrustedProxies: trusted, UseRealIP: true}, "10.0.0.2:80",
			[]string{"198.51.100.1"}, "203.0.113.4", "203.0.113.4"},
		{"X-Real-IP ignored unless configured", handlers.ClientIPConfig{TrustedProxies: trusted}, "10.0.0.2:80",
			[]string{"198.51.100.1"}, "203.0.113.4", "198.51.100.1"},
		{"bad X-Real-IP falls back to XFF", handlers.ClientIPConfig{TrustedProxies: trusted, UseRealIP: true}, "10.0.0.2:80",
			[]string{"198.51.100.1"}, "junk", "198.51.100.1"},
		{"IPv4-mapped peer folded", handlers.ClientIPConfig{}, "[::ffff:203.0.113.5]:4000", nil, "", "203.0.113.5"},
		{"IPv4-mapped peer matches an IPv4 trusted range", handlers.ClientIPConfig{TrustedProxies: trusted},
			"[::ffff:10.0.0.2]:80", []string{"::ffff:203.0.113.9"}, "", "203.0.113.9"},
		{"IPv6 grouped by /64", handlers.ClientIPConfig{}, "[2001:db8:aa:bb:1:2:3:4]:4000", nil, "", "2001:db8:aa:bb::/64"},
		{"IPv6 grouped by /48", handlers.ClientIPConfig{IPv6Prefix: 48}, "[2001:db8:aa:bb:1:2:3:4]:4000", nil, "", "2001:db8:aa::/48"},
		{"IPv6 per address", handlers.ClientIPConfig{IPv6Prefix: 128}, "[2001:db8:aa:bb:1:2:3:4]:4000", nil, "", "2001:db8:aa:bb:1:2:3:4"},
		{"IPv6 zone dropped", handlers.ClientIPConfig{IPv6Prefix: 128}, "[fe80::1%eth0]:4000", nil, "", "fe80::1"},
		{"trusted IPv6 proxy", handlers.ClientIPConfig{TrustedProxies: trusted}, "[2001:db8:ffff::1]:80",
			[]string{"2001:db8:5:6::1, 2001:db8:ffff::2"}, "", "2001:db8:5:6::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.peer
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if tt.realIP != "" {
				r.Header.Set("X-Real-IP", tt.realIP)
			}
			got, err := tt.cfg.ClientKey(r)
			if err != nil {
				t.Fatalf("ClientKey: %v", err)
			}
			if got != tt.wantKey {
				t.Errorf("ClientKey = %q, want %q", got, tt.wantKey)
			}
		})
	}
}

func TestClientKeyBadPeer(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@"
	if got, err := (handlers.ClientIPConfig{}).ClientKey(r); err == nil {
		t.Errorf("ClientKey = %q, want an error for an unparseable peer", got)
	}
}

func TestParseTrustedProxies(t *testing.T) {
	got, err := handlers.ParseTrustedProxies(" 10.0.0.0/8, 192.168.1.7 ,::ffff:172.16.0.0/108,2001:db8::/32,")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("2001:db8::/32"),
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("ParseTrustedProxies (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0"} {
		if _, err := handlers.ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q) error = nil, want one", bad)
		}
	}
}
