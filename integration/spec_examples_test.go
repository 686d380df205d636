package integration

import (
	"context"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/latchkey/latchkey/api"
)

// TestSpecRequestExamplesAreValidRequests sends every request example of
// api/openapi.yaml to the quick-start server (the server binary with no
// configuration, on its embedded store, with the README's admin key) and
// expects 2xx: Swagger UI pre-fills the first one, and a user pastes the
// others, on the server the README starts first. An operation with a JSON
// body must have an example, or Swagger UI would build one from the schema's
// defaults and examples, a combination no one checks.
func TestSpecRequestExamplesAreValidRequests(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	srv := startServerProcess(t, buildServer(t), t.TempDir(), freePort(t), "LATCHKEY_ADMIN_KEY="+readmeAdminKey)
	e := remoteEnv(t, srv.URL)

	paths := doc.Paths.Map()
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	sent := 0
	for _, path := range keys {
		for method, op := range paths[path].Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			for mtName, mt := range op.RequestBody.Value.Content {
				if !isJSON(mtName) {
					continue
				}
				examples := requestExamples(mt)
				if len(examples) == 0 {
					t.Errorf("%s %s (%s): no request example; Swagger UI would make one up from the schema", method, path, op.OperationID)
				}
				for _, ex := range examples {
					t.Run(op.OperationID+"/"+ex.name, func(t *testing.T) {
						sendExample(t, e, method, path, op, ex)
					})
					sent++
				}
			}
		}
	}
	if sent < 4 {
		t.Errorf("sent %d examples; the spec has at least acquire, renew, hold and check", sent)
	}
}

type namedExample struct {
	name string
	body []byte
}

// requestExamples are a media type's example, its named examples (sorted
// by name) and its schema's example, as JSON.
func requestExamples(mt *openapi3.MediaType) []namedExample {
	var out []namedExample
	add := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte("unmarshalable example: " + err.Error())
		}
		out = append(out, namedExample{name, b})
	}
	if mt.Example != nil {
		add("example", mt.Example)
	}
	names := make([]string, 0, len(mt.Examples))
	for n := range mt.Examples {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if ex := mt.Examples[n]; ex != nil && ex.Value != nil {
			add(n, ex.Value.Value)
		}
	}
	if mt.Schema != nil && mt.Schema.Value != nil && mt.Schema.Value.Example != nil {
		add("schema-example", mt.Schema.Value.Example)
	}
	return out
}

// sendExample sends one example to the operation, on a lock name of its
// own and the quick-start server's policy (default); an operation that
// needs a held lease (Lock-Token required) gets one first.
func sendExample(t *testing.T, e *testEnv, method, path string, op *openapi3.Operation, ex namedExample) {
	lockName := "example-" + op.OperationID + "-" + ex.name
	url := strings.NewReplacer("{name}", lockName, "{policy}", "default", "{path}", "x").Replace(path)
	var headers []string
	for _, p := range op.Parameters {
		if p.Value != nil && p.Value.In == "header" && p.Value.Name == "Lock-Token" && p.Value.Required {
			headers = append(headers, "Lock-Token", exampleLease(t, e, path, lockName))
		}
	}
	if op.Security != nil && len(*op.Security) == 1 { // an admin-only operation
		headers = append(headers, "Authorization", "Bearer "+readmeAdminKey)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := e.newRequest(t, ctx, method, url, string(ex.body), headers...)
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s %s: %v", method, url, ex.body, err)
	}
	defer resp.Body.Close()
	var body []byte
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ = io.ReadAll(resp.Body) // a hold stream stays open: its status is enough
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		t.Errorf("%s %s with example %s %s: %d %s, want 2xx", method, url, ex.name, ex.body, resp.StatusCode, body)
	}
}

// exampleLease takes a lease for an example that needs one, of the
// primitive its path names: a semaphore's, a read/write lock's (read), an
// election's leadership or a lock's.
func exampleLease(t *testing.T, e *testEnv, path, name string) string {
	switch {
	case strings.HasPrefix(path, "/v1/semaphores/"):
		return e.semAcquire(t, name, `{"permits":8,"ttl":"30s"}`).Token
	case strings.HasPrefix(path, "/v1/rwlocks/"):
		r := e.do(t, "POST", "/v1/rwlocks/"+name, `{"mode":"read","ttl":"30s"}`)
		wantStatus(t, r, 201)
		return r.Token()
	case strings.HasPrefix(path, "/v1/elections/"):
		return e.campaign(t, name, `{"ttl":"30s"}`).Token
	}
	return e.acquire(t, name, `{"ttl":"30s"}`).Token
}
