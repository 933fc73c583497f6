package admitgrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// UnaryServerInterceptor returns a server interceptor that admits each
// unary call against l, under the key and at the cost the options choose
// (by default KeyByPeer and cost 1), and answers as follows:
//
//   - admitted: the handler runs; the response header metadata carries
//     ratelimit and ratelimit-policy;
//   - denied: codes.ResourceExhausted, handler not called, with an
//     errdetails.RetryInfo whose RetryDelay is the Decision's RetryAfter
//     (exact: a client that waits that long is not early) and an
//     errdetails.QuotaFailure naming the policy; the trailer metadata
//     carries ratelimit, ratelimit-policy and retry-after (whole seconds,
//     rounded up, at least 1);
//   - WithLimits' function returns no limits: the handler runs unlimited,
//     with no key function or limiter call and no headers;
//   - the key function (or WithLimits' function, which runs first) fails:
//     codes.InvalidArgument, or codes.PermissionDenied if its error wraps
//     admit.ErrUnknownClient (a client the server does not serve), no
//     limiter call, handler not called;
//   - a negative cost, or WithLimits' limits fail admit.ValidateLimits:
//     codes.Internal (a bug in the server), no limiter call;
//   - the cost is above the capacity (the limiter's error wraps
//     admit.ErrUnsatisfiable): codes.ResourceExhausted with a QuotaFailure
//     and without RetryInfo, since waiting can never help; the headers
//     carry the key's current state;
//   - the limiter rejects a limit (its error wraps admit.ErrInvalidConfig,
//     not admit.ErrUnavailable: a rate too small to represent at its
//     capacity, or redisbucket's Redis refusing the decision):
//     codes.Internal, whatever the failure policy, as admithttp's 500;
//   - the limiter's backend failed (its error wraps admit.ErrUnavailable)
//     and its failure policy decided from a bucket (a fallback limiter, or
//     keyed's RefuseNew): that Decision is followed as above;
//   - the backend failed and its policy admitted blind (redisbucket's
//     WithFailOpen): the handler runs, with no ratelimit headers;
//   - the backend failed and its failure policy refused without a bucket's
//     Decision (a fallback limiter found the cost above its own capacity,
//     or rejected a limit: the error wraps admit.ErrUnavailable and
//     admit.ErrUnsatisfiable or admit.ErrInvalidConfig):
//     codes.Unavailable, whatever WithFailOpen says: the policy decided,
//     and failing open would let exactly the costliest calls through;
//   - the call's context ended while the limiter decided: its status
//     (status.FromContextError);
//   - any other limiter error, or a blind refusal (redisbucket's default,
//     fail closed): codes.Unavailable, or with WithFailOpen the handler runs
//     unlimited. No ratelimit headers either way: no trustworthy state
//     exists.
//
// Every refusal is sent trailers-only: no header metadata, its fields (if
// any) in the trailer metadata, so that the call is not committed and a
// client's retryPolicy (grpc-go's, gRFC A6) may retry it; a refusal with
// header metadata would end every retry at the first attempt. An admitted
// call's fields go out with its response's header metadata, set when the
// handler has returned without error (for a stream: merged into its header
// when the handler first sends), so that a failure from behind the
// interceptor, such as a call shed by UnaryServerConcurrency, is still
// trailers-only and retryable; a call that fails, or a stream that ends
// before sending anything, carries them in its trailer. So a client reads
// the fields from the header metadata of a call that got a response, and
// from the trailer of one that did not.
//
// A ResourceExhausted refusal also tells the retryPolicy when to come back,
// with gRFC A6's grpc-retry-pushback-ms trailer, which grpc-go obeys in
// place of its own backoff:
//
//   - a denial whose token comes before the call's deadline: the wait in
//     whole milliseconds, rounded up, so the retry comes when the token is
//     due (and is admitted, unless another call of the key took it first),
//     not earlier to be denied again;
//   - a denial whose token comes at or after the deadline (as the server
//     sees it: the client's deadline plus the request's transit and the
//     rounding up of grpc-timeout, a few microseconds on a LAN; a wait
//     that falls in between gets its pushback, and the client sees
//     DeadlineExceeded at its deadline), or more than 2^31-1 ms away (the
//     int32 every gRPC implementation parses; a zero rate's "never"; with
//     or without a deadline), and a cost above the capacity: -1, no retry,
//     so the client gets ResourceExhausted at once instead of
//     DeadlineExceeded at the deadline, and the limiter is not asked again
//     in vain. grpc-go (v1.85, as gRFC A6 says) counts each -1 as a
//     failure of the ClientConn's retryThrottling, whatever the code and
//     whether or not the method's retryPolicy lists it: a client that keeps
//     calling past its limit spends the tokens that would retry its other
//     calls, a shed call's Unavailable included
//     (TestPushbackCostsRetryThrottling);
//   - any other denial of a call without a deadline: none, so the retryPolicy's
//     own backoff and maxAttempts govern. Such a call states no bound on
//     its caller's patience, and the exact wait would hold it open for as
//     long as the limit says (hours, under a daily limit); give calls a
//     deadline to be told the wait.
//
// The header values are admithttp's RateLimit and RateLimit-Policy fields.
// Under one limit, ratelimit-policy is "<name>";q=<capacity>;w=<seconds to
// refill from empty>, w taken from l's FillTime method if it has one
// (keyed.Limiter), else from the one limit l lists through a Limits method
// (keyed.Limiter, redisbucket.Limiter), else left out. Both methods are
// looked for on l, then down its chain of
// Unwrap() admit.KeyedLimiter methods, the nearest first: a wrapper that
// only counts (admitotel.Limiter) has neither. Under several limits (WithLimits,
// or a Limits method listing two or more, as a keyed.Limiter from
// keyed.NewLimits has), ratelimit-policy lists every limit, each w its
// Capacity ÷ Rate, and ratelimit names the one that decided
// (Decision.Policy); an unnamed limit is shown under WithPolicyName's name.
// A decision of the limiter's failure policy (its error wraps
// admit.ErrUnavailable: redisbucket's WithFallback limiter, keyed's
// RefuseNew), and a Decision naming a limit outside the list, is shown
// alone: its limit's name (WithPolicyName's if unnamed) and q, no w. It
// describes the policy's own bucket, whose rate the interceptor does not
// know, whatever capacity or Names it shares with the limits l lists (a
// fallback sized for one replica's share has the same ones at another
// rate).
//
// It panics if l is nil, an option is invalid (a nil function, a policy name
// that is not printable ASCII), WithLimits is given and l is not an
// admit.PolicyLimiter (nor is what it wraps, if it has an Unwrap method
// returning an admit.KeyedLimiter, as admitotel.Limiter does), or the limits
// l lists fail admit.ValidateLimits: those are programming errors found at
// start-up, not call data. The interceptor is safe for concurrent use.
func UnaryServerInterceptor(l admit.KeyedLimiter, opts ...Option) grpc.UnaryServerInterceptor {
	in := newInterceptor(l, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := in.decide(ctx, info.FullMethod)
		if err != nil {
			if md != nil {
				_ = grpc.SetTrailer(ctx, md) // fails only outside a server call, where there is nothing to send
			}
			return nil, err
		}
		resp, err := handler(ctx, req)
		if md != nil {
			// Unary headers go out with the response, after the
			// interceptors return. A handler that sent its own first
			// makes SetHeader fail: the trailer then.
			if err != nil || grpc.SetHeader(ctx, md) != nil {
				_ = grpc.SetTrailer(ctx, md)
			}
		}
		return resp, err
	}
}

