package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/latchkey/latchkey/internal/yamlcheck"
	"github.com/latchkey/latchkey/service/store"
)

// Algorithm names a rate-limit algorithm.
type Algorithm string

// The rate-limit algorithms. Each is one Lua script touching one key.
const (
	// FixedWindow counts requests in a window that starts with the first
	// request (INCR, then EXPIRE on the first hit).
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindow weighs the previous fixed window's count by how much of
	// it still overlaps the sliding window (two-counter approximation).
	SlidingWindow Algorithm = "sliding_window"
	// TokenBucket refills Limit tokens per Window up to Burst (GCRA).
	TokenBucket Algorithm = "token_bucket"
)

// Algorithms lists the valid algorithms.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket}

// FailMode says what a policy answers when Redis cannot be reached in time.
type FailMode string

const (
	// FailOpen allows the request, marked as degraded. The default.
	FailOpen FailMode = "open"
	// FailClosed refuses to decide: the caller gets ErrUnavailable (503).
	FailClosed FailMode = "closed"
)

// Limit is how much a key may do: Limit cost units per Window. Burst is the
// token bucket's capacity (default Limit); other algorithms ignore it.
type Limit struct {
	Algorithm Algorithm
	Limit     int64
	Window    time.Duration
	Burst     int64
	// Lease, when above 0, lets each instance take Lease units at a time
	// from the limit's counter and answer from them without Redis until they
	// run out or the window ends: never more than Limit per window across
	// all instances, at most (instances - 1) × Lease units denied early.
	// Fixed windows only. Policies from the policy file only.
	Lease int64 `json:",omitempty"`
	// Calendar, when set, makes a fixed window the calendar period (day,
	// week, month, year) in a time zone that holds the Redis clock's now;
	// Window is then zero. Policies (and envoy rules) only.
	Calendar *Calendar `json:",omitempty"`
}

// capacity is the largest cost a single request may have.
func (l Limit) capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Policy is a named limit with how the HTTP layer finds its key and answers.
type Policy struct {
	Name string
	Limit
	// Key is where the gate takes the client's key from: "ip" (the client
	// address, see the trusted-proxy settings) or "header:NAME".
	Key string
	// DenyStatus is the gate's status for a denied request: 429 (default),
	// 403 (for nginx auth_request) or 401.
	DenyStatus int
	// Fail is what the policy answers when Redis is down. Default FailOpen.
	Fail FailMode
	// Shadow decides and counts as usual but always allows: a request the
	// policy would have denied is allowed with Decision.WouldDeny set, and
	// consumes nothing, as a denial would not have.
	Shadow bool
	// Cost, when its Header is set, takes a request's cost from a header
	// (see HeaderCost), like envoy's hits_addend.
	Cost CostSource
	// Limits, when set, are the policy's several limits (the policy file's
	// "limits:" form): a request is allowed only if every one allows it, and
	// a denied request consumes nothing from any of them. The embedded Limit
	// and Key are then unused (zero). Nil for a single-limit policy.
	Limits []NamedLimit `json:",omitempty"`
}

// NamedLimit is one limit of a multi-limit policy.
type NamedLimit struct {
	// Name names the limit in headers, keys and metrics: 1-64 characters
	// of A-Z a-z 0-9 . _ -, unique within the policy.
	Name string
	Limit
	// Key is where the limit's key comes from: "ip", "header:NAME",
	// "const" (one counter for every request) or "path" (the gate path's
	// remainder after /v1/ratelimit/gate/{policy}/).
	Key string
	// Shadow decides and counts the limit as usual but never lets it deny:
	// a request only it denies is allowed, marked WouldDeny, and not counted
	// by it (as a denial would not be); the other limits count it.
	Shadow bool `json:",omitempty"`
}

// The key sources of a limit that are not a header.
const (
	KeyIP    = "ip"
	KeyConst = "const"
	KeyPath  = "path"
)

// ConstKey is the key of every request under a "const" limit.
const ConstKey = "const"

// MaxLimitsPerPolicy bounds the limits of one policy: each is a key of
// the decision's one script call.
const MaxLimitsPerPolicy = 8

