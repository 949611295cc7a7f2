package httpapi

import (
	"cmp"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/mail"
)

// addRoutes is the whole HTTP API in one place, grouped by who may call
// it (auth.go has the trust model; docs/security.md explains it).
func addRoutes(r chi.Router, d Deps, hooks webhookMetrics) {
	addr := clientAddr(d.RateLimits.TrustedProxies)
	public, backend := newLimiter(d.RateLimits.Public), newLimiter(d.RateLimits.Backend)
	// Requests to the backend's routes whose credentials fail (no key, a
	// wrong or revoked one, a guessed order token) have proved nothing, so
	// they get what an anonymous client gets: the public budget, per
	// client address, in buckets of their own (a broken backend key does
	// not eat the checkouts of a storefront at the same address). Each
	// costs a database look-up; past the budget the answer is 429 before
	// any. A client whose credentials pass spends only its key's budget.
	refused := newLimiter(d.RateLimits.Public)
	guarded := func(check func(http.Handler) http.Handler) func(http.Handler) http.Handler {
		return limitRefusals(refused, addr, check)
	}

	// Anyone: the load balancer, the storefront, a browser.
	r.Method(http.MethodGet, "/healthz", handleHealthz())
	r.Method(http.MethodGet, "/readyz", handleReadyz(d.Log, d.Checks))
	r.Group(func(r chi.Router) {
		r.Use(limit(public, addr))
		r.Method(http.MethodGet, "/openapi.yaml", handleOpenAPI())
		r.Method(http.MethodGet, "/v1/templates", handleListTemplates(d.Templates))
		r.Method(http.MethodGet, "/v1/templates/{name}/preview", handlePreviewTemplate(d.Templates))
		r.Method(http.MethodPost, "/v1/templates/{name}/preview", handlePreviewTemplate(d.Templates))
		r.Method(http.MethodGet, "/templates", handleGallery(d.Templates))
		// One-click unsubscribe: the token's signature is the credential.
		unsubscribe := handleUnsubscribe(d.UnsubscribeSecret, cmp.Or(d.UnsubscribeTTL, mail.DefaultUnsubscribeTTL), d.Admin.Ops)
		r.Method(http.MethodGet, "/v1/unsubscribe/{token}", unsubscribe)
		r.Method(http.MethodPost, "/v1/unsubscribe/{token}", unsubscribe)
	})
	// Providers' events: authenticated by the provider's signature or
	// credentials, not by ours. A provider posts from few addresses in
	// bursts, so they get the backend's limit, not a browser's.
	r.With(limit(backend, addr)).
		Method(http.MethodPost, "/v1/webhooks/{provider}", handleWebhook(d.Webhooks, d.Admin.Ops, hooks))

	// The checkout and the shop's backend answer with secrets (the
	// order's access token) and personal data (the order, its
	// notifications): no cache keeps any answer of theirs.
	r.Group(func(r chi.Router) {
		r.Use(noStore)
		// The checkout: the shop's server, with a key that may place orders;
		// in public mode also a storefront's browsers, without one, under the
		// public budget and order.PublicRules.
		keyedCheckout := []func(http.Handler) http.Handler{
			guarded(requireKey(d.Keys, apikey.ScopeCheckout, apikey.ScopeOrdersWrite)), limit(backend, keyOrAddr(addr)),
		}
		if d.Orders != nil && d.Orders.Public != nil {
			r.With(anonymousOr([]func(http.Handler) http.Handler{limit(public, addr)}, keyedCheckout)).
				Method(http.MethodPost, "/v1/orders", handleCreateOrder(d.Orders, addr))
		} else {
			r.With(keyedCheckout...).Method(http.MethodPost, "/v1/orders", handleCreateOrder(d.Orders, addr))
		}

		// The shop's backend (an API key with the scope), or, to read one
		// order, the access token its checkout answered with.
		// Failed credentials spend the address's refusal budget (above); the
		// requests that pass, their key's (or, with an order token, their
		// address's) backend budget.
		backendRoute := func(check func(http.Handler) http.Handler, method, pattern string, h http.Handler) {
			r.With(guarded(check), limit(backend, keyOrAddr(addr))).Method(method, pattern, h)
		}
		backendRoute(requireOrderReader(d.Keys, d.Orders), http.MethodGet, "/v1/orders/{id}", handleGetOrder(d.Orders))
		backendRoute(requireKey(d.Keys, apikey.ScopeOrdersWrite), http.MethodPost, "/v1/orders/{id}/shipments", handleCreateShipment(d.Orders))
		backendRoute(requireKey(d.Keys, apikey.ScopeNotificationsWrite), http.MethodPost, "/v1/orders/{id}/notifications", handleCreateNotification(d.Orders))
		backendRoute(requireKey(d.Keys, apikey.ScopeNotificationsWrite), http.MethodPost, "/v1/orders/{id}/notifications/cancel", handleCancelTemplate(d.Orders))
		backendRoute(requireKey(d.Keys, apikey.ScopeOrdersRead), http.MethodGet, "/v1/notifications/{id}", handleGetNotification(d.Orders))
		backendRoute(requireKey(d.Keys, apikey.ScopeNotificationsWrite), http.MethodPost, "/v1/notifications/{id}/cancel", handleCancelNotification(d.Orders))
	})

	// Operators. A guess at an operator key or at ADMIN_TOKEN costs the
	// guesser the same wherever it is tried: failed bearer tokens on the
	// admin API and failed sign-ins to the console count against their
	// client address and the key prefix they name (operatorGuard), and
	// past its backoff both answer 429 before any look-up; an operator's
	// own key still gets through from an address a stranger has closed.
	operators := newOperatorGuard(d.Admin.Keys)
	r.Route("/admin/v1", func(r chi.Router) {
		r.Use(noStore) // every answer: deliveries, recipients, new keys and webhook secrets
		r.Use(guardOperators(operators, addr, requireAdmin(d.Admin.Token, d.Keys)))
		r.Method(http.MethodGet, "/deliveries", handleAdminListDeliveries(d.Admin))
		r.Method(http.MethodGet, "/deliveries/{id}", handleAdminGetDelivery(d.Admin))
		r.Method(http.MethodPost, "/deliveries/{id}/retry", handleAdminRetry(d.Admin))
		r.Method(http.MethodPost, "/deliveries/{id}/mark-sent", handleAdminMarkSent(d.Admin))
		r.Method(http.MethodPost, "/deliveries/{id}/cancel", handleAdminCancel(d.Admin))
		r.Method(http.MethodGet, "/queue", handleAdminQueue(d.Admin))
		r.Method(http.MethodPost, "/queue/pause", handleAdminPause(d.Admin))
		r.Method(http.MethodPost, "/queue/resume", handleAdminResume(d.Admin))
		r.Method(http.MethodPut, "/queue/concurrency", handleAdminConcurrency(d.Admin))
		r.Method(http.MethodGet, "/blocks", handleAdminListBlocks(d.Admin))
		r.Method(http.MethodPost, "/blocks", handleAdminAddBlock(d.Admin))
		r.Method(http.MethodDelete, "/blocks/{id}", handleAdminDeleteBlock(d.Admin))
		r.Method(http.MethodGet, "/suppressions", handleAdminListSuppressions(d.Admin))
		r.Method(http.MethodPost, "/suppressions", handleAdminAddSuppression(d.Admin))
		r.Method(http.MethodGet, "/suppressions/{recipient}", handleAdminGetSuppression(d.Admin))
		r.Method(http.MethodDelete, "/suppressions/{recipient}", handleAdminRemoveSuppression(d.Admin))
		r.Method(http.MethodGet, "/api-keys", handleAdminListKeys(d.Admin))
		r.Method(http.MethodPost, "/api-keys", handleAdminCreateKey(d.Admin))
		r.Method(http.MethodDelete, "/api-keys/{id}", handleAdminRevokeKey(d.Admin))
		r.Method(http.MethodGet, "/webhook-endpoints", handleAdminListWebhookEndpoints(d.Admin))
		r.Method(http.MethodPost, "/webhook-endpoints", handleAdminCreateWebhookEndpoint(d.Admin))
		r.Method(http.MethodGet, "/webhook-endpoints/{id}", handleAdminGetWebhookEndpoint(d.Admin))
		r.Method(http.MethodDelete, "/webhook-endpoints/{id}", handleAdminDeleteWebhookEndpoint(d.Admin))
		r.Method(http.MethodPost, "/webhook-endpoints/{id}/rotate-secret", handleAdminRotateWebhookSecret(d.Admin))
		r.Method(http.MethodPost, "/webhook-endpoints/{id}/disable", handleAdminSetWebhookEndpoint(d.Admin, false))
		r.Method(http.MethodPost, "/webhook-endpoints/{id}/enable", handleAdminSetWebhookEndpoint(d.Admin, true))
		r.Method(http.MethodPost, "/webhook-endpoints/{id}/replay", handleAdminReplayWebhooks(d.Admin))
		r.Method(http.MethodGet, "/actions", handleAdminListActions(d.Admin))
	})
	// The operator console (console.go): pages for people, who sign in
	// with an operator key; failed sign-ins count as failed tokens do.
	if d.Admin.Keys != nil && d.Admin.Ops != nil {
		addConsole(r, d, addr, operators)
	}
	// /metrics and pprof are never here: they have listeners of their own
	// (METRICS_ADDR, PPROF_ADDR) that only operators reach.
}

