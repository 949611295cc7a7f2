// Command preflight checks, before the test suite starts, that the
// PostgreSQL and Redis the tests use are reachable, and says how to start
// them when they are not. `make test` runs it first.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sekali-dev/sekali/internal/testenv"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := errors.Join(testenv.CheckPostgres(ctx), testenv.CheckRedis(ctx))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "preflight: the tests need real services:")
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("preflight: PostgreSQL and Redis are reachable")
}
