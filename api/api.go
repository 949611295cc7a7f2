// Package api holds the OpenAPI 3.1 description of the HTTP API
// (openapi.yaml). The API serves it at /openapi.yaml, and the tests of
// internal/httpapi check the routes and real responses against it.
package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document, as YAML.
//
//go:embed openapi.yaml
var OpenAPI []byte
