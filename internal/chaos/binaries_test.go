package chaos_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/sekali-dev/sekali/internal/testenv"
)

// The binaries that ship are built without -tags failpoints and carry no
// failpoint code: nothing in them reads SEKALI_FAILPOINTS.
func TestProductionBinariesCarryNoFailpoints(t *testing.T) {
	t.Parallel()
	for _, pkg := range []string{"./cmd/api", "./cmd/worker", "./cmd/reconciler"} {
		b, err := os.ReadFile(testenv.Binary(t, pkg))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("SEKALI_FAILPOINTS")) {
			t.Errorf("%s built without -tags failpoints still contains failpoint code", pkg)
		}
	}
	// And the check can fail: the fault-injection build does contain it.
	b, err := os.ReadFile(testenv.Binary(t, "./cmd/worker", "failpoints"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("SEKALI_FAILPOINTS")) {
		t.Error("the failpoints build does not mention SEKALI_FAILPOINTS; the check above proves nothing")
	}
}
