package admitotel_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: the wrappers start
// none, and the Prometheus test's server is closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
