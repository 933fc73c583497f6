package casbucket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/casbucket"
)

// AcquireN fails at once, consuming nothing, when waiting cannot help: more
// tokens than the bucket holds, or a deadline before the tokens can exist.
func ExampleBucket_AcquireN() {
	clk := buckettest.NewFakeClock(0)
	b, err := casbucket.New(5, 1, admit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	b.TryAcquireN(5)

	err = b.AcquireN(context.Background(), 6)
	fmt.Println(errors.Is(err, admit.ErrUnsatisfiable))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = b.AcquireN(ctx, 3) // 3 tokens take 3 s at 1/s
	fmt.Println(errors.Is(err, admit.ErrDeadline), errors.Is(err, context.DeadlineExceeded))
	fmt.Println(b.Tokens())
	// Output:
	// true
	// true true
	// 0
}
