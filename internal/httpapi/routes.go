package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
)

// addRoutes is the whole HTTP API in one place.
func addRoutes(r chi.Router, d Deps, metrics http.Handler) {
	r.Method(http.MethodGet, "/healthz", handleHealthz())
	r.Method(http.MethodGet, "/readyz", handleReadyz(d.Checks))
	r.Method(http.MethodGet, "/metrics", metrics)
	r.Method(http.MethodGet, "/openapi.yaml", handleOpenAPI())

	r.Method(http.MethodPost, "/v1/orders", handleCreateOrder(d.Orders))
	r.Method(http.MethodGet, "/v1/orders/{id}", handleGetOrder(d.Orders))
	r.Method(http.MethodPost, "/v1/orders/{id}/shipments", handleCreateShipment(d.Orders))

	r.Method(http.MethodGet, "/v1/templates", handleListTemplates(d.Templates))
	r.Method(http.MethodGet, "/v1/templates/{name}/preview", handlePreviewTemplate(d.Templates))

	r.Route("/admin/v1", func(r chi.Router) {
		r.Use(requireAdmin(d.Admin.Token))
		r.Method(http.MethodGet, "/deliveries", handleAdminListDeliveries(d.Admin))
		r.Method(http.MethodGet, "/deliveries/{id}", handleAdminGetDelivery(d.Admin))
		r.Method(http.MethodPost, "/deliveries/{id}/retry", handleAdminRetry(d.Admin))
		r.Method(http.MethodPost, "/deliveries/{id}/mark-sent", handleAdminMarkSent(d.Admin))
		r.Method(http.MethodGet, "/queue", handleAdminQueue(d.Admin))
		r.Method(http.MethodPost, "/queue/pause", handleAdminPause(d.Admin))
		r.Method(http.MethodPost, "/queue/resume", handleAdminResume(d.Admin))
		r.Method(http.MethodPut, "/queue/concurrency", handleAdminConcurrency(d.Admin))
		r.Method(http.MethodGet, "/blocks", handleAdminListBlocks(d.Admin))
		r.Method(http.MethodPost, "/blocks", handleAdminAddBlock(d.Admin))
		r.Method(http.MethodDelete, "/blocks/{id}", handleAdminDeleteBlock(d.Admin))
	})
}
