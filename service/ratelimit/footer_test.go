package ratelimit_test

import (
	"strings"
	"testing"

	"github.com/latchkey/latchkey/scripts/lua"
)

// The rate-limit scripts share their batch footer (the loop that decides
// each key under pcall and lays the replies out four by four), and Lua
// cannot share code between scripts: the three copies stay the same text.
func TestRateLimitScriptsShareTheirBatchFooter(t *testing.T) {
	footer := func(name, src string) string {
		t.Helper()
		i := strings.Index(src, "\nlocal out = {}\nfor i = 1, #KEYS do\n")
		j := strings.Index(src, "  if not ok then\n")
		if i < 0 || j < i {
			t.Fatalf("%s: no batch footer (local out = {} ... if not ok then)", name)
		}
		return src[j:]
	}
	fixed := footer("ratelimit_fixed_window.lua", lua.RateLimitFixedWindow)
	for name, src := range map[string]string{
		"ratelimit_sliding_window.lua": lua.RateLimitSlidingWindow,
		"ratelimit_token_bucket.lua":   lua.RateLimitTokenBucket,
	} {
		if got := footer(name, src); got != fixed {
			t.Errorf("%s's batch footer differs from ratelimit_fixed_window.lua's:\n%s\nwant:\n%s", name, got, fixed)
		}
	}
}
