package locks_test

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// badNames are lock names every operation must refuse before touching Redis.
var badNames = []struct{ desc, name string }{
	{"empty", ""},
	{"open brace (a Redis Cluster hash tag)", "a{b"},
	{"close brace", "a}b"},
	{"space", "a b"},
	{"129 characters", strings.Repeat("a", 129)},
	{"leading dot", ".hidden"},
	{"leading dash", "-x"},
	{"slash", "a/b"},
	{"non-ASCII letter", "schlüssel"},
	{"newline", "a\nb"},
}

// goodNames are names at the edges of what is allowed.
var goodNames = []struct{ desc, name string }{
	{"one character", "a"},
	{"128 characters", strings.Repeat("a", 128)},
	{"every allowed character", "A9._:-zZ"},
	{"leading digit", "0job"},
}

// badTokens are client tokens every operation must refuse.
var badTokens = []struct{ desc, token string }{
	{"21 characters", strings.Repeat("t", 21)},
	{"129 characters", strings.Repeat("t", 129)},
	{"standard base64 plus", strings.Repeat("t", 21) + "+"},
	{"standard base64 slash", strings.Repeat("t", 21) + "/"},
	{"padding", strings.Repeat("t", 21) + "="},
	{"space", strings.Repeat("t", 11) + " " + strings.Repeat("t", 11)},
}

// wantValidation fails t unless err is a *store.ValidationError for field
// and rule that also wraps ErrInvalid.
func wantValidation(t *testing.T, err error, field, rule string) {
	t.Helper()
	var ve *store.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v, want a *store.ValidationError", err)
	}
	if ve.Field != field || ve.Rule != rule {
		t.Errorf("ValidationError{Field: %q, Rule: %q}, want {Field: %q, Rule: %q}", ve.Field, ve.Rule, field, rule)
	}
	if ve.Detail == "" {
		t.Error("ValidationError.Detail is empty, want a sentence")
	}
	if !errors.Is(err, store.ErrInvalid) {
		t.Error("error does not wrap ErrInvalid")
	}
}

func TestValidateName(t *testing.T) {
	for _, tt := range badNames {
		t.Run("bad/"+tt.desc, func(t *testing.T) {
			wantValidation(t, locks.ValidateName(tt.name), "name", "format")
		})
	}
	for _, tt := range goodNames {
		t.Run("good/"+tt.desc, func(t *testing.T) {
			if err := locks.ValidateName(tt.name); err != nil {
				t.Fatalf("ValidateName(%q) = %v, want nil", tt.name, err)
			}
		})
	}
}

func TestValidateToken(t *testing.T) {
	for _, tt := range badTokens {
		t.Run("bad/"+tt.desc, func(t *testing.T) {
			wantValidation(t, locks.ValidateToken(tt.token), "Lock-Token", "format")
		})
	}
	for _, tok := range []string{strings.Repeat("t", 22), strings.Repeat("t", 128), "AZaz09-_AZaz09-_AZaz09"} {
		if err := locks.ValidateToken(tok); err != nil {
			t.Errorf("ValidateToken(%q) = %v, want nil", tok, err)
		}
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := locks.NewToken()
		if len(tok) != 22 {
			t.Fatalf("NewToken() = %q, %d characters, want 22", tok, len(tok))
		}
		if err := locks.ValidateToken(tok); err != nil {
			t.Fatalf("ValidateToken(NewToken()) = %v", err)
		}
		if seen[tok] {
			t.Fatalf("NewToken() repeated %q", tok)
		}
		seen[tok] = true
	}
}

// TestKeysShareTheLocksHashTag: every key a lock uses carries the configured
// prefix and the lock's {name} hash tag, so one script's keys stay on one
// Redis Cluster slot and two lock names never share a key.
func TestKeysShareTheLocksHashTag(t *testing.T) {
	svc, m := newTestService(t, locks.Config{}, store.Config{KeyPrefix: "test:"})
	for _, name := range []string{"orders", "jobs:nightly"} {
		l := mustAcquire(t, svc, name, locks.AcquireRequest{})
		mustAcquire(t, svc, name, locks.AcquireRequest{Token: l.Token})
	}
	keys := m.Keys()
	if len(keys) < 4 {
		t.Fatalf("keys = %q, want at least a lock and a fence counter per name", keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "test:") {
			t.Errorf("key %q lacks the configured prefix test:", k)
		}
		if strings.Contains(k, "{orders}") == strings.Contains(k, "{jobs:nightly}") {
			t.Errorf("key %q carries not exactly one lock's hash tag", k)
		}
	}
}

// The validators check bytes in loops for speed; each must accept exactly
// the strings its documented pattern does.
func TestValidatorsAgreeWithTheirPatterns(t *testing.T) {
	cases := []struct {
		name    string
		pattern *regexp.Regexp
		check   func(string) error
	}{
		{"lock name", regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`), locks.ValidateName},
		{"token", regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`), locks.ValidateToken},
		{"policy name", regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`), ratelimit.ValidatePolicyName},
		{"rate-limit key", regexp.MustCompile(`^[!-z|~]{1,256}$`), func(s string) error { return ratelimit.ValidateRateLimitKey("key", s) }},
	}
	inputs := []string{"", "a", "A", "0", ".a", "-a", "_a", ":a", "a.b", "a:b", "a_b", "a-b", "a b", "a{b", "a}b", "{", "}",
		"a|b", "a~b", "a\x7f", "é", "a\x00", strings.Repeat("a", 21), strings.Repeat("a", 22), strings.Repeat("a", 64),
		strings.Repeat("a", 65), strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("a", 256), strings.Repeat("a", 257)}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := make([]byte, rnd.IntN(30)+1)
		for i := range b {
			b[i] = byte(rnd.IntN(128))
		}
		inputs = append(inputs, string(b))
	}
	for _, tc := range cases {
		for _, in := range inputs {
			if want, got := tc.pattern.MatchString(in), tc.check(in) == nil; got != want {
				t.Errorf("%s %q: accepted = %v, want %v", tc.name, in, got, want)
			}
		}
	}
}
