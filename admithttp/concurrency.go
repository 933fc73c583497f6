package admithttp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/admit-go/admit/adaptive"
)

// Concurrency returns middleware that admits each request against the
// adaptive limiter l: a request takes a permit for as long as the next
// handler runs, at the priority that WithRequestPriority's function gives
// it (Normal by default). It answers as follows:
//
//   - admitted: the next handler runs; when it returns, its response ends
//     the permit. It is Dropped, a loss, when the request's context ended
//     while it ran, whether its client gave up (context.Canceled: a client
//     timeout is the commonest symptom of overload) or a handler deadline
//     passed (http.TimeoutHandler, a server's timeout middleware), though
//     not when a write of the handler's ended it (over HTTP/2 the server
//     ends a HEAD request's stream, and its context, once the headers go
//     out: the response is complete); and when
//     the status is 429 Too Many Requests or 5xx, the backend saying it is
//     overloaded or failing. Any other response is a Success whose latency
//     is a sample. admitgrpc's interceptors classify the same way. A client
//     that goes away for reasons of its own is dropped too: the limiter
//     tolerates a few percent of such drops per update window (see package
//     adaptive). A handler that panics ends its permit Dropped and the
//     panic goes on. Put per-client rate limits (Middleware) in front of
//     Concurrency, so that their 429s never reach it;
//   - shed (the limiter's error wraps admit.ErrOverloaded): 503 Service
//     Unavailable (or the WithShedHandler handler) with Retry-After, in
//     whole seconds, from WithRetryAfterHint (1 s by default). It is a
//     hint, not a promise: unlike a token bucket, a concurrency limit
//     cannot say when a permit will be free;
//   - the request's context ended while it waited in the backlog: 503 with
//     Retry-After too (the client is probably gone; nothing else is
//     written).
//
// The status is read from the handler's WriteHeader, first Write or first
// Flush (an implicit 200) through a wrapper that has http.Flusher and
// http.Hijacker exactly when the server's writer has them (gRPC's
// ServeHTTP, server-sent events and websocket upgrades check for them),
// and whose Unwrap gives http.ResponseController the original writer; it
// is an io.ReaderFrom that copies through the server's (so http.FileServer
// keeps sendfile). A
// hijacked connection's permit is held until the handler returns, its
// outcome a Success unless the handler wrote a 429 or 5xx before: give
// long-lived connections their own limiter, or none, since their duration
// is not a latency. A gRPC server served through its ServeHTTP answers 200
// whatever its code: classify gRPC with admitgrpc's interceptors instead. Concurrency panics if l is nil or an option is invalid;
// the middleware is safe for concurrent use.
func Concurrency(l *adaptive.Limiter, opts ...ConcurrencyOption) func(http.Handler) http.Handler {
	if l == nil {
		panic("admithttp: Concurrency with a nil limiter")
	}
	c := concurrencyConfig{retryAfter: "1"}
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("admithttp: Concurrency option %d is nil", i))
		}
		o(&c)
		if c.err != "" {
			panic("admithttp: " + c.err)
		}
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("admithttp: Concurrency applied to a nil handler")
		}
		return &concurrencyHandler{l: l, c: c, next: next}
	}
}

// ConcurrencyOption configures Concurrency.
type ConcurrencyOption func(*concurrencyConfig)

type concurrencyConfig struct {
	priority   func(*http.Request) adaptive.Priority
	shed       http.Handler
	retryAfter string
	err        string
}

// WithRequestPriority sets the function that gives each request its
// priority (from a header, a route, an API key's tier). Without it every
// request is Normal, unless the request's context already carries a
// priority (adaptive.ContextWithPriority in an outer middleware). A nil f
// is a configuration error.
func WithRequestPriority(f func(*http.Request) adaptive.Priority) ConcurrencyOption {
	return func(c *concurrencyConfig) {
		if f == nil {
			c.err = "WithRequestPriority(nil)"
			return
		}
		c.priority = f
	}
}

// WithShedHandler sets the handler that answers a shed request, after
// Retry-After is set; the default writes 503 Service Unavailable. A nil h
// is a configuration error.
func WithShedHandler(h http.Handler) ConcurrencyOption {
	return func(c *concurrencyConfig) {
		if h == nil {
			c.err = "WithShedHandler(nil)"
			return
		}
		c.shed = h
	}
}

