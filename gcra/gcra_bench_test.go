package gcra_test

import (
	"testing"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/gcra"
)

func BenchmarkTryAcquire(b *testing.B) { buckettest.Bench(b, gcra.New) }
