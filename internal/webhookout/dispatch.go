package webhookout

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/metric"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// Config is the Dispatcher's.
type Config struct {
	Guard       *Guard
	Interval    time.Duration // WEBHOOK_INTERVAL: between passes when there was nothing to send (default 1s)
	Timeout     time.Duration // WEBHOOK_TIMEOUT: one request (default 10s)
	MaxAge      time.Duration // WEBHOOK_MAX_AGE: how long a message is retried (default 72h)
	Retention   time.Duration // delivered or given-up messages are kept this long (default 7 days)
	Batch       int           // messages a pass takes (default 50)
	Concurrency int           // requests at once (default 8)
	RetryBase   time.Duration // the first back-off, doubling to an hour (default 5s; tests shorten it)
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Interval, time.Second)
	def(&c.Timeout, 10*time.Second)
	def(&c.MaxAge, 72*time.Hour)
	def(&c.Retention, 7*24*time.Hour)
	def(&c.RetryBase, 5*time.Second)
	if c.Batch <= 0 {
		c.Batch = 50
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.Guard == nil {
		c.Guard = &Guard{}
	}
	return c
}

// maxResponseBody is how much of a receiver's answer is read: enough for
// the log, not enough for a receiver to cost us memory.
const maxResponseBody = 4 << 10

// Dispatcher posts the outbox's messages.
type Dispatcher struct {
	db     *pgxpool.Pool
	cfg    Config
	client *http.Client
	log    *slog.Logger

	results *prometheus.CounterVec
	oldest  *prometheus.GaugeVec
	backlog *prometheus.GaugeVec
}

// NewDispatcher returns a Dispatcher over db, registering its metrics
// with reg.
func NewDispatcher(db *pgxpool.Pool, cfg Config, log *slog.Logger, reg prometheus.Registerer) *Dispatcher {
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: cfg.Guard.control}
	d := &Dispatcher{
		db: db, cfg: cfg, log: log,
		client: &http.Client{
			Timeout: cfg.Timeout,
			Transport: &http.Transport{
				Proxy:                 nil, // the guard checks the receiver's address, not a proxy's
				DialContext:           dialer.DialContext,
				TLSHandshakeTimeout:   5 * time.Second,
				ResponseHeaderTimeout: cfg.Timeout,
				MaxIdleConnsPerHost:   2,
				IdleConnTimeout:       90 * time.Second,
			},
			// A redirect is not followed: it could lead anywhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		results: metric.CounterVec(reg, "sekali_webhook_deliveries_total",
			"Attempts to post an event to a webhook endpoint, by endpoint and result: delivered (2xx), failed (retried), gave_up (past WEBHOOK_MAX_AGE), gone (410: the endpoint is disabled).",
			[]string{"endpoint", "result"}),
		oldest: metric.GaugeVec(reg, "sekali_webhook_oldest_undelivered_seconds",
			"How long the oldest event not yet delivered to an enabled webhook endpoint has waited, since it was written or last replayed (0: none).",
			[]string{"endpoint"}),
		backlog: metric.GaugeVec(reg, "sekali_webhook_undelivered", "Events not yet delivered to an enabled webhook endpoint.", []string{"endpoint"}),
	}
	return d
}

// Run dispatches until ctx ends: a pass at once after one that found
// work, one every Interval otherwise, and the clean-up and the gauges
// every ten passes or so.
func (d *Dispatcher) Run(ctx context.Context) {
	for pass := 0; ; pass++ {
		n, err := d.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("webhook dispatch failed", "error", err.Error())
		}
		if pass%10 == 0 {
			if err := d.housekeeping(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("webhook housekeeping failed", "error", err.Error())
			}
		}
		wait := d.cfg.Interval
		if n > 0 {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// RunOnce takes the messages that are due and posts them; it returns how
// many it took.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	q := dbsqlc.New(d.db)
	msgs, err := q.ClaimWebhookMessages(ctx, dbsqlc.ClaimWebhookMessagesParams{
		Batch: int32(d.cfg.Batch), LeaseSeconds: lease(d.cfg).Seconds(),
	})
	if err != nil {
		return 0, fmt.Errorf("claim webhook messages: %w", err)
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, d.cfg.Concurrency)
	for _, m := range msgs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			d.deliver(ctx, q, m)
		}()
	}
	wg.Wait()
	return len(msgs), nil
}

// lease is how long the messages a pass takes are its own: the pass
// posts Concurrency at a time, each for up to Timeout, so the last of a
// full batch may start Timeout × (waves - 1) after the claim; past its
// lease another dispatcher would take it and post it beside this one.
func lease(cfg Config) time.Duration {
	waves := (max(cfg.Batch, 1) + max(cfg.Concurrency, 1) - 1) / max(cfg.Concurrency, 1)
	return cfg.Timeout*time.Duration(waves) + 30*time.Second
}

