package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sekali-dev/sekali/internal/dbsqlc"
)

// SessionTTL is how long a console sign-in lasts: a working day.
const SessionTTL = 8 * time.Hour

// ErrNotOperator is returned when a key that is valid lacks ScopeAdmin.
var ErrNotOperator = errors.New("apikey: the key has no admin scope")

// Session is a signed-in operator of the console.
type Session struct {
	Operator Key    // the admin key the operator signed in with
	CSRF     string // the token each of the session's forms must carry
	Expires  time.Time
}

// Actor is how the history names what the operator does:
// "operator:<key name> (<key prefix>)".
func (s Session) Actor() string {
	return fmt.Sprintf("operator:%s (%s)", s.Operator.Name, s.Operator.Prefix)
}

// SignIn starts a console session for the operator whose key token is:
// ErrInvalid for a token that is no live key, ErrNotOperator for a key
// without ScopeAdmin. secret is the session's cookie value; only its
// SHA-256 is stored. Expired sessions are swept on the way.
func (s *Service) SignIn(ctx context.Context, token string) (sess Session, secret string, err error) {
	k, err := s.authenticate(ctx, token, sha256.Sum256([]byte(token)))
	if err != nil {
		return Session{}, "", err
	}
	if !k.Has(ScopeAdmin) {
		return Session{}, "", ErrNotOperator
	}
	q := dbsqlc.New(s.db)
	if _, err := q.DeleteExpiredConsoleSessions(ctx); err != nil {
		return Session{}, "", fmt.Errorf("sweep console sessions: %w", err)
	}
	secret, csrf := randomToken(), randomToken()
	hash := sha256.Sum256([]byte(secret))
	expires := s.now().Add(SessionTTL)
	if err := q.InsertConsoleSession(ctx, dbsqlc.InsertConsoleSessionParams{
		TokenHash: hash[:], KeyID: k.ID, CsrfToken: csrf, ExpiresAt: expires,
	}); err != nil {
		return Session{}, "", fmt.Errorf("start console session: %w", err)
	}
	return Session{Operator: k, CSRF: csrf, Expires: expires}, secret, nil
}

// Session returns the live session whose cookie value is secret, or
// ErrInvalid: none, expired, signed out, or its key revoked since.
func (s *Service) Session(ctx context.Context, secret string) (Session, error) {
	hash := sha256.Sum256([]byte(secret))
	row, err := dbsqlc.New(s.db).GetConsoleSession(ctx, hash[:])
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrInvalid
	}
	if err != nil {
		return Session{}, fmt.Errorf("look up console session: %w", err)
	}
	k := fromRow(dbsqlc.ApiKey{ID: row.ID, Name: row.Name, Prefix: row.Prefix, Scopes: row.Scopes, CreatedAt: row.CreatedAt, RevokedAt: row.RevokedAt})
	if !k.Has(ScopeAdmin) {
		return Session{}, ErrInvalid
	}
	return Session{Operator: k, CSRF: row.CsrfToken, Expires: row.ExpiresAt}, nil
}

// SignOut ends the session whose cookie value is secret; ending one that
// is gone is no error.
func (s *Service) SignOut(ctx context.Context, secret string) error {
	hash := sha256.Sum256([]byte(secret))
	if err := dbsqlc.New(s.db).DeleteConsoleSession(ctx, hash[:]); err != nil {
		return fmt.Errorf("end console session: %w", err)
	}
	return nil
}

// randomToken is 256 random bits, URL-safe.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}
