package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The operators' kit in deploy/: the Grafana dashboard and the Prometheus
// alert rules with their unit tests.
const (
	dashboardFile  = "../deploy/grafana/latchkey.json"
	alertsFile     = "../deploy/prometheus/alerts.yml"
	alertTestsFile = "../deploy/prometheus/alerts_test.yml"
)

// metricName finds the Latchkey metrics a PromQL expression reads.
var metricName = regexp.MustCompile(`\blatchkey_[a-z0-9_]+`)

// The alert rules pass promtool's check and their own unit tests, and
// every alert has a test in alerts_test.yml.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		skipOrFail(t, "the alert rules' tests need promtool (Debian package prometheus): "+err.Error())
	}
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", alertTestsFile}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, alertsFile, &rules)
	readYAML(t, alertTestsFile, &tests)
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if !fires[r.Alert] {
				t.Errorf("alert %s has no test in %s that sees it fire", r.Alert, alertTestsFile)
			}
			if len(metricName.FindAllString(r.Expr, -1)) == 0 {
				t.Errorf("alert %s reads no Latchkey metric: %s", r.Alert, r.Expr)
			}
		}
	}
	if n < 6 {
		t.Errorf("%d alert rules, want at least Redis unreachable, renewal failures, fail-open, lost leases and both reloads", n)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// kitQueries are the PromQL expressions of the dashboard (its panels'
// targets and its variables' queries) and of the alert rules.
func kitQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", dashboardFile)
	}
	var out []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		out = append(out, v.Definition)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, alertsFile, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

// Every metric the dashboard and the alert rules query is one the server
// exports: the server binary runs on Redis with a policies file and a keys
// file, serves a little of everything (locks, waits, read/write locks,
// semaphores, rate-limit decisions, one Redis error), and its /metrics must
// name each.
func TestOperatorsKitMetricsExist(t *testing.T) {
	singleNode(t)
	queried := map[string]bool{}
	for _, q := range kitQueries(t) {
		for _, m := range metricName.FindAllString(q, -1) {
			queried[m] = true
		}
	}
	if len(queried) < 20 {
		t.Fatalf("the kit queries %d metrics; the dashboard alone shows more", len(queried))
	}

	rdb, url := newRedis(t)
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte("policies:\n  api:\n    limit: 2\n    window: 1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := uniquePrefix()
	srv := startServerProcess(t, buildServer(t), dir, freePort(t), "LATCHKEY_REDIS_URL="+url, "LATCHKEY_KEY_PREFIX="+prefix,
		"LATCHKEY_RATELIMIT_POLICIES="+policies, "LATCHKEY_API_KEYS="+writeKeysFile(t, tenantsFile("")))
	e := remoteEnv(t, srv.URL)
	a := bearer(secretA)
	do := func(method, path, body string, want int) response {
		t.Helper()
		r := e.do(t, method, path, body, a...)
		wantStatus(t, r, want)
		return r
	}
	lease := decodeAs[leaseJSON](t, do("POST", "/v1/locks/kit", `{"ttl":"1m"}`, 201))
	do("POST", "/v1/locks/kit", `{"ttl":"1m","wait":"50ms"}`, 409)
	e.release(t, "kit", lease.Token, a...)
	do("POST", "/v1/rwlocks/kit", `{"ttl":"1m","mode":"read"}`, 201)
	do("POST", "/v1/semaphores/kit", `{"ttl":"1m","permits":1}`, 201)
	do("POST", "/v1/semaphores/kit", `{"ttl":"1m","permits":1,"wait":"50ms"}`, 409)
	for _, want := range []int{200, 200, 429} { // the second is near the limit
		do("POST", "/v1/ratelimit/check", `{"policy":"api","key":"k"}`, want)
	}
	// One Redis error: the rate-limit key of "broken" made a list, which
	// the script cannot count (WRONGTYPE).
	do("POST", "/v1/ratelimit/check", `{"policy":"api","key":"broken"}`, 200)
	keys, err := rdb.Keys(t.Context(), prefix+"*broken*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the rate-limit key of broken: %v %v", keys, err)
	}
	if err := rdb.Del(t.Context(), keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.LPush(t.Context(), keys[0], "x").Err(); err != nil {
		t.Fatal(err)
	}
	do("POST", "/v1/ratelimit/check", `{"policy":"api","key":"broken"}`, 500)

	exported := map[string]bool{}
	for series := range metrics(t, e) {
		name, _, _ := strings.Cut(series, "{")
		exported[name] = true
	}
	for m := range queried {
		if !exported[m] {
			t.Errorf("the operators' kit queries %s, which the server does not export", m)
		}
	}
}