// StreamServerInterceptor returns a server interceptor that admits each
// stream against l once, when it opens, as UnaryServerInterceptor admits a
// unary call: a denied stream ends with the same status before the handler
// runs, trailers-only, and the messages of an admitted stream are not
// counted. An admitted stream's fields are merged into its header metadata
// when the handler first sends (SendHeader or SendMsg), so the handler may
// add its own with SetHeader before; a stream that ends before sending
// anything carries them in its trailer, and stays trailers-only.
func StreamServerInterceptor(l admit.KeyedLimiter, opts ...Option) grpc.StreamServerInterceptor {
	in := newInterceptor(l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := in.decide(ss.Context(), info.FullMethod)
		if err != nil {
			if md != nil {
				ss.SetTrailer(md)
			}
			return err
		}
		if md == nil {
			return handler(srv, ss)
		}
		hs := &headerStream{ServerStream: ss, md: md}
		err = handler(srv, hs)
		if !hs.inHeader {
			ss.SetTrailer(md)
		}
		return err
	}
}

// headerStream holds an admitted stream's fields until its handler first
// sends: header metadata set earlier would commit the stream even if it
// then failed with nothing sent. grpc-go allows no concurrent sends on a
// stream, so the flags need no lock.
type headerStream struct {
	grpc.ServerStream
	md       metadata.MD
	tried    bool // at the first send
	inHeader bool // SetHeader took md: false if the handler had sent headers another way (grpc.SendHeader on the stream's context)
}

