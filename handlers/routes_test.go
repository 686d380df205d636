package handlers_test

import (
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/api"
	"github.com/latchkey/latchkey/handlers"
)

// loadSpec parses and validates api/openapi.yaml once.
var loadSpec = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

func mustSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := loadSpec()
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

// specProblemTypes is the enum of the Problem schema's type property.
func specProblemTypes(t *testing.T) map[string]bool {
	t.Helper()
	doc := mustSpec(t)
	problem := doc.Components.Schemas["Problem"]
	if problem == nil || problem.Value.Properties["type"] == nil {
		t.Fatal("api/openapi.yaml has no Problem schema with a type property")
	}
	out := map[string]bool{}
	for _, v := range problem.Value.Properties["type"].Value.Enum {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("Problem.type enum holds %T %v, want strings", v, v)
		}
		out[s] = true
	}
	return out
}

// newTestRouter returns the router on svc, for both domains, with cfg.
func newTestRouter(t *testing.T, svc *fakeService, cfg handlers.Config) http.Handler {
	t.Helper()
	return handlers.NewRouter(svc, svc, cfg)
}

// newRequest builds a request. A non-empty body is sent as application/json
// unless the header pairs say otherwise; a header given as "" is removed,
// and one named in two pairs is sent twice.
func newRequest(method, target, body string, headers ...string) *http.Request {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	named := map[string]bool{}
	for i := 0; i+1 < len(headers); i += 2 {
		switch {
		case headers[i+1] == "":
			req.Header.Del(headers[i])
		case named[http.CanonicalHeaderKey(headers[i])]:
			req.Header.Add(headers[i], headers[i+1])
		default:
			req.Header.Set(headers[i], headers[i+1])
		}
		named[http.CanonicalHeaderKey(headers[i])] = true
	}
	return req
}

// loadSpecRouter finds the documented operation of a request.
var loadSpecRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := loadSpec()
	if err != nil {
		return nil, err
	}
	return gorillamux.NewRouter(doc)
})

// serve runs req through h and returns the recorded response, after checking
// it against api/openapi.yaml when req is a documented operation: its status
// must be documented, its headers and body must match their schemas.
func serve(t *testing.T, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := serveUnchecked(h, req)
	wantSpecResponse(t, req, rec)
	return rec
}

// serveUnchecked runs req through h without checking the answer against the
// spec, for tests that provoke answers a route cannot really give (a
// service error that operation never returns).
func serveUnchecked(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func wantSpecResponse(t *testing.T, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	router, err := loadSpecRouter()
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		return // not a documented operation: TestUnknownRouteAndMethod covers those
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts},
		Status:                 rec.Code,
		Header:                 rec.Header(),
		Options:                opts,
	}
	// Bodies are checked when they are JSON; kin-openapi would read a YAML
	// or HTML document as data, not as the string the spec says it is.
	if mt, _, _ := mime.ParseMediaType(rec.Header().Get("Content-Type")); mt == "application/json" || mt == "application/problem+json" {
		input.SetBodyBytes(rec.Body.Bytes())
	} else {
		opts.ExcludeResponseBody = true
	}
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		t.Errorf("response to %s %s (%d) does not match api/openapi.yaml: %v", req.Method, req.URL.Path, rec.Code, err)
	}
}

// wantProblem fails t unless rec is a complete problem+json answer with the
// given status and type, a type documented in the spec. It returns the body.
func wantProblem(t *testing.T, rec *httptest.ResponseRecorder, req *http.Request, status int, typ string) handlers.Problem {
	t.Helper()
	if rec.Code != status {
		t.Errorf("status = %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	for _, member := range []string{"type", "title", "status", "instance", "request_id", "detail"} {
		if v, ok := raw[member]; !ok || v == "" {
			t.Errorf("problem body lacks %q: %s", member, rec.Body)
		}
	}
	var p handlers.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if p.Type != typ || p.Status != status {
		t.Errorf("problem {type: %q, status: %d}, want {%q, %d}", p.Type, p.Status, typ, status)
	}
	if p.Instance != req.URL.Path {
		t.Errorf("problem instance = %q, want the request path %q", p.Instance, req.URL.Path)
	}
	if !specProblemTypes(t)[p.Type] {
		t.Errorf("problem type %q is not in the Problem.type enum of api/openapi.yaml", p.Type)
	}
	return p
}

// wantField fails t unless the problem's errors[] names field.
func wantField(t *testing.T, p handlers.Problem, field string) {
	t.Helper()
	for _, fe := range p.Errors {
		if fe.Field == field {
			if fe.Rule == "" {
				t.Errorf("errors[] entry for %q has no rule", field)
			}
			return
		}
	}
	t.Errorf("errors[] = %+v, want an entry for field %q", p.Errors, field)
}

// TestRoutesMatchSpec is the drift test: the router serves exactly the
// operations api/openapi.yaml documents.
func TestRoutesMatchSpec(t *testing.T) {
	doc := mustSpec(t)
	routes, ok := newTestRouter(t, &fakeService{}, handlers.Config{}).(chi.Routes)
	if !ok {
		t.Fatal("NewRouter does not return a chi router; the drift test cannot walk it")
	}
	var got []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if prefix, ok := strings.CutSuffix(route, "/*"); ok {
			route = prefix + "/{path}" // chi's catch-all is the spec's {path}
		}
		got = append(got, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatalf("chi.Walk: %v", err)
	}
	var want []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			want = append(want, method+" "+path)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("routes differ from api/openapi.yaml (-spec +router):\n%s", diff)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	tests := []struct {
		method, target string
		status         int
		typ            string
	}{
		{http.MethodGet, "/nope", http.StatusNotFound, "not-found"},
		{http.MethodGet, "/v1/lockz", http.StatusNotFound, "not-found"},
		{http.MethodGet, "/v1/locks/", http.StatusNotFound, "not-found"},
		{http.MethodGet, "/v1/locks/orders/renew", http.StatusMethodNotAllowed, "method-not-allowed"},
		{http.MethodPut, "/v1/locks/orders", http.StatusMethodNotAllowed, "method-not-allowed"},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, "method-not-allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			fake := &fakeService{}
			req := newRequest(tt.method, tt.target, "")
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), req)
			wantProblem(t, rec, req, tt.status, tt.typ)
			if calls := fake.Calls(); len(calls) != 0 {
				t.Errorf("service calls = %v, want none", calls)
			}
		})
	}
}

