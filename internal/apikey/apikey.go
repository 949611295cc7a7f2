// Package apikey holds the credentials of the shop's backend: keys with
// scopes, created and revoked by operators, shown once and stored only as
// a hash, checked in constant time. Several keys may be valid at once, so
// that one is rotated by creating the next, deploying it, and revoking
// the old one. docs/security.md says which route needs which scope.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
	"github.com/sekali-dev/sekali/internal/textrule"
)

// Scope is what a key may do.
type Scope string

const (
	// ScopeCheckout places orders (POST /v1/orders), and nothing else: the
	// key of a shop's checkout server.
	ScopeCheckout Scope = "checkout"
	// ScopeOrdersRead reads orders and their notifications.
	ScopeOrdersRead Scope = "orders:read"
	// ScopeOrdersWrite places orders and records shipments (and so sends
	// their e-mails).
	ScopeOrdersWrite Scope = "orders:write"
	// ScopeNotificationsWrite triggers any template for an order.
	ScopeNotificationsWrite Scope = "notifications:write"
	// ScopeAdmin is an operator's: it signs in to the console under
	// /admin/, whose actions are recorded under the key's name. It opens
	// none of the backend's routes.
	ScopeAdmin Scope = "admin"
)

// Scopes lists every scope, in order.
var Scopes = []Scope{ScopeCheckout, ScopeOrdersRead, ScopeOrdersWrite, ScopeNotificationsWrite, ScopeAdmin}

// BackendScopes are the scopes of the shop's backend: every one but the
// operators'.
var BackendScopes = Scopes[:len(Scopes)-1]

// Prefix starts every live key, so that a leaked one is recognizable
// (secret scanners look for such prefixes).
const Prefix = "sekali_key_"

// TestPrefix starts every test key (ModeTest): a key whose orders and
// notifications run the whole pipeline but never reach a provider
// (docs/testmode.md). A glance at a configuration tells it from a live
// one, and so does a secret scanner.
const TestPrefix = "sekali_test_"

// Mode is whether a key's orders are real (live) or a shop's tests
// (test). It is the key's for good: a key made to replace another has
// that key's mode.
type Mode string

const (
	ModeLive Mode = "live"
	ModeTest Mode = "test"
)

// ParseMode reads a mode's name; "" is live.
func ParseMode(s string) (Mode, error) {
	switch Mode(strings.TrimSpace(s)) {
	case "", ModeLive:
		return ModeLive, nil
	case ModeTest:
		return ModeTest, nil
	}
	return "", fmt.Errorf("%w %q: want live or test", ErrBadMode, s)
}

var (
	// ErrInvalid is returned for a token that is no live key.
	ErrInvalid = errors.New("apikey: not a valid key")
	// ErrNotFound is returned when no key has the given id.
	ErrNotFound = errors.New("apikey: not found")
	// ErrBadScope is returned for a scope that does not exist.
	ErrBadScope = errors.New("apikey: unknown scope")
	// ErrBadMode is returned for a mode that does not exist, for a test
	// key with the operators' scope (operators act on live data), and for
	// a key that would replace a key of the other mode.
	ErrBadMode = errors.New("apikey: bad mode")
)

