package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls/config"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Observer receives the service's outcomes, for metrics: one call for each
// request that reaches a decision (a request refused as malformed, or
// before a configuration is loaded, reaches none). Its methods are called
// on the request path and must be safe for concurrent use and fast. The
// domain is "" for a domain the configuration does not hold, so that
// requests cannot grow a metric's label set. tokens is what the request
// asked for: the sum of the costs of its limited descriptors (0 when none
// is limited), at most math.MaxInt64.
type Observer interface {
	// Decided reports a request's overall code, the tokens it asked for,
	// and how many of its descriptors were over their limit but let
	// through by shadow mode.
	Decided(domain string, code pb.RateLimitResponse_Code, tokens int64, shadowed int)
	// StoreFailed reports a request the Store could not decide, the tokens
	// it asked for, and the Store's error.
	StoreFailed(domain string, tokens int64, err error)
}

// Options configure a Service.
type Options struct {
	// ShadowMode answers OK to every request and counts what would have
	// been refused (SHADOW_MODE).
	ShadowMode bool
	// Headers adds the RateLimit headers (LIMIT_RESPONSE_HEADERS_ENABLED)
	// under the names below, which default to RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset.
	Headers                                   bool
	LimitHeader, RemainingHeader, ResetHeader string
	// FailOpen answers OK, without limits, when the Store is unavailable
	// (an error wrapping admit.ErrUnavailable: Redis down or slow); by
	// default such a request fails with codes.Unavailable and Envoy's
	// failure_mode_deny decides.
	FailOpen bool
	// Observer, if not nil, receives outcomes.
	Observer Observer
	// Health, if not nil, is asked by /healthcheck: an error fails it
	// (the backend is unreachable, say).
	Health func() error
}

// Service is the rate limit service. It is safe for concurrent use; build
// one with New.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	store Store
	opts  Options
	cfg   atomic.Pointer[config.Config]
}

// New returns a Service deciding on store, with no configuration until
// SetConfig.
func New(store Store, opts Options) *Service {
	if opts.LimitHeader == "" {
		opts.LimitHeader = "RateLimit-Limit"
	}
	if opts.RemainingHeader == "" {
		opts.RemainingHeader = "RateLimit-Remaining"
	}
	if opts.ResetHeader == "" {
		opts.ResetHeader = "RateLimit-Reset"
	}
	return &Service{store: store, opts: opts}
}

// SetConfig replaces the configuration; requests already deciding finish
// with the one they read.
func (s *Service) SetConfig(c *config.Config) { s.cfg.Store(c) }

// Check reports whether the store can hold every limited rule of c (see
// Store.Check); the error names the first rule it cannot. Call it before
// SetConfig, so that such a rule is refused when loaded rather than failing
// its requests.
func (s *Service) Check(c *config.Config) error {
	for _, r := range c.Rules() {
		if r.Unlimited || r.Capacity() == 0 {
			continue
		}
		h := Hit{Capacity: r.Capacity(), Count: int64(r.RequestsPerUnit), Period: config.UnitDuration(r.Unit), Debt: r.Debt}
		if err := s.store.Check(h); err != nil {
			return fmt.Errorf("rule %s: %w", r.Key, err)
		}
	}
	return nil
}

// Config returns the current configuration, nil before the first SetConfig.
func (s *Service) Config() *config.Config { return s.cfg.Load() }

// MaxLimited is the most limited descriptors (those a limit applies to) a
// request may carry; more is InvalidArgument. Envoy sends one descriptor
// per rate limit action that applies to a request, so a real configuration
// stays far below it; the bound keeps one request from making the store
// decide thousands of buckets in one step (one Redis script, say).
const MaxLimited = 256

// MaxDescriptors is the most descriptors, limited or not, a request may
// carry; more is InvalidArgument. A descriptor costs the service a few
// hundred bytes while it decides (its plan and its status in the
// response), so without a bound a 4 MiB request of a million empty
// descriptors would cost hundreds of MiB.
const MaxDescriptors = 4096

// plan is one descriptor's part of a decision.
type plan struct {
	limit     *pb.RateLimitResponse_RateLimit // nil: no limit applies
	unlimited bool                            // no limit, by an unlimited rule
	hit       int                             // index into hits, -1 when none
	shadow    bool
	debt      bool
	n         int64
	name      string
	burst     uint32
	shared    []string      // share_threshold wildcards standing for entries' values
	reset     time.Duration // until full, for the Reset header
}

