package casbucket_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/casbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	buckettest.Run(t, casbucket.New)
}

func TestAllocs(t *testing.T) {
	b, err := casbucket.New(1e9, 1e9)
	require.NoError(t, err)
	assert.LessOrEqual(t, testing.AllocsPerRun(1000, func() { b.TryAcquire() }), 1.0, "admit: the new state only")
	e, err := casbucket.New(1, 1e-6)
	require.NoError(t, err)
	e.TryAcquire()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { e.TryAcquire() }), "reject: loads only")
}

// TestWalk is the model-based walk: every decision, Tokens and wake against
// the reference, and the bound on every window (see buckettest.Walk).
func TestWalk(t *testing.T) { buckettest.Walk(t, casbucket.New, 400) }
