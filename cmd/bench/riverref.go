package main

// The reference pipeline: the same checkout → e-mail path built on River
// the way River's documentation recommends, for the benchmark to measure
// beside sekali under the same load. It is part of this binary, so that
// `make bench` (which builds only cmd/bench besides the service's
// binaries) carries it, and the benchmark starts it as two processes of
// its own executable, as sekali runs as an API and a worker:
//
//	bench riverref api      the checkout API: in one transaction the order,
//	                        its lines and a unique River job (InsertTx)
//	bench riverref worker   a River client that works the jobs: render the
//	                        confirmation, send it over SMTP, return nil
//
// Both are configured by environment variables like the service's
// binaries (riverRefConfig lists them). The schema is sekali's own
// migrations plus River's tables (rivermigrate), applied by the API at
// start.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"golang.org/x/sync/errgroup"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/debugserver"
	"github.com/sekali-dev/sekali/internal/envconfig"
	"github.com/sekali-dev/sekali/internal/mail"
	"github.com/sekali-dev/sekali/internal/money"
	"github.com/sekali-dev/sekali/internal/notify"
	"github.com/sekali-dev/sekali/internal/order"
	"github.com/sekali-dev/sekali/internal/postgres"
)

// riverRefConfig is the reference's configuration.
type riverRefConfig struct {
	DatabaseURL   string
	HTTPAddr      string        // the API's
	LogLevel      slog.Level    // the API logs one line per request at info
	PprofAddr     string        // as the service's binaries: profiles when set
	SMTPHost      string        // the worker's
	SMTPPort      int           // the worker's
	MailFrom      string        // sender, and the domain of the Message-IDs
	MaxWorkers    int           // jobs the worker runs at once (River's QueueConfig.MaxWorkers)
	FetchCooldown time.Duration // River's Config.FetchCooldown, in both processes
	FetchPoll     time.Duration // River's Config.FetchPollInterval, the worker's fallback poll
}

func loadRiverRefConfig(getenv func(string) string) (riverRefConfig, error) {
	env := envconfig.New(getenv)
	cfg := riverRefConfig{
		DatabaseURL:   env.Secret("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sekali_bench_river?sslmode=disable"),
		HTTPAddr:      env.String("HTTP_ADDR", "127.0.0.1:0"),
		LogLevel:      env.LogLevel("LOG_LEVEL"),
		PprofAddr:     env.String("PPROF_ADDR", ""),
		SMTPHost:      env.String("SMTP_HOST", "127.0.0.1"),
		SMTPPort:      env.Int("SMTP_PORT", 1025, 1, 65535),
		MailFrom:      env.String("MAIL_FROM", "orders@shop.example"),
		MaxWorkers:    env.Int("RIVER_MAX_WORKERS", 16, 1, 10_000),
		FetchCooldown: env.Duration("RIVER_FETCH_COOLDOWN", river.FetchCooldownDefault),
		FetchPoll:     env.Duration("RIVER_FETCH_POLL_INTERVAL", river.FetchPollIntervalDefault),
	}
	if _, err := mail.ParseSender(cfg.MailFrom); err != nil {
		env.Check("MAIL_FROM", err)
	}
	if cfg.FetchCooldown < river.FetchCooldownMin || cfg.FetchPoll < cfg.FetchCooldown {
		env.Check("RIVER_FETCH_COOLDOWN", fmt.Errorf("%v: want at least %v and at most RIVER_FETCH_POLL_INTERVAL (%v)", cfg.FetchCooldown, river.FetchCooldownMin, cfg.FetchPoll))
	}
	return cfg, env.Err()
}

// runRiverRef is `bench riverref api|worker`.
func runRiverRef(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 1 || (args[0] != "api" && args[0] != "worker") {
		return fmt.Errorf("usage: bench riverref api|worker (configured by environment variables), not %q", args)
	}
	cfg, err := loadRiverRefConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel})).With("service", "riverref-"+args[0])
	if cfg.PprofAddr != "" {
		profiles, err := debugserver.Start(cfg.PprofAddr, log)
		if err != nil {
			return err
		}
		defer profiles.Close()
	}
	pool, err := postgres.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if args[0] == "worker" {
		return runRiverRefWorker(ctx, cfg, pool, log)
	}
	if err := migrateRiverRef(ctx, pool, log); err != nil {
		return err
	}
	return serveRiverRefAPI(ctx, cfg, pool, log)
}

