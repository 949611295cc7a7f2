package postmark

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Errors of Lookup.Find when it cannot say "not there" for certain.
var (
	ErrOutsideRetention = fmt.Errorf("postmark: the send is older than Postmark keeps messages: %w", mail.ErrCannotTell)
	ErrTooRecent        = errors.New("postmark: the send is too recent for a search to be sure")
)

// The Messages API returns at most 500 a page and lets count+offset
// reach 10,000.
const (
	pageSize   = 100
	maxResults = 10000
)

// checkLookup checks the configuration for the look-up and reports
// every problem at once.
func (c Config) checkLookup() error { return api.CheckLookup(c.Config, c.streamProblems()...) }

// LookupConfig configures a Lookup made outside the descriptor (the
// reconciler's tests make one), under the names of Postmark's variables:
// it is Config without From.
type LookupConfig struct {
	ServerToken   string        // POSTMARK_SERVER_TOKEN
	MessageStream string        // POSTMARK_MESSAGE_STREAM: DefaultMessageStream when empty
	BaseURL       string        // POSTMARK_BASE_URL: DefaultBaseURL when empty
	Timeout       time.Duration // one request; httpprovider.DefaultTimeout (30s) when zero
	// Window: the server's message retention (POSTMARK_RETENTION, at
	// most 365 days), and how old a miss must be (POSTMARK_LOOKUP_SETTLE);
	// the defaults when zero.
	httpprovider.Window
}

func (c LookupConfig) config() Config {
	return Config{Config: httpprovider.Config{Key: c.ServerToken, BaseURL: c.BaseURL, Timeout: c.Timeout, Window: c.Window}, MessageStream: c.MessageStream}
}

// Validate checks the configuration and reports every problem at once.
func (c LookupConfig) Validate() error { return c.config().checkLookup() }

// Lookup finds the message of an ambiguous send by the metadata every
// message carries (MetadataKey). It implements mail.Lookup.
type Lookup struct {
	stream string
	window httpprovider.Window
	client *httpprovider.Client
}

// NewLookup returns a Lookup; cfg must be valid.
func NewLookup(cfg LookupConfig) (*Lookup, error) { return newLookup(cfg.config()) }

// newLookup returns the Lookup of cfg, which must be valid for it.
func newLookup(cfg Config) (*Lookup, error) {
	if err := cfg.checkLookup(); err != nil {
		return nil, err
	}
	return &Lookup{stream: cfg.stream(), window: api.LookupWindow(cfg.Config), client: api.NewClient(cfg.Config)}, nil
}

// searchAnswer is a page of GET /messages/outbound
// (https://postmarkapp.com/developer/api/messages-api).
type searchAnswer struct {
	TotalCount *int `json:"TotalCount"`
	Messages   []struct {
		MessageID     string            `json:"MessageID"`
		MessageStream string            `json:"MessageStream"`
		Status        string            `json:"Status"`
		Metadata      map[string]string `json:"Metadata"`
	} `json:"Messages"`
}

// Find implements mail.Lookup: the outbound messages of the stream
// whose metadata sekali-key is q.KeyHash, page by page. A message
// Postmark holds in any status (queued, sent, processed) was accepted.
// Not found is said only for a send inside the retention and older than
// the settle margin; anything Postmark does not answer with 200 and its
// JSON is an error.
func (l *Lookup) Find(ctx context.Context, q mail.Query) (string, bool, error) {
	if q.KeyHash == "" {
		return "", false, errors.New("postmark: look-up without a key hash")
	}
	return httpprovider.Search(ctx, "postmark", q, l.window, ErrOutsideRetention, ErrTooRecent, l.search)
}

// search pages through the stream's messages whose metadata is q's key
// hash.
func (l *Lookup) search(ctx context.Context, q mail.Query, _ time.Time) (string, bool, error) {
	total := 0
	for offset := 0; offset < maxResults; {
		page, err := l.page(ctx, q.KeyHash, offset)
		if err != nil {
			return "", false, err
		}
		for _, m := range page.Messages {
			if m.Metadata[MetadataKey] == q.KeyHash && m.MessageID != "" {
				return m.MessageID, true, nil
			}
		}
		total = *page.TotalCount
		offset += len(page.Messages)
		if len(page.Messages) == 0 || offset >= total {
			break
		}
	}
	if total > maxResults {
		return "", false, fmt.Errorf("postmark: %d messages match, more than the %d a search can page through: %w", total, maxResults, mail.ErrCannotTell)
	}
	return "", false, nil
}

func (l *Lookup) page(ctx context.Context, keyHash string, offset int) (searchAnswer, error) {
	v := url.Values{}
	v.Set("count", strconv.Itoa(pageSize))
	v.Set("offset", strconv.Itoa(offset))
	v.Set("messagestream", l.stream)
	v.Set("metadata_"+MetadataKey, keyHash)
	var page searchAnswer
	if err := l.client.Get(ctx, "/messages/outbound?"+v.Encode(), &page); err != nil {
		return searchAnswer{}, fmt.Errorf("postmark look-up: %w", err)
	}
	if page.TotalCount == nil {
		return searchAnswer{}, errors.New("postmark look-up: not a message search answer: no TotalCount")
	}
	return page, nil
}
