package casbucket_test

import (
	"testing"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/casbucket"
)

func BenchmarkTryAcquire(b *testing.B) { buckettest.Bench(b, casbucket.New) }
