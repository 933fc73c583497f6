package admit_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/shardedbucket"
)

// The three buckets share one constructor signature and satisfy
// admit.Limiter, so choosing one is a one-line change.
func Example() {
	var limiter admit.Limiter
	limiter, err := shardedbucket.New(100, 1.0/60) // or mutexbucket.New, casbucket.New
	if err != nil {
		panic(err)
	}
	handler := func(w http.ResponseWriter, r *http.Request) {
		if !limiter.TryAcquire() {
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "ok")
	}
	_ = handler
	fmt.Println(limiter.Acquire(context.Background()), limiter.TryAcquireN(99), limiter.TryAcquire())
	// Output: <nil> true false
}