// addConsole adds the operator console's pages under /admin/; failed
// sign-ins count against guard, as the admin API's failed tokens do.
func addConsole(r chi.Router, d Deps, addr func(*http.Request) string, guard *operatorGuard) {
	r.Method(http.MethodGet, "/admin", http.RedirectHandler("/admin/", http.StatusMovedPermanently))
	r.Method(http.MethodGet, "/admin/console.css", handleConsoleCSS())
	r.Method(http.MethodGet, "/admin/sign-in", handleSignInForm())
	r.Method(http.MethodPost, "/admin/sign-in", handleSignIn(d.Admin.Keys, guard, addr))
	r.Group(func(r chi.Router) {
		r.Use(requireSession(d.Admin.Keys))
		r.Method(http.MethodPost, "/admin/sign-out", handleSignOut(d.Admin.Keys))
		r.Method(http.MethodGet, "/admin/", handleConsoleOverview(d.Admin.Ops))
		r.Method(http.MethodGet, "/admin/deliveries", handleConsoleDeliveries(d.Admin.Ops, d.Templates))
		r.Method(http.MethodGet, "/admin/deliveries/{id}", handleConsoleDelivery(d.Admin.Ops, d.Templates))
		r.Method(http.MethodGet, "/admin/deliveries/{id}/email", handleConsoleEmail(d.Admin.Ops, d.Templates))
		r.Method(http.MethodPost, "/admin/deliveries/{id}/retry", handleConsoleRetry(d.Admin.Ops))
		r.Method(http.MethodPost, "/admin/deliveries/{id}/mark-sent", handleConsoleMarkSent(d.Admin.Ops))
		r.Method(http.MethodPost, "/admin/deliveries/{id}/cancel", handleConsoleCancel(d.Admin.Ops))
		r.Method(http.MethodPost, "/admin/queue/pause", handleConsoleQueue(d.Admin.Ops, true))
		r.Method(http.MethodPost, "/admin/queue/resume", handleConsoleQueue(d.Admin.Ops, false))
		r.Method(http.MethodPost, "/admin/deliveries/retry", handleConsoleBulkRetry(d.Admin.Ops))
		r.Method(http.MethodGet, "/admin/suppressions", handleConsoleSuppressions(d.Admin.Ops))
		r.Method(http.MethodPost, "/admin/suppressions", handleConsoleSuppress(d.Admin.Ops, false))
		r.Method(http.MethodPost, "/admin/suppressions/remove", handleConsoleSuppress(d.Admin.Ops, true))
		r.Method(http.MethodGet, "/admin/blocks", handleConsoleBlocks(d.Admin.Ops))
		r.Method(http.MethodPost, "/admin/blocks", handleConsoleAddBlock(d.Admin.Ops))
		r.Method(http.MethodPost, "/admin/blocks/{id}/remove", handleConsoleRemoveBlock(d.Admin.Ops))
		r.Method(http.MethodGet, "/admin/api-keys", handleConsoleKeys(d.Admin.Keys))
		r.Method(http.MethodPost, "/admin/api-keys", handleConsoleCreateKey(d.Admin.Keys))
		r.Method(http.MethodPost, "/admin/api-keys/{id}/revoke", handleConsoleRevokeKey(d.Admin.Keys))
		r.Method(http.MethodGet, "/admin/activity", handleConsoleActivity(d.Admin.Ops))
		r.Method(http.MethodGet, "/admin/webhooks", handleConsoleWebhooks(d.Admin.Webhooks))
		r.Method(http.MethodPost, "/admin/webhooks", handleConsoleAddWebhook(d.Admin.Webhooks))
		r.Method(http.MethodGet, "/admin/webhooks/{id}", handleConsoleWebhook(d.Admin.Webhooks))
		r.Method(http.MethodPost, "/admin/webhooks/{id}/rotate-secret", handleConsoleRotateWebhook(d.Admin.Webhooks))
		r.Method(http.MethodPost, "/admin/webhooks/{id}/disable", handleConsoleSetWebhook(d.Admin.Webhooks, false))
		r.Method(http.MethodPost, "/admin/webhooks/{id}/enable", handleConsoleSetWebhook(d.Admin.Webhooks, true))
		r.Method(http.MethodPost, "/admin/webhooks/{id}/replay", handleConsoleReplayWebhook(d.Admin.Webhooks))
	})
}

// anonymousOr sends a request that carries no Authorization through
// anonymous and one that does through keyed: a storefront's browser and
// the shop's server share the public checkout's route.
func anonymousOr(anonymous, keyed []func(http.Handler) http.Handler) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		anon, key := chi.Chain(anonymous...).Handler(next), chi.Chain(keyed...).Handler(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "" {
				anon.ServeHTTP(w, r)
				return
			}
			key.ServeHTTP(w, r)
		})
	}
}
