package worker

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The statements on the way to a send are each shared by the attempts
// that reach them at once (internal/smartbatch); perRow is when one of
// them runs again for each attempt alone.

// perRow reports whether PostgreSQL's error for a statement shared by
// several attempts may not be every attempt's: a value it refused (data
// exception, class 22; integrity constraint, 23), a deadlock (40P01) or
// a serialization failure (40001). The statement committed nothing, and
// one row must not fail every attempt of its batch: each runs alone, so
// the error reaches only the attempt it belongs to. Not after any other
// error: a lost connection may have come after the commit, and a timeout
// or a lock wait would only be waited out again, once per row.
func perRow(err error) bool {
	var refused *pgconn.PgError
	if !errors.As(err, &refused) {
		return false
	}
	code := refused.Code
	return strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23") || code == "40P01" || code == "40001"
}
