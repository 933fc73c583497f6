package redisbucket

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialWatchers holds one dialWatcher per go-redis client a Limiter was made
// with, so that a client gets one hook however many Limiters share it.
// Entries live as long as the process: a service holds a few clients.
var dialWatchers sync.Map // redis.UniversalClient → *dialWatcher

// dialWatcher is a go-redis hook that remembers the latest failed dial.
// go-redis's pool dials a refused connection again with backoff, and when
// the command's deadline cuts those dials short it returns the context's
// error alone, so without it an outage's cause ("connection refused")
// would not reach the caller. It
// only observes: dials, commands and pipelines pass through unchanged, and
// the command hooks add no layer at all.
type dialWatcher struct {
	last atomic.Pointer[dialFailure]
}

type dialFailure struct {
	err error
	at  int64 // monotonic ns
}

func watchDials(c redis.UniversalClient) *dialWatcher {
	if w, ok := dialWatchers.Load(c); ok {
		return w.(*dialWatcher)
	}
	w, loaded := dialWatchers.LoadOrStore(c, &dialWatcher{})
	if !loaded {
		c.AddHook(w.(*dialWatcher))
	}
	return w.(*dialWatcher)
}

func (w *dialWatcher) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		// A dial cut short by the command's own context is not the
		// server's failure.
		if err != nil && ctx.Err() == nil {
			w.last.Store(&dialFailure{err: err, at: int64(time.Since(mono))})
		}
		return conn, err
	}
}

func (w *dialWatcher) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatcher) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
