package shardedbucket_test

import (
	"testing"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/shardedbucket"
)

func BenchmarkTryAcquire(b *testing.B) { buckettest.Bench(b, shardedbucket.New) }
