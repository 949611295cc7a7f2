package mailgun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Errors of Lookup.Find when it cannot say "not there" for certain.
var (
	ErrOutsideRetention = fmt.Errorf("mailgun: the send is older than Mailgun keeps events: %w", mail.ErrCannotTell)
	ErrTooRecent        = errors.New("mailgun: the send is too recent for the events to be complete")
)

// DefaultRetention is the least Mailgun keeps events ("at least 3
// days"); a plan that keeps them longer can say so (MAILGUN_RETENTION).
const DefaultRetention = 3 * 24 * time.Hour

// DefaultSettle is how old a send must be before a miss is believed:
// Mailgun's event-polling guide calls pages with events younger than
// about half an hour not trustworthy, since events reach storage late
// and out of order.
const DefaultSettle = 30 * time.Minute

// Events are searched from this long before the hand-over (clock skew).
const searchSkew = 10 * time.Minute

const (
	eventsLimit = 300 // the most the Events API returns a page
	maxPages    = 100
)

// LookupConfig configures a Lookup.
type LookupConfig struct {
	APIKey  string        // MAILGUN_API_KEY: a key that can read events
	Domain  string        // MAILGUN_DOMAIN
	BaseURL string        // MAILGUN_BASE_URL
	Timeout time.Duration // one request; httpprovider.DefaultTimeout (30s) when zero
	// Window: how long the plan keeps events (MAILGUN_RETENTION), and
	// how old a miss must be (MAILGUN_LOOKUP_SETTLE); the defaults when
	// zero.
	httpprovider.Window
}

// Validate checks the configuration and reports every problem at once.
func (c LookupConfig) Validate() error {
	errs := validateCommon(c.APIKey, c.Domain, c.BaseURL, c.Timeout)
	return errors.Join(append(errs, c.Problems("MAILGUN", 0)...)...)
}

// ReadLookupEnv reads the look-up's variables: ReadEnv's, and
// MAILGUN_RETENTION and MAILGUN_LOOKUP_SETTLE.
func ReadLookupEnv(env *envconfig.Reader) LookupConfig {
	c := ReadEnv(env)
	return LookupConfig{
		APIKey:  c.APIKey,
		Domain:  c.Domain,
		BaseURL: c.BaseURL,
		Window:  httpprovider.ReadWindow(env, "MAILGUN"),
	}
}

// Lookup finds the message of an ambiguous send by our Message-ID in
// Mailgun's Events API. It implements mail.Lookup.
type Lookup struct {
	cfg    LookupConfig
	client *httpprovider.Client
}

// NewLookup returns a Lookup; cfg must be valid.
func NewLookup(cfg LookupConfig) (*Lookup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Window = cfg.Or(httpprovider.Window{Retention: DefaultRetention, Settle: DefaultSettle})
	base, _ := baseURL(cfg.BaseURL)
	return &Lookup{cfg: cfg, client: newClient(base, cfg.APIKey, cfg.Timeout)}, nil
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
	now := time.Now()
	if err := httpprovider.CheckRetention(q.HandedOverAt, now, l.cfg.Retention, ErrOutsideRetention); err != nil {
		return "", false, err
	}
	begin := now.Add(-l.cfg.Retention)
	if !q.HandedOverAt.IsZero() {
		begin = q.HandedOverAt.Add(-searchSkew)
	}
	v := url.Values{}
	v.Set("message-id", q.MessageID)
	v.Set("begin", strconv.FormatInt(begin.Unix(), 10))
	v.Set("ascending", "yes")
	v.Set("limit", strconv.Itoa(eventsLimit))
	target := "/v3/" + l.cfg.Domain + "/events?" + v.Encode()
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
	if err := httpprovider.CheckMiss("mailgun", q.HandedOverAt, now, l.cfg.Settle, ErrTooRecent); err != nil {
		return "", false, err
	}
	return "", false, nil
}

func (l *Lookup) page(ctx context.Context, target string) (eventsPage, error) {
	ans, se := l.client.Do(ctx, http.MethodGet, target, nil, nil)
	if se != nil {
		return eventsPage{}, fmt.Errorf("mailgun look-up: %w", se.Err)
	}
	if ans.Status != http.StatusOK {
		return eventsPage{}, fmt.Errorf("mailgun look-up: answered %d: %s", ans.Status, httpprovider.Truncate(ans.Body))
	}
	var page eventsPage
	if err := json.Unmarshal(ans.Body, &page); err != nil || page.Items == nil {
		return eventsPage{}, fmt.Errorf("mailgun look-up: not a page of events: %q", httpprovider.Truncate(ans.Body))
	}
	return page, nil
}

func sameID(a, b string) bool { return strings.EqualFold(stripID(a), stripID(b)) }
