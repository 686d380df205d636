package grpcapi

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/latchkey/latchkey/internal/yamlcheck"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// Unit names of envoyproxy/ratelimit's configuration and their windows,
// as its src/utils/utilities.go UnitToDivider computes them: week, month
// and year are fixed lengths (7, 30 and 365 days), not calendar periods.
var unitWindows = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

// fileRoot is one file of the configuration: one domain
// (envoyproxy/ratelimit's src/config/config_impl.go YamlRoot).
type fileRoot struct {
	Domain      string           `yaml:"domain" expect:"the domain's name"`
	Descriptors []fileDescriptor `yaml:"descriptors"`
}

// fileDescriptor is envoyproxy/ratelimit's YamlDescriptor, with
// value_to_metric and share_threshold of its later versions.
type fileDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *fileRateLimit   `yaml:"rate_limit"`
	Descriptors    []fileDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

// fileRateLimit is envoyproxy/ratelimit's YamlRateLimit plus Latchkey's
// extensions: algorithm, window, burst, policy, and calendar with timezone
// and week_start.
type fileRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit" expect:"second, minute, hour, day, week, month or year"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []fileReplaces `yaml:"replaces"`
	Algorithm       string         `yaml:"algorithm" expect:"fixed_window, sliding_window or token_bucket"`
	Window          string         `yaml:"window" expect:"a duration such as 90s or 720h"`
	Burst           int64          `yaml:"burst"`
	Policy          string         `yaml:"policy" expect:"the name of a policy of the policies file"`
	Calendar        string         `yaml:"calendar" expect:"day, week, month or year"`
	Timezone        string         `yaml:"timezone" expect:"an IANA time zone name such as Europe/Berlin"`
	WeekStart       string         `yaml:"week_start" expect:"a weekday such as monday"`
}

type fileReplaces struct {
	Name string `yaml:"name"`
}

// Rule is the limit of one descriptor of the configuration.
type Rule struct {
	// Path is the descriptor's place in its domain, as envoyproxy/ratelimit
	// names it: domain.key_value.key (the stat key).
	Path      string
	Unit      string // envoy's unit, "" for a Latchkey window that is none
	Requests  uint32
	Unlimited bool
	Shadow    bool
	Name      string   // what replaces entries name
	Replaces  []string // names of the rules this one replaces
	// Limit is the Latchkey limit the rule decides with.
	Limit ratelimit.Limit
	// Policy, when set, decides the rule under that policy of the policies
	// file, whose counter the HTTP API shares.
	Policy string
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by key_value, or key for a key-only entry
	wildcards []string         // children keys ending in '*', in file order
	rule      *Rule
	// share: every value this wildcard node matches counts as the wildcard's
	// own text (share_threshold), whether or not the node has a rule.
	share bool
}

// EnvoyConfig is a loaded envoy configuration: one tree per domain.
type EnvoyConfig struct {
	domains map[string]*node
	// Files names the files it was read from, sorted.
	Files []string
}

// Domains returns the configuration's domains, sorted.
func (c *EnvoyConfig) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// LoadConfig reads path: one YAML file, or every *.yaml and *.yml file of
// a directory (one domain per file, as envoyproxy/ratelimit loads its
// runtime directory). validate checks each rule's Latchkey limit (windows up
// to a year). Returns an error naming the file and descriptor of the first
// thing envoyproxy/ratelimit would refuse, or Latchkey cannot decide.
func LoadConfig(path string, validate func(ratelimit.Limit) error) (*EnvoyConfig, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if fi.IsDir() {
		files = nil
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(path, n))
			}
		}
	}
	srcs := make(map[string][]byte, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		srcs[filepath.Base(f)] = b
	}
	return ParseConfig(srcs, validate)
}

// ParseConfig parses files (name to content), one domain each.
func ParseConfig(files map[string][]byte, validate func(ratelimit.Limit) error) (*EnvoyConfig, error) {
	c := &EnvoyConfig{domains: map[string]*node{}}
	for name := range files {
		c.Files = append(c.Files, name)
	}
	sort.Strings(c.Files)
	for _, name := range c.Files {
		var root fileRoot
		if err := yamlcheck.Unmarshal(files[name], &root); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		// config_impl.go loadConfig: "config file cannot have empty domain",
		// "duplicate domain '%s' in config file".
		if root.Domain == "" {
			return nil, fmt.Errorf("%s: config file cannot have empty domain", name)
		}
		if _, dup := c.domains[root.Domain]; dup {
			return nil, fmt.Errorf("%s: duplicate domain '%s' in config file", name, root.Domain)
		}
		n := &node{children: map[string]*node{}}
		if err := n.load(root.Domain+".", root.Descriptors, validate); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		c.domains[root.Domain] = n
	}
	return c, nil
}

