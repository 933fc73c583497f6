package mutexbucket_test

import (
	"testing"

	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/mutexbucket"
)

func BenchmarkTryAcquire(b *testing.B) { buckettest.Bench(b, mutexbucket.New) }
