package e2e_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/mail"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sekali-dev/sekali/internal/apikey"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/testenv"
)

// Issue 44's "done when", with the binaries as they ship and a real
// mail server: a shop in Bandung (SHOP_TIMEZONE=Asia/Jakarta, BRAND_NAME,
// the default bare MAIL_FROM, its links) places an order with its own
// number in each language and ships it. Every e-mail arrives from
// "Toko Ana", shows the order number in its subject and body and the
// local time (WIB, never UTC), links to the order and the parcel, and,
// as Mailpit received it, scores at most 1.0 with Debian's SpamAssassin
// and trips none of its rules about how a message is built.
func TestTheShopsOwnWordsArriveAndPassSpamAssassin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	rd := testenv.NewRedis(t)
	mp := testenv.StartMailpit(t, testenv.MailpitOptions{})
	env := func(extra ...string) map[string]string {
		m := map[string]string{"DATABASE_URL": db.URL, "REDIS_URL": rd.URL, "DELIVERY_QUEUE": rd.Queue,
			"MAIL_FROM": "orders@shop.example", "METRICS_ADDR": "127.0.0.1:0", "LOG_LEVEL": "info",
			"BRAND_NAME": "Toko Ana", "BRAND_ADDRESS": "Jl. Melati 7, Bandung 40115", "SHOP_TIMEZONE": "Asia/Jakarta",
			"SHOP_ORDER_URL":     "https://shop.example/account/orders/{reference}",
			"SHOP_TRACKING_URLS": `{"JNE": "https://www.jne.co.id/tracking?awb={tracking_number}"}`}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	api := testenv.Start(t, "api", testenv.Binary(t, "./cmd/api"), env("HTTP_ADDR", "127.0.0.1:0", "RATE_LIMIT_PUBLIC", "0"))
	apiURL := "http://" + api.WaitLog(t, "api listening", "addr", 60*time.Second)
	worker := testenv.Start(t, "worker", testenv.Binary(t, "./cmd/worker"), env(
		"SMTP_HOST", mp.Host, "SMTP_PORT", strconv.Itoa(mp.Port), "SMTP_TLS", "none"))
	worker.WaitLog(t, "worker started", "worker_id", 60*time.Second)

	_, key, err := apikey.NewService(db.Pool).Create(ctx, "test", "e2e shop", []apikey.Scope{apikey.ScopeCheckout, apikey.ScopeOrdersWrite})
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, apiURL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", path, res.StatusCode, b)
		}
		return b
	}
	jakarta, err := time.LoadLocation("Asia/Jakarta")
	if err != nil {
		t.Fatal(err)
	}
	type placed struct {
		order.Order
		lang, recipient, clock string
	}
	var orders []placed
	for i, lang := range []string{"en", "id"} {
		recipient := "maria." + lang + "@example.com"
		var o order.Order
		if err := json.Unmarshal(post("/v1/orders", fmt.Sprintf(`{"customer_email":%q,"customer_name":"Maria","currency":"IDR","locale":%q,
			"reference":"TA-2026-004%d","items":[{"sku":"TEA-01","name":"Teh melati 250 g","quantity":2,"unit_price":4500000}]}`, recipient, lang, i)), &o); err != nil {
			t.Fatal(err)
		}
		post("/v1/orders/"+o.ID.String()+"/shipments", `{"carrier":"JNE","tracking_number":"JNE-0042-778`+strconv.Itoa(i)+`"}`)
		sep := map[string]string{"en": ":", "id": "."}[lang]
		at := o.CreatedAt.In(jakarta)
		orders = append(orders, placed{Order: o, lang: lang, recipient: recipient, clock: fmt.Sprintf("%02d%s%02d WIB", at.Hour(), sep, at.Minute())})
	}
	testenv.WaitFor(t, "the four e-mails to be sent through Mailpit", 60*time.Second, func() bool {
		n := 0
		for _, o := range orders {
			ds, err := notify.ListByOrder(ctx, db.Pool, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if d.Status == notify.StatusSent {
					n++
				}
			}
		}
		return n == 4
	})

	raws := map[string][]byte{}
	for _, o := range orders {
		msgs := mp.ByRecipient(t, o.recipient)
		if len(msgs) != 2 {
			t.Fatalf("%s: %d messages, want the confirmation and the shipment", o.recipient, len(msgs))
		}
		for _, msg := range msgs {
			raw := mp.Raw(t, msg.ID)
			name := o.lang + ": " + msg.Subject
			raws[name] = raw
			h := mp.Headers(t, msg.ID)
			from, err := (&mail.AddressParser{WordDecoder: &mime.WordDecoder{}}).Parse(h.Get("From"))
			if err != nil || from.Name != "Toko Ana" || from.Address != "orders@shop.example" {
				t.Errorf("%s: From %q (%v), want Toko Ana <orders@shop.example>", name, h.Get("From"), err)
			}
			if h.Get("Idempotency-Key") != "" {
				t.Errorf("%s carries its idempotency key through a relay that ignores it", name)
			}
			if !strings.Contains(msg.Subject, o.Reference) {
				t.Errorf("%s: the subject lacks the order number %s", name, o.Reference)
			}
			text, html := bodies(t, raw)
			for _, want := range []string{o.Reference, "https://shop.example/account/orders/" + o.Reference} {
				if !strings.Contains(text, want) || !strings.Contains(html, want) {
					t.Errorf("%s: text or HTML lacks %q:\n%s", name, want, text)
				}
			}
			if strings.Contains(text+html, o.ID.String()) || strings.Contains(text+html, "UTC") {
				t.Errorf("%s shows the order's UUID, or a time in UTC:\n%s", name, text)
			}
			if strings.Contains(msg.Subject, "on its way") || strings.Contains(msg.Subject, "perjalanan") {
				if !strings.Contains(text, " WIB") || !strings.Contains(text, "https://www.jne.co.id/tracking?awb=JNE-0042-778") {
					t.Errorf("%s: the shipment lacks its local time or its tracking link:\n%s", name, text)
				}
			} else if !strings.Contains(text, o.clock) {
				t.Errorf("%s: the confirmation lacks the time it was placed, %s:\n%s", name, o.clock, text)
			}
		}
	}
	testenv.CheckSpamScores(t, 1.0, raws)
}

// bodies are the text and HTML parts of a raw message, decoded.
func bodies(t *testing.T, raw []byte) (text, html string) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	r := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			return text, html
		}
		if err != nil {
			t.Fatal(err)
		}
		var body io.Reader = p // NextPart decodes quoted-printable itself
		if strings.EqualFold(p.Header.Get("Content-Transfer-Encoding"), "base64") {
			body = base64.NewDecoder(base64.StdEncoding, p)
		}
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		switch mt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type")); mt {
		case "text/plain":
			text = string(b)
		case "text/html":
			html = string(b)
		}
	}
}