// KeyHeader returns the header a "header:NAME" limit takes its key from,
// or "" for another source.
func (l NamedLimit) KeyHeader() string { return keyHeader(l.Key) }

// keyHeader is the header NAME of a "header:NAME" key source, "" for
// another source.
func keyHeader(key string) string {
	h, ok := strings.CutPrefix(key, "header:")
	if !ok {
		return ""
	}
	return h
}

// Multi reports whether p is a multi-limit policy (the "limits:" form).
func (p Policy) Multi() bool { return len(p.Limits) > 0 }

// maxCost is the largest cost a request under p may have: the smallest
// capacity of its limits, as the cost applies to every one.
func (p Policy) maxCost() int64 {
	if !p.Multi() {
		return p.capacity()
	}
	c := p.Limits[0].capacity()
	for _, l := range p.Limits[1:] {
		c = min(c, l.capacity())
	}
	return c
}

// KeyHeader returns the header a "header:NAME" policy takes its key from,
// or "" for an "ip" policy.
func (p Policy) KeyHeader() string { return keyHeader(p.Key) }

// InlinePolicyName is the policy name reported for inline limits.
const InlinePolicyName = "inline"

// DefaultPolicyName is the name of the per-IP policy configured from the
// environment.
const DefaultPolicyName = "default"

var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")

// validateLimit checks a limit against the configured bounds; field names
// are prefixed with prefix ("" for a request, "policies.NAME." for a file).
func (c Config) validateLimit(prefix string, l Limit) error {
	switch l.Algorithm {
	case FixedWindow, SlidingWindow, TokenBucket:
	default:
		return invalid(prefix+"algorithm", "oneof", "%salgorithm must be one of fixed_window, sliding_window, token_bucket, got %q", prefix, l.Algorithm)
	}
	if l.Limit < 1 {
		return invalid(prefix+"limit", "min", "%slimit must be at least 1, got %d", prefix, l.Limit)
	}
	if l.Limit > c.MaxLimit {
		return invalid(prefix+"limit", "max", "%slimit must be at most %d, got %d", prefix, c.MaxLimit, l.Limit)
	}
	if l.Calendar != nil {
		return l.Calendar.validate(prefix, l)
	}
	if l.Window < c.MinWindow {
		return invalid(prefix+"window", "min", "%swindow must be at least %s, got %s", prefix, c.MinWindow, l.Window)
	}
	if l.Window > c.MaxWindow {
		return invalid(prefix+"window", "max", "%swindow must be at most %s, got %s", prefix, c.MaxWindow, l.Window)
	}
	if l.Burst < 0 || l.Burst > c.MaxLimit {
		return invalid(prefix+"burst", "range", "%sburst must be between 1 and %d, got %d", prefix, c.MaxLimit, l.Burst)
	}
	if l.Burst > 0 && l.Algorithm != TokenBucket {
		return invalid(prefix+"burst", "excluded", "%sburst applies to the token_bucket algorithm only", prefix)
	}
	if l.Lease < 0 || l.Lease > l.Limit {
		return invalid(prefix+"lease", "range", "%slease must be between 1 and the limit (%d), got %d", prefix, l.Limit, l.Lease)
	}
	if l.Lease > 0 && l.Algorithm != FixedWindow {
		return invalid(prefix+"lease", "excluded", "%slease applies to the fixed_window algorithm only", prefix)
	}
	if l.Algorithm == TokenBucket {
		return validateRefill(prefix, l, maxRefill, " (10 years)")
	}
	return nil
}

// validateInline checks an inline limit, beyond validateLimit: no
// calendar (a policy's only, as a lease is), and a token
// bucket must refill within MaxWindow, as a window must end within it. An
// inline limit's counter is kept for its window (a sliding window's for
// two) or its refill time, so no request makes a counter that outlives
// 2 × MaxWindow, not the 10 years a policy's bucket may take to refill.
func (c Config) validateInline(l Limit) error {
	if l.Calendar != nil {
		return invalid("calendar", "excluded", "calendar is for the policies of the policy file only, not inline limits")
	}
	if l.Algorithm != TokenBucket {
		return nil
	}
	return validateRefill("", l, c.MaxWindow, " for an inline limit")
}

