package integration_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: every server,
// client connection and redis-server the tests start is stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
