package ratelimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

// Replacing the set keeps the counters of a policy whose algorithm did not
// change (its key depends on its name, algorithm and the request's key), also
// when other policies come and go, and applies the new limit at once.
func TestSetPoliciesCarriesCountsOver(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := rlConfig(100, fixed("api", 5, time.Minute), fixed("other", 1, time.Minute))
	cfg.Registerer = reg
	svc, _ := newTestService(t, cfg)
	before := svc.ActivePolicies()
	for i := 0; i < 3; i++ {
		mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k"})
	}
	mustCheck(t, svc, ratelimit.Request{Policy: "other", Key: "k"})
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "other", Key: "k"}); d.Allowed {
		t.Fatalf("other: %+v, want denied (and cached)", d)
	}

	// "other" goes, "new" comes, "api" is unchanged.
	set, changed, err := svc.SetPolicies([]ratelimit.Policy{fixed("api", 5, time.Minute), fixed("new", 2, time.Minute)})
	if err != nil || !changed {
		t.Fatalf("SetPolicies = %v, %v", changed, err)
	}
	if set.Version == before.Version || len(set.Version) != 12 || set.Version != svc.ActivePolicies().Version {
		t.Errorf("version %q after %q", set.Version, before.Version)
	}
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k"}); !d.Allowed || d.Remaining != 1 {
		t.Errorf("api after an unrelated change: %+v, want its 4th request (1 remaining)", d)
	}
	if _, err := svc.Check(context.Background(), ratelimit.Request{Policy: "other", Key: "k"}); err == nil {
		t.Error("a removed policy still decides")
	}
	if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_decisions_total", "policy", "other", "result", "allowed"); got != 0 {
		t.Errorf("removed policy's series still exported (%v)", got)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_decisions_total", "policy", "api", "result", "allowed"); got != 4 {
		t.Errorf("api allowed = %v, want 4 (kept over the reload)", got)
	}

	// A higher limit for api applies at once, over the same counter.
	if _, _, err := svc.SetPolicies([]ratelimit.Policy{fixed("api", 10, time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k"}); !d.Allowed || d.Limit != 10 || d.Remaining != 5 {
		t.Errorf("api with limit 10: %+v, want its 5th request allowed with 5 remaining", d)
	}

	// The same set again changes nothing.
	active := svc.ActivePolicies()
	if set, changed, err := svc.SetPolicies([]ratelimit.Policy{fixed("api", 10, time.Minute)}); err != nil || changed || set.LoadedAt != active.LoadedAt {
		t.Errorf("same set: changed %v err %v", changed, err)
	}
}

// A bad set is refused and the active one stays.
func TestSetPoliciesRefusesABadSet(t *testing.T) {
	svc, _ := newTestService(t, rlConfig(0, fixed("api", 5, time.Minute)))
	before := svc.ActivePolicies()
	_, changed, err := svc.SetPolicies([]ratelimit.Policy{fixed("api", 0, time.Minute)})
	if err == nil || changed || !strings.Contains(err.Error(), `policy "api": limit must be at least 1`) {
		t.Fatalf("SetPolicies = %v, %v, want a refusal naming the policy", changed, err)
	}
	if after := svc.ActivePolicies(); after.Version != before.Version {
		t.Errorf("version %q, want %q kept", after.Version, before.Version)
	}
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k"}); d.Limit != 5 {
		t.Errorf("limit %d, want the old set's 5", d.Limit)
	}
}

