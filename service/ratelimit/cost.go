package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/latchkey/latchkey/service/store"
	"go.yaml.in/yaml/v3"
)

// CostSource says where a policy takes a request's cost from: the value of
// Header, a positive integer of at most Max; Default when the request does
// not send the header. Like envoy's hits_addend, it lets a limit count bytes
// or tokens instead of requests. The zero CostSource costs every request 1.
type CostSource struct {
	// Header names the header that carries the cost; "" turns it off.
	Header string
	// Max is the largest cost the header may give. Default: the limit's
	// capacity (limit, or burst for a token bucket); it may not be larger,
	// as a larger cost could never be allowed.
	Max int64
	// Default is the cost of a request without the header. Default 1.
	Default int64
}

// HeaderCost returns the cost of a request that sent values for the
// policy's cost header (nil when it did not): Cost.Default when there is
// none, else the value, which must be one positive decimal integer of at most
// Cost.Max. Returns a *ValidationError naming the header otherwise, or 0 and
// no error when the policy takes no cost from a header.
func (p Policy) HeaderCost(values []string) (int64, error) {
	c := p.Cost
	if c.Header == "" {
		return 0, nil
	}
	switch len(values) {
	case 0:
		return c.Default, nil
	case 1:
	default:
		return 0, onceError(c.Header, len(values))
	}
	v := values[0]
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || !isDigits(v) {
		return 0, invalid(c.Header, "format", "%s (the cost of a request under policy %s) must be a positive integer, got %s",
			c.Header, p.Name, store.Quote(v))
	}
	if n > c.Max {
		return 0, invalid(c.Header, "max", "%s (the cost of a request under policy %s) must be at most %d, got %d",
			c.Header, p.Name, c.Max, n)
	}
	return n, nil
}

// sourceCost is the cost src sends in p's cost header (see HeaderCost), 0
// when p takes no cost from a header.
func (p Policy) sourceCost(src Source) (int64, error) {
	if p.Cost.Header == "" {
		return 0, nil
	}
	return p.HeaderCost(src.Header(p.Cost.Header))
}

// isDigits reports whether s is ASCII digits only: no sign, no spaces.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// validateCost checks a policy's cost source after withDefaults.
func (p Policy) validateCost() error {
	c := p.Cost
	if c.Header == "" {
		if c.Max != 0 || c.Default != 0 {
			return errors.New("cost: max and default need a header (cost: {header: NAME, max: N})")
		}
		return nil
	}
	if !headerNameRE.MatchString(c.Header) {
		return fmt.Errorf("cost: header must be a header name of 1-64 token characters, got %q", c.Header)
	}
	if capacity := p.maxCost(); c.Max < 1 || c.Max > capacity {
		return fmt.Errorf("cost: max must be between 1 and the limit's capacity (%d; a larger cost could never be allowed), got %d", capacity, c.Max)
	}
	if c.Default < 1 || c.Default > c.Max {
		return fmt.Errorf("cost: default must be between 1 and max (%d), got %d", c.Max, c.Default)
	}
	return nil
}

// costEntry is the on-disk shape of a policy's cost: "header:NAME", or
// {header, max, default}.
type costEntry struct {
	Header  string `json:"header" yaml:"header"`
	Max     int64  `json:"max" yaml:"max"`
	Default int64  `json:"default" yaml:"default"`
}

var errCostShape = errors.New(`cost must be "header:NAME" or {header: NAME, max: N, default: N}`)

func (c *costEntry) fromString(s string) error {
	h, ok := strings.CutPrefix(s, "header:")
	if !ok || h == "" {
		return fmt.Errorf("%w, got %q", errCostShape, s)
	}
	*c = costEntry{Header: h}
	return nil
}

// UnmarshalYAML reads either form. The map's fields have been checked by
// yamlcheck, which puts the line and the field's path before the errors.
func (c *costEntry) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		return c.fromString(s)
	case yaml.MappingNode:
		type plain costEntry
		return n.Decode((*plain)(c))
	}
	return errCostShape
}

// UnmarshalJSONFrom reads either form, its errors those of the policy
// file's decoder, which names the field by its path and line.
func (c *costEntry) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case '"':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		return c.fromString(tok.String())
	case '{':
		type plain costEntry
		return jsonv2.UnmarshalDecode(dec, (*plain)(c))
	}
	if err := dec.SkipValue(); err != nil {
		return err
	}
	return errCostShape
}
