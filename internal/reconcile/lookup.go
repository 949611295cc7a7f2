package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Lookup asks the mail provider whether it accepted a message.
type Lookup interface {
	// Find reports whether the provider holds a message with this
	// Message-ID (without angle brackets), and the provider's id for it.
	Find(ctx context.Context, messageID string) (providerID string, found bool, err error)
}

// Look-up APIs this package speaks.
const (
	APIMailpit = "mailpit"
	APIMailHog = "mailhog"
)

// NewLookup returns a Lookup for the development sinks' HTTP APIs at
// baseURL (e.g. http://mailhog:8025).
func NewLookup(api, baseURL string) (Lookup, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("MAIL_LOOKUP_URL %q: want an http(s) URL such as http://mailhog:8025", baseURL)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	switch api {
	case APIMailpit:
		return mailpit{base: u.String(), client: client}, nil
	case APIMailHog:
		return mailhog{base: u.String(), client: client}, nil
	default:
		return nil, fmt.Errorf("MAIL_LOOKUP_API %q: want mailpit or mailhog", api)
	}
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("provider look-up: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("provider look-up: %s answered %s", u, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		return fmt.Errorf("provider look-up: decode answer: %w", err)
	}
	return nil
}

func sameID(a, b string) bool {
	return strings.EqualFold(strings.Trim(strings.TrimSpace(a), "<>"), strings.Trim(strings.TrimSpace(b), "<>"))
}

// mailpit speaks Mailpit's /api/v1/search.
type mailpit struct {
	base   string
	client *http.Client
}

func (m mailpit) Find(ctx context.Context, messageID string) (string, bool, error) {
	var ans struct {
		Messages []struct {
			ID        string `json:"ID"`
			MessageID string `json:"MessageID"`
		} `json:"messages"`
	}
	u := m.base + "/api/v1/search?query=" + url.QueryEscape("message-id:"+messageID)
	if err := getJSON(ctx, m.client, u, &ans); err != nil {
		return "", false, err
	}
	// The search matches substrings; only an exact Message-ID counts.
	for _, msg := range ans.Messages {
		if sameID(msg.MessageID, messageID) {
			return msg.ID, true, nil
		}
	}
	return "", false, nil
}

// mailhog speaks MailHog's /api/v2/search.
type mailhog struct {
	base   string
	client *http.Client
}

func (m mailhog) Find(ctx context.Context, messageID string) (string, bool, error) {
	var ans struct {
		Items []struct {
			ID      string `json:"ID"`
			Content struct {
				Headers map[string][]string `json:"Headers"`
			} `json:"Content"`
		} `json:"items"`
	}
	u := m.base + "/api/v2/search?kind=containing&query=" + url.QueryEscape(messageID)
	if err := getJSON(ctx, m.client, u, &ans); err != nil {
		return "", false, err
	}
	for _, item := range ans.Items {
		for name, values := range item.Content.Headers {
			if !strings.EqualFold(name, "Message-ID") {
				continue
			}
			for _, v := range values {
				if sameID(v, messageID) {
					return item.ID, true, nil
				}
			}
		}
	}
	return "", false, nil
}
