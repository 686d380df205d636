package lua_test

import (
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/redis/go-redis/v9"
)

// scripts are the exported scripts by file name.
var scripts = map[string]string{
	"acquire.lua": lua.Source("acquire"), "release.lua": lua.Source("release"), "renew.lua": lua.Source("renew"),
	"inspect.lua": lua.Source("inspect"), "force_release.lua": lua.Source("force_release"), "leave.lua": lua.Source("leave"),
	"keepalive_due.lua":  lua.Source("keepalive_due"),
	"keepalive_mark.lua": lua.Source("keepalive_mark"), "keepalive_claim.lua": lua.Source("keepalive_claim"), "keepalive_settle.lua": lua.Source("keepalive_settle"), "renew_batch.lua": lua.Source("renew_batch"),
	"ratelimit_fixed_window.lua": lua.Source("ratelimit_fixed_window"), "ratelimit_sliding_window.lua": lua.Source("ratelimit_sliding_window"),
	"ratelimit_token_bucket.lua": lua.Source("ratelimit_token_bucket"), "ratelimit_multi.lua": lua.Source("ratelimit_multi"), "ratelimit_multi_batch.lua": lua.Source("ratelimit_multi_batch"),
	"ratelimit_refund.lua": lua.Source("ratelimit_refund"), "ratelimit_reset.lua": lua.Source("ratelimit_reset"),
	"rw_acquire.lua": lua.Source("rw_acquire"), "rw_release.lua": lua.Source("rw_release"), "rw_renew.lua": lua.Source("rw_renew"),
	"rw_inspect.lua": lua.Source("rw_inspect"), "rw_force_release.lua": lua.Source("rw_force_release"), "rw_leave.lua": lua.Source("rw_leave"),
	"rw_renew_batch.lua": lua.Source("rw_renew_batch"),
	"quota_take.lua":     lua.Source("quota_take"), "quota_set.lua": lua.Source("quota_set"), "quota_release.lua": lua.Source("quota_release"),
	"sem_acquire.lua": lua.Source("sem_acquire"), "sem_release.lua": lua.Source("sem_release"), "sem_renew.lua": lua.Source("sem_renew"),
	"sem_inspect.lua": lua.Source("sem_inspect"), "sem_force_release.lua": lua.Source("sem_force_release"),
	"sem_set_permits.lua": lua.Source("sem_set_permits"), "sem_leave.lua": lua.Source("sem_leave"), "sem_renew_batch.lua": lua.Source("sem_renew_batch"),
	"list_secret.lua": lua.Source("list_secret"), "lost_list.lua": lua.Source("lost_list"),
	"el_acquire.lua": lua.Source("el_acquire"), "el_release.lua": lua.Source("el_release"), "el_renew.lua": lua.Source("el_renew"),
	"el_inspect.lua": lua.Source("el_inspect"), "el_force_release.lua": lua.Source("el_force_release"), "el_leave.lua": lua.Source("el_leave"),
	"el_renew_batch.lua": lua.Source("el_renew_batch"), "el_proclaim.lua": lua.Source("el_proclaim"),
}

// TestEveryScriptIsListed: the tests here see every script file.
func TestEveryScriptIsListed(t *testing.T) {
	files, err := fs.Glob(lua.Sources(), "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := scripts[f]; !ok {
			t.Errorf("%s is not in this package's scripts table", f)
		}
	}
}

// TestAssembledScriptsKeepTheirHeaderAndLoad: every script, its fragments
// put in, still opens with its header comment (KEYS, ARGV, reply), keeps
// no include line, and compiles (SCRIPT LOAD).
func TestAssembledScriptsKeepTheirHeaderAndLoad(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	included := 0
	for name, src := range scripts {
		t.Run(name, func(t *testing.T) {
			base := strings.TrimSuffix(name, ".lua")
			if !strings.HasPrefix(src, "-- "+base+": ") {
				t.Errorf("does not open with its header %q", "-- "+base+": ")
			}
			var header strings.Builder
			for line := range strings.Lines(src) {
				if !strings.HasPrefix(line, "--") {
					break
				}
				header.WriteString(line)
			}
			for _, want := range []string{"KEYS[", "Reply"} {
				if !strings.Contains(header.String(), want) {
					t.Errorf("header lacks %q:\n%s", want, header.String())
				}
			}
			if strings.Contains(src, "--#include") {
				t.Errorf("an include line is left in the assembled script")
			}
			if err := rdb.ScriptLoad(t.Context(), src).Err(); err != nil {
				t.Errorf("SCRIPT LOAD: %v", err)
			}
			raw, err := fs.ReadFile(lua.Sources(), name)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != src {
				included++
			}
		})
	}
	if included < 4 {
		t.Errorf("%d scripts include fragments, want the 4 rate-limit scripts at least", included)
	}
}

// TestEveryFragmentIsIncluded: a fragment no script includes is dead code,
// and every include names a fragment that exists.
func TestEveryFragmentIsIncluded(t *testing.T) {
	frags, err := fs.Glob(lua.Sources(), "lib/*.lua")
	if err != nil || len(frags) == 0 {
		t.Fatalf("fragments: %v %v", frags, err)
	}
	re := regexp.MustCompile(`(?m)^--#include (\S+)$`)
	used := map[string]bool{}
	for name := range scripts {
		raw, err := fs.ReadFile(lua.Sources(), name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			used[m[1]] = true
		}
	}
	for _, f := range frags {
		if !used[f] {
			t.Errorf("%s is included by no script", f)
		}
		delete(used, f)
	}
	for f := range used {
		t.Errorf("an include names %s, which is no fragment", f)
	}
	if _, err := lua.Assemble("lib/" + path.Base("missing.lua")); err == nil {
		t.Errorf("Assemble of a missing file: no error")
	}
}

// TestShardedPublishesEveryWakeUpWithSPUBLISH: the Redis Cluster form of
// every script sends each wake-up it publishes with SPUBLISH, and differs
// in nothing else; the scripts that publish nothing are left as they are.
// Every acquire script publishes (a grant's notice).
func TestShardedPublishesEveryWakeUpWithSPUBLISH(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	publishing := 0
	for name, src := range scripts {
		sharded := lua.Sharded(src)
		n := strings.Count(src, "'PUBLISH'")
		if strings.Contains(sharded, "'PUBLISH'") || strings.Count(sharded, "'SPUBLISH'") != n+strings.Count(src, "'SPUBLISH'") {
			t.Errorf("%s: the sharded form still publishes with PUBLISH, or lost one", name)
		}
		if strings.ReplaceAll(sharded, "'SPUBLISH'", "'PUBLISH'") != strings.ReplaceAll(src, "'SPUBLISH'", "'PUBLISH'") {
			t.Errorf("%s: the sharded form differs in more than its PUBLISH calls", name)
		}
		if n > 0 {
			publishing++
			if err := rdb.ScriptLoad(t.Context(), sharded).Err(); err != nil {
				t.Errorf("%s: SCRIPT LOAD of the sharded form: %v", name, err)
			}
		}
	}
	if publishing < 16 {
		t.Errorf("%d scripts publish wake-ups, want the 16 of the three lock primitives", publishing)
	}
	for _, name := range []string{"acquire.lua", "rw_acquire.lua", "sem_acquire.lua"} {
		if !strings.Contains(lua.Sharded(scripts[name]), "redis.call('SPUBLISH', ") {
			t.Errorf("%s: the sharded form publishes no grant's notice with SPUBLISH", name)
		}
	}
}
