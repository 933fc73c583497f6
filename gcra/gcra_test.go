package gcra_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/gcra"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gcra declares the stale-reading rule buckettest holds it to.
var _ buckettest.NoLatestReading = (*gcra.Bucket)(nil)

func TestConformance(t *testing.T) {
	buckettest.Run(t, gcra.New)
}

func TestAllocs(t *testing.T) {
	b, err := gcra.New(1e9, 1e9)
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { b.TryAcquire() }), "admit: one CAS, no new state")
	e, err := gcra.New(1, 1e-6)
	require.NoError(t, err)
	e.TryAcquire()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { e.TryAcquire() }), "reject: loads only")
}

// TestWalk is the model-based walk: every decision, Tokens and wake against
// the reference (gcra's own-moment rule for stale readings), and the bound
// on every window (see buckettest.Walk).
func TestWalk(t *testing.T) { buckettest.Walk(t, gcra.New, 400) }
