package httpapi

import (
	"net/http"
	"strconv"

	"github.com/sekali-dev/sekali/api"
)

// handleOpenAPI serves the API's OpenAPI document.
func handleOpenAPI() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", strconv.Itoa(len(api.OpenAPI)))
		_, _ = w.Write(api.OpenAPI)
	})
}
