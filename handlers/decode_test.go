package handlers_test

import (
	"strings"
	"testing"

	"github.com/latchkey/latchkey/handlers"
)

// TestDecodeJSON: request bodies are bounded, application/json, one object
// of known fields with the right types, and nothing after it.
func TestDecodeJSON(t *testing.T) {
	runRequestCases(t, []requestCase{
		{desc: "malformed JSON", req: newRequest("POST", "/v1/locks/orders", `{"ttl" "1s"}`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "truncated JSON", req: newRequest("POST", "/v1/locks/orders", `{"ttl":`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "unknown field", req: newRequest("POST", "/v1/locks/orders", `{"tll":"1s"}`), status: 400, typ: "invalid-request", field: "tll"},
		{desc: "trailing object", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"} {}`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "trailing garbage", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}x`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "array body", req: newRequest("POST", "/v1/locks/orders", `[{"ttl":"1s"}]`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "string body", req: newRequest("POST", "/v1/locks/orders", `"1s"`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "ttl a number", req: newRequest("POST", "/v1/locks/orders", `{"ttl":30}`), status: 400, typ: "invalid-request", field: "ttl"},
		{desc: "keepalive a string", req: newRequest("POST", "/v1/locks/orders", `{"keepalive":"yes"}`), status: 400, typ: "invalid-request", field: "keepalive"},
		{desc: "body over the limit", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"`+strings.Repeat("9", 2000)+`s"}`),
			cfg: handlers.Config{MaxBodyBytes: 1024}, status: 413, typ: "payload-too-large", inDetail: "1024"},
		{desc: "renew body over the limit", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"`+strings.Repeat("9", 2000)+`s"}`, "Lock-Token", tokenA),
			cfg: handlers.Config{MaxBodyBytes: 1024}, status: 413, typ: "payload-too-large"},
		{desc: "text/plain body", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}`, "Content-Type", "text/plain"), status: 415, typ: "unsupported-media", inDetail: "text/plain"},
		{desc: "body without Content-Type", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}`, "Content-Type", ""), status: 415, typ: "unsupported-media"},
		{desc: "renew text/plain body", req: newRequest("POST", "/v1/locks/orders/renew", `{}`, "Content-Type", "text/plain", "Lock-Token", tokenA), status: 415, typ: "unsupported-media"},
		{desc: "empty body needs no Content-Type", req: newRequest("POST", "/v1/locks/orders", ""), status: 201, calls: []string{"Acquire"}},
		{desc: "blank body needs no Content-Type", req: newRequest("POST", "/v1/locks/orders", " \n", "Content-Type", ""), status: 201, calls: []string{"Acquire"}},
		{desc: "json with charset", req: newRequest("POST", "/v1/locks/orders", `{}`, "Content-Type", "application/json; charset=utf-8"), status: 201, calls: []string{"Acquire"}},
		{desc: "+json media type", req: newRequest("POST", "/v1/locks/orders", `{}`, "Content-Type", "application/merge-patch+json"), status: 201, calls: []string{"Acquire"}},
	})
}
