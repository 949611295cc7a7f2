package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/order"
)

// The trust model (docs/security.md), as the routes enforce it:
//
//	public              GET /v1/templates..., /openapi.yaml, /healthz, /readyz
//	                    (rate-limited per client address); POST /v1/orders too
//	                    in public mode (CHECKOUT_MODE=public), under PublicRules
//	the shop's backend  an API key with a scope: checkout or orders:write (place
//	                    an order), orders:write (shipments), notifications:write
//	                    (any template), orders:read (read an order)
//	the order's holder  the access token the checkout answered with: read that one order
//	operators           /admin/v1, Authorization: Bearer $ADMIN_TOKEN
//	never public        /metrics (on METRICS_ADDR), pprof (PPROF_ADDR)

// keyChecker is how the API checks a backend's credentials (*apikey.Service).
type keyChecker interface {
	Authenticate(ctx context.Context, token string) (apikey.Key, error)
}

// bearer returns the token of an Authorization: Bearer header, or "".
func bearer(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// deny answers 401 with a challenge (RFC 6750 §3): the credentials are
// missing or not valid. error="invalid_token" is added only when a bearer
// token was sent; a request without one (no Authorization, or another
// scheme) gets the bare challenge, as §3.1 says it should.
func deny(w http.ResponseWriter, r *http.Request, realm, detail string) {
	challenge := `Bearer realm="` + realm + `"`
	if bearer(r) != "" {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeProblem(w, r, problem{Type: typeUnauthorized, Status: http.StatusUnauthorized, Detail: detail})
}

// forbid answers 403: valid credentials that may not do this, for want
// of one of scopes.
func forbid(w http.ResponseWriter, r *http.Request, scopes []apikey.Scope) {
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = string(s)
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="sekali", error="insufficient_scope", scope="`+strings.Join(names, " ")+`"`)
	writeProblem(w, r, problem{Type: typeForbidden, Status: http.StatusForbidden,
		Detail: "This API key does not have the " + strings.Join(names, " or the ") + " scope; create one that has (POST /admin/v1/api-keys)."})
}

type keyCtx struct{}

// keyFrom returns the API key that authenticated the request, if any.
func keyFrom(ctx context.Context) (apikey.Key, bool) {
	k, ok := ctx.Value(keyCtx{}).(apikey.Key)
	return k, ok
}

// authenticate checks the request's API key and that it carries one of
// scopes; it reports false after answering 401, 403 or 500.
func authenticate(w http.ResponseWriter, r *http.Request, keys keyChecker, scopes ...apikey.Scope) (*http.Request, bool) {
	token := bearer(r)
	if token == "" {
		deny(w, r, "sekali", "Send Authorization: Bearer <API key> (create one with POST /admin/v1/api-keys).")
		return r, false
	}
	k, err := keys.Authenticate(r.Context(), token)
	if errors.Is(err, apikey.ErrInvalid) {
		deny(w, r, "sekali", "The API key is not valid or has been revoked.")
		return r, false
	}
	if err != nil {
		writeError(w, r, err)
		return r, false
	}
	addLogAttrs(r.Context(), slog.String("api_key", k.Prefix))
	if !slices.ContainsFunc(scopes, k.Has) {
		forbid(w, r, scopes)
		return r, false
	}
	return r.WithContext(context.WithValue(r.Context(), keyCtx{}, k)), true
}

// requireKey lets a request through only with a live API key that has
// one of scopes.
func requireKey(keys keyChecker, scopes ...apikey.Scope) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r, ok := authenticate(w, r, keys, scopes...); ok {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// requireOrderReader lets a request for one order through with an API key
// that may read orders, or with that order's own access token.
func requireOrderReader(keys keyChecker, orders *order.Service) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token := bearer(r)
			if !strings.HasPrefix(token, order.AccessTokenPrefix) {
				if r, ok := authenticate(w, r, keys, apikey.ScopeOrdersRead); ok {
					next.ServeHTTP(w, r)
				}
				return
			}
			id, ok := orderIDOf(w, r)
			if !ok {
				return
			}
			switch err := orders.Authorize(r.Context(), id, token); {
			case errors.Is(err, order.ErrTokenInvalid):
				// The same answer as for an order that does not exist: a
				// token says nothing about other orders.
				writeError(w, r, order.ErrNotFound)
			case err != nil:
				writeError(w, r, err)
			default:
				addLogAttrs(r.Context(), slog.Bool("order_token", true))
				next.ServeHTTP(w, r)
			}
		})
	}
}
