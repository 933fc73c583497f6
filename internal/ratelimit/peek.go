package ratelimit

import "context"

// headerPeekKey marks a context as a middleware's own peek.
type headerPeekKey struct{}

// ForHeaders returns ctx marked as carrying the peek (n = 0) that admithttp
// and admitgrpc make to fill a refused request's fields when the limiter's
// error came without the key's state: a read for the response, not a
// decision of the request's (which the limiter already made and a counting
// wrapper already counted). admitotel does not count it.
func ForHeaders(ctx context.Context) context.Context {
	return context.WithValue(ctx, headerPeekKey{}, true)
}

// IsForHeaders reports whether ctx was marked by ForHeaders.
func IsForHeaders(ctx context.Context) bool {
	_, ok := ctx.Value(headerPeekKey{}).(bool)
	return ok
}