// ShouldRateLimit decides a request; see the package doc.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	domain := req.GetDomain()
	if domain == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(ds) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: more than %d", len(ds), MaxDescriptors)
	}
	for i, d := range ds {
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: is_negative_hits (a refund) is not implemented by admit-rls", i)
		}
	}
	cfg := s.cfg.Load()
	if cfg == nil {
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	known := cfg.HasDomain(domain)
	plans := make([]plan, len(ds))
	var replaced map[string]bool
	for i, d := range ds {
		p := &plans[i]
		p.hit = -1
		p.n = int64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			p.n = int64(min(h.GetValue(), math.MaxInt64))
		}
		if !known {
			continue // a domain the configuration does not hold: no limit, overrides included
		}
		if o := d.GetLimit(); o != nil {
			if config.UnitDuration(pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())) == 0 {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override has unit %v", i, o.GetUnit())
			}
			p.limit = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())}
			// An override changes the numbers of the descriptor's bucket,
			// not how its usage counts: under a debt rule it is charged.
			if r, _ := cfg.Lookup(domain, d.GetEntries()); r != nil {
				p.debt = r.Debt
			}
			continue
		}
		r, shared := cfg.Lookup(domain, d.GetEntries())
		if r == nil {
			continue
		}
		if len(r.Replaces) > 0 {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			for _, n := range r.Replaces {
				replaced[n] = true
			}
		}
		if r.Unlimited {
			p.unlimited = true
			continue
		}
		p.limit = &pb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit}
		p.shadow = r.ShadowMode
		p.debt = r.Debt
		p.name = r.Name
		p.burst = r.Burst
		p.shared = shared
	}
	hits := make([]Hit, 0, len(ds))
	var tokens int64 // what the limited descriptors cost, for the Observer
	for i, d := range ds {
		p := &plans[i]
		if p.limit == nil {
			continue
		}
		if p.name != "" && replaced[p.name] {
			p.limit = nil
			continue
		}
		tokens += min(p.n, math.MaxInt64-tokens) // saturating: each n is at most MaxInt64
		if len(hits) == MaxLimited {
			return nil, status.Errorf(codes.InvalidArgument, "more than %d limited descriptors", MaxLimited)
		}
		capacity := int64(p.burst)
		if capacity == 0 {
			capacity = int64(p.limit.RequestsPerUnit)
		}
		p.hit = len(hits)
		hits = append(hits, Hit{
			Key: Key(domain, d.GetEntries(), p.shared), Capacity: capacity,
			Count: int64(p.limit.RequestsPerUnit), Period: config.UnitDuration(p.limit.Unit),
			N: p.n, Shadow: p.shadow || s.opts.ShadowMode, Debt: p.debt,
		})
	}
	label := domain
	if !known {
		label = ""
	}
	results := make([]Result, len(hits))
	admitted := true
	if len(hits) > 0 {
		var err error
		admitted, err = s.store.Decide(ctx, hits, results)
		if err != nil {
			if s.opts.Observer != nil {
				s.opts.Observer.StoreFailed(label, tokens, err)
			}
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			if errors.Is(err, admit.ErrUnavailable) {
				if s.opts.FailOpen {
					return failOpen(len(ds)), nil
				}
				return nil, status.Error(codes.Unavailable, err.Error())
			}
			if errors.Is(err, admit.ErrInvalidConfig) {
				return nil, status.Error(codes.InvalidArgument, err.Error()) // an override the store cannot hold
			}
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(ds))}
	shadowed := 0
	for i := range plans {
		p := &plans[i]
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		if p.limit == nil {
			if p.unlimited {
				st.LimitRemaining = math.MaxUint32
			}
			continue
		}
		st.CurrentLimit = p.limit
		r := results[p.hit]
		over := !r.OK
		p.reset = r.ResetAfter
		if !over { // one over its limit has nothing left for its cost: 0, as envoyproxy/ratelimit answers
			st.LimitRemaining = uint32(min(r.Remaining, math.MaxUint32))
		}
		switch {
		case hits[p.hit].Capacity == 0 || over && r.ResetAfter != Never && (r.ResetAfter == 0 || beyondBurst(hits, p.hit)):
			// No wait lets this hit pass: a limit of zero (no bucket to
			// fill, ResetAfter 0), or its cost, or the request's costs on
			// its key up to it, exceed the burst, or a full bucket lacked
			// them (one key under two limits). A reset of 0 would send
			// the client back at once, for ever; envoyproxy/ratelimit
			// answers the end of the rule's unit window, and one unit is
			// the nearest a bucket can say (or the time until full, if
			// longer).
			p.reset = max(r.ResetAfter, hits[p.hit].Period)
			st.DurationUntilReset = durationpb.New(ceilSecond(p.reset))
		case r.ResetAfter != Never:
			st.DurationUntilReset = durationpb.New(ceilSecond(r.ResetAfter))
		}
		switch {
		case over && !p.shadow:
			// Under the global shadow mode the status still says
			// OVER_LIMIT; only the overall code is OK.
			st.Code = pb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
			if s.opts.ShadowMode {
				shadowed++
			}
		case over:
			shadowed++
		}
	}
	if !admitted && (resp.OverallCode == pb.RateLimitResponse_OK || s.opts.ShadowMode) {
		// Cannot happen: the Store refuses only for an enforced hit.
		return nil, status.Error(codes.Internal, "store refused a request no descriptor refuses")
	}
	if s.opts.ShadowMode {
		resp.OverallCode = pb.RateLimitResponse_OK
	}
	if s.opts.Headers {
		if c := closest(resp.Statuses); c >= 0 {
			st := resp.Statuses[c]
			resp.ResponseHeadersToAdd = []*core.HeaderValue{
				{Key: s.opts.LimitHeader, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
				{Key: s.opts.RemainingHeader, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
				{Key: s.opts.ResetHeader, Value: strconv.FormatInt(ceilSeconds(plans[c].reset), 10)},
			}
		}
	}
	if s.opts.Observer != nil {
		s.opts.Observer.Decided(label, resp.OverallCode, tokens, shadowed)
	}
	return resp, nil
}

// beyondBurst reports whether hit i's cost, with the costs of the
// request's earlier hits of its key, exceeds its burst: no wait lets it
// pass.
func beyondBurst(hits []Hit, i int) bool {
	h := &hits[i]
	n := h.N
	for j := range i {
		if hits[j].Key == h.Key {
			n += min(hits[j].N, math.MaxInt64-n)
		}
	}
	return n > h.Capacity
}

// failOpen is the answer to n descriptors when the store is unavailable
// and FailOpen is set: OK, no limit.
func failOpen(n int) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, n)}
	for i := range resp.Statuses {
		resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	}
	return resp
}

