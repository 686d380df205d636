package handlers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/go-playground/validator/v10"
	"github.com/latchkey/latchkey/service/store"
)

// newValidator returns the one validator of a router, with JSON field names
// and the duration rules registered before first use.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	must := func(err error) {
		if err != nil {
			panic(err) // only on a programming error in the tag registration below
		}
	}
	must(v.RegisterValidation("duration", func(fl validator.FieldLevel) bool {
		d, err := time.ParseDuration(fl.Field().String())
		return err == nil && d >= 0
	}))
	must(v.RegisterValidation("posduration", func(fl validator.FieldLevel) bool {
		d, err := time.ParseDuration(fl.Field().String())
		return err == nil && d > 0
	}))
	return v
}

// validationDetail turns one validator failure into a sentence.
func validationDetail(fe validator.FieldError) string {
	switch fe.Tag() {
	case "posduration":
		if v, _ := fe.Value().(string); durationOutOfRange(v) {
			return outOfRangeDetail(fe.Field(), v)
		}
		return fmt.Sprintf("%s must be a positive duration such as \"30s\" or \"1500ms\", got %s", fe.Field(), showValue(fe))
	case "duration":
		if v, _ := fe.Value().(string); durationOutOfRange(v) {
			return outOfRangeDetail(fe.Field(), v)
		}
		return fmt.Sprintf("%s must be a duration such as \"0s\", \"5s\" or \"1500ms\", got %s", fe.Field(), showValue(fe))
	case "required":
		return fe.Field() + " is required"
	case "oneof":
		return fmt.Sprintf("%s must be %s, got %s", fe.Field(), alternatives(strings.Fields(fe.Param())), showValue(fe))
	case "min", "gte":
		return fmt.Sprintf("%s must be at least %s, got %s", fe.Field(), fe.Param(), showValue(fe))
	case "max", "lte":
		return fmt.Sprintf("%s must be at most %s, got %s", fe.Field(), fe.Param(), showValue(fe))
	}
	return fmt.Sprintf("%s fails the %q rule", fe.Field(), fe.Tag())
}

// alternatives lists the values a field may take: "read or write", "a, b
// or c".
func alternatives(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

// showValue is the value a field failed its rule with, as the client wrote
// it: a number as it is, a string quoted (see store.Quote).
func showValue(fe validator.FieldError) string {
	if s, ok := fe.Value().(string); ok {
		return store.Quote(s)
	}
	return store.Clip(fmt.Sprint(fe.Value()))
}

// durationOutOfRange reports whether s is written as a Go duration
// (an optional sign, then numbers each with a unit: ns, us, µs, ms, s, m,
// h) that time.ParseDuration refuses all the same: one longer than
// time.Duration holds (about 2,562,047 hours).
func durationOutOfRange(s string) bool {
	if _, err := time.ParseDuration(s); err == nil {
		return false
	}
	s = strings.TrimLeft(s, "+-")
	if s == "" {
		return false
	}
	for s != "" {
		n := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if n <= 0 || strings.Count(s[:n], ".") > 1 || s[:n] == "." {
			return false
		}
		s = s[n:]
		unit := strings.IndexFunc(s, func(r rune) bool { return ('0' <= r && r <= '9') || r == '.' })
		if unit < 0 {
			unit = len(s)
		}
		switch s[:unit] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[unit:]
	}
	return true
}

func outOfRangeDetail(field, v string) string {
	return fmt.Sprintf("%s is out of range: %s is longer than any duration Latchkey can hold (at most %s)",
		field, store.Quote(v), time.Duration(math.MaxInt64).Truncate(time.Second))
}

// decodeJSON reads an optional JSON body into dst and validates it. An empty
// body leaves dst as it is. The body is bounded by maxBytes; it must be
// sent without a content coding (see checkContentEncoding), be
// application/json and hold exactly one object whose member names are dst's
// JSON field names, matched exactly (case included), each at most once: the
// meaning api/openapi.yaml gives it (additionalProperties: false), so a proxy
// or firewall that validates bodies against the spec reads them as Latchkey
// does.
func (a *api) decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := a.readBody(w, r, nil)
	if err != nil {
		return err
	}
	return a.decodeBody(r, body, dst)
}

