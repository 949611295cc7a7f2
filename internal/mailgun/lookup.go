package mailgun

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Errors of Lookup.Find when it cannot say "not there" for certain.
var (
	ErrOutsideRetention = fmt.Errorf("mailgun: the send is older than Mailgun keeps events: %w", mail.ErrCannotTell)
	ErrTooRecent        = errors.New("mailgun: the send is too recent for the events to be complete")
)

// Events are searched from this long before the hand-over (clock skew).
const searchSkew = 10 * time.Minute

const (
	eventsLimit = 300 // the most the Events API returns a page
	maxPages    = 100
)

// checkLookup checks the configuration for the look-up and reports
// every problem at once.
func (c Config) checkLookup() error { return api.CheckLookup(c.Config, c.problems()...) }

// Lookup finds the message of an ambiguous send by our Message-ID in
// Mailgun's Events API. It implements mail.Lookup.
type Lookup struct {
	domain string
	window httpprovider.Window
	client *httpprovider.Client
}

// NewLookup returns a Lookup; cfg must be valid for it: a key that can
// read events, the domain and the window (its From is not used).
func NewLookup(cfg Config) (*Lookup, error) {
	if err := cfg.checkLookup(); err != nil {
		return nil, err
	}
	return &Lookup{domain: cfg.Domain, window: api.LookupWindow(cfg.Config), client: api.NewClient(cfg.Config)}, nil
}

// eventsPage is a page of GET /v3/<domain>/events.
type eventsPage struct {
	Items []struct {
		Event   string `json:"event"`
		Message struct {
			Headers struct {
				MessageID string `json:"message-id"`
			} `json:"headers"`
		} `json:"message"`
	} `json:"items"`
	Paging *struct {
		Next string `json:"next"`
	} `json:"paging"`
}

// Find implements mail.Lookup: the domain's events for our
// Message-ID, from shortly before the hand-over on, page by page until
// an empty one. Any event but "rejected" (accepted, delivered, failed,
// opened, …) means Mailgun took the message. Not found is said only for
// a send inside the retention and older than the settle margin; an
// answer that is not 200 with Mailgun's JSON is an error.
func (l *Lookup) Find(ctx context.Context, q mail.Query) (string, bool, error) {
	if q.MessageID == "" {
		return "", false, errors.New("mailgun: look-up without a Message-ID")
	}
	return httpprovider.Search(ctx, "mailgun", q, l.window, ErrOutsideRetention, ErrTooRecent, l.search)
}

// search pages through the domain's events for q's Message-ID, from
// shortly before its earliest unknown hand-over (not known: the whole
// retention before now).
func (l *Lookup) search(ctx context.Context, q mail.Query, now time.Time) (string, bool, error) {
	begin := now.Add(-l.window.Retention)
	if from := q.From(); !from.IsZero() {
		begin = from.Add(-searchSkew)
	}
	v := url.Values{}
	v.Set("message-id", q.MessageID)
	v.Set("begin", strconv.FormatInt(begin.Unix(), 10))
	v.Set("ascending", "yes")
	v.Set("limit", strconv.Itoa(eventsLimit))
	target := "/v3/" + l.domain + "/events?" + v.Encode()
	for pages := 0; ; pages++ {
		if pages == maxPages {
			return "", false, fmt.Errorf("mailgun look-up: more than %d pages of events for %s: %w", maxPages, q.MessageID, mail.ErrCannotTell)
		}
		page, err := l.page(ctx, target)
		if err != nil {
			return "", false, err
		}
		for _, it := range page.Items {
			if sameID(it.Message.Headers.MessageID, q.MessageID) && it.Event != "rejected" && it.Event != "" {
				return stripID(it.Message.Headers.MessageID), true, nil
			}
		}
		if len(page.Items) == 0 {
			break
		}
		if page.Paging == nil || page.Paging.Next == "" {
			return "", false, errors.New("mailgun look-up: a page of events without a next link")
		}
		target = page.Paging.Next // the client refuses it off the base URL: it would get our key
	}
	return "", false, nil
}

func (l *Lookup) page(ctx context.Context, target string) (eventsPage, error) {
	var page eventsPage
	if err := l.client.Get(ctx, target, &page); err != nil {
		return eventsPage{}, fmt.Errorf("mailgun look-up: %w", err)
	}
	if page.Items == nil {
		return eventsPage{}, errors.New("mailgun look-up: not a page of events: no items")
	}
	return page, nil
}

func sameID(a, b string) bool { return strings.EqualFold(stripID(a), stripID(b)) }