// closest returns the status the headers describe, as envoyproxy/ratelimit
// picks it: the last one over its limit, else the first limited one with
// the fewest remaining; -1 if none is limited.
func closest(sts []*pb.RateLimitResponse_DescriptorStatus) int {
	c, over := -1, false
	for i, st := range sts {
		switch {
		case st.CurrentLimit == nil:
		case st.Code == pb.RateLimitResponse_OVER_LIMIT:
			c, over = i, true
		case !over && (c < 0 || st.LimitRemaining < sts[c].LimitRemaining):
			c = i
		}
	}
	return c
}

// ceilSecond rounds d up to whole seconds. duration_until_reset is sent
// so: Envoy's x-ratelimit-reset header takes the duration's whole seconds,
// so a status over its limit 0.8 s from full would tell the client 0,
// come back at once, where envoyproxy/ratelimit, counting to its window's
// end in whole seconds, never answers less than 1.
func ceilSecond(d time.Duration) time.Duration {
	if d > math.MaxInt64-time.Second {
		return d
	}
	return time.Duration(ceilSeconds(d)) * time.Second
}

func ceilSeconds(d time.Duration) int64 {
	if d == Never {
		return math.MaxInt64 / int64(time.Second)
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Key returns the bucket key of a descriptor in a domain: every part
// length-prefixed, so no two descriptors share a key, except that a
// non-empty shared[i] replaces entry i's value (share_threshold).
func Key(domain string, entries []*common.RateLimitDescriptor_Entry, shared []string) string {
	n := len(domain) + 4
	for _, e := range entries {
		n += len(e.GetKey()) + len(e.GetValue()) + 8
	}
	b := make([]byte, 0, n)
	b = appendPart(b, domain)
	for i, e := range entries {
		b = appendPart(b, e.GetKey())
		if i < len(shared) && shared[i] != "" {
			b = append(b, '*') // a shared wildcard, never equal to a value's part
			b = appendPart(b, shared[i])
			continue
		}
		b = appendPart(b, e.GetValue())
	}
	return string(b)
}

func appendPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
