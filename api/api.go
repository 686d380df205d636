// Package api embeds Latchkey's OpenAPI document, the contract of its HTTP API.
package api

import _ "embed"

// Spec is the OpenAPI 3 document served at /openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
