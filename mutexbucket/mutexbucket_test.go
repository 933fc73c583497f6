package mutexbucket_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/mutexbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	buckettest.Run(t, mutexbucket.New)
}
