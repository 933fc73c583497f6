package mutexbucket_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/mutexbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	buckettest.Run(t, mutexbucket.New)
}

func TestAllocs(t *testing.T) {
	b, err := mutexbucket.New(1e9, 1e9)
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { b.TryAcquire() }), "admit")
	e, err := mutexbucket.New(1, 1e-6)
	require.NoError(t, err)
	e.TryAcquire()
	assert.Zero(t, testing.AllocsPerRun(1000, func() { e.TryAcquire() }), "reject")
}

// TestWalk is the model-based walk: every decision, Tokens and wake against
// the reference, and the bound on every window (see buckettest.Walk).
func TestWalk(t *testing.T) { buckettest.Walk(t, mutexbucket.New, 400) }