// readBody reads r's body, appended to buf: it must be sent without a
// content coding (see checkContentEncoding) and be at most maxBytes long.
// Returns an unsupported-media error for a content coding, the
// *http.MaxBytesError of a body that is too long, and an invalid-request
// error for one that cannot be read.
func (a *api) readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	if err := checkContentEncoding(r.Header.Values("Content-Encoding")); err != nil {
		return nil, err
	}
	body := r.Body
	if r.ContentLength < 0 || r.ContentLength > a.cfg.MaxBodyBytes {
		// A body of a known length within the bound needs no limit of
		// its own: net/http's body reader ends it at Content-Length.
		body = http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes)
	}
	if buf == nil {
		buf = make([]byte, 0, 512) // as io.ReadAll starts
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return nil, err
			}
			return nil, badRequest("body", "readable", "could not read the request body: "+err.Error())
		}
	}
}

// decodeBody decodes body, read by readBody, into dst and validates it, as
// decodeJSON says.
func (a *api) decodeBody(r *http.Request, body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return a.validate.StructCtx(r.Context(), dst)
	}
	ct, err := singleHeader(r, "Content-Type")
	if err != nil {
		return err
	}
	if err := checkJSONMediaType(ct); err != nil {
		return err
	}
	if err := unmarshalStrict(body, dst); err != nil {
		return err
	}
	return a.validate.StructCtx(r.Context(), dst)
}

// decodeLease reads a lease request: its optional JSON body into dst (see
// decodeJSON), then its optional Lock-Token. Returns the errors of
// decodeJSON and of lockToken.
func (a *api) decodeLease(w http.ResponseWriter, r *http.Request, dst any) (token string, err error) {
	if err := a.decodeJSON(w, r, dst); err != nil {
		return "", err
	}
	return lockToken(r)
}

// lockToken returns the optional Lock-Token header; its format is the
// service's to check. Returns an invalid-request error when it is sent more
// than once.
func lockToken(r *http.Request) (string, error) { return singleHeader(r, "Lock-Token") }

// singleHeader returns the value of the request header name, "" when the
// request does not send it. Every header Latchkey reads is read through it:
// a header sent more than once is an invalid-request error naming it,
// never one of its values picked (a proxy may add a line a client cannot
// see, or the other way round).
func singleHeader(r *http.Request, name string) (string, error) {
	vs := r.Header.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", badRequest(name, "once", fmt.Sprintf("the %s header must be sent once, got %d values", name, len(vs)))
}

// strictDecoder is a reusable decoder of request bodies.
type strictDecoder struct {
	r   bytes.Reader
	dec *jsontext.Decoder
}

var strictDecoders = sync.Pool{New: func() any {
	d := &strictDecoder{}
	d.dec = jsontext.NewDecoder(&d.r)
	return d
}}

// strictOptions are json/v2's defaults (exact, case-sensitive member names;
// a duplicate name is an error) with unknown members refused as well.
var strictOptions = jsonv2.RejectUnknownMembers(true)

// unmarshalStrict decodes the one JSON value of body into dst (see
// decodeJSON) and returns a problem naming what is wrong with it.
func unmarshalStrict(body []byte, dst any) error {
	d := strictDecoders.Get().(*strictDecoder)
	defer func() {
		d.r.Reset(nil) // the pool keeps no request's body
		strictDecoders.Put(d)
	}()
	d.r.Reset(body)
	d.dec.Reset(&d.r)
	if err := jsonv2.UnmarshalDecode(d.dec, dst, strictOptions); err != nil {
		return jsonError(err, dst)
	}
	if _, err := d.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return badRequest("body", "single-object", "request body must hold a single JSON object with nothing after it")
	}
	return nil
}

