# sekali: the commands a developer and CI run. `make help` lists them.

SQLC_VERSION := v1.31.1
SQLC := bin/sqlc-$(SQLC_VERSION)
MAILPIT_VERSION := v1.33.1
GOLANGCI_LINT_VERSION := v2.15.0
# The Nu Html Checker the e-mail HTML tests run (internal/testenv.VnuVersion).
VNU_VERSION := 26.9.27
# Debian's SpamAssassin, whose shipped rules the e-mails are scored with
# (internal/testenv.SpamAssassinVersion is its upstream version).
SPAMASSASSIN_DEB_VERSION := 4.0.1-1~deb12u1
GO ?= go

.PHONY: help run run-check browser chromium test fuzz gallery preflight mailpit pgbouncer postfix vnu spamassassin bench bench-provider bench-go chaos chaos-long sqlc sqlc-check client client-check tidy-check vet golangci-lint lint compose-check deploy-check ci up

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# What `make run` builds: the three binaries and the program that runs
# them with Mailpit (cmd/devstack).
RUN_BINARIES := ./cmd/api ./cmd/worker ./cmd/reconciler ./cmd/devstack

run: mailpit ## the whole stack on this machine, no Docker: PostgreSQL and Redis (installed, started if missing, unless DATABASE_URL or REDIS_URL names another), Mailpit (UI :8025), API :8080; Ctrl-C stops it
	@scripts/services.sh postgres redis
	@scripts/build.sh "building the API, the worker, the reconciler and devstack into bin/: the first time it compiles about 670 packages, a few minutes (4 to 6 on two busy cores); then seconds" \
		$(GO) build -v -o bin/ $(RUN_BINARIES)
	bin/devstack -bin bin

run-check: mailpit ## run make run, follow the README against it (a key, an order, its e-mail in Mailpit) and docs/testmode.md's recipe, then Ctrl-C it
	$(GO) test -count=1 -tags runcheck -run TestMakeRun -v -timeout 15m ./cmd/devstack

# A count of executions (20000x), not a duration, in make test: with a
# duration, Go 1.26's fuzzing coordinator can report the -fuzztime
# deadline itself as a failure ("context deadline exceeded", no failing
# input) when a worker is busy as it expires (go.dev/issue/75804, fixed
# in Go 1.27); a count has no deadline to race. Each target runs about
# 10 s here at 20,000.
FUZZTIME ?= 2m

test: preflight ## run every test against the real PostgreSQL, Redis, Mailpit and SMTP sink, then fuzz the request parsers briefly
	$(GO) test -race -count=1 ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

fuzz: ## fuzz the checkout decoder and validator, the Idempotency-Key parser, the strict JSON parser and every route (no input makes a 5xx), FUZZTIME each (default 2m)
	$(GO) test -run '^$$' -fuzz '^FuzzCheckoutBody$$' -fuzztime $(FUZZTIME) ./internal/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzIdempotencyKey$$' -fuzztime $(FUZZTIME) ./internal/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzJSONBody$$' -fuzztime $(FUZZTIME) ./internal/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzEveryRoute$$' -fuzztime $(FUZZTIME) ./internal/httpapi

bench: preflight ## run the whole stack natively under open-loop load; prints the report (bench.md) and draws bench.png
	$(GO) build -o bin/ ./cmd/api ./cmd/worker ./cmd/reconciler ./cmd/bench
	bin/bench -bin bin -out bench.md -plot bench.png $(BENCH_FLAGS)

bench-provider: preflight ## the stack bound by the provider's pace: Resend's stand-in at 5 requests/s, 300 checkouts at once, 2 workers, batches off then on; prints the report (bench-provider.md)
	$(GO) build -o bin/ ./cmd/api ./cmd/worker ./cmd/reconciler ./cmd/bench
	bin/bench -bin bin -out bench-provider.md -provider resend -provider-rate 5 -orders 300 -workers 2 -concurrency 10 -provider-batches off,on $(BENCH_FLAGS)

bench-go: preflight ## the hot-path Go benchmarks, 6 times each, for benchstat
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./internal/notify ./internal/order ./internal/postgres | tee bench-go.txt

chaos: preflight ## the fault-injection suite's short variant (also part of make test), with its summary table
	$(GO) test -count=1 -v -timeout 20m ./internal/chaos 2>&1 | tee chaos.out | grep -E '^(--- |ok|FAIL|\|)|summary'

chaos-long: preflight ## the short variant plus PostgreSQL restarts and a soak (CHAOS_SOAK_ORDERS, default 300)
	$(GO) test -count=1 -v -tags chaoslong -timeout 60m ./internal/chaos 2>&1 | tee chaos.out | grep -E '^(--- |ok|FAIL|\|)|summary'

# Chromium from Debian's packages, for the tests that drive a real browser.
chromium:
	@command -v chromium >/dev/null || { sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium || \
		{ $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }; }

browser: preflight chromium ## the pages people use (the operator console, the template gallery) in headless Chromium; CONSOLE_SCREENSHOT=docs/console.png saves the console's overview there, and beside it the overview at 390 px (console-phone.png) and a delivery's page (console-delivery.png)
	$(if $(CONSOLE_SCREENSHOT),CONSOLE_SCREENSHOT=$(abspath $(CONSOLE_SCREENSHOT))) $(GO) test -count=1 -tags browser -run 'InABrowser' -v ./internal/httpapi

gallery: preflight chromium ## open the template gallery in headless Chromium (installed from Debian's packages if missing) and save docs/templates-gallery.png
	SCREENSHOT=$(CURDIR)/docs/templates-gallery.png $(GO) test -count=1 -tags browser -run TestGalleryInABrowser -v ./internal/httpapi

