package postmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/httpprovider"
	"github.com/sekali-dev/sekali/internal/mail"
)

// Errors of Lookup.Find when it cannot say "not there" for certain.
var (
	ErrOutsideRetention = fmt.Errorf("postmark: the send is older than Postmark keeps messages: %w", mail.ErrCannotTell)
	ErrTooRecent        = errors.New("postmark: the send is too recent for a search to be sure")
)

// DefaultRetention is how long Postmark keeps messages unless the
// server's retention was changed (7 to 365 days).
const DefaultRetention = 45 * 24 * time.Hour

// DefaultSettle is how old a send must be before a search that misses
// it is believed. Postmark documents no delay before a message can be
// searched; this is a margin, not a documented figure.
const DefaultSettle = 5 * time.Minute

// The Messages API returns at most 500 a page and lets count+offset
// reach 10,000.
const (
	pageSize   = 100
	maxResults = 10000
)

// LookupConfig configures a Lookup.
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

// Validate checks the configuration and reports every problem at once.
func (c LookupConfig) Validate() error {
	errs := validateCommon(c.ServerToken, c.MessageStream, c.BaseURL, c.Timeout)
	return errors.Join(append(errs, c.Problems("POSTMARK", 365*24*time.Hour)...)...)
}

// ReadLookupEnv reads the look-up's variables: ReadEnv's, and
// POSTMARK_RETENTION and POSTMARK_LOOKUP_SETTLE.
func ReadLookupEnv(env *envconfig.Reader) LookupConfig {
	c := ReadEnv(env)
	return LookupConfig{
		ServerToken:   c.ServerToken,
		MessageStream: c.MessageStream,
		BaseURL:       c.BaseURL,
		Window:        httpprovider.ReadWindow(env, "POSTMARK"),
	}
}

// Lookup finds the message of an ambiguous send by the metadata every
// message carries (MetadataKey). It implements mail.Lookup.
type Lookup struct {
	cfg    LookupConfig
	client *httpprovider.Client
}

// NewLookup returns a Lookup; cfg must be valid.
func NewLookup(cfg LookupConfig) (*Lookup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MessageStream == "" {
		cfg.MessageStream = DefaultMessageStream
	}
	cfg.Window = cfg.Or(httpprovider.Window{Retention: DefaultRetention, Settle: DefaultSettle})
	return &Lookup{cfg: cfg, client: newClient(cfg.BaseURL, cfg.ServerToken, cfg.Timeout)}, nil
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
	now := time.Now()
	if err := httpprovider.CheckRetention(q.HandedOverAt, now, l.cfg.Retention, ErrOutsideRetention); err != nil {
		return "", false, err
	}
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
	if err := httpprovider.CheckMiss("postmark", q.HandedOverAt, now, l.cfg.Settle, ErrTooRecent); err != nil {
		return "", false, err
	}
	return "", false, nil
}

func (l *Lookup) page(ctx context.Context, keyHash string, offset int) (searchAnswer, error) {
	v := url.Values{}
	v.Set("count", strconv.Itoa(pageSize))
	v.Set("offset", strconv.Itoa(offset))
	v.Set("messagestream", l.cfg.MessageStream)
	v.Set("metadata_"+MetadataKey, keyHash)
	ans, se := l.client.Do(ctx, http.MethodGet, "/messages/outbound?"+v.Encode(), nil, nil)
	if se != nil {
		return searchAnswer{}, fmt.Errorf("postmark look-up: %w", se.Err)
	}
	if ans.Status != http.StatusOK {
		return searchAnswer{}, fmt.Errorf("postmark look-up: answered %d: %s", ans.Status, httpprovider.Truncate(ans.Body))
	}
	var page searchAnswer
	if err := json.Unmarshal(ans.Body, &page); err != nil || page.TotalCount == nil {
		return searchAnswer{}, fmt.Errorf("postmark look-up: not a message search answer: %q", httpprovider.Truncate(ans.Body))
	}
	return page, nil
}