// migrateRiverRef applies sekali's migrations, so that orders and their
// lines land in the same tables, then River's own.
func migrateRiverRef(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	if err := postgres.Migrate(ctx, pool, log); err != nil {
		return err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

// confirmationArgs is the River job of one order confirmation. It
// carries the template's snapshot, as sekali's intent row does, so the
// worker needs no query of its own. Uniqueness is by order and
// recipient only (the fields tagged unique): the same e-mail can be
// enqueued once, whatever else the args hold.
type confirmationArgs struct {
	OrderID        uuid.UUID       `json:"order_id" river:"unique"`
	Recipient      string          `json:"recipient" river:"unique"`
	NotificationID uuid.UUID       `json:"notification_id"` // the id the checkout answered with
	Data           json.RawMessage `json:"data"`            // what the order-confirmation template renders
}

func (confirmationArgs) Kind() string { return "order_confirmation" }

func (confirmationArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// confirmationData is the order-confirmation template's data, in the
// shape sekali's checkout freezes it.
type confirmationData struct {
	OrderID      uuid.UUID    `json:"order_id"`
	CustomerName string       `json:"customer_name"`
	Currency     string       `json:"currency"`
	Items        []order.Item `json:"items"`
	Total        int64        `json:"total"`
	PlacedAt     time.Time    `json:"placed_at"`
}

// idempotencyScope is the scope of the reference's Idempotency-Key rows,
// the same as sekali's for the same endpoint.
const idempotencyScope = "POST /v1/orders"

func serveRiverRefAPI(ctx context.Context, cfg riverRefConfig, pool *pgxpool.Pool, log *slog.Logger) error {
	// An insert-only client: no queues, no workers. Its FetchCooldown
	// also spaces the insert notifications it sends to the workers.
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: cfg.FetchCooldown, FetchPollInterval: cfg.FetchPoll, Logger: log})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", handleRiverRefCheckout(pool, jobs))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := pool.Ping(r.Context()); err != nil {
			http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := &http.Server{
		Handler:           logRequests(log, mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("api listening", "addr", ln.Addr().String())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}

// logRequests writes one line per request, as sekali's API does at
// LOG_LEVEL=info.
func logRequests(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rec.status), slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// errKeyTaken: the Idempotency-Key's row exists (its unique constraint
// refused a second one).
var errKeyTaken = errors.New("idempotency key already recorded")

// handleRiverRefCheckout records a checkout and enqueues its
// confirmation in one transaction. With an Idempotency-Key, the key's
// row is written in the same transaction under its primary key: a
// retry after the commit finds it and gets the first answer back; a
// retry racing the first waits on the row's lock and then finds it; the
// same key with a different body is refused (422).
func handleRiverRefCheckout(pool *pgxpool.Pool, jobs *river.Client[pgx.Tx]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.Trim(strings.TrimSpace(r.Header.Get("Idempotency-Key")), `"`)
		if len(key) > 255 {
			writeRefProblem(w, http.StatusBadRequest, "Send one Idempotency-Key of 1 to 255 characters.")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			writeRefProblem(w, http.StatusBadRequest, "The body could not be read.")
			return
		}
		o, err := decodeRiverRefCheckout(body)
		if err != nil {
			writeRefProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		o.ID = uuid.Must(uuid.NewV7())
		o.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
		data, err := json.Marshal(confirmationData{OrderID: o.ID, CustomerName: o.CustomerName, Currency: o.Currency,
			Items: o.Items, Total: o.Total, PlacedAt: o.CreatedAt})
		if err != nil {
			writeRefProblem(w, http.StatusInternalServerError, err.Error())
			return
		}
		args := confirmationArgs{OrderID: o.ID, Recipient: o.CustomerEmail, NotificationID: uuid.Must(uuid.NewV7()), Data: data}
		o.Notifications = []order.Notification{{ID: args.NotificationID, Template: order.TemplateConfirmation,
			IdempotencyKey: notify.Key(order.TemplateConfirmation, o.ID, o.CustomerEmail), Status: "pending"}}
		resp, err := json.Marshal(o)
		if err != nil {
			writeRefProblem(w, http.StatusInternalServerError, err.Error())
			return
		}
		hash := sha256.Sum256(body)
		err = pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			if err := insertRiverRefOrder(r.Context(), dbsqlc.New(tx), o); err != nil {
				return err
			}
			if _, err := jobs.InsertTx(r.Context(), tx, args, nil); err != nil {
				return fmt.Errorf("insert job: %w", err)
			}
			if key == "" {
				return nil
			}
			err := dbsqlc.New(tx).InsertIdempotencyKey(r.Context(), dbsqlc.InsertIdempotencyKeyParams{Scope: idempotencyScope,
				Key: key, RequestHash: hash[:], ResponseBody: resp, ExpiresAt: o.CreatedAt.Add(24 * time.Hour)})
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" {
				return errKeyTaken
			}
			return err
		})
		if errors.Is(err, errKeyTaken) {
			prior, err := dbsqlc.New(pool).GetIdempotencyKey(r.Context(), dbsqlc.GetIdempotencyKeyParams{Scope: idempotencyScope, Key: key})
			switch {
			case err != nil:
				writeRefProblem(w, http.StatusInternalServerError, err.Error())
			case string(prior.RequestHash) != string(hash[:]):
				writeRefProblem(w, http.StatusUnprocessableEntity, "This Idempotency-Key was used for a different request.")
			default:
				w.Header().Set("Idempotent-Replayed", "true")
				writeRefJSON(w, http.StatusCreated, prior.ResponseBody)
			}
			return
		}
		if err != nil {
			writeRefProblem(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Location", "/v1/orders/"+o.ID.String())
		writeRefJSON(w, http.StatusCreated, resp)
	})
}

func insertRiverRefOrder(ctx context.Context, q *dbsqlc.Queries, o order.Order) error {
	p := dbsqlc.InsertOrderParams{ID: o.ID, CustomerEmail: o.CustomerEmail, CustomerName: o.CustomerName,
		Currency: o.Currency, TotalMinor: o.Total, CreatedAt: o.CreatedAt}
	for i, it := range o.Items {
		p.LineNos = append(p.LineNos, int32(i+1))
		p.Skus = append(p.Skus, it.SKU)
		p.Names = append(p.Names, it.Name)
		p.Quantities = append(p.Quantities, it.Quantity)
		p.UnitPricesMinor = append(p.UnitPricesMinor, it.UnitPrice)
	}
	if err := q.InsertOrder(ctx, p); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	return nil
}

// decodeRiverRefCheckout reads the checkout JSON sekali's API takes and
// checks what a careful simple service checks: a deliverable address, a
// name, a known currency, 1 to order.MaxItems lines with sane
// quantities and prices, and a total that stays exact. The first
// problem is the answer (sekali lists them all).
func decodeRiverRefCheckout(body []byte) (order.Order, error) {
	var req struct {
		CustomerEmail string `json:"customer_email"`
		CustomerName  string `json:"customer_name"`
		Currency      string `json:"currency"`
		Items         []struct {
			SKU       string `json:"sku"`
			Name      string `json:"name"`
			Quantity  int64  `json:"quantity"`
			UnitPrice *int64 `json:"unit_price"`
		} `json:"items"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return order.Order{}, fmt.Errorf("the body is not a checkout: %w", err)
	}
	email, err := mail.NormalizeAddress(req.CustomerEmail)
	if err != nil {
		return order.Order{}, fmt.Errorf("customer_email: %w", err)
	}
	o := order.Order{CustomerEmail: email, CustomerName: strings.TrimSpace(req.CustomerName), Currency: req.Currency}
	switch {
	case o.CustomerName == "" || utf8.RuneCountInString(o.CustomerName) > 200:
		return order.Order{}, errors.New("customer_name: give a name of at most 200 characters")
	case !money.Known(o.Currency):
		return order.Order{}, errors.New("currency: must be an active ISO 4217 code such as IDR")
	case len(req.Items) == 0 || len(req.Items) > order.MaxItems:
		return order.Order{}, fmt.Errorf("items: give 1 to %d", order.MaxItems)
	}
	for i, it := range req.Items {
		if it.SKU == "" || it.Name == "" || it.Quantity < 1 || it.Quantity > order.MaxQuantity ||
			it.UnitPrice == nil || *it.UnitPrice < 0 || *it.UnitPrice > order.MaxAmount {
			return order.Order{}, fmt.Errorf("items/%d: needs a sku, a name, a quantity of 1 to %d and a unit_price of 0 to %d", i, order.MaxQuantity, int64(order.MaxAmount))
		}
		line := *it.UnitPrice * it.Quantity
		if line/it.Quantity != *it.UnitPrice || line > order.MaxAmount || o.Total > order.MaxAmount-line {
			return order.Order{}, fmt.Errorf("items/%d: the total exceeds %d minor units", i, int64(order.MaxAmount))
		}
		o.Total += line
		o.Items = append(o.Items, order.Item{SKU: it.SKU, Name: it.Name, Quantity: int32(it.Quantity), UnitPrice: *it.UnitPrice, LineTotal: line})
	}
	return o, nil
}

func writeRefJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeRefProblem(w http.ResponseWriter, status int, detail string) {
	b, _ := json.Marshal(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
