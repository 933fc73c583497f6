package admitgrpc

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/admit-go/admit/adaptive"
)

// UnaryServerConcurrency returns a server interceptor that admits each call
// against the adaptive limiter l, holding a permit while the handler runs.
// StreamServerConcurrency does the same for streams, holding the permit for
// the stream's whole life: give long-lived streams their own limiter, or
// none, since their duration is not a latency.
//
// A shed call fails with codes.Unavailable and the limiter's message. A
// call whose context ended while it waited in the backlog fails with the
// code of its context's error (DeadlineExceeded or Canceled). The handler's
// result ends the permit, by the code grpc-go sends for it (a status's
// own; DeadlineExceeded or Canceled for a plain or wrapped context error,
// such as the handler's own timeout on a call behind it; Unknown for any
// other error). It is Dropped, a loss, when the call's context ended while
// it ran (its caller gave up, or its deadline passed), and for the codes
// that the standard mapping of gRPC codes to HTTP statuses (as
// grpc-gateway applies it) sends as 429 or 5xx, with Canceled (a caller
// gone, HTTP's 499): Canceled, Unknown, DeadlineExceeded,
// ResourceExhausted, Unimplemented, Internal, Unavailable and DataLoss.
// Any other, OK or a client's error (InvalidArgument, NotFound, ...), is a
// Success whose latency is a sample. This is admithttp.Concurrency's rule
// (429 and 5xx, and a caller that gave up), so a service served over both
// is classified alike: return a client's error with its code, since a
// plain error is Unknown, a 500. A caller that gives up is a loss since a
// client timeout is how overload usually shows; the limiter tolerates the
// few percent of callers that go away for reasons of their own. Put
// per-client rate limits (UnaryServerInterceptor) in front of the
// concurrency interceptor, so that their ResourceExhausted denials never
// reach it. A handler that panics ends its permit Dropped and the panic
// goes on.
//
// # Unavailable and the client's retries
//
// Unavailable is the code grpc-go's retry policy (gRFC A6) treats as
// transient: a client whose service config lists "UNAVAILABLE" in a
// method's retryPolicy.retryableStatusCodes retries a shed call after an
// exponential, jittered backoff (initialBackoff, backoffMultiplier,
// maxBackoff), up to maxAttempts, and a call shed before any response
// header is sent is always safe to retry: the handler never ran. A shed
// call's answer is trailers-only (no header, no message), and grpc-go
// (v1.85) counts such an answer whose code is among the retryable codes
// as a failure of the client's retryThrottling (each costs one of its
// maxTokens; each success gives back tokenRatio): while the tokens are at
// or below half of maxTokens the client retries nothing, so when a server
// sheds most calls, retries stop instead of multiplying the load that
// caused the shedding. Configure both on clients of a server that sheds;
// without a retry policy the client sees the Unavailable error. The shed
// status carries no pushback (grpc-retry-pushback-ms), so clients keep
// their own backoff. One client-side quirk (grpc-go v1.85, streams only):
// when a stream's last allowed attempt is shed before the client has sent
// its first message, the client may end the stream with "max retries
// exhausted: ... EOF" (codes.Unknown) instead of the Unavailable status;
// a streaming client that looks for Unavailable to detect shedding should
// treat that error the same way. Unary calls always see Unavailable.
//
// The priority comes from opts' WithCallPriority function, or from the
// context (an outer interceptor's adaptive.ContextWithPriority), Normal by
// default. The interceptors panic if l is nil or an option is invalid;
// they are safe for concurrent use.
func UnaryServerConcurrency(l *adaptive.Limiter, opts ...ConcurrencyOption) grpc.UnaryServerInterceptor {
	c := newConcurrency(l, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx = c.withPriority(ctx, info.FullMethod)
		p, err := l.Acquire(ctx)
		if err != nil {
			return nil, shedStatus(err)
		}
		defer p.Dropped() // a panic; a no-op after the end below
		resp, err := h(ctx, req)
		end(ctx, p, err)
		return resp, err
	}
}

// StreamServerConcurrency is UnaryServerConcurrency for streams; see it.
func StreamServerConcurrency(l *adaptive.Limiter, opts ...ConcurrencyOption) grpc.StreamServerInterceptor {
	c := newConcurrency(l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx := ss.Context()
		if c.priority != nil {
			ctx = c.withPriority(ctx, info.FullMethod)
			ss = &priorityStream{ServerStream: ss, ctx: ctx}
		}
		p, err := l.Acquire(ctx)
		if err != nil {
			return shedStatus(err)
		}
		defer p.Dropped()
		err = h(srv, ss)
		end(ctx, p, err)
		return err
	}
}

// ConcurrencyOption configures UnaryServerConcurrency and
// StreamServerConcurrency.
type ConcurrencyOption func(*concurrency)

type concurrency struct {
	priority func(ctx context.Context, fullMethod string) adaptive.Priority
	err      string
}

// WithCallPriority sets the function that gives each call its priority,
// from its method or its metadata (metadata.FromIncomingContext). A nil f
// is a configuration error.
func WithCallPriority(f func(ctx context.Context, fullMethod string) adaptive.Priority) ConcurrencyOption {
	return func(c *concurrency) {
		if f == nil {
			c.err = "WithCallPriority(nil)"
			return
		}
		c.priority = f
	}
}

func newConcurrency(l *adaptive.Limiter, opts []ConcurrencyOption) *concurrency {
	if l == nil {
		panic("admitgrpc: concurrency interceptor with a nil limiter")
	}
	c := &concurrency{}
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("admitgrpc: concurrency option %d is nil", i))
		}
		o(c)
		if c.err != "" {
			panic("admitgrpc: " + c.err)
		}
	}
	return c
}

func (c *concurrency) withPriority(ctx context.Context, method string) context.Context {
	if c.priority == nil {
		return ctx
	}
	return adaptive.ContextWithPriority(ctx, c.priority(ctx, method))
}

// shedStatus is the status of a call that got no permit.
func shedStatus(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// end ends p after a handler returned err.
func end(ctx context.Context, p *adaptive.Permit, err error) {
	if ctx.Err() != nil {
		p.Dropped()
		return
	}
	switch sentCode(err) {
	case codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		p.Dropped()
	default:
		p.Success()
	}
}

// sentCode is the code grpc-go's server sends for a handler's error: a
// status's own (OK for nil), the code of a plain or wrapped context error,
// Unknown for any other error.
func sentCode(err error) codes.Code {
	s, ok := status.FromError(err)
	if !ok {
		s = status.FromContextError(err)
	}
	return s.Code()
}

// priorityStream carries the context with the call's priority to the
// stream handler.
type priorityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *priorityStream) Context() context.Context { return s.ctx }
