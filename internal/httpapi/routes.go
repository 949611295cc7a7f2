package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// addRoutes is the whole HTTP API in one place.
func addRoutes(r chi.Router, orders *order.Service, templates *notify.Templates, checks []Check, metrics http.Handler) {
	r.Method(http.MethodGet, "/healthz", handleHealthz())
	r.Method(http.MethodGet, "/readyz", handleReadyz(checks))
	r.Method(http.MethodGet, "/metrics", metrics)

	r.Method(http.MethodPost, "/v1/orders", handleCreateOrder(orders))
	r.Method(http.MethodGet, "/v1/orders/{id}", handleGetOrder(orders))
	r.Method(http.MethodPost, "/v1/orders/{id}/shipments", handleCreateShipment(orders))

	r.Method(http.MethodGet, "/v1/templates", handleListTemplates(templates))
	r.Method(http.MethodGet, "/v1/templates/{name}/preview", handlePreviewTemplate(templates))
}
