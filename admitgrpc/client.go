package admitgrpc

import (
	"context"
	"errors"

	"github.com/admit-go/admit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// UnaryClientInterceptor returns a client interceptor that waits its turn
// on l (AcquireN(ctx, 1)) before each call, so a client keeps to a server's
// published rate instead of learning it from denials. The wait is part of
// the call: a timeout the ClientConn's service config gives the method
// bounds it, and the call after it, from the moment the interceptor runs,
// as the call's own deadline does (grpc-go applies that timeout only once
// the interceptor hands the call on). A new ClientConn knows its service
// config only once its resolver has answered, which grpc-go asks for only
// after the interceptors ran: so the interceptor takes an idle ClientConn
// out of idle mode itself (cc.Connect, as the call is about to), which
// applies the config at once with a resolver that answers within that call
// (passthrough, unix, dns for an IP address). With one that answers later
// (dns for a host name), calls made before its first answer are bounded by
// their own deadline only. When the wait fails, the call is not sent and
// the error is a gRPC status:
//
//   - the call's context ended while it waited: the context's status
//     (status.FromContextError: codes.Canceled or codes.DeadlineExceeded);
//   - the limiter can never admit the call in time (its error wraps
//     admit.ErrUnsatisfiable, or admit.ErrDeadline: the deadline comes
//     before the earliest admission), or refuses to queue it
//     (admit.ErrQueueFull): codes.ResourceExhausted, at once;
//   - any other error (admit.ErrUnavailable from a shared backend):
//     codes.Unavailable.
//
// A call takes one token however many attempts grpc-go makes of it: the
// interceptor runs once per call, above grpc-go's retries (a service
// config's retryPolicy; grpc-go implements no hedgingPolicy), so a call
// retried on RESOURCE_EXHAUSTED up to maxAttempts times sends that many
// requests for one token. grpc-go offers no hook that runs before each
// attempt and may refuse it: a stats handler is told of an attempt but
// cannot stop it. To bound what retries add, keep maxAttempts small and
// set the service config's retryThrottling, which stops retrying while
// most calls fail. A server's denial takes no token of the server's
// limiter, but is such a failure when the retryPolicy lists its code or
// its grpc-retry-pushback-ms is -1 (see UnaryServerInterceptor).
//
// It panics if l is nil. The interceptor is safe for concurrent use.
func UnaryClientInterceptor(l admit.Limiter) grpc.UnaryClientInterceptor {
	if l == nil {
		panic("admitgrpc: UnaryClientInterceptor with a nil limiter")
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, cancel := methodTimeout(ctx, cc, method)
		defer cancel()
		if err := l.AcquireN(ctx, 1); err != nil {
			return waitStatus(ctx, err)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor returns a client interceptor that waits its turn
// on l before opening each stream, as UnaryClientInterceptor does before
// each call, under the method's service-config timeout too; the stream's
// messages are not counted. It panics if l is nil.
func StreamClientInterceptor(l admit.Limiter) grpc.StreamClientInterceptor {
	if l == nil {
		panic("admitgrpc: StreamClientInterceptor with a nil limiter")
	}
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, cancel := methodTimeout(ctx, cc, method)
		if err := l.AcquireN(ctx, 1); err != nil {
			cancel()
			return nil, waitStatus(ctx, err)
		}
		// The stream outlives this function: its context is released when
		// it ends (OnFinish runs once, also when opening it fails). opts is
		// the caller's slice when the ClientConn has no default call
		// options, and may have spare capacity shared by concurrent
		// calls: the full slice expression makes append copy it rather
		// than write another stream's OnFinish into it.
		s, err := streamer(ctx, desc, cc, method, append(opts[:len(opts):len(opts)], grpc.OnFinish(func(error) { cancel() }))...)
		if err != nil {
			cancel()
		}
		return s, err
	}
}

// methodTimeout returns ctx bounded by the timeout the ClientConn's service
// config gives method, if any, and the function that releases it.
func methodTimeout(ctx context.Context, cc *grpc.ClientConn, method string) (context.Context, context.CancelFunc) {
	if cc == nil {
		return ctx, func() {}
	}
	t := cc.GetMethodConfig(method).Timeout
	if t == nil && cc.GetState() == connectivity.Idle {
		// The service config comes with the resolver's first answer, and
		// a new ClientConn asks for none until a call leaves idle mode,
		// which grpc-go does only after the interceptors ran: so on the
		// first call every method reads as having no timeout. Leave idle
		// now, as the call is about to: with a resolver that answers
		// within Connect (passthrough, unix, dns for an IP address) the
		// service config is then in place. (One that answers later, dns
		// for a host name, leaves the first calls bounded by their own
		// deadline only; a ClientConn that went idle keeps its config.)
		cc.Connect()
		t = cc.GetMethodConfig(method).Timeout
	}
	if t != nil && *t >= 0 {
		return context.WithTimeout(ctx, *t)
	}
	return ctx, func() {}
}

// waitStatus maps a failed wait to the status the client interceptors
// return. admit.ErrDeadline also matches context.DeadlineExceeded, so it is
// tested first: the deadline has not passed, it only comes too soon. A
// context error counts as the call's only if the call's context ended: a
// backend's own timeout (redisbucket's WithTimeout) is an outage.
func waitStatus(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, admit.ErrUnsatisfiable), errors.Is(err, admit.ErrDeadline), errors.Is(err, admit.ErrQueueFull):
		return status.Errorf(codes.ResourceExhausted, "admitgrpc: the client's rate limit cannot admit the call: %v", err)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return status.FromContextError(ctx.Err()).Err()
	default:
		return status.Errorf(codes.Unavailable, "admitgrpc: the client's rate limiter failed: %v", err)
	}
}