// load fills n from the file's descriptors under parent (the stat key so
// far), refusing what config_impl.go loadDescriptors refuses.
func (n *node) load(parent string, ds []fileDescriptor, validate func(ratelimit.Limit) error) error {
	for _, d := range ds {
		if d.Key == "" {
			return fmt.Errorf("descriptor under '%s' has empty key", strings.TrimSuffix(parent, "."))
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		path := parent + final
		if _, dup := n.children[final]; dup {
			return fmt.Errorf("duplicate descriptor composite key '%s'", path)
		}
		// config_impl.go loadDescriptors: share_threshold on any descriptor,
		// with or without a rate_limit, needs a wildcard value.
		if d.ShareThreshold && !strings.HasSuffix(final, "*") {
			return fmt.Errorf("share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", final)
		}
		child := &node{children: map[string]*node{}, share: d.ShareThreshold}
		if d.RateLimit != nil {
			r, err := newRule(path, d, validate)
			if err != nil {
				return fmt.Errorf("descriptor '%s': %w", path, err)
			}
			child.rule = r
		}
		if err := child.load(path+".", d.Descriptors, validate); err != nil {
			return err
		}
		n.children[final] = child
		if strings.HasSuffix(final, "*") {
			n.wildcards = append(n.wildcards, final)
		}
	}
	return nil
}

// newRule checks a descriptor's rate_limit as config_impl.go does
// (unknown unit, a unit beside unlimited, empty replaces, replacing
// itself) and builds its Latchkey limit.
func newRule(path string, d fileDescriptor, validate func(ratelimit.Limit) error) (*Rule, error) {
	rl := d.RateLimit
	r := &Rule{Path: path, Unit: strings.ToLower(rl.Unit), Requests: rl.RequestsPerUnit, Unlimited: rl.Unlimited,
		Shadow: d.ShadowMode, Name: rl.Name, Policy: rl.Policy}
	window, validUnit := unitWindows[r.Unit]
	switch {
	case rl.Unlimited && validUnit:
		return nil, fmt.Errorf("should not specify rate limit unit when unlimited")
	case !rl.Unlimited && !validUnit && rl.Window == "" && rl.Policy == "" && rl.Calendar == "":
		return nil, fmt.Errorf("invalid rate limit unit '%s'", rl.Unit)
	}
	for _, rp := range rl.Replaces {
		if rp.Name == "" {
			return nil, fmt.Errorf("should not have an empty replaces entry")
		}
		if rp.Name == rl.Name {
			return nil, fmt.Errorf("replaces should not contain name of same descriptor")
		}
		r.Replaces = append(r.Replaces, rp.Name)
	}
	if rl.Unlimited || rl.Policy != "" {
		if rl.Policy != "" && (rl.Unlimited || rl.Unit != "" || rl.RequestsPerUnit != 0 || rl.Window != "" || rl.Algorithm != "" || rl.Burst != 0 ||
			rl.Calendar != "" || rl.Timezone != "" || rl.WeekStart != "") {
			return nil, fmt.Errorf("policy takes its limit from the policies file: give no unit, requests_per_unit, window, algorithm, burst, calendar or unlimited beside it")
		}
		return r, nil
	}
	// calendar: the unit's period on the calendar of timezone, not
	// envoyproxy/ratelimit's fixed length on the epoch; a unit beside it
	// must name the same period.
	cal, err := ratelimit.ParseCalendar(rl.Calendar, rl.Timezone, rl.WeekStart)
	if err != nil {
		return nil, err
	}
	if cal != nil {
		if r.Unit != "" && r.Unit != cal.Period || rl.Window != "" {
			return nil, fmt.Errorf("calendar %s is the rule's window: give no window, and no unit but %s", cal.Period, cal.Period)
		}
		window = 0
	}
	if rl.Window != "" {
		w, err := time.ParseDuration(rl.Window)
		if err != nil || w <= 0 {
			return nil, fmt.Errorf("window must be a duration such as 90s or 720h, got %q", rl.Window)
		}
		if validUnit && w != window {
			return nil, fmt.Errorf("give unit or window, not both")
		}
		window = w
	}
	alg := ratelimit.Algorithm(rl.Algorithm)
	if alg == "" {
		alg = ratelimit.FixedWindow
	}
	if rl.RequestsPerUnit == 0 {
		// envoyproxy/ratelimit takes 0 and denies every request; Latchkey's
		// limits are at least 1.
		return nil, fmt.Errorf("requests_per_unit must be at least 1 (or unlimited: true)")
	}
	r.Limit = ratelimit.Limit{Algorithm: alg, Limit: int64(rl.RequestsPerUnit), Window: window, Burst: rl.Burst, Calendar: cal}
	if validate != nil {
		if err := validate(r.Limit); err != nil {
			return nil, err
		}
	}
	return r, nil
}
