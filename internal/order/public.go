package order

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sekali-dev/sekali/internal/textrule"
)

// PublicRules are what an anonymous checkout is also held to when the
// storefront's browsers call the checkout themselves (CHECKOUT_MODE=public;
// docs/security.md). A keyed checkout comes from the shop's own server,
// which vouches for its prices and names; an anonymous one could come
// from anyone. So its text that the confirmation shows (the customer's
// name, the items' names and SKUs) may not carry links, which would make
// the confirmation an advertisement mailed to a stranger; it may not be
// free unless the shop gives things away; and the confirmations it asks
// for are counted (Quota).
type PublicRules struct {
	// FreeOrders lets an anonymous checkout total 0.
	FreeOrders bool
	// Quota counts the confirmations anonymous checkouts ask for, per
	// client address, per recipient, per recipient domain and in all,
	// and shares the last two out among the clients' networks; nil
	// counts none.
	Quota Quota
}

// Quota counts anonymous checkouts' confirmations (*quota.Hourly).
type Quota interface {
	// Take counts one confirmation to recipient, the mailbox it reaches
	// (mail.Mailbox), asked for by client (the caller's address), or
	// refuses it: refused names the limit it is over ("client",
	// "recipient", "domain", "all", or "network": the share of the
	// client's network in the domain's cap or in all), and retryAfter
	// says when it has room again. An error says it could not count.
	Take(ctx context.Context, client, recipient string) (refused string, retryAfter time.Duration, err error)
}

// ErrQuotaUnavailable refuses an anonymous checkout whose confirmation
// could not be counted (Redis did not answer). It is not admitted
// uncounted: the confirmation would wait in the database and be mailed,
// past every cap, once the worker and the reconciler reach Redis again.
// Nothing is written; the checkout can be retried.
var ErrQuotaUnavailable = errors.New("order: the public checkout's quota cannot be counted")

// QuotaError refuses an anonymous checkout over a quota.
type QuotaError struct {
	Limit      string // "client", "recipient", "domain", "all" or "network"
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("order: the public checkout's hourly quota per %s is used up; retry in %s", e.Limit, e.RetryAfter)
}

// checkPublic holds a valid checkout to the public rules: every problem
// as one *ValidationError, like validate's.
func (r *PublicRules) checkPublic(v validCheckout) error {
	var verr ValidationError
	noLink := func(pointer, s string) {
		if link := textrule.Link(s); link != "" {
			verr.add(pointer, "must not contain a link or an address such as %q", link)
		}
	}
	noLink("/customer_name", v.Name)
	if v.Reference != "" {
		// Anonymous checkouts share one owner: a number from a browser
		// would be a stranger's to take, or to probe for.
		verr.add("/reference", "an order number is the shop's backend's to give: send it with an API key")
	}
	for i, it := range v.Items {
		noLink(fmt.Sprintf("/items/%d/name", i), it.Name)
		noLink(fmt.Sprintf("/items/%d/sku", i), it.SKU)
	}
	if v.Total == 0 && !r.FreeOrders {
		verr.add("/items", "the order total is 0: this shop takes no free orders without its backend's API key")
	}
	if len(verr.Fields) > 0 {
		return &verr
	}
	return nil
}