// maxRefill bounds a token bucket's window and the time an empty bucket
// takes to refill (window × burst / limit). The script's exact arithmetic
// needs the bound, and it keeps every reset and retry time in a
// time.Duration (a few hundred years).
const maxRefill = 87600 * time.Hour // 10 years of 365 days

// maxBucketLimit bounds a token bucket's limit for the script's exact
// arithmetic (2^48); the default MaxLimit is far below.
const maxBucketLimit = 1 << 48

// validateRefill checks a token bucket against maxBucketLimit, and its
// window and refill time against most (which bound says names in errors).
func validateRefill(prefix string, l Limit, most time.Duration, which string) error {
	if l.Limit >= maxBucketLimit {
		return invalid(prefix+"limit", "max", "%slimit of a token_bucket must be below %d, got %d", prefix, int64(maxBucketLimit), l.Limit)
	}
	if l.Window > most {
		return invalid(prefix+"window", "max", "%swindow of a token_bucket must be at most %s%s, got %s", prefix, most, which, l.Window)
	}
	if l.Burst <= l.Limit {
		return nil // refills within the window
	}
	// window × burst <= maxRefill × limit in milliseconds, as the script
	// sees the window; 128-bit products, as they overflow int64.
	w := uint64(l.Window.Milliseconds())
	hi, lo := bits.Mul64(w, uint64(l.Burst))
	maxHi, maxLo := bits.Mul64(uint64(most.Milliseconds()), uint64(l.Limit))
	if hi < maxHi || hi == maxHi && lo <= maxLo {
		return nil
	}
	refill := float64(w) * float64(l.Burst) / float64(l.Limit) // milliseconds
	got := fmt.Sprintf("about %.3g years", refill/float64((365*24*time.Hour).Milliseconds()))
	if refill < float64(math.MaxInt64/int64(time.Millisecond)) {
		got = time.Duration(refill * float64(time.Millisecond)).Round(time.Microsecond).String()
	}
	return invalid(prefix+"burst", "max", "%sburst × window / limit (the time an empty bucket takes to refill) must be at most %s%s, got %s",
		prefix, most, which, got)
}

// validatePolicy checks p, with windows up to the longer of MaxWindow and
// LongestWindow: a policy's counters are as many as its clients, whereas
// anyone may make an inline limit's, which MaxWindow bounds alone.
func (c Config) validatePolicy(p Policy) error {
	if !store.Matches(p.Name, 1, 64, store.IsAlnum, isPolicyNameByte) {
		return fmt.Errorf("policy %q: names are 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", p.Name)
	}
	if p.Name == InlinePolicyName {
		return fmt.Errorf("policy %q: the name is reserved for inline limits", p.Name)
	}
	c.MaxWindow = max(c.MaxWindow, LongestWindow)
	if p.Multi() {
		if err := c.validateLimits(p); err != nil {
			return fmt.Errorf("policy %q: %w", p.Name, err)
		}
	} else {
		if err := c.validateLimit("", p.Limit); err != nil {
			var ve *store.ValidationError
			errors.As(err, &ve)
			return fmt.Errorf("policy %q: %s", p.Name, ve.Detail)
		}
		if p.Key != KeyIP && !headerNameRE.MatchString(p.KeyHeader()) {
			return fmt.Errorf("policy %q: key must be \"ip\" or \"header:NAME\", got %q", p.Name, p.Key)
		}
	}
	if p.DenyStatus != 429 && p.DenyStatus != 403 && p.DenyStatus != 401 {
		return fmt.Errorf("policy %q: deny_status must be 401, 403 or 429, got %d", p.Name, p.DenyStatus)
	}
	if p.Fail != FailOpen && p.Fail != FailClosed {
		return fmt.Errorf("policy %q: fail must be \"open\" or \"closed\", got %q", p.Name, p.Fail)
	}
	if err := p.validateCost(); err != nil {
		return fmt.Errorf("policy %q: %w", p.Name, err)
	}
	return nil
}