// Decisions under way while the set flips between two versions each use one
// of them whole: a decision's limit and window are always one set's pair,
// and a policy looked up before a reload is decided as it was looked up.
func TestSetPoliciesIsAtomicUnderLoad(t *testing.T) {
	a := fixed("api", 100000, 10*time.Second)
	b := fixed("api", 200000, 20*time.Second)
	svc, _ := newTestService(t, rlConfig(0, a))
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := a
			if i%2 == 0 {
				p = b
			}
			if _, _, err := svc.SetPolicies([]ratelimit.Policy{p}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				pol, err := svc.Policy("api")
				if err != nil {
					t.Error(err)
					return
				}
				d, err := svc.Check(context.Background(), ratelimit.Request{Using: pol, Key: "k"})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Limit != pol.Limit.Limit || d.Window != pol.Window ||
					!(d.Limit == a.Limit.Limit && d.Window == a.Window || d.Limit == b.Limit.Limit && d.Window == b.Window) {
					t.Errorf("decision limit %d window %s under policy limit %d window %s: a mix", d.Limit, d.Window, pol.Limit.Limit, pol.Window)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flips.Wait()
}

func writePolicies(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The reloader applies a changed file, keeps the old set on a bad one (and
// says so once), and does nothing for an unchanged one unless forced.
func TestReloaderFollowsTheFile(t *testing.T) {
	reg := prometheus.NewRegistry()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writePolicies(t, path, "policies:\n  api:\n    limit: 5\n    window: 1m\n")
	ps := mustParsePolicies(t, path)
	svc, _ := newTestService(t, rlConfig(0, ps...))
	completed := 0
	r, err := ratelimit.NewReloader(svc, ratelimit.ReloaderConfig{Path: path, Read: readFile(path), Registerer: reg,
		Complete: func(ps []ratelimit.Policy) ([]ratelimit.Policy, error) {
			completed++
			return append(ps, fixed("default", 60, time.Minute)), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	reloads := func(result string) float64 {
		return storetest.CounterValue(t, reg, "latchkey_ratelimit_policy_reloads_total", "result", result)
	}

	// The first read applies the file with the default policy added.
	set, changed, err := r.Reload(false)
	if err != nil || !changed || len(set.Policies) != 2 || set.Policies[1].Name != "default" {
		t.Fatalf("first reload: %+v %v %v", set, changed, err)
	}
	// Unchanged: nothing happens (the file is not even parsed again).
	if _, changed, err := r.Reload(false); err != nil || changed || completed != 1 {
		t.Fatalf("unchanged file: changed %v err %v, parsed %d times", changed, err, completed)
	}
	// Changed: applied.
	writePolicies(t, path, "policies:\n  api:\n    limit: 7\n    window: 1m\n    shadow: true\n")
	set, changed, err = r.Reload(false)
	if err != nil || !changed {
		t.Fatalf("changed file: %v %v", changed, err)
	}
	if p, _ := svc.Policy("api"); p.Limit.Limit != 7 || !p.Shadow {
		t.Errorf("api = %+v after the reload", p)
	}
	good := set.Version
	// Bad: refused, old set kept, counted once however often it is polled.
	writePolicies(t, path, "policies:\n  api:\n    limit: 7\n    window: forever\n")
	for range 3 {
		if _, changed, err := r.Reload(false); changed || err != nil && !strings.Contains(err.Error(), `window "forever"`) {
			t.Fatalf("bad file: changed %v err %v", changed, err)
		}
	}
	if v := svc.ActivePolicies().Version; v != good {
		t.Errorf("version %q after a bad file, want %q kept", v, good)
	}
	if reloads("error") != 1 || reloads("ok") != 2 {
		t.Errorf("reloads ok %v error %v, want 2 and 1", reloads("ok"), reloads("error"))
	}
	// A forced reload (SIGHUP) of the bad file says why again.
	if _, _, err := r.Reload(true); err == nil || reloads("error") != 2 {
		t.Errorf("forced reload of a bad file: %v, errors counted %v", err, reloads("error"))
	}
	// A value of the wrong kind is refused the same way, the field named.
	writePolicies(t, path, "policies: [api]\n")
	if _, changed, err := r.Reload(false); changed || err == nil ||
		!strings.Contains(err.Error(), "line 1: policies must be a map of policy names to policies, got a list") ||
		svc.ActivePolicies().Version != good {
		t.Errorf("file of the wrong kind: changed %v err %v", changed, err)
	}
	// A missing file is refused too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Reload(false); err == nil || svc.ActivePolicies().Version != good {
		t.Errorf("missing file: %v", err)
	}
}

// Load, the start-up read, applies the file as a forced Reload does but
// neither logs nor counts: a refusal is only returned, naming the file. A
// poll of the unchanged file afterwards does nothing.
func TestReloaderLoadIsQuiet(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	path := filepath.Join(t.TempDir(), "policies.json")
	writePolicies(t, path, `{"policies":{"api":{"limit":0,"window":"1m"}}}`)
	svc, _ := newTestService(t, rlConfig(0, fixed("default", 60, time.Minute)))
	before := svc.ActivePolicies()
	completed := 0
	r, err := ratelimit.NewReloader(svc, ratelimit.ReloaderConfig{Path: path, Read: readFile(path), Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Complete: func(ps []ratelimit.Policy) ([]ratelimit.Policy, error) {
			completed++
			return append(ps, fixed("default", 60, time.Minute)), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load(); err == nil || !strings.Contains(err.Error(), "policy file "+path+`: policy "api": limit must be at least 1`) {
		t.Fatalf("Load of a bad file = %v, want the file, policy and field named", err)
	}
	if v := svc.ActivePolicies().Version; v != before.Version {
		t.Errorf("version %q after a refused Load, want %q kept", v, before.Version)
	}
	writePolicies(t, path, `{"policies":{"api":{"limit":5,"window":"1m"}}}`) // JSON, by the name
	set, err := r.Load()
	if err != nil || len(set.Policies) != 2 || set.Policies[0].Name != "api" || set.Version != svc.ActivePolicies().Version {
		t.Fatalf("Load = %+v, %v, want api and default active", set, err)
	}
	if _, changed, err := r.Reload(false); err != nil || changed || completed != 2 {
		t.Errorf("poll after Load: changed %v err %v, completed %d times, want the unchanged file left alone", changed, err, completed)
	}
	for _, result := range []string{"ok", "error"} {
		if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_policy_reloads_total", "result", result); got != 0 {
			t.Errorf("reloads %s = %v after Load, want 0", result, got)
		}
	}
	if logs.Len() != 0 {
		t.Errorf("Load logged %q, want nothing", logs.String())
	}
}

// Run reloads on every trigger, changed file or not.
func TestReloaderRunReloadsOnTrigger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writePolicies(t, path, "policies:\n  api:\n    limit: 5\n    window: 1m\n")
	svc, _ := newTestService(t, rlConfig(0, fixed("api", 5, time.Minute)))
	reloaded := make(chan struct{}, 1)
	r, err := ratelimit.NewReloader(svc, ratelimit.ReloaderConfig{Path: path, Read: readFile(path),
		Complete: func(ps []ratelimit.Policy) ([]ratelimit.Policy, error) {
			reloaded <- struct{}{}
			return ps, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	trigger := make(chan os.Signal)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, 0, trigger) }()
	writePolicies(t, path, "policies:\n  api:\n    limit: 9\n    window: 1m\n")
	trigger <- os.Interrupt
	<-reloaded
	trigger <- os.Interrupt // unchanged, read again all the same
	<-reloaded
	cancel()
	<-done
	if p, _ := svc.Policy("api"); p.Limit.Limit != 9 {
		t.Errorf("limit %d, want 9", p.Limit.Limit)
	}
}

// readFile reads path, as the server's reloader does.
func readFile(path string) func() ([]byte, error) {
	return func() ([]byte, error) { return os.ReadFile(path) }
}

// mustParsePolicies reads and parses the YAML policy file at path.
func mustParsePolicies(t *testing.T, path string) []ratelimit.Policy {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ratelimit.ParsePolicies(b, false)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}