func (s *headerStream) commit() {
	if !s.tried {
		s.tried = true
		s.inHeader = s.ServerStream.SetHeader(s.md) == nil
	}
}

func (s *headerStream) SendHeader(md metadata.MD) error {
	s.commit()
	return s.ServerStream.SendHeader(md)
}

func (s *headerStream) SendMsg(m any) error {
	s.commit()
	return s.ServerStream.SendMsg(m)
}

type interceptor struct {
	l  admit.KeyedLimiter
	pl admit.PolicyLimiter // l, when WithLimits is given
	config
	quoted string          // the single limit's name as an sf-string
	w      int64           // the single limit's w, or 0 to leave it out
	static *ratelimit.Set  // the limits of a LimitLister of two or more, without WithLimits
	cache  ratelimit.Cache // the rendered lists WithLimits returns
	// policy caches the ratelimit-policy value for the last capacity seen
	// without WithLimits: one capacity for every key is the usual case.
	policy atomic.Pointer[policyValue]
}

type policyValue struct {
	q int64
	s string
}

func one(context.Context, string) int64 { return 1 }

func newInterceptor(l admit.KeyedLimiter, opts []Option) *interceptor {
	if l == nil {
		panic("admitgrpc: interceptor with a nil limiter")
	}
	c := config{key: keyByPeer, cost: one, name: "default"}
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("admitgrpc: option %d is nil", i))
		}
		o(&c)
		if c.err != nil {
			panic(c.err.Error())
		}
	}
	in := &interceptor{l: l, config: c}
	name := c.name
	f, refiller := ratelimit.Find[interface{ FillTime() time.Duration }](l)
	if refiller {
		in.w = ratelimit.Seconds(f.FillTime())
	}
	if c.limits != nil {
		pl, ok := ratelimit.Policy(l)
		if !ok {
			panic(fmt.Sprintf("admitgrpc: WithLimits needs an admit.PolicyLimiter; %T is not one", l))
		}
		in.pl = pl
	} else if ll, ok := ratelimit.Find[interface{ Limits() []admit.Limit }](l); ok {
		switch listed := ll.Limits(); {
		case len(listed) >= 2:
			p, err := ratelimit.NewSet(listed, c.name)
			if err != nil {
				panic(fmt.Sprintf("admitgrpc: the limiter's Limits: %v", err))
			}
			in.static = p
		case len(listed) == 1:
			if err := listed[0].Validate(); err != nil {
				panic(fmt.Sprintf("admitgrpc: the limiter's Limits: %v", err))
			}
			if listed[0].Name != "" {
				name = listed[0].Name
			}
			if !refiller {
				in.w = ratelimit.FillSeconds(listed[0])
			}
		}
	}
	in.quoted = ratelimit.Quote(name)
	return in
}

