package chanpool

// WaitingCount reads the pool's raw count of waiters, which Stats clamps at
// zero, for the review's walk.
func WaitingCount[T any](p *Pool[T]) int64 { return p.waiting.Load() }