// deliver posts one message and records the outcome: the receiver's
// status (none when it did not answer) and, when it did not take it,
// why, with the start of what it answered.
func (d *Dispatcher) deliver(ctx context.Context, q *dbsqlc.Queries, m dbsqlc.ClaimWebhookMessagesRow) {
	endpoint := m.EndpointID.String()
	status, answer, err := d.post(ctx, m)
	log := d.log.With("endpoint", endpoint, "webhook_id", m.MsgID, "type", m.EventType, "attempt", m.Attempts)
	record := func(err error) {
		if err != nil && ctx.Err() == nil {
			log.Warn("record a webhook attempt", "error", err.Error())
		}
	}
	var answered *int16
	if err == nil {
		answered = new(int16(status))
	}
	switch {
	case err == nil && status >= 200 && status < 300:
		record(q.MarkWebhookDelivered(ctx, dbsqlc.MarkWebhookDeliveredParams{ID: m.ID, Status: int16(status)}))
		d.results.WithLabelValues(endpoint, "delivered").Inc()
		log.Info("webhook delivered", "status", status)
	case err == nil && status == http.StatusGone:
		record(q.DisableGoneWebhookEndpoint(ctx, dbsqlc.DisableGoneWebhookEndpointParams{ID: m.EndpointID,
			Reason: "the receiver answered 410 Gone"}))
		_, err := d.markFailed(ctx, q, m, answered, "410 Gone: endpoint disabled", time.Now())
		record(err)
		d.results.WithLabelValues(endpoint, "gone").Inc()
		log.Warn("webhook endpoint answered 410 Gone: disabled")
	default:
		// The log says the status; the record also the start of the
		// answer, which may name the shop's customers.
		reason, stored := fmt.Sprintf("answered %d", status), ""
		if answer != "" {
			stored = reason + ": " + answer
		}
		if err != nil {
			reason = err.Error()
		}
		next := time.Now().Add(backoff(d.cfg.RetryBase, int(m.Attempts)))
		gaveUp, err := d.markFailed(ctx, q, m, answered, textrule.Clip(cmp.Or(stored, reason), 500), next)
		record(err)
		result := "failed"
		if gaveUp {
			result = "gave_up"
		}
		d.results.WithLabelValues(endpoint, result).Inc()
		log.Warn("webhook not delivered", "reason", reason, "result", result, "next_attempt_at", next.UTC().Format(time.RFC3339))
	}
}

// markFailed records a failed attempt at m, with the receiver's status
// (nil: it did not answer): another at next, or none
// when its tries began more than WEBHOOK_MAX_AGE ago (at its creation or
// its latest replay), which gaveUp reports. A late answer to an attempt
// that another has since superseded records nothing, and is no error.
func (d *Dispatcher) markFailed(ctx context.Context, q *dbsqlc.Queries, m dbsqlc.ClaimWebhookMessagesRow, status *int16, reason string, next time.Time) (gaveUp bool, err error) {
	gaveUp, err = q.MarkWebhookFailed(ctx, dbsqlc.MarkWebhookFailedParams{ID: m.ID, Attempts: m.Attempts, LastError: reason,
		LastStatus: status, NextAttemptAt: next, MaxAgeSeconds: d.cfg.MaxAge.Seconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return gaveUp, err
}

// post sends m, signed, and returns the receiver's status and the start
// of its answer's body, as one line (answerExcerpt).
func (d *Dispatcher) post(ctx context.Context, m dbsqlc.ClaimWebhookMessagesRow) (int, string, error) {
	ts := time.Now()
	previous := m.PreviousSecret
	if m.PreviousExpiresAt == nil || !m.PreviousExpiresAt.After(ts) {
		previous = nil // the rotation's overlap is over
	}
	sig, err := signatures(m.MsgID, ts, m.Payload, m.Secret, previous)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.Url, bytes.NewReader(m.Payload))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sekali-webhooks/1")
	req.Header.Set("webhook-id", m.MsgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	res, err := d.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxResponseBody))
	return res.StatusCode, answerExcerpt(body), nil
}

// answerExcerpt is what an operator is shown of a receiver's answer: its
// start, on one line (textrule.Clip).
func answerExcerpt(body []byte) string {
	return textrule.Clip(strings.Join(strings.Fields(string(body)), " "), 200)
}

// housekeeping deletes old finished messages and sets the gauges.
func (d *Dispatcher) housekeeping(ctx context.Context) error {
	q := dbsqlc.New(d.db)
	if _, err := q.DeleteOldWebhookMessages(ctx, dbsqlc.DeleteOldWebhookMessagesParams{
		OlderThanSeconds: d.cfg.Retention.Seconds(), Batch: 1000,
	}); err != nil {
		return fmt.Errorf("delete old webhook messages: %w", err)
	}
	rows, err := q.WebhookBacklog(ctx)
	if err != nil {
		return fmt.Errorf("webhook backlog: %w", err)
	}
	d.oldest.Reset()
	d.backlog.Reset()
	for _, r := range rows {
		d.oldest.WithLabelValues(r.ID.String()).Set(r.OldestSeconds)
		d.backlog.WithLabelValues(r.ID.String()).Set(float64(r.Undelivered))
	}
	return nil
}

// backoff is the wait before attempt n+1: base (5 s) doubling to an
// hour, with jitter (5 s, 10 s, 20 s, … then hourly until WEBHOOK_MAX_AGE).
func backoff(base time.Duration, n int) time.Duration {
	ceiling := min(base<<min(max(n-1, 0), 10), time.Hour)
	return ceiling/2 + rand.N(ceiling/2+1)
}

// signatures is the webhook-signature header: "v1,<base64>" of the
// secret, and of the previous one while it still signs.
func signatures(msgID string, ts time.Time, body []byte, secret string, previous *string) (string, error) {
	sigs := make([]string, 0, 2)
	for _, s := range []*string{&secret, previous} {
		if s == nil || *s == "" {
			continue
		}
		sig, err := Sign(*s, msgID, ts, body)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, sig)
	}
	return strings.Join(sigs, " "), nil
}

// Sign is one Standard Webhooks signature, "v1,<base64>": HMAC-SHA256,
// keyed with the secret's base64-decoded part after "whsec_", of
// "<msgID>.<unix seconds>.<body>".
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return "", errors.New("the endpoint's secret is not whsec_ and base64")
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", msgID, ts.Unix())
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
