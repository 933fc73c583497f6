package shardedbucket_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/shardedbucket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	buckettest.Run(t, shardedbucket.New)
}
