package fixedwindow_test

import (
	"testing"

	"github.com/admit-go/admit/windowtest"
)

func BenchmarkTryAcquire(b *testing.B) { windowtest.Bench(b, alg) }
