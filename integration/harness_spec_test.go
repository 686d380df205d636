package integration

// The harness's HTTP client: every response it carries is checked against
// api/openapi.yaml.

import (
	"bytes"
	"context"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/latchkey/latchkey/api"
)

var (
	specOnce   sync.Once
	specRouter routers.Router
	specErr    error
)

// loadSpecRouter parses api/openapi.yaml once and builds a router that finds
// the operation of any request.
func loadSpecRouter(t testing.TB) routers.Router {
	t.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.Spec)
		if err != nil {
			specErr = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			specErr = err
			return
		}
		specRouter, specErr = gorillamux.NewRouter(doc)
	})
	if specErr != nil {
		t.Fatalf("api/openapi.yaml: %v", specErr)
	}
	return specRouter
}

// isJSON reports a JSON media type (application/json, application/problem+json, ...).
func isJSON(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// specTransport checks every response it carries against api/openapi.yaml:
// the route and status must be documented and the headers and body must
// match their schemas. Streams (text/event-stream) are checked up to their
// headers.
type specTransport struct {
	t      testing.TB
	base   http.RoundTripper
	router routers.Router
}

func newSpecClient(t testing.TB) *http.Client {
	t.Helper()
	return &http.Client{Transport: &specTransport{t: t, base: http.DefaultTransport, router: loadSpecRouter(t)}}
}

func (st *specTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := st.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	route, params, ferr := st.router.FindRoute(req)
	if ferr != nil {
		st.t.Errorf("spec: %s %s is not in api/openapi.yaml: %v", req.Method, req.URL.Path, ferr)
		return resp, nil
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true}
	opts.AuthenticationFunc = openapi3filter.NoopAuthenticationFunc
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" || !isJSON(mt) {
		// Streams are checked up to their headers; so are the YAML, HTML and
		// metrics text bodies, whose schema is only "a string".
		opts.ExcludeResponseBody = true
		input.SetBodyBytes(nil)
	} else {
		body, rerr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if rerr != nil {
			return nil, rerr
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		input.SetBodyBytes(body)
	}
	if verr := openapi3filter.ValidateResponse(req.Context(), input); verr != nil {
		st.t.Errorf("spec: response to %s %s (%d) does not match api/openapi.yaml: %v", req.Method, req.URL.Path, resp.StatusCode, verr)
	}
	return resp, nil
}
