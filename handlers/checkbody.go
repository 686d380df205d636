package handlers

import (
	"net/http"
	"sync"
	"time"
)

// The body of POST /v1/ratelimit/check, read by hand. Programs ask for a
// decision on every request they serve, nearly always with the same few
// members ({"policy":"api","key":"user-1"}); reading those without
// reflection, the validator or a fresh buffer keeps the check close to the
// gate's cost. Only a body the hand-written reader fully understands is
// taken this way; every other body (anything malformed, unknown, repeated,
// escaped, non-ASCII, null, or out of its rules) goes through the generic
// decoder and validator, so every refusal is exactly the one they give.

// checkBodies are buffers for check bodies, returned once decoded: the
// decoded request holds copies of what it keeps.
var checkBodies = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// decodeCheck reads the body of a check, as decodeJSON would. Returns the
// errors of decodeJSON.
func (a *api) decodeCheck(w http.ResponseWriter, r *http.Request) (checkRequest, error) {
	bp := checkBodies.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 4<<10 { // a rare large body does not stay in the pool
			checkBodies.Put(bp)
		}
	}()
	body, err := a.readBody(w, r, (*bp)[:0])
	if err != nil {
		return checkRequest{}, err
	}
	*bp = body[:0]
	var req checkRequest
	if ct := r.Header["Content-Type"]; len(ct) == 1 && ct[0] == "application/json" && parseCheckBody(body, &req) {
		return req, nil
	}
	generic := new(checkRequest)
	err = a.decodeBody(r, body, generic)
	return *generic, err
}

// checkField is a member of the check body, as a bit of the members seen.
type checkField uint8

const (
	fieldPolicy checkField = 1 << iota
	fieldKey
	fieldLimit
	fieldWindow
	fieldAlgorithm
	fieldBurst
	fieldCost
	fieldPeek
)

// checkFields are the check body's member names, as checkRequest's JSON
// tags spell them (TestCheckBodyFastPathMatchesDecoder keeps them so).
var checkFields = [...]struct {
	name  string
	field checkField
}{
	{"policy", fieldPolicy}, {"key", fieldKey}, {"limit", fieldLimit}, {"window", fieldWindow},
	{"algorithm", fieldAlgorithm}, {"burst", fieldBurst}, {"cost", fieldCost}, {"peek", fieldPeek},
}

// parseCheckBody decodes body into req when it is one JSON object whose
// members are checkRequest's, each at most once, with a string of
// printable ASCII without escapes for a string member, an integer of at
// most 18 digits (no fraction or exponent) for a number member, true or
// false for peek, a window that is a positive duration and an algorithm
// the validator accepts, and nothing but whitespace after it. It reports
// false for anything else, leaving req partly set: the caller then decodes
// the body the generic way.
func parseCheckBody(body []byte, req *checkRequest) bool {
	p := checkParser{b: body}
	if !p.consume('{') {
		return false
	}
	var seen checkField
	if p.consume('}') {
		return p.end()
	}
	for {
		name, ok := p.str()
		if !ok || !p.consume(':') {
			return false
		}
		var f checkField
		for _, cf := range checkFields {
			if string(name) == cf.name {
				f = cf.field
				break
			}
		}
		if f == 0 || seen&f != 0 {
			return false
		}
		seen |= f
		if !p.value(f, req) {
			return false
		}
		if p.consume('}') {
			return p.end()
		}
		if !p.consume(',') {
			return false
		}
	}
}

// checkParser reads a check body from b, at i.
type checkParser struct {
	b []byte
	i int
}

// skip passes JSON whitespace.
func (p *checkParser) skip() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// consume passes whitespace and c, reporting whether c came.
func (p *checkParser) consume(c byte) bool {
	p.skip()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (p *checkParser) end() bool {
	p.skip()
	return p.i == len(p.b)
}

// str reads a string of printable ASCII without escapes and returns its
// bytes (still in b).
func (p *checkParser) str() ([]byte, bool) {
	if !p.consume('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// integer reads an integer of at most 18 digits, optionally negative,
// written as JSON writes one (no leading zero), followed by a delimiter.
func (p *checkParser) integer() (int64, bool) {
	p.skip()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var n int64
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		n = n*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 18 || (digits > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r', ',', '}':
		default:
			return 0, false // a fraction, an exponent or anything else
		}
	}
	if neg {
		n = -n
	}
	return n, true
}

// literal reads the word w (true or false).
func (p *checkParser) literal(w string) bool {
	p.skip()
	if len(p.b)-p.i < len(w) || string(p.b[p.i:p.i+len(w)]) != w {
		return false
	}
	p.i += len(w)
	return true
}

// value reads member f's value into req, checking it as checkRequest's
// validate tags do.
func (p *checkParser) value(f checkField, req *checkRequest) bool {
	switch f {
	case fieldPolicy, fieldKey, fieldWindow, fieldAlgorithm:
		b, ok := p.str()
		if !ok {
			return false
		}
		switch f {
		case fieldPolicy:
			req.Policy = string(b)
		case fieldKey:
			req.Key = string(b)
		case fieldWindow:
			s := string(b)
			if d, err := time.ParseDuration(s); err != nil || d <= 0 {
				return false // the validator's posduration refusal
			}
			req.Window = &s
		case fieldAlgorithm:
			var s string
			switch string(b) {
			case "fixed_window":
				s = "fixed_window"
			case "sliding_window":
				s = "sliding_window"
			case "token_bucket":
				s = "token_bucket"
			default:
				return false // the validator's oneof refusal
			}
			req.Algorithm = &s
		}
		return true
	case fieldPeek:
		switch {
		case p.literal("true"):
			req.Peek = true
		case p.literal("false"):
			req.Peek = false
		default:
			return false
		}
		return true
	}
	n, ok := p.integer()
	if !ok {
		return false
	}
	switch f {
	case fieldLimit:
		req.Limit = &n
	case fieldBurst:
		req.Burst = &n
	case fieldCost:
		req.Cost = &n
	}
	return true
}