// checkContentEncoding refuses a body sent with a content coding (gzip,
// deflate, br, ...): Latchkey decodes none, and would otherwise read the
// coded bytes as JSON. identity, the coding that changes nothing, is
// accepted. Returns an unsupported-media error naming the coding.
func checkContentEncoding(values []string) error {
	for _, v := range values {
		for _, coding := range strings.Split(v, ",") {
			coding = strings.TrimSpace(coding)
			if coding != "" && !strings.EqualFold(coding, "identity") {
				return &httpError{typ: unsupportedMedia,
					detail: "request body must be sent without a content coding: Latchkey does not decode Content-Encoding " + store.Clip(coding)}
			}
		}
	}
	return nil
}

func checkJSONMediaType(ct string) error {
	if ct == "application/json" {
		return nil // what nearly every client sends: no parse needed
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return &httpError{typ: unsupportedMedia,
		detail: "request body must be application/json, got Content-Type " + store.Clip(ct)}
}

// jsonError names what is wrong with a body the JSON decoder refused;
// dst is what it was decoding into.
func jsonError(err error, dst any) error {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syn):
		field := pointerField(syn.JSONPointer)
		return badRequest(store.Clip(field), "duplicate", fmt.Sprintf("duplicate field %s: each field may appear once", store.Quote(field)))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body", "json", "malformed JSON: the body ends too early")
	case errors.As(err, &syn):
		return badRequest("body", "json", fmt.Sprintf("malformed JSON at byte %d: %s", syn.ByteOffset, store.Clip(syn.Err.Error())))
	case errors.Is(err, jsonv2.ErrUnknownName) && errors.As(err, &sem):
		field := pointerField(sem.JSONPointer)
		detail := "unknown field " + store.Quote(field)
		if known := foldedField(dst, field); known != "" {
			detail += fmt.Sprintf(" (field names are case-sensitive: did you mean %q?)", known)
		}
		return badRequest(store.Clip(field), "unknown", detail)
	case errors.As(err, &sem):
		if sem.JSONPointer == "" {
			return badRequest("body", "json", "request body must be a JSON object")
		}
		field := store.Clip(pointerField(sem.JSONPointer))
		return badRequest(field, "type", typeDetail(field, sem))
	}
	return badRequest("body", "json", "malformed JSON: "+store.Clip(err.Error()))
}

// pointerField is the request field a JSON pointer names: its member names
// joined with dots (request bodies are flat, so usually one name).
func pointerField(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// foldedField returns the JSON name of dst's field (its embedded structs'
// included) that name matches but for case, or "".
func foldedField(dst any, name string) string {
	t := reflect.TypeOf(dst)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	for _, f := range reflect.VisibleFields(t) {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag != "" && tag != name && strings.EqualFold(tag, name) {
			return tag
		}
	}
	return ""
}

// typeDetail says why a JSON value does not fit its field: the wrong kind
// of value, or a number that is not an integer in range.
func typeDetail(field string, sem *jsonv2.SemanticError) string {
	want := goKind(sem.GoType)
	got := jsonKindName(sem.JSONKind)
	if got != "number" || want != "number" {
		return fmt.Sprintf("%s must be a JSON %s, got a JSON %s", field, want, got)
	}
	f, err := strconv.ParseFloat(string(sem.JSONValue), 64)
	num := store.Clip(string(sem.JSONValue))
	switch {
	case err == nil && f != math.Trunc(f):
		return fmt.Sprintf("%s must be an integer, got %s", field, num)
	case err != nil || f < math.MinInt64 || f >= math.MaxInt64:
		return fmt.Sprintf("%s is out of range: %s is not between %d and %d", field, num, int64(math.MinInt64), int64(math.MaxInt64))
	}
	return fmt.Sprintf("%s must be an integer written without a fraction or exponent, such as %.0f; got %s", field, f, num)
}

// goKind is the JSON kind a Go field takes.
func goKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "value"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Float64, reflect.Uint, reflect.Uint64:
		return "number"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return t.String()
}