// TestMethodNotAllowedListsAllow: a 405 carries the Allow header RFC 9110
// §15.5.6 requires, listing exactly the methods api/openapi.yaml documents
// for the path (HEAD where it lists HEAD), for every path with a method it
// does not document. The gate's paths answer every method and have none.
func TestMethodNotAllowedListsAllow(t *testing.T) {
	doc := mustSpec(t)
	h := newTestRouter(t, &fakeService{}, handlers.Config{})
	candidates := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodTrace}
	checked := 0
	for path, item := range doc.Paths.Map() {
		if strings.HasPrefix(path, "/v1/ratelimit/gate/") {
			continue
		}
		var want []string
		for method := range item.Operations() {
			want = append(want, method)
		}
		slices.Sort(want)
		target := strings.NewReplacer("{name}", "orders", "{path}", "x").Replace(path)
		for _, method := range candidates {
			if slices.Contains(want, method) {
				continue
			}
			t.Run(method+" "+path, func(t *testing.T) {
				req := newRequest(method, target, "")
				rec := serve(t, h, req)
				wantProblem(t, rec, req, http.StatusMethodNotAllowed, "method-not-allowed")
				if got := rec.Header().Get("Allow"); got != strings.Join(want, ", ") {
					t.Errorf("Allow = %q, want %q (the spec's methods for %s)", got, strings.Join(want, ", "), path)
				}
			})
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no path of the spec has a method it does not document")
	}
}

// TestUnknownQueryParametersRefused: every /v1 operation but the gate's
// refuses a query parameter it does not read (?ttl=5m on an acquire, which
// would otherwise be a 201 with the default ttl) with a 400 naming it and
// listing the parameters the operation takes, exactly those
// api/openapi.yaml documents for it, before any service call. The gate
// takes any query: gateways forward their client's.
func TestUnknownQueryParametersRefused(t *testing.T) {
	doc := mustSpec(t)
	h := newTestRouter(t, &fakeService{}, handlers.Config{AdminKey: adminKey})
	checked := 0
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/v1/ratelimit/gate/") {
			continue
		}
		for method, op := range item.Operations() {
			var params []string
			for _, p := range append(item.Parameters, op.Parameters...) {
				if p.Value.In == "query" {
					params = append(params, p.Value.Name)
				}
			}
			target := strings.ReplaceAll(path, "{name}", "orders") + "?ttl=5m"
			t.Run(method+" "+target, func(t *testing.T) {
				fake := &fakeService{}
				req := newRequest(method, target, "", "Lock-Token", tokenA, "Authorization", "Bearer "+adminKey)
				rec := serve(t, newTestRouter(t, fake, handlers.Config{AdminKey: adminKey}), req)
				p := wantProblem(t, rec, req, http.StatusBadRequest, "invalid-request")
				if len(p.Errors) != 1 || p.Errors[0].Field != "ttl" || p.Errors[0].Rule != "unknown" {
					t.Errorf("errors = %+v, want one naming ttl, rule unknown", p.Errors)
				}
				want := "this route takes no query parameter"
				if len(params) > 0 {
					slices.Sort(params)
					want = `this route takes only "` + strings.Join(params, `" and "`) + `"`
				}
				if !strings.HasSuffix(p.Detail, want) {
					t.Errorf("detail %q, want it to end %q (the spec's query parameters)", p.Detail, want)
				}
				if calls := fake.Calls(); len(calls) != 0 {
					t.Errorf("service calls = %v, want none", calls)
				}
			})
			checked++
		}
	}
	if checked < 16 {
		t.Fatalf("checked %d /v1 operations, want every one but the gate's", checked)
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req := newRequest(method, "/v1/ratelimit/gate/per-ip/some/path?ttl=5m&utm_source=x", "")
		rec := serve(t, h, req)
		if rec.Code == http.StatusBadRequest {
			t.Errorf("%s gate with an arbitrary query: %d %s, want it not refused for the query", method, rec.Code, rec.Body)
		}
	}
}