// Key is one credential, without its secret.
type Key struct {
	ID     uuid.UUID `json:"id"`
	Name   string    `json:"name"`
	Prefix string    `json:"prefix"` // the public part of the key, for telling keys apart
	Scopes []Scope   `json:"scopes"`
	// Owner names the key's line: its own id, or, for a key made to
	// replace another (rotation), that key's owner. What a key makes (an
	// order, a notification) belongs to its owner: only keys of that line
	// may call it off.
	Owner uuid.UUID `json:"owner"`
	// Mode: a test key's orders and notifications never reach a
	// provider, and it sees only test orders (docs/testmode.md).
	Mode      Mode       `json:"mode"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Test reports whether k is a test key.
func (k Key) Test() bool { return k.Mode == ModeTest }

// Has reports whether k carries scope.
func (k Key) Has(scope Scope) bool { return slices.Contains(k.Scopes, scope) }

// DB is where keys are kept: a *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// CacheTTL is how long a key that authenticated is taken on its word:
// a backend's every request does not cost a database look-up, and a
// revocation reaches every API process within it (the process that
// revoked the key at once).
const CacheTTL = 5 * time.Second

// maxCached bounds the keys remembered; past it the cache starts over.
const maxCached = 1000

// Service creates, lists, revokes and checks keys.
type Service struct {
	db  DB
	now func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cachedKey // by the SHA-256 of the whole key
	// operators are the prefixes of the live operator keys as read last,
	// until operatorsUntil (IsOperator).
	operators      map[string]bool
	operatorsUntil time.Time
}

type cachedKey struct {
	key   Key
	until time.Time
}

// NewService returns a Service over db.
func NewService(db DB) *Service {
	return &Service{db: db, now: time.Now, cache: map[[sha256.Size]byte]cachedKey{}}
}

// ParseScopes checks a list of scope names.
func ParseScopes(names []string) ([]Scope, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: give at least one of %v", ErrBadScope, Scopes)
	}
	var out []Scope
	for _, n := range names {
		s := Scope(strings.TrimSpace(n))
		if !slices.Contains(Scopes, s) {
			return nil, fmt.Errorf("%w %q: want one of %v", ErrBadScope, n, Scopes)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}

// CheckName trims a key's name and says what is wrong with it, "" if
// nothing: it is held to the rule a checkout's one-line fields are
// (textrule.OneLine), at most 100 characters. A blank name comes back
// as "" with the problem "must not be empty"; callers that want to say
// more about a missing name test for "" first. Both the admin API and
// `api keys create` apply it.
func CheckName(raw string) (name, problem string) {
	name = strings.TrimSpace(raw)
	return name, textrule.OneLine(name, 100)
}

// Create makes a live key of a new line (its own owner), by actor (as
// the operators' actions name people: an operator, admin:<request id>,
// cli:<user>@<host>); secret is the whole key, shown this once.
func (s *Service) Create(ctx context.Context, actor, name string, scopes []Scope) (k Key, secret string, err error) {
	return s.CreateReplacing(ctx, actor, name, scopes, uuid.Nil, ModeLive)
}

// CreateReplacing makes a key that replaces the key replaces (uuid.Nil:
// none, a new line), so that it has that key's owner: the notifications
// the old key made stay the new one's to cancel once the old one is
// revoked. Replacing revokes nothing; a key that does not exist is
// ErrNotFound. Revoked keys may be replaced (a key revoked in a hurry).
// mode is the new key's (ModeTest: a test key, sekali_test_…); a key
// replaces only a key of its own mode, and a test key never has the
// operators' scope (both ErrBadMode). The key and the record of who made
// it (operator_actions) commit together.
func (s *Service) CreateReplacing(ctx context.Context, actor, name string, scopes []Scope, replaces uuid.UUID, mode Mode) (k Key, secret string, err error) {
	mode, err = ParseMode(string(mode))
	if err != nil {
		return Key{}, "", err
	}
	if mode == ModeTest && slices.Contains(scopes, ScopeAdmin) {
		return Key{}, "", fmt.Errorf("%w: a test key cannot have the admin scope: operators act on live data", ErrBadMode)
	}
	id := uuid.Must(uuid.NewV7())
	owner := id
	if replaces != uuid.Nil {
		old, err := dbsqlc.New(s.db).GetAPIKey(ctx, replaces)
		if errors.Is(err, pgx.ErrNoRows) {
			return Key{}, "", fmt.Errorf("replace api key %s: %w", replaces, ErrNotFound)
		}
		if err != nil {
			return Key{}, "", fmt.Errorf("replace api key %s: %w", replaces, err)
		}
		if old.Test != (mode == ModeTest) {
			return Key{}, "", fmt.Errorf("%w: api key %s is of the other mode; a key replaces only a key of its own", ErrBadMode, replaces)
		}
		owner = old.OwnerID
	}
	var idPart [10]byte
	_, _ = rand.Read(idPart[:]) // crypto/rand.Read never fails on supported platforms
	start := Prefix
	if mode == ModeTest {
		start = TestPrefix
	}
	prefix := start + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(idPart[:]))
	secret = prefix + "_" + randomToken()
	hash := sha256.Sum256([]byte(secret))
	names := make([]string, len(scopes))
	for i, sc := range scopes {
		names[i] = string(sc)
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		row, err := q.InsertAPIKey(ctx, dbsqlc.InsertAPIKeyParams{
			ID: id, Name: name, Prefix: prefix, SecretHash: hash[:], Scopes: names, OwnerID: owner, Test: mode == ModeTest,
		})
		if err != nil {
			return err
		}
		k = fromRow(row)
		detail := map[string]any{"name": k.Name, "scopes": k.Scopes, "mode": k.Mode}
		if replaces != uuid.Nil {
			detail["replaces"] = replaces.String()
		}
		return recordAction(ctx, q, actor, "api_key.create", k, detail)
	})
	if err != nil {
		return Key{}, "", fmt.Errorf("create api key: %w", err)
	}
	s.forgetOperators()
	return k, secret, nil
}

// PrefixOf is the public part of token that names a key, its prefix
// (sekali_key_<id>, sekali_test_<id>), if token has a key's shape. It
// says nothing of whether such a key exists.
func PrefixOf(token string) (prefix string, ok bool) {
	for _, start := range []string{Prefix, TestPrefix} {
		if rest, found := strings.CutPrefix(token, start); found {
			id, _, secret := strings.Cut(rest, "_")
			if !secret || id == "" {
				return "", false
			}
			return start + id, true
		}
	}
	return "", false
}

// IsOperator reports whether prefix names a live operator key (one of
// the admin scope), as the keys were at most CacheTTL ago (at once after
// a change made through this Service). The API asks it before any
// look-up of a token, so that an operator's key gets through from an
// address that strangers' failed guesses have closed to the others.
func (s *Service) IsOperator(ctx context.Context, prefix string) (bool, error) {
	now := s.now()
	s.mu.Lock()
	if now.Before(s.operatorsUntil) {
		defer s.mu.Unlock()
		return s.operators[prefix], nil
	}
	s.mu.Unlock()
	keys, err := s.List(ctx)
	if err != nil {
		return false, err
	}
	operators := map[string]bool{}
	for _, k := range keys {
		if k.RevokedAt == nil && k.Has(ScopeAdmin) {
			operators[k.Prefix] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.operators, s.operatorsUntil = operators, now.Add(CacheTTL)
	return operators[prefix], nil
}

// forgetOperators makes the next IsOperator read the keys again.
func (s *Service) forgetOperators() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.operatorsUntil = time.Time{}
}

// List returns every key, revoked ones included, oldest first.
func (s *Service) List(ctx context.Context) ([]Key, error) {
	rows, err := dbsqlc.New(s.db).ListAPIKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	out := make([]Key, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

// Revoke ends a key, by actor: at once in this process, within CacheTTL
// in the others; revoking a revoked key changes nothing.
func (s *Service) Revoke(ctx context.Context, actor string, id uuid.UUID) (k Key, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		q := dbsqlc.New(tx)
		row, err := q.RevokeAPIKey(ctx, id)
		if err != nil {
			return err
		}
		k = fromRow(row)
		return recordAction(ctx, q, actor, "api_key.revoke", k, map[string]any{"name": k.Name})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("revoke api key %s: %w", id, err)
	}
	s.mu.Lock()
	for h, c := range s.cache {
		if c.key.ID == id {
			delete(s.cache, h)
		}
	}
	s.operatorsUntil = time.Time{}
	s.mu.Unlock()
	return k, nil
}

// recordAction writes what actor did to key k into operator_actions, on
// q (the transaction of the change).
func recordAction(ctx context.Context, q *dbsqlc.Queries, actor, action string, k Key, detail map[string]any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return q.RecordOperatorAction(ctx, dbsqlc.RecordOperatorActionParams{
		Actor: textrule.Clip(actor, 500), Action: action, Target: "api_key:" + k.Prefix, Detail: b,
	})
}

// dummyHash is the stand-in's hash that a token is compared with when
// no key has its prefix (dbsqlc.CheckAPIKey): no token hashes to it.
var dummyHash = sha256.Sum256([]byte("sekali: no such key"))

// Authenticate returns the live key that token is, or ErrInvalid. A key
// that authenticated less than CacheTTL ago is not looked up again.
func (s *Service) Authenticate(ctx context.Context, token string) (Key, error) {
	have := sha256.Sum256([]byte(token))
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[have]
	s.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.key, nil
	}
	k, err := s.authenticate(ctx, token, have)
	if err == nil {
		s.mu.Lock()
		if len(s.cache) >= maxCached {
			clear(s.cache)
		}
		s.cache[have] = cachedKey{key: k, until: now.Add(CacheTTL)}
		s.mu.Unlock()
	}
	return k, err
}

// authenticate looks token, whose SHA-256 is have, up in the database.
// Every token that is not the live key takes one path, whatever its
// prefix or shape: the same statement, which returns one row (the key
// of the prefix, or a stand-in of the same shape whose hash is
// dummyHash), the same scan, and the same constant-time comparisons,
// none of them cut short. Only the stored hash is checked against: a
// token whose SHA-256 is a key's hash is that key, so its format needs
// no check of its own, which would be a path of its own.
func (s *Service) authenticate(ctx context.Context, token string, have [sha256.Size]byte) (Key, error) {
	// A test key's prefix is looked up as such, anything else as a live
	// key's: the same statement either way.
	start := Prefix
	if strings.HasPrefix(token, TestPrefix) {
		start = TestPrefix
	}
	prefix, _, _ := strings.Cut(strings.TrimPrefix(token, start), "_")
	if !textrule.Storable(prefix) {
		prefix = "" // text PostgreSQL refuses is no key's prefix: the statement looks up one that is none
	}
	row, err := dbsqlc.New(s.db).CheckAPIKey(ctx, dbsqlc.CheckAPIKeyParams{Prefix: start + prefix, StandInHash: dummyHash[:]})
	if err != nil {
		return Key{}, fmt.Errorf("look up api key: %w", err)
	}
	live := subtle.ConstantTimeCompare(have[:], row.SecretHash) & isTrue(row.Found) & isTrue(row.RevokedAt == nil)
	if live != 1 {
		return Key{}, ErrInvalid
	}
	return fromRow(dbsqlc.ApiKey{ID: row.ID, Name: row.Name, Prefix: row.Prefix, SecretHash: row.SecretHash,
		Scopes: row.Scopes, CreatedAt: row.CreatedAt, RevokedAt: row.RevokedAt, OwnerID: row.OwnerID, Test: row.Test}), nil
}

// isTrue is b as 1 or 0, for combining checks without cutting any short.
func isTrue(b bool) int {
	if b {
		return 1
	}
	return 0
}

func fromRow(r dbsqlc.ApiKey) Key {
	k := Key{ID: r.ID, Name: r.Name, Prefix: r.Prefix, Owner: r.OwnerID, Mode: ModeLive, CreatedAt: r.CreatedAt, RevokedAt: r.RevokedAt}
	if r.Test {
		k.Mode = ModeTest
	}
	for _, s := range r.Scopes {
		k.Scopes = append(k.Scopes, Scope(s))
	}
	return k
}
