package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	gomail "github.com/wneessen/go-mail"

	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/mailtemplate"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
)

// runRiverRefWorker works confirmation jobs until ctx ends, then stops
// River gracefully: the running jobs finish and their completions are
// written before it returns.
func runRiverRefWorker(ctx context.Context, cfg riverRefConfig, pool *pgxpool.Pool, log *slog.Logger) error {
	templates, err := mailtemplate.LoadBuiltin()
	if err != nil {
		return err
	}
	mailer := newRefMailer(cfg.SMTPHost, cfg.SMTPPort, cfg.MaxWorkers)
	defer mailer.close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &confirmationWorker{templates: templates, mailer: mailer, from: cfg.MailFrom, domain: mail.MessageIDDomain(cfg.MailFrom)})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}},
		Workers:           workers,
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPoll,
		Logger:            log,
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	// Cancelling Start's context would cancel the running jobs too; the
	// stop below is the graceful one.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	log.Info("worker started", "max_workers", cfg.MaxWorkers, "fetch_cooldown", cfg.FetchCooldown.String(), "fetch_poll_interval", cfg.FetchPoll.String())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return client.Stop(sctx)
}

// confirmationWorker renders the order confirmation with sekali's
// templates and sends it with the Message-ID and Idempotency-Key header
// sekali's worker gives it. Returning nil lets River's completer mark
// the job completed; an error makes River retry it with backoff.
type confirmationWorker struct {
	river.WorkerDefaults[confirmationArgs]
	templates    *mailtemplate.Templates
	mailer       *refMailer
	from, domain string
}

func (w *confirmationWorker) Work(ctx context.Context, job *river.Job[confirmationArgs]) error {
	r, err := w.templates.Render(order.TemplateConfirmation, job.Args.Data)
	if err != nil {
		return river.JobCancel(fmt.Errorf("render: %w", err)) // the same data will never render
	}
	key := notify.Key(order.TemplateConfirmation, job.Args.OrderID, job.Args.Recipient)
	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	if err := msg.From(w.from); err != nil {
		return river.JobCancel(err)
	}
	if err := msg.To(job.Args.Recipient); err != nil {
		return river.JobCancel(err)
	}
	msg.Subject(r.Subject)
	msg.SetMessageIDWithValue(mail.MessageID(key, w.domain))
	msg.SetGenHeader("Idempotency-Key", key)
	msg.SetDate()
	msg.SetBodyString(gomail.TypeTextPlain, r.Text)
	msg.AddAlternativeString(gomail.TypeTextHTML, r.HTML)
	return w.mailer.send(ctx, msg)
}

// refMailer keeps go-mail clients, each with its SMTP connection open,
// for the next message: as many as jobs run at once.
type refMailer struct {
	host string
	port int
	idle chan *gomail.Client
}

func newRefMailer(host string, port, size int) *refMailer {
	return &refMailer{host: host, port: port, idle: make(chan *gomail.Client, size)}
}

// send sends msg on a kept connection, or a new one. A connection that
// failed is closed; the job's retry gets a fresh one.
func (m *refMailer) send(ctx context.Context, msg *gomail.Msg) error {
	var c *gomail.Client
	select {
	case c = <-m.idle:
	default:
		// Without NOOP before and RSET after each message: the same
		// MAIL, RCPT, DATA exchange as sekali's SMTP provider.
		var err error
		c, err = gomail.NewClient(m.host, gomail.WithPort(m.port), gomail.WithTLSPolicy(gomail.NoTLS),
			gomail.WithTimeout(15*time.Second), gomail.WithoutNoop(), gomail.WithoutRset())
		if err != nil {
			return err
		}
		if err := c.DialWithContext(ctx); err != nil {
			return fmt.Errorf("connect to %s: %w", m.host+":"+strconv.Itoa(m.port), err)
		}
	}
	if err := c.Send(msg); err != nil {
		_ = c.Close()
		return fmt.Errorf("send: %w", err)
	}
	select {
	case m.idle <- c:
	default:
		_ = c.Close()
	}
	return nil
}

func (m *refMailer) close() {
	for {
		select {
		case c := <-m.idle:
			_ = c.Close()
		default:
			return
		}
	}
}