preflight: mailpit pgbouncer postfix vnu spamassassin ## fail at once, with instructions, if PostgreSQL or Redis is unreachable; install Mailpit, PgBouncer, Postfix, the Nu Html Checker and SpamAssassin
	@$(GO) run ./internal/testenv/preflight

# The tests start PgBouncers of their own (internal/testenv/pgbouncer.go);
# Debian's lives in /usr/sbin, which is not on every user's PATH.
pgbouncer: ## install PgBouncer from Debian's packages unless it is there
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || { sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer || \
		{ $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer; }; }

# The tests start Postfixes of their own as the relay a shop runs
# (internal/testenv/postfix.go). Preseeded to "No configuration", the
# package writes no main.cf and starts no system instance.
postfix: ## install Postfix from Debian's packages unless it is there, configuring and starting nothing
	@test -x /usr/sbin/postfix || { sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		echo 'postfix postfix/main_mailer_type select No configuration' | $$sudo debconf-set-selections; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postfix || \
		{ $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postfix; }; }

# The e-mail templates' HTML is checked by the W3C's Nu Html Checker:
# vnu.jar from the npm package vnu-jar (its install script, which fetches
# a Java runtime, is not run), on Debian's Java.
vnu: ## install the Nu Html Checker (npm vnu-jar) into bin/vnu unless that version is there, and Debian's Java unless there is one
	@command -v java >/dev/null || { sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless || \
		{ $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless; }; }
	@command -v npm >/dev/null || { sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm || \
		{ $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; }; }
	@grep -qs '"version": "$(VNU_VERSION)"' bin/vnu/node_modules/vnu-jar/package.json || \
		npm install --prefix bin/vnu --no-save --no-audit --no-fund --ignore-scripts --loglevel=error vnu-jar@$(VNU_VERSION)

# The e-mails are scored by Debian's SpamAssassin with the rules its
# package ships (the tests read /usr/share/spamassassin, never what
# sa-update fetches): internal/testenv/spamassassin.go.
spamassassin: ## install Debian's SpamAssassin ($(SPAMASSASSIN_DEB_VERSION)) unless that version is there
	@test "$$(dpkg-query -W -f '$${Version}' spamassassin 2>/dev/null)" = "$(SPAMASSASSIN_DEB_VERSION)" || { sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends spamassassin=$(SPAMASSASSIN_DEB_VERSION) || \
		{ $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends spamassassin=$(SPAMASSASSIN_DEB_VERSION); }; }

# bin/mailpit is the real SMTP server the tests deliver to; go install
# stamps the module version into it (`mailpit version` itself says "dev").
mailpit: ## install Mailpit, the SMTP server the tests use, into bin/ unless that version is there
	@test "$$($(GO) version -m bin/mailpit 2>/dev/null | awk '$$1 == "mod" && $$2 == "github.com/axllent/mailpit" { print $$3 }')" = "$(MAILPIT_VERSION)" || \
		GOBIN=$(CURDIR)/bin scripts/build.sh "installing Mailpit $(MAILPIT_VERSION) into bin/: the first time it downloads and compiles it, a few minutes" \
		$(GO) install -v github.com/axllent/mailpit@$(MAILPIT_VERSION)

$(SQLC):
	@mkdir -p bin
	GOBIN=$(CURDIR)/bin/.sqlc-build $(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
	mv bin/.sqlc-build/sqlc $(SQLC) && rm -rf bin/.sqlc-build

sqlc: $(SQLC) ## regenerate internal/dbsqlc from db/migrations and db/queries
	$(SQLC) generate

sqlc-check: $(SQLC) ## fail if the committed generated code differs from what sqlc makes
	$(SQLC) diff

# The Go client's generated half: oapi-codegen, the version go.mod's tool
# directive pins, run on api/openapi.yaml with oapi-codegen.yaml; the
# same command line as the go:generate directive in generate.go.
CLIENT_GEN := internal/apiclient/apiclient.gen.go

client: ## regenerate internal/apiclient (the Go client's generated half) from api/openapi.yaml
	$(GO) generate .

client-check: ## fail, showing the diff, if internal/apiclient is not what oapi-codegen makes of api/openapi.yaml
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(GO) tool oapi-codegen -config oapi-codegen.yaml -o "$$tmp/gen.go" api/openapi.yaml && \
		diff -u $(CLIENT_GEN) "$$tmp/gen.go" || { echo "$(CLIENT_GEN) is not what api/openapi.yaml makes: run make client"; exit 1; }

tidy-check: ## fail, showing the diff, if go mod tidy would change go.mod or go.sum
	$(GO) mod tidy -diff

vet: ## go vet every package and check gofmt
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }

# Like bin/mailpit: go install stamps the module version into the binary.
golangci-lint: ## install golangci-lint into bin/ unless that version is there
	@test "$$($(GO) version -m bin/golangci-lint 2>/dev/null | awk '$$1 == "mod" && $$2 == "github.com/golangci/golangci-lint/v2" { print $$3 }')" = "$(GOLANGCI_LINT_VERSION)" || \
		GOBIN=$(CURDIR)/bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

lint: golangci-lint ## run the linters .golangci.yml enables (generated internal/dbsqlc excluded)
	bin/golangci-lint run ./...

compose-check: ## validate docker-compose.yml (and its ha profile) without a Docker engine
	docker-compose config -q
	docker-compose --profile ha config -q

deploy-check: ## validate the Prometheus config and alert rules, and run the rules' unit tests (needs promtool)
	promtool check config --syntax-only deploy/prometheus/prometheus.yml
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

ci: test run-check browser sqlc-check client-check tidy-check vet lint compose-check deploy-check ## what .ci/run runs after starting the services, make test first

up: ## run the whole stack (needs a Docker engine)
	docker compose up --build