// validateLimits checks the limits of a multi-limit policy.
func (c Config) validateLimits(p Policy) error {
	if p.Limit != (Limit{}) || p.Key != "" {
		return errors.New("give either limits or a single limit (limit, window, algorithm, burst, key), not both")
	}
	if len(p.Limits) > MaxLimitsPerPolicy {
		return fmt.Errorf("limits: at most %d limits per policy, got %d", MaxLimitsPerPolicy, len(p.Limits))
	}
	seen := make(map[string]bool, len(p.Limits))
	for i, l := range p.Limits {
		if !store.Matches(l.Name, 1, 64, store.IsAlnum, isPolicyNameByte) {
			return fmt.Errorf("limits[%d]: name must be 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit, got %q", i, l.Name)
		}
		if seen[l.Name] {
			return fmt.Errorf("limits[%d]: name %q is given twice", i, l.Name)
		}
		seen[l.Name] = true
		if err := c.validateLimit("", l.Limit); err != nil {
			var ve *store.ValidationError
			errors.As(err, &ve)
			return fmt.Errorf("limit %q: %s", l.Name, ve.Detail)
		}
		switch l.Key {
		case KeyIP, KeyConst, KeyPath:
		default:
			if !headerNameRE.MatchString(l.KeyHeader()) {
				return fmt.Errorf("limit %q: key must be \"ip\", \"header:NAME\", \"const\" or \"path\", got %q", l.Name, l.Key)
			}
		}
	}
	return nil
}

// policyFile is the on-disk shape of a policy file (YAML or JSON); an
// expect tag says in words what its field takes, for the file's errors.
type policyFile struct {
	Policies map[string]policyEntry `json:"policies" yaml:"policies" expect:"a map of policy names to policies"`
}

type policyEntry struct {
	limitFields `yaml:",inline"`
	DenyStatus  int          `json:"deny_status" yaml:"deny_status"`
	Fail        string       `json:"fail" yaml:"fail"`
	Cost        *costEntry   `json:"cost" yaml:"cost"`
	Limits      []limitEntry `json:"limits" yaml:"limits" expect:"a list of limits"`
}

// limitEntry is the on-disk shape of one limit of a "limits:" list.
type limitEntry struct {
	Name        string `json:"name" yaml:"name"`
	limitFields `yaml:",inline"`
}

// limitFields are the fields of a single-limit policy and of each limit of
// a "limits:" list.
type limitFields struct {
	Key       string `json:"key" yaml:"key"`
	Limit     int64  `json:"limit" yaml:"limit"`
	Window    string `json:"window" yaml:"window"`
	Algorithm string `json:"algorithm" yaml:"algorithm"`
	Burst     int64  `json:"burst" yaml:"burst"`
	Lease     int64  `json:"lease" yaml:"lease"`
	Shadow    bool   `json:"shadow" yaml:"shadow"`
	Calendar  string `json:"calendar" yaml:"calendar" expect:"day, week, month or year"`
	Timezone  string `json:"timezone" yaml:"timezone" expect:"an IANA time zone name such as Europe/Berlin"`
	WeekStart string `json:"week_start" yaml:"week_start" expect:"a weekday such as monday"`
}

// limit returns the Limit the fields give, its window parsed: a calendar
// window when calendar is set, which then takes no window.
func (f limitFields) limit() (Limit, error) {
	l := Limit{Algorithm: Algorithm(f.Algorithm), Limit: f.Limit, Burst: f.Burst, Lease: f.Lease}
	cal, err := ParseCalendar(f.Calendar, f.Timezone, f.WeekStart)
	if err != nil {
		return l, err
	}
	if cal != nil && f.Window == "" {
		l.Calendar = cal
		return l, nil
	}
	l.Calendar = cal
	l.Window, err = parseWindow(f.Window)
	return l, err
}

