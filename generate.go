package sekali

// The client's generated half, internal/apiclient: oapi-codegen (the
// version go.mod's tool directive pins) on api/openapi.yaml, configured by
// oapi-codegen.yaml. `make client` runs this; `make client-check`, a step
// of make ci, fails when the committed code is not what it makes.
//go:generate go tool oapi-codegen -config oapi-codegen.yaml -o internal/apiclient/apiclient.gen.go api/openapi.yaml