// decide admits or refuses one call. It returns the header metadata to
// send (nil for none) and, for a call that must not be served, its status
// error.
func (in *interceptor) decide(ctx context.Context, method string) (metadata.MD, error) {
	// The limits first, as admithttp asks for them: a call they exempt
	// needs no key (a health probe without credentials).
	var limits []admit.Limit
	ps := in.static
	if in.limits != nil {
		var err error
		if limits, err = in.limits(ctx, method); err != nil {
			return nil, callerError("cannot choose the limits", err)
		}
		if len(limits) == 0 {
			return nil, nil // not limited
		}
		if ps, err = in.cache.Get(limits, in.name); err != nil {
			// Limits that cannot be enforced are a bug in the server.
			return nil, status.Errorf(codes.Internal, "admitgrpc: the call's limits: %v", err)
		}
	}
	key, err := in.key(ctx, method)
	if err != nil {
		return nil, callerError("cannot identify the client", err)
	}
	n := in.cost(ctx, method)
	if n < 0 {
		return nil, status.Error(codes.Internal, "admitgrpc: negative cost")
	}
	d, err := in.allow(ctx, key, n, limits)
	if err != nil && (!errors.Is(err, admit.ErrUnavailable) || !ratelimit.FromBucket(d)) {
		return in.undecided(ctx, key, n, limits, ps, d, err)
	}
	// No error, or the backend failed and its failure policy decided from
	// a bucket (a fallback limiter's): that Decision is the answer. The
	// policy's Decision describes its own bucket, not the limits listed
	// for the backend (a fallback may share their capacity or Names at
	// another rate), so it is shown alone.
	md, name := in.headers(ps, err != nil, d, !d.Allowed)
	if d.Allowed {
		return md, nil
	}
	if pb := pushback(ctx, d.RetryAfter); pb != "" {
		md[pushbackKey] = []string{pb}
	}
	return md, exhausted(name, d, true)
}

// callerError is the status for an error of the key or limits function:
// codes.PermissionDenied for a client the server does not serve (the error
// wraps admit.ErrUnknownClient), else codes.InvalidArgument (the call does
// not say who sent it, or which limits apply). The message carries the
// package's prefix once, whether or not err's text begins with it (the
// package's own key functions' errors do).
func callerError(what string, err error) error {
	code := codes.InvalidArgument
	if errors.Is(err, admit.ErrUnknownClient) {
		code = codes.PermissionDenied
	}
	return status.Error(code, "admitgrpc: "+what+": "+strings.TrimPrefix(err.Error(), "admitgrpc: "))
}

func (in *interceptor) allow(ctx context.Context, key string, n int64, limits []admit.Limit) (admit.Decision, error) {
	if limits != nil {
		return in.pl.AllowLimits(ctx, key, n, limits...)
	}
	return in.l.AllowN(ctx, key, n)
}

// undecided answers a limiter error that comes without a Decision from a
// bucket, as UnaryServerInterceptor lists.
func (in *interceptor) undecided(ctx context.Context, key string, n int64, limits []admit.Limit, ps *ratelimit.Set, d admit.Decision, err error) (metadata.MD, error) {
	unavailable := errors.Is(err, admit.ErrUnavailable)
	switch {
	case unavailable && d.Allowed && d.Limit >= 1:
		return nil, nil // the backend's policy admitted blind (fail open)
	case !unavailable && errors.Is(err, admit.ErrUnsatisfiable):
		// The Decision that comes with this error need not hold the
		// key's state (keyed's does not): peek for it.
		var md metadata.MD
		// The peek is marked so that a counting wrapper (admitotel) does
		// not count it as a second decision.
		p, perr := in.allow(ratelimit.ForHeaders(ctx), key, 0, limits)
		name := in.name
		if perr == nil && p.Limit >= 1 {
			md, name = in.headers(ps, false, p, false)
		}
		q := p.Limit
		if ps != nil {
			for i, l := range ps.Limits {
				if n > l.Capacity { // the first limit n can never fit
					name, q = ratelimit.Unquote(ps.Names[i]), l.Capacity
					break
				}
			}
		}
		if md == nil {
			md = metadata.MD{}
		}
		md[pushbackKey] = []string{"-1"} // never: no retry can be admitted
		return md, exhausted(name, admit.Decision{Limit: q}, false)
	case !unavailable && errors.Is(err, admit.ErrInvalidConfig):
		// A limit the limiter cannot enforce though ValidateLimits passed
		// it, or a backend that refused this decision (redisbucket: a
		// script error, WRONGTYPE, NOPERM): a server bug, whatever the
		// failure policy, as admithttp answers 500.
		return nil, status.Error(codes.Internal, "admitgrpc: the limiter rejected the call's limits")
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return nil, status.FromContextError(ctx.Err()).Err()
	case in.failOpen && !ratelimit.PolicyRefused(err):
		return nil, nil
	default:
		return nil, status.Error(codes.Unavailable, "admitgrpc: rate limiter unavailable")
	}
}

