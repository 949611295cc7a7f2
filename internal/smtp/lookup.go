package smtp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sekali-dev/sekali/internal/mail"
)

// The SMTP path's look-up: a relay that keeps what it accepted and lets
// it be searched over HTTP, as the development catchers do (Mailpit,
// MailHog). A production relay has no such search; without one the
// reconciler's policy settles an ambiguous send (docs/providers.md).

// checkedLookup is a Lookup that can tell whether its server speaks its API.
type checkedLookup interface {
	mail.Lookup
	check(ctx context.Context) error
}

// Look-up APIs this package speaks (MAIL_LOOKUP_API).
const (
	APIAuto    = "auto" // find out which of the others answers
	APIMailpit = "mailpit"
	APIMailHog = "mailhog"
)

// parseLookupURL checks a MAIL_LOOKUP_URL.
func parseLookupURL(baseURL string) (string, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q: want an http(s) URL such as http://mailpit:8025", baseURL)
	}
	return u.String(), nil
}

// NewLookup returns a Lookup for the development sinks' HTTP APIs at
// baseURL (e.g. http://mailpit:8025), after checking that the server
// there speaks api; with APIAuto it finds out which one it speaks. A
// server that answers, but not as api, is a configuration error, reported
// now rather than as a failed look-up at the first ambiguous send.
func NewLookup(ctx context.Context, api, baseURL string) (mail.Lookup, error) {
	base, err := parseLookupURL(baseURL)
	if err != nil {
		return nil, fmt.Errorf("MAIL_LOOKUP_URL %w", err)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	candidates := map[string]checkedLookup{APIMailpit: mailpit{base: base, client: client}, APIMailHog: mailhog{base: base, client: client}}
	order := []string{api}
	if api == APIAuto {
		order = []string{APIMailpit, APIMailHog}
	} else if candidates[api] == nil {
		return nil, fmt.Errorf("MAIL_LOOKUP_API %q: want auto, mailpit or mailhog", api)
	}
	var errs []error
	for _, name := range order {
		l := candidates[name]
		err := l.check(ctx)
		if err == nil {
			return l, nil
		}
		errs = append(errs, fmt.Errorf("not the %s API: %w", name, err))
	}
	hint := ""
	if api != APIAuto {
		hint = " (MAIL_LOOKUP_API=auto finds out which API it speaks)"
	}
	return nil, fmt.Errorf("MAIL_LOOKUP_URL %s with MAIL_LOOKUP_API=%s%s: %w", base, api, hint, errors.Join(errs...))
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

// check asks Mailpit's /api/v1/info, which names its version.
func (m mailpit) check(ctx context.Context) error {
	var info struct {
		Version *string `json:"Version"`
	}
	if err := getJSON(ctx, m.client, m.base+"/api/v1/info", &info); err != nil {
		return err
	}
	if info.Version == nil {
		return errors.New("GET /api/v1/info has no Version")
	}
	return nil
}

func (m mailpit) Find(ctx context.Context, q mail.Query) (string, bool, error) {
	messageID := q.MessageID
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

// check lists one message through MailHog's /api/v2/messages.
func (m mailhog) check(ctx context.Context) error {
	var page struct {
		Total *int `json:"total"`
	}
	if err := getJSON(ctx, m.client, m.base+"/api/v2/messages?limit=1", &page); err != nil {
		return err
	}
	if page.Total == nil {
		return errors.New("GET /api/v2/messages has no total")
	}
	return nil
}

func (m mailhog) Find(ctx context.Context, q mail.Query) (string, bool, error) {
	messageID := q.MessageID
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