// jsonKindName names a JSON kind as RFC 8259 does.
func jsonKindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}

// parseDuration parses a duration field that the validator already checked;
// absent (or null) gives zero, which the service reads as its default.
func parseDuration(s *string) time.Duration {
	if s == nil {
		return 0
	}
	d, _ := time.ParseDuration(*s)
	return d
}

// valueOr is the value of an optional field, or def when it is absent (or
// null).
func valueOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// queryParam reads the query parameter name of r, which may be given at
// most once: its value and whether it was given. It is the one reading of
// a query parameter, so that every parameter has the same rules. Returns
// an invalid-request error naming the query when the query string cannot
// be parsed (a parameter could hide in it), naming a parameter whose name
// differs from name only in case (names are case-sensitive, and one meant
// as name must not pass unread), and naming name when it is given more
// than once.
func queryParam(r *http.Request, name string) (string, bool, error) {
	q, err := parseQuery(r)
	if err != nil {
		return "", false, err
	}
	for n := range q {
		if n != name && strings.EqualFold(n, name) {
			return "", false, badRequest(n, "unknown", "unknown query parameter "+store.Quote(n)+
				" (parameter names are case-sensitive): did you mean "+strconv.Quote(name)+"?")
		}
	}
	vs, ok := q[name]
	switch {
	case !ok:
		return "", false, nil
	case len(vs) > 1:
		return "", false, badRequest(name, "duplicate",
			name+" must be given at most once, got it "+strconv.Itoa(len(vs))+" times")
	}
	return vs[0], true, nil
}

// knownParams refuses a query parameter of r other than accepted, the
// ones its route reads: one it does not read must not pass for a setting
// the client believes it made (?ttl=5m on an acquire, whose ttl is in the
// body). Returns queryParam's error for a query string that cannot be
// parsed, and an invalid-request error naming the first unknown parameter
// (in name order) and listing the route's.
func knownParams(r *http.Request, accepted ...string) error {
	if r.URL.RawQuery == "" {
		return nil // most requests: no map to build
	}
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(q))
	for _, n := range names {
		if slices.Contains(accepted, n) {
			continue
		}
		detail := "unknown query parameter " + store.Quote(n)
		for _, a := range accepted {
			if strings.EqualFold(n, a) {
				return badRequest(n, "unknown", detail+" (parameter names are case-sensitive): did you mean "+strconv.Quote(a)+"?")
			}
		}
		if len(accepted) == 0 {
			return badRequest(n, "unknown", detail+": this route takes no query parameter")
		}
		quoted := make([]string, len(accepted))
		for i, a := range accepted {
			quoted[i] = strconv.Quote(a)
		}
		return badRequest(n, "unknown", detail+": this route takes only "+strings.Join(quoted, " and "))
	}
	return nil
}

// parseQuery parses r's query string. Returns an invalid-request error
// naming the query when it cannot be parsed.
func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("query", "format",
			"the query string is malformed ("+err.Error()+"): escape '%' as %25 and separate parameters with '&'")
	}
	return q, nil
}

// oneOfParam reads the query parameter name as queryParam does, and
// requires its value, when given, to be one of values exactly. Returns
// queryParam's errors, and an invalid-request error naming name and
// quoting the value for any other value (an empty one included).
func oneOfParam(r *http.Request, name string, values ...string) (string, bool, error) {
	v, ok, err := queryParam(r, name)
	if err != nil || !ok {
		return "", false, err
	}
	for _, want := range values {
		if v == want {
			return v, true, nil
		}
	}
	return "", false, badRequest(name, "oneof", name+" must be "+strings.Join(values, " or ")+
		" (in lower case), got "+store.Quote(v))
}
