package ratelimit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

func TestParsePoliciesCost(t *testing.T) {
	yaml := `policies:
  tokens:
    limit: 1000
    window: 1m
    cost: {header: X-Tokens, max: 500, default: 2}
  bytes:
    limit: 100
    window: 1m
    cost: header:X-Bytes
    shadow: true
`
	json := `{"policies":{"tokens":{"limit":1000,"window":"1m","cost":{"header":"X-Tokens","max":500,"default":2}},
  "bytes":{"limit":100,"window":"1m","cost":"header:X-Bytes","shadow":true}}}`
	forEachPolicyFile(t, yaml, json, func(t *testing.T, got []ratelimit.Policy) {
		want := []ratelimit.CostSource{{Header: "X-Bytes", Max: 100, Default: 1}, {Header: "X-Tokens", Max: 500, Default: 2}}
		if diff := cmp.Diff(want, []ratelimit.CostSource{got[0].Cost, got[1].Cost}); diff != "" {
			t.Errorf("costs (-want +got):\n%s", diff)
		}
		if !got[0].Shadow || got[1].Shadow {
			t.Errorf("shadow = %v, %v, want true, false", got[0].Shadow, got[1].Shadow)
		}
	})
}

func TestPolicyCostErrors(t *testing.T) {
	for _, tt := range []struct{ name, src, want string }{
		{"unknown field", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: {header: X-C, min: 1}\n", `line 5: unknown field "min" in policies.p.cost: the fields there are header, max, default`},
		{"max not a number", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: {header: X-C, max: many}\n", "line 5: policies.p.cost.max must be a whole number, got a string"},
		{"a list", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: [X-C]\n", `line 5: policies.p.cost: cost must be "header:NAME"`},
		{"bad string", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: X-C\n", `cost must be "header:NAME"`},
		{"max above limit", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: {header: X-C, max: 4}\n", `policy "p": cost: max must be between 1 and the limit's capacity (3`},
		{"default above max", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: {header: X-C, max: 2, default: 3}\n", "default must be between 1 and max (2)"},
		{"bad header", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: {header: 'X C'}\n", "cost: header must be a header name"},
		{"max without header", "policies:\n  p:\n    limit: 3\n    window: 1s\n    cost: {max: 2}\n", "need a header"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := ratelimit.ParsePolicies([]byte(tt.src), false)
			if err == nil {
				err = ratelimit.Config{Policies: ps}.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			wantNoGoType(t, err)
		})
	}
}

func TestHeaderCost(t *testing.T) {
	p := ratelimit.Policy{Name: "tokens", Cost: ratelimit.CostSource{Header: "X-Tokens", Max: 100, Default: 1}}
	for _, tt := range []struct {
		values []string
		want   int64
		err    string
	}{
		{nil, 1, ""},
		{[]string{"1"}, 1, ""},
		{[]string{"100"}, 100, ""},
		{[]string{"101"}, 0, "X-Tokens (the cost of a request under policy tokens) must be at most 100, got 101"},
		{[]string{"0"}, 0, "must be a positive integer, got \"0\""},
		{[]string{"-3"}, 0, "must be a positive integer"},
		{[]string{"+3"}, 0, "must be a positive integer"},
		{[]string{"3.5"}, 0, "must be a positive integer"},
		{[]string{"99999999999999999999"}, 0, "must be a positive integer"},
		{[]string{""}, 0, "must be a positive integer"},
		{[]string{"1", "2"}, 0, "must be sent once, got 2 values"},
		{[]string{strings.Repeat("x", 100)}, 0, `"` + strings.Repeat("x", 64) + `"… (100 characters)`},
	} {
		got, err := p.HeaderCost(tt.values)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("HeaderCost(%q) = %d, %v, want %d", tt.values, got, err, tt.want)
			}
			continue
		}
		var ve *store.ValidationError
		if !errors.As(err, &ve) || ve.Field != "X-Tokens" || !strings.Contains(ve.Detail, tt.err) {
			t.Errorf("HeaderCost(%q) = %v, want a validation error of X-Tokens containing %q", tt.values, err, tt.err)
		}
	}
	if got, err := (ratelimit.Policy{}).HeaderCost([]string{"junk"}); got != 0 || err != nil {
		t.Errorf("without a cost header: %d, %v, want 0 (the request's own cost), nil", got, err)
	}
}

// A cost spends exactly that many units.
func TestHeaderCostSpendsExactly(t *testing.T) {
	p := fixed("tokens", 100, time.Minute)
	p.Cost = ratelimit.CostSource{Header: "X-Tokens"}
	svc, m := newTestService(t, rlConfig(0, p))
	pol, err := svc.Policy("tokens")
	if err != nil {
		t.Fatal(err)
	}
	cost, err := pol.HeaderCost([]string{"40"})
	if err != nil {
		t.Fatal(err)
	}
	d := mustCheck(t, svc, ratelimit.Request{Using: pol, Key: "k", Cost: cost})
	if !d.Allowed || d.Remaining != 60 {
		t.Fatalf("%+v, want allowed with 60 remaining", d)
	}
	if v, _ := m.Get(m.Keys()[0]); v != "40" {
		t.Errorf("counter = %q, want 40", v)
	}
}