// WithRetryAfterHint sets the Retry-After of a shed request, rounded up
// to whole seconds (at least 1); the default is 1 s. A d <= 0 is a
// configuration error.
func WithRetryAfterHint(d time.Duration) ConcurrencyOption {
	return func(c *concurrencyConfig) {
		if d <= 0 {
			c.err = fmt.Sprintf("WithRetryAfterHint(%v): not positive", d)
			return
		}
		secs := d / time.Second // rounded up below, without overflowing near MaxInt64
		if d%time.Second != 0 {
			secs++
		}
		c.retryAfter = strconv.FormatInt(int64(secs), 10)
	}
}

type concurrencyHandler struct {
	l    *adaptive.Limiter
	c    concurrencyConfig
	next http.Handler
}

func (h *concurrencyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if h.c.priority != nil {
		ctx = adaptive.ContextWithPriority(ctx, h.c.priority(r))
		r = r.WithContext(ctx)
	}
	p, err := h.l.Acquire(ctx)
	if err != nil {
		w.Header().Set("Retry-After", h.c.retryAfter)
		if h.c.shed != nil && ctx.Err() == nil {
			h.c.shed.ServeHTTP(w, r)
			return
		}
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	// A panicking handler ends the permit here; a normal return ends it
	// below first, and this is then a no-op.
	defer p.Dropped()
	sw := &statusWriter{ResponseWriter: w}
	if r.Method == http.MethodHead {
		sw.head = r.Context()
	}
	h.next.ServeHTTP(sw.wrap(), r)
	if r.Context().Err() != nil && !sw.complete || sw.status == http.StatusTooManyRequests || sw.status >= 500 {
		p.Dropped()
	} else {
		p.Success()
	}
}

// statusWriter records the status a handler sends.
type statusWriter struct {
	http.ResponseWriter
	status int
	// head is the context of a HEAD request, else nil. Over HTTP/2 the
	// server ends a HEAD response's stream as soon as its headers go out
	// (a flush, or a body beyond the write buffer, which HEAD discards),
	// and cancels the context before the write returns: complete records
	// that a write ended the context, the response sent, not a client
	// that gave up.
	head     context.Context
	complete bool
}

// live reports whether w serves a HEAD request whose context has not ended.
func (w *statusWriter) live() bool { return w.head != nil && w.head.Err() == nil }

// sent notes, after a write to the server's writer that live preceded,
// whether that write ended the HEAD request's context.
func (w *statusWriter) sent(live bool) {
	if live && w.head.Err() != nil {
		w.complete = true
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	live := w.live()
	n, err := w.ResponseWriter.Write(b)
	w.sent(live)
	return n, err
}

// ReadFrom copies through the server's writer, so that io.Copy to the
// handler's writer still reaches the server's own ReadFrom (sendfile from
// a file on HTTP/1.1, as http.ServeContent and http.FileServer use it)
// where it has one; with none below, io.Copy copies through Write. A copy
// of a byte or more commits the implicit 200, as Write does; a copy of
// nothing writes nothing, and the handler may still choose its status.
// Every variant of wrap has it.
func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	live := w.live()
	n, err := io.Copy(w.ResponseWriter, r)
	w.sent(live)
	if w.status == 0 && n > 0 {
		w.status = http.StatusOK
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the original writer for what
// statusWriter does not implement (deadlines, full duplex).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap returns w as the handler's writer: with Flush and FlushError if a
// writer below can flush, with Hijack if one can hijack, so that a type
// assertion on the handler's writer answers as it would on the server's.
// Each variant holds only w, so storing it in the interface allocates
// nothing more.
func (w *statusWriter) wrap() http.ResponseWriter {
	f, h := below(w.ResponseWriter, canFlush) != nil, below(w.ResponseWriter, canHijack) != nil
	switch {
	case f && h:
		return flushHijackWriter{w}
	case f:
		return flushWriter{w}
	case h:
		return hijackWriter{w}
	}
	return w
}

// flushError flushes through the writer below; a flush commits the
// implicit 200 if no status was written.
func (w *statusWriter) flushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	live := w.live()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	w.sent(live)
	return err
}

func (w *statusWriter) hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

type flushWriter struct{ *statusWriter }

func (w flushWriter) Flush()            { _ = w.flushError() }
func (w flushWriter) FlushError() error { return w.flushError() }

type hijackWriter struct{ *statusWriter }

func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }

type flushHijackWriter struct{ *statusWriter }

func (w flushHijackWriter) Flush()                                       { _ = w.flushError() }
func (w flushHijackWriter) FlushError() error                            { return w.flushError() }
func (w flushHijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.hijack() }