// headers returns ratelimit-policy and ratelimit for d (and retry-after,
// for a denial), and the name of the limit that decided, as admithttp shows
// them: one limit under the interceptor's name (or the one limit a
// LimitLister names), or the whole set with ratelimit naming the deciding
// limit; a failure policy's decision (alone) or a limit outside the set is
// shown alone, its name and q, no w.
func (in *interceptor) headers(ps *ratelimit.Set, alone bool, d admit.Decision, retry bool) (metadata.MD, string) {
	var policy, quoted, name string
	switch q, ok := ps.Name(d.Policy); {
	case alone:
		name, quoted, policy = in.alone(d)
	case ps == nil:
		policy, quoted = in.policyFor(d.Limit), in.quoted
		name = ratelimit.Unquote(quoted)
	case ok:
		policy, quoted, name = ps.Policy, q, ratelimit.Unquote(q)
	default:
		name, quoted, policy = in.alone(d)
	}
	// The values share one allocation, each capped at length 1 so that an
	// append to one cannot write into its neighbour.
	vals := make([]string, 3)
	vals[0], vals[1] = policy, rateLimit(quoted, d)
	md := metadata.MD{"ratelimit-policy": vals[0:1:1], "ratelimit": vals[1:2:2]}
	if retry {
		vals[2] = strconv.FormatInt(ratelimit.RetryAfter(d.RetryAfter), 10)
		md["retry-after"] = vals[2:3:3]
	}
	return md, name
}

// alone is the name, quoted name and ratelimit-policy of d's limit shown
// alone: its name (WithPolicyName's for an unnamed one) and q, and no w,
// its rate being unknown.
func (in *interceptor) alone(d admit.Decision) (name, quoted, policy string) {
	name = in.name
	if d.Policy != "" && (admit.Limit{Name: d.Policy, Capacity: 1}).Validate() == nil {
		name = d.Policy
	}
	quoted = ratelimit.Quote(name)
	return name, quoted, string(ratelimit.AppendPolicy(nil, quoted, d.Limit, 0))
}

func (in *interceptor) policyFor(q int64) string {
	if p := in.policy.Load(); p != nil && p.q == q {
		return p.s
	}
	p := &policyValue{q: q, s: string(ratelimit.AppendPolicy(nil, in.quoted, q, in.w))}
	in.policy.Store(p)
	return p.s
}

// pushbackKey is gRFC A6's trailer for a server to steer a client's
// retryPolicy: the milliseconds to wait before the next attempt, or a
// negative number for no further attempt.
const pushbackKey = "grpc-retry-pushback-ms"

// pushback is the pushbackKey value for a denial whose token is wait away,
// on a call whose context is ctx, as UnaryServerInterceptor states: the
// wait in whole milliseconds, rounded up, when the retry would come before
// the call's deadline; "-1" when it would not, or when the wait is past
// what the field holds (2^31-1 ms, about 24.8 days, the int32 that every
// gRPC implementation parses: a zero rate's wait is "never"); "" (no
// pushback: the client's own backoff) for a call without a deadline.
func pushback(ctx context.Context, wait time.Duration) string {
	const most = math.MaxInt32 * time.Millisecond
	if wait > most {
		return "-1"
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return ""
	}
	ms := (wait + time.Millisecond - 1) / time.Millisecond
	if time.Until(deadline) <= ms*time.Millisecond {
		return "-1"
	}
	return strconv.FormatInt(int64(ms), 10)
}

// exhausted is the codes.ResourceExhausted status for a call that the
// limit name refused: with RetryInfo when waiting helps (retry), and a
// QuotaFailure naming the limit.
func exhausted(name string, d admit.Decision, retry bool) error {
	var msg string
	if retry {
		msg = fmt.Sprintf("admitgrpc: rate limit %q exceeded; retry after %v", name, d.RetryAfter)
	} else {
		msg = fmt.Sprintf("admitgrpc: the call costs more than rate limit %q can ever admit", name)
	}
	st := status.New(codes.ResourceExhausted, msg)
	v := &errdetails.QuotaFailure_Violation{
		Subject:     "policy:" + name,
		Description: msg,
		QuotaId:     name,
		QuotaValue:  d.Limit,
	}
	var details []protoadapt.MessageV1
	if retry {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	}
	details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}})
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}