// ParsePolicies parses named policies from the contents of a YAML or JSON
// policy file, sorted by name. The file holds a "policies" map from name to
// {limit, window, algorithm, burst, lease, key, deny_status, fail, shadow,
// cost}, or {limits, deny_status, fail, shadow, cost} where each limit is
// {name, key, limit, window, algorithm, burst, lease, shadow};
// algorithm defaults to fixed_window, key to ip, deny_status to 429, fail to
// open, shadow to false; cost is "header:NAME" or {header, max, default}.
// Unknown fields, a field given twice and a value of the wrong kind are
// errors naming the line and the field by its path (policies.api.limit),
// with what it takes in words, in YAML as in JSON; other errors name the
// policy and field at fault. The policies are checked in full by
// Config.Validate.
func ParsePolicies(b []byte, isJSON bool) ([]Policy, error) {
	var f policyFile
	if isJSON {
		if err := unmarshalJSON(b, &f); err != nil {
			return nil, err
		}
	} else if err := yamlcheck.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	if len(f.Policies) == 0 {
		return nil, errors.New("no policies: the file must hold a \"policies\" map with at least one entry")
	}
	out := make([]Policy, 0, len(f.Policies))
	for name, e := range f.Policies {
		p := Policy{Name: name, Key: e.Key, DenyStatus: e.DenyStatus, Fail: FailMode(e.Fail), Shadow: e.Shadow}
		if e.Cost != nil {
			p.Cost = CostSource(*e.Cost)
		}
		if e.Limits == nil {
			l, err := e.limit()
			if err != nil {
				return nil, fmt.Errorf("policy %q: %w", name, err)
			}
			p.Limit = l
			out = append(out, p.withDefaults())
			continue
		}
		if len(e.Limits) == 0 {
			return nil, fmt.Errorf("policy %q: limits must list at least one limit", name)
		}
		if e.limitFields != (limitFields{Key: e.Key, Shadow: e.Shadow}) || e.Key != "" {
			return nil, fmt.Errorf("policy %q: give either limits or a single limit (limit, window, algorithm, burst, lease, key), not both", name)
		}
		for i, le := range e.Limits {
			l, err := le.limit()
			if err != nil {
				return nil, fmt.Errorf("policy %q: limits[%d] (%s): %w", name, i, le.Name, err)
			}
			p.Limits = append(p.Limits, NamedLimit{Name: le.Name, Key: le.Key, Shadow: le.Shadow, Limit: l})
		}
		out = append(out, p.withDefaults())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseWindow reads a policy file's window.
func parseWindow(w string) (time.Duration, error) {
	if w == "" {
		return 0, errors.New("window is required (a duration such as 10s or 1m)")
	}
	d, err := time.ParseDuration(w)
	if err != nil {
		return 0, fmt.Errorf("window %q is not a duration such as 10s or 1m", w)
	}
	return d, nil
}

// withDefaults fills in the optional fields of a policy.
func (p Policy) withDefaults() Policy {
	if p.Multi() {
		ls := make([]NamedLimit, len(p.Limits))
		for i, l := range p.Limits {
			if l.Algorithm == "" {
				l.Algorithm = FixedWindow
			}
			if l.Key == "" {
				l.Key = KeyIP
			}
			ls[i] = l
		}
		p.Limits = ls
	} else {
		if p.Algorithm == "" {
			p.Algorithm = FixedWindow
		}
		if p.Key == "" {
			p.Key = KeyIP
		}
	}
	if p.DenyStatus == 0 {
		p.DenyStatus = 429
	}
	if p.Fail == "" {
		p.Fail = FailOpen
	}
	if p.Cost.Header != "" {
		if p.Cost.Default == 0 {
			p.Cost.Default = 1
		}
		if p.Cost.Max == 0 {
			p.Cost.Max = p.maxCost()
		}
	}
	return p
}

// isPolicyNameByte is the class of a policy name's bytes after the first.
func isPolicyNameByte(c byte) bool { return store.IsAlnum(c) || c == '.' || c == '_' || c == '-' }

// isKeyByte is the class of a rate-limit key's bytes: printable ASCII
// without space, '{' and '}' (which would break Redis Cluster hash tags).
func isKeyByte(c byte) bool { return '!' <= c && c <= 'z' || c == '|' || c == '~' }

// ValidateLimit checks l as a policy's limit, with windows up to the
// longer of MaxWindow and LongestWindow. Returns a *ValidationError.
func (s *Service) ValidateLimit(l Limit) error {
	c := s.cfg
	c.MaxWindow = max(c.MaxWindow, LongestWindow)
	return c.validateLimit("", l)
}
