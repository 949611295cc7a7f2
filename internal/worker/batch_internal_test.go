package worker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgreSQL's refusal of a shared statement for one row's value, a
// deadlock or a serialization failure runs each attempt's row alone
// (internal/smartbatch's Alone); any other error (a lost connection,
// which may come after the commit; a timeout, which would only be waited
// out again per row) fails the whole batch.
func TestPerRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "22021", Message: "invalid byte sequence"}, true},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key value"}, true},
		{&pgconn.PgError{Code: "40P01", Message: "deadlock detected"}, true},
		{&pgconn.PgError{Code: "40001", Message: "could not serialize access"}, true},
		{fmt.Errorf("claim: %w", &pgconn.PgError{Code: "22P02"}), true},
		{&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}, false},
		{errors.New("unexpected EOF"), false},
	} {
		if got := perRow(tc.err); got != tc.want {
			t.Errorf("perRow(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
