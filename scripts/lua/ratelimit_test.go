package lua_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/scripts/lua"
)

// TestRateLimitDecisionsMakeNoClosure reads the rate-limit fragments and
// scripts: every function in them is defined once, at the top level of the
// call (a check's write is a function of its state table, lib/check.lua),
// never inside another. A function defined inside a check or a decision is
// a closure and its upvalues made again for every decision of a batch,
// which cost Redis's Lua more than the decision's commands.
func TestRateLimitDecisionsMakeNoClosure(t *testing.T) {
	topLevel := regexp.MustCompile(`^local function [a-z_]+\(`)
	word := regexp.MustCompile(`\bfunction\b`)
	for _, name := range []string{
		"lib/check.lua", "lib/batch.lua", "lib/multi.lua", "lib/fixed_window.lua",
		"lib/sliding_window.lua", "lib/token_bucket.lua", "lib/muldiv.lua",
		"ratelimit_fixed_window.lua", "ratelimit_sliding_window.lua", "ratelimit_token_bucket.lua",
		"ratelimit_multi.lua", "ratelimit_multi_batch.lua",
	} {
		src, err := fs.ReadFile(lua.Sources(), name)
		if err != nil {
			t.Fatal(err)
		}
		batch := 0
		for i, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") || !word.MatchString(line) {
				continue
			}
			switch {
			case topLevel.MatchString(line):
			case strings.HasPrefix(line, "return decide_batch(function("):
				batch++ // the single scripts' decision: one function a call
			default:
				t.Errorf("%s:%d defines a function inside another (a closure a decision): %s", name, i+1, strings.TrimSpace(line))
			}
		}
		if batch > 1 {
			t.Errorf("%s hands decide_batch %d functions, want one", name, batch)
		}
	}
}
