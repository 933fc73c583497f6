package admithttp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/ratelimit"
)

// Middleware returns middleware that admits each request against l, under
// the key and at the cost the options choose (by default KeyByIP, cost 1),
// and under l's own limits, or with WithLimits under the limits chosen for
// the request (l must then be an admit.PolicyLimiter). It answers as
// follows, in this order:
//
//   - WithSkip's function exempts the request: the next handler runs, with
//     no other function called, no limiter call, no RateLimit fields;
//   - WithLimits's function fails: 400 Bad Request (the request does not say
//     which limits apply), or 403 Forbidden if its error wraps
//     admit.ErrUnknownClient (the request names a client the server does
//     not serve), no limiter call, no fields; it returns no limits:
//     the next handler runs unlimited, no limiter call, no fields; it
//     returns limits admit.ValidateLimits rejects (or an unnamed limit shown
//     under another limit's name, below): 500 Internal Server Error, nothing
//     consumed, no fields;
//   - admitted: the next handler runs, with the RateLimit and
//     RateLimit-Policy fields already set;
//   - denied: 429 Too Many Requests (or the WithDenied handler), with both
//     fields and Retry-After, the wait in whole seconds rounded up, at least
//     1, so a client that honours it is never early;
//   - the key function fails: 400 Bad Request (the request does not say who
//     sent it), or 403 Forbidden if its error wraps admit.ErrUnknownClient,
//     no limiter call, no RateLimit fields;
//   - the cost function returns a negative cost: 500 Internal Server Error (a
//     bug in the server, not the client), no limiter call, no fields;
//   - the cost is above the key's capacity, or some limit's (the limiter's
//     error wraps admit.ErrUnsatisfiable, not admit.ErrUnavailable): 413
//     Content Too Large, since waiting can never help, with the fields of
//     the key's current state;
//   - the limiter rejects a limit (its error wraps admit.ErrInvalidConfig: a
//     rate too small to represent at its capacity, say): 500, no fields,
//     whatever the failure policy;
//   - the limiter's backend failed (its error wraps admit.ErrUnavailable)
//     and its failure policy decided from a bucket (a fallback limiter, or
//     keyed's RefuseNew): that Decision is followed as above, admitted or
//     denied, with its fields;
//   - the backend failed and its policy admitted blind (Remaining and
//     ResetAfter both 0, redisbucket's WithFailOpen): the next handler runs,
//     with no RateLimit fields, since no state exists;
//   - the backend failed and its failure policy refused without a bucket's
//     Decision (a fallback limiter found the cost above its own capacity,
//     or rejected a limit: the error wraps admit.ErrUnavailable and
//     admit.ErrUnsatisfiable or admit.ErrInvalidConfig): 503 with
//     Retry-After as below, whatever WithFailOpen says. The policy decided;
//     failing open there would let exactly the costliest requests through
//     unlimited;
//   - no decision: the backend failed and its policy refused blind
//     (redisbucket's default, fail closed), or the Decision has Limit 0, or
//     any other limiter error: by default fail closed, 503 Service
//     Unavailable with Retry-After (the Decision's RetryAfter rounded up,
//     at least 1 second); with WithFailOpen the next handler runs
//     unlimited. No RateLimit fields either way: no trustworthy state
//     exists;
//   - the request's own context ended while the limiter decided (its error
//     matches context.Canceled or context.DeadlineExceeded and
//     r.Context() is done: the client left, or a deadline set in front
//     passed): 503 as above, whatever WithFailOpen says. That is no
//     failure of the limiter, and a client that closes its connection
//     right after sending must not reach the handler without a token
//     (WithFailOpen states the trade-off for deadlines).
//
// So a decision of the limiter's failure policy is obeyed whenever there is
// one, and the middleware's own policy (WithFailOpen or not) applies only
// where there is none. Every limiter error, and every error of the
// WithLimits function or its limits, is passed to the WithOnError
// function, if any, whatever the answer. A cost of 0 admits without
// consuming and reports the key's state.
//
// The fields follow draft-ietf-httpapi-ratelimit-headers-10 with Structured
// Field syntax (RFC 9651):
//
//	RateLimit-Policy: "<name>";q=<capacity>;w=<seconds to refill from empty>
//	RateLimit: "<name>";r=<remaining>;t=<seconds until full>
//
// with w and t rounded up. Under one limit, w needs the limiter's refill
// rate, which admit.KeyedLimiter does not expose: it is taken from
// WithFillTime if given, else from l's FillTime method if l is a Refiller,
// else from the limit l lists if it is a LimitLister, and is left out (the
// draft makes it optional) when none says or the bucket never refills.
// Both optional interfaces are looked for on l and then down its Unwrap
// chain, the nearest first (see Refiller).
// Integers above the Structured Field maximum (999,999,999,999,999) are
// clamped to it.
//
// Under several limits (WithLimits, or a LimitLister listing two or more),
// RateLimit-Policy lists every limit in order and RateLimit names the one
// that decided (Decision.Policy, PolicyLimiter's rule 4), with the
// Decision's Remaining and ResetAfter (until every limit is full):
//
//	RateLimit-Policy: "burst";q=20;w=2, "daily";q=1000;w=86400
//	RateLimit: "burst";r=0;t=1729
//
// Each limit's q is its Capacity and its w its Capacity ÷ Rate, taken to
// the nearest nanosecond and rounded up to whole seconds (a Per(24*time.Hour,
// n) limit reads 86400 whatever n), left out for a Rate of 0. A limit's
// Name is its name in both fields; a limit whose Name is "" takes the
// WithPolicyName name ("default" by default), as a limiter that lists no
// limits does, so that name must not also be another limit's.
//
// A decision of the limiter's failure policy (the error wraps
// admit.ErrUnavailable and the Decision comes from a bucket: redisbucket's
// WithFallback limiter, keyed's RefuseNew), and a Decision naming a limit
// outside the list, is shown alone: its limit's name (the WithPolicyName
// name if unnamed) and q, no w. It describes the policy's own bucket, whose
// rate the middleware does not know, whatever capacity or Names it shares
// with the limits l lists (a fallback sized for one replica's share has the
// same ones at another rate).
//
// Middleware panics if l is nil or an option is invalid (a nil function, a
// policy name that is not printable ASCII, a negative fill time), if
// WithLimits is given and l is not an admit.PolicyLimiter, if WithFillTime
// is given with WithLimits or with a LimitLister of two or more limits
// (each limit has its own w), and if a LimitLister's limits fail
// admit.ValidateLimits or two would be shown under one name: those are
// programming errors found at start-up, not request data. The returned
// middleware is safe for concurrent use.
func Middleware(l admit.KeyedLimiter, opts ...Option) func(http.Handler) http.Handler {
	if l == nil {
		panic("admithttp: Middleware with a nil limiter")
	}
	c := config{key: KeyByIP, cost: one, name: "default"}
	rf, refiller := ratelimit.Find[Refiller](l)
	if refiller {
		c.fill = rf.FillTime()
	}
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("admithttp: option %d is nil", i))
		}
		o(&c)
		if c.err != nil {
			panic(c.err.Error())
		}
	}
	m := &middleware{l: l, config: c}
	name := c.name
	if c.limits != nil {
		pl, ok := ratelimit.Policy(l)
		if !ok {
			panic(fmt.Sprintf("admithttp: WithLimits needs a limiter that implements admit.PolicyLimiter (AllowLimits), all the way down its Unwrap chain; %T does not", l))
		}
		if c.fillSet {
			panic("admithttp: WithFillTime with WithLimits: each limit's w is its own Capacity ÷ Rate")
		}
		m.pl = pl
	} else if ll, ok := ratelimit.Find[LimitLister](l); ok {
		listed := ll.Limits()
		if len(listed) > 0 {
			if err := admit.ValidateLimits(listed); err != nil {
				panic(fmt.Sprintf("admithttp: the limiter's Limits: %v", err))
			}
		}
		switch {
		case len(listed) >= 2:
			if c.fillSet {
				panic(fmt.Sprintf("admithttp: WithFillTime with a limiter of %d limits: each limit's w is its own Capacity ÷ Rate", len(listed)))
			}
			p, err := ratelimit.NewSet(slices.Clone(listed), c.name)
			if err != nil {
				panic(fmt.Sprintf("admithttp: the limiter's Limits: %v", err))
			}
			m.static = p
		case len(listed) == 1:
			if listed[0].Name != "" {
				name = listed[0].Name
			}
			if !c.fillSet && !refiller {
				m.w = ratelimit.FillSeconds(listed[0])
			}
		}
	}
	m.quoted = ratelimit.Quote(name)
	if c.fill > 0 {
		m.w = ratelimit.Seconds(c.fill)
	}
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("admithttp: Middleware applied to a nil handler")
		}
		return &handler{m: m, next: next}
	}
}

// Refiller is an optional interface of an admit.KeyedLimiter: FillTime
// reports how long one of its buckets takes to refill from empty to full
// (capacity ÷ rate), or 0 if it never refills. Middleware reads it once, for
// the w parameter of RateLimit-Policy, from the limiter or, if the limiter
// has no FillTime, from the nearest limiter down its chain of
// Unwrap() admit.KeyedLimiter methods that has one: a wrapper that only
// counts (admitotel.Limiter) has neither method, so it neither hides the
// wrapped limiter's nor claims one the wrapped limiter lacks.
type Refiller interface {
	FillTime() time.Duration
}

// Option configures Middleware.
type Option func(*config)

type config struct {
	key      func(*http.Request) (string, error)
	cost     func(*http.Request) int64
	limits   func(*http.Request) ([]admit.Limit, error)
	skip     func(*http.Request) bool
	name     string
	denied   http.Handler
	failOpen bool
	onError  func(*http.Request, error)
	fill     time.Duration
	fillSet  bool // WithFillTime was given
	err      error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("admithttp: "+format, args...)
	}
}

// WithKey sets the function that names a request's client; the default is
// KeyByIP. An error from f is answered with 400 Bad Request, or 403
// Forbidden if it wraps admit.ErrUnknownClient. To fall back to a shared
// key instead, wrap f in a function that returns one.
func WithKey(f func(*http.Request) (string, error)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithKey(nil)")
		}
		c.key = f
	}
}

// WithCost sets the number of tokens a request consumes; the default is 1.
// A cost of 0 admits without consuming; a negative cost is answered with 500
// Internal Server Error.
func WithCost(f func(*http.Request) int64) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithCost(nil)")
		}
		c.cost = f
	}
}

// WithPolicyName sets the policy name both RateLimit fields carry for a
// limit that has none: the one limit of a limiter that lists no limits or
// one unnamed limit (keyed.New's), or a limit whose Name is "" among limits
// listed or chosen by WithLimits. A named limit is shown under its own Name. The default is
// "default". It must be printable ASCII (a Structured Field String).
func WithPolicyName(name string) Option {
	return func(c *config) {
		if !printable(name) {
			c.fail("WithPolicyName(%q): not printable ASCII", name)
			return
		}
		c.name = name
	}
}

// WithDenied sets the handler for denied requests, in place of a plain-text
// 429. It runs with RateLimit, RateLimit-Policy and Retry-After already set
// on the response. The status is 429 unless h writes another one itself: a
// handler that only sets headers, writes a body, or flushes still denies.
// One that hijacks the connection (through http.ResponseController) before
// writing a status gets it after the server has sent a complete 429 head,
// with Content-Length: 0 and Connection: close; to send a status of its own
// on a hijacked connection, h writes it with WriteHeader first.
func WithDenied(h http.Handler) Option {
	return func(c *config) {
		if h == nil {
			c.fail("WithDenied(nil)")
		}
		c.denied = h
	}
}

// WithFailOpen makes a limiter error that comes without a decision (see
// Middleware) run the next handler unlimited instead of answering 503,
// unless the error is the request's own context ending: the client left
// (context.Canceled), or a deadline set on the request in front of the
// middleware passed (context.DeadlineExceeded). That is answered 503
// either way, since no limiter failed, and a client must not reach the
// handler without a token by leaving right after it sends (or, where a
// deadline comes from a client's header, by asking for a tiny one). Fail
// open when an outage of the limiter's backend must not become an outage of
// the service; stay closed (the default) when the limit protects something
// that would fall over without it. A decision the limiter's own failure
// policy made (redisbucket's WithFallback or WithFailOpen) is followed
// either way.
//
// The trade-off: a backend that stalls for longer than the requests'
// deadline makes every request a 503 while it stalls, fail-open or not (a
// limiter that returns the caller's context error, as redisbucket does,
// never reaches its own failure policy), and a handler run then would hold
// an expired context anyway. Give the limiter a timeout shorter than the
// requests' deadline (redisbucket.WithTimeout): a stall is then the
// limiter's failure, reported within the request's time, which this option
// or the limiter's own failure policy serves.
func WithFailOpen() Option {
	return func(c *config) { c.failOpen = true }
}

// WithOnError sets a function called with the request and each error the
// limiter returns, before the response is written, whatever the response:
// a followed failure-policy decision, 503, 413, or a cancelled request's
// context error; and with each error of the WithLimits function (400) or of
// the limits it returns (500), wrapped with the prefix "admithttp:
// WithLimits:" (errors.Is sees through it). The middleware does not log;
// this is where an outage that a fallback hides becomes visible (a log
// line, a counter). f runs on the request's goroutine, concurrently with
// other requests, and must not write the response.
func WithOnError(f func(r *http.Request, err error)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithOnError(nil)")
		}
		c.onError = f
	}
}

// WithFillTime states how long an empty bucket takes to refill (capacity ÷
// rate), for the w parameter of RateLimit-Policy, when the limiter is not a
// Refiller or should be overridden; 0 leaves w out. Negative is invalid, and
// so is WithFillTime under several limits (WithLimits, or a LimitLister of
// two or more): each has its own w.
func WithFillTime(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithFillTime(%v) is negative", d)
		}
		c.fill, c.fillSet = d, true
	}
}

type middleware struct {
	l  admit.KeyedLimiter
	pl admit.PolicyLimiter // l, when WithLimits is given; else nil
	config
	quoted string // the single limit's name as an sf-string
	w      int64  // the single limit's w, or 0 to leave it out
	// static renders the limiter's own limits when it lists two or more
	// (LimitLister) and WithLimits is not given; nil on the single-limit
	// path.
	static *ratelimit.Set
	// cache renders the lists WithLimits returns.
	cache ratelimit.Cache
	// policy caches the RateLimit-Policy value for the last capacity seen,
	// so that the usual case, one capacity for every key, allocates nothing.
	policy atomic.Pointer[policyValue]
}

type policyValue struct {
	q int64
	s string
}

type handler struct {
	m    *middleware
	next http.Handler
}

func one(*http.Request) int64 { return 1 }

// deniedWriter gives a WithDenied handler's response the status 429 unless
// the handler writes a status of its own: one that only writes a body,
// flushes, hijacks, or does nothing, still denies. Each way a response can
// be committed passes through commit first: Write, and the two methods
// http.ResponseController would otherwise find on the server's writer
// through Unwrap, where a flush commits an implicit 200.
type deniedWriter struct {
	http.ResponseWriter
	wrote bool
}

// commit writes the 429 status unless a final status was written.
func (d *deniedWriter) commit() {
	if !d.wrote {
		d.WriteHeader(http.StatusTooManyRequests)
	}
}

func (d *deniedWriter) WriteHeader(code int) {
	if code >= 200 { // 1xx informational responses precede the final status
		d.wrote = true
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *deniedWriter) Write(b []byte) (int, error) {
	d.commit()
	return d.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls. It commits the
// 429 only if a writer below can flush, so that a handler told
// http.ErrNotSupported may still choose its status.
func (d *deniedWriter) FlushError() error {
	if below(d.ResponseWriter, canFlush) == nil {
		return http.ErrNotSupported
	}
	d.commit()
	return http.NewResponseController(d.ResponseWriter).Flush()
}

// Flush makes deniedWriter an http.Flusher, for handlers that assert it
// rather than use http.ResponseController; see FlushError.
func (d *deniedWriter) Flush() { _ = d.FlushError() }

// Hijack is what http.ResponseController.Hijack calls. Without a status
// written, it makes the 429 a complete response (no body, the connection
// closed after it), which the server sends before handing the connection
// over; as with FlushError, only if a writer below can hijack.
func (d *deniedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, _ := below(d.ResponseWriter, canHijack).(http.Hijacker)
	if h == nil {
		return nil, nil, http.ErrNotSupported
	}
	if !d.wrote {
		hd := d.Header()
		hd.Set("Content-Length", "0")
		hd.Set("Connection", "close")
		d.commit()
	}
	return h.Hijack()
}

// Unwrap lets http.ResponseController reach the server's writer for what
// deniedWriter does not implement (deadlines, full duplex).
func (d *deniedWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// below returns the first writer in w's Unwrap chain, w included, that has
// the method ok looks for, as http.ResponseController searches; nil if none.
func below(w http.ResponseWriter, ok func(http.ResponseWriter) bool) http.ResponseWriter {
	for w != nil && !ok(w) {
		u, isU := w.(interface{ Unwrap() http.ResponseWriter })
		if !isU {
			return nil
		}
		w = u.Unwrap()
	}
	return w
}

func canFlush(w http.ResponseWriter) bool {
	_, e := w.(interface{ FlushError() error })
	_, f := w.(http.Flusher)
	return e || f
}

func canHijack(w http.ResponseWriter) bool {
	_, ok := w.(http.Hijacker)
	return ok
}

// tooManyBody is the default denial's body, as http.Error would write it.
var tooManyBody = []byte("429 too many requests\n")

// ServeHTTP implements the responses listed on Middleware.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.skip != nil && m.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	// ps renders the fields: nil on the single-limit path.
	ps := m.static
	var limits []admit.Limit
	if m.limits != nil {
		var err error
		if limits, err = m.limits(r); err != nil {
			m.report(r, fmt.Errorf("admithttp: WithLimits: %w", err))
			badRequest(w, err, "400 bad request: cannot tell which limits apply")
			return
		}
		if len(limits) == 0 {
			h.next.ServeHTTP(w, r)
			return
		}
		// Rendered before the limiter is called, so that limits the
		// fields cannot show consume nothing.
		if ps, err = m.cache.Get(limits, m.name); err != nil {
			m.report(r, fmt.Errorf("admithttp: WithLimits: %w", err))
			http.Error(w, "500 internal server error", http.StatusInternalServerError)
			return
		}
	}
	key, err := m.key(r)
	if err != nil {
		badRequest(w, err, "400 bad request: cannot identify the client")
		return
	}
	n := m.cost(r)
	if n < 0 {
		http.Error(w, "500 internal server error", http.StatusInternalServerError)
		return
	}
	d, err := m.decide(r, key, n, limits)
	if err == nil && d.Limit < 1 {
		// No decision at all (admit.Decision's contract), from a limiter
		// that breaks it: no fields from it, as for a failure.
		err = fmt.Errorf("admithttp: the limiter's Decision has Limit %d and no error: %w", d.Limit, errNoDecision)
	}
	alone := false
	if err != nil {
		m.report(r, err)
		if !errors.Is(err, admit.ErrUnavailable) || !ratelimit.FromBucket(d) {
			h.undecided(w, r, key, limits, ps, d, err)
			return
		}
		// The backend failed and its failure policy decided from a bucket
		// (a fallback limiter's): that Decision is the answer, and it
		// describes that bucket, not the limits listed for the backend
		// (a fallback may share their capacity or Names at another rate),
		// so it is shown alone.
		alone = true
	}
	if d.Allowed {
		m.setFields(w.Header(), ps, alone, d, false)
		h.next.ServeHTTP(w, r)
	} else {
		m.setFields(w.Header(), ps, alone, d, true)
		if m.denied != nil {
			dw := &deniedWriter{ResponseWriter: w}
			m.denied.ServeHTTP(dw, r)
			dw.commit()
			return
		}
		// What http.Error(w, ..., 429) does, without its formatting and
		// header churn: denials are the path a flood takes.
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(tooManyBody)
	}
}

// errNoDecision is wrapped by the error that WithOnError is given for a
// Decision with Limit 0 that came without an error.
var errNoDecision = errors.New("no decision")

// badRequest answers an error of the key or limits function: 403 Forbidden
// for a client the server does not serve (err wraps admit.ErrUnknownClient),
// else 400 with msg (the request does not say who sent it, or which limits
// apply).
func badRequest(w http.ResponseWriter, err error, msg string) {
	if errors.Is(err, admit.ErrUnknownClient) {
		http.Error(w, "403 forbidden: unknown client", http.StatusForbidden)
		return
	}
	http.Error(w, msg, http.StatusBadRequest)
}

// undecided answers a limiter error that comes without a Decision from a
// bucket, as Middleware lists.
func (h *handler) undecided(w http.ResponseWriter, r *http.Request, key string, limits []admit.Limit, ps *ratelimit.Set, d admit.Decision, err error) {
	m := h.m
	unavailable := errors.Is(err, admit.ErrUnavailable)
	switch {
	case unavailable && d.Allowed && d.Limit >= 1:
		// The backend's policy admitted blind (fail open).
		h.next.ServeHTTP(w, r)
	case !unavailable && errors.Is(err, admit.ErrUnsatisfiable):
		// The Decision that comes with an error need not hold the
		// key's state (keyed's does not): peek for it.
		// The peek is marked so that a counting wrapper (admitotel) does
		// not count it as a second decision.
		if d, err = m.decide(r.WithContext(ratelimit.ForHeaders(r.Context())), key, 0, limits); err == nil && d.Limit >= 1 {
			m.setFields(w.Header(), ps, false, d, false)
		}
		http.Error(w, "413 request costs more than the whole quota", http.StatusRequestEntityTooLarge)
	case !unavailable && errors.Is(err, admit.ErrInvalidConfig):
		// A limit the limiter cannot enforce though ValidateLimits
		// passed it (a rate too small for its capacity): a server bug,
		// whatever the failure policy.
		http.Error(w, "500 internal server error", http.StatusInternalServerError)
	case m.failOpen && !ended(r, err) && !ratelimit.PolicyRefused(err):
		h.next.ServeHTTP(w, r)
	default:
		w.Header().Set("Retry-After", strconv.FormatInt(ratelimit.RetryAfter(d.RetryAfter), 10))
		http.Error(w, "503 rate limiter unavailable", http.StatusServiceUnavailable)
	}
}

// ended reports whether err is the request's own context ending (the
// client left, or a deadline set in front of the middleware passed) rather
// than a failure of the limiter: no limiter failed, so WithFailOpen does not
// serve such a request, whose client chose the path by leaving.
func ended(r *http.Request, err error) bool {
	return r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// report passes err to the WithOnError function, if any.
func (m *middleware) report(r *http.Request, err error) {
	if m.onError != nil {
		m.onError(r, err)
	}
}

// decide asks the limiter: under limits if WithLimits chose them, else
// under the limiter's own.
func (m *middleware) decide(r *http.Request, key string, n int64, limits []admit.Limit) (admit.Decision, error) {
	if limits != nil {
		return m.pl.AllowLimits(r.Context(), key, n, limits...)
	}
	return m.l.AllowN(r.Context(), key, n)
}

// setFields sets the fields for d: from the single limit's name and d's
// capacity when ps is nil, else from ps, naming the limit that decided;
// and for a Decision of a limit outside ps, or of a failure policy
// (alone), only what the Decision says of its own limit.
func (m *middleware) setFields(hd http.Header, ps *ratelimit.Set, alone bool, d admit.Decision, retry bool) {
	if !alone {
		if ps == nil {
			m.fields(hd, m.policyFor(d.Limit), m.quoted, d, retry)
			return
		}
		if name, ok := ps.Name(d.Policy); ok {
			m.fields(hd, ps.Policy, name, d, retry)
			return
		}
	}
	// A failure policy's decision, or a limit outside the set. Its fields
	// describe that limit alone, as far as the Decision says: its name
	// (WithPolicyName's for an unnamed one) and q, and no w, its rate
	// being unknown. This path allocates.
	name := m.name
	if d.Policy != "" && printable(d.Policy) {
		name = d.Policy
	}
	q := ratelimit.Quote(name)
	var buf [96]byte
	m.fields(hd, string(ratelimit.AppendPolicy(buf[:0], q, d.Limit, 0)), q, d, retry)
}

// fields sets RateLimit-Policy to policy and RateLimit to the sf-string
// name with d's numbers, and for a denial Retry-After and, unless
// WithDenied took over the body, the plain-text headers. The header map
// takes its value slices from one allocation, each capped at length 1 so
// that a later Add cannot write into its neighbour.
func (m *middleware) fields(hd http.Header, policy, name string, d admit.Decision, retry bool) {
	var vals []string
	if retry {
		vals = make([]string, 5)
	} else {
		vals = make([]string, 2)
	}
	vals[0] = policy
	var buf [96]byte
	vals[1] = string(ratelimit.AppendLimit(buf[:0], name, d))
	hd["Ratelimit-Policy"] = vals[0:1:1]
	hd["Ratelimit"] = vals[1:2:2]
	if retry {
		vals[2] = strconv.FormatInt(ratelimit.RetryAfter(d.RetryAfter), 10)
		hd["Retry-After"] = vals[2:3:3]
		if m.denied == nil {
			vals[3], vals[4] = "text/plain; charset=utf-8", "nosniff"
			hd["Content-Type"] = vals[3:4:4]
			hd["X-Content-Type-Options"] = vals[4:5:5]
		}
	}
}

func (m *middleware) policyFor(q int64) string {
	if p := m.policy.Load(); p != nil && p.q == q {
		return p.s
	}
	var buf [96]byte
	p := &policyValue{q: q, s: string(ratelimit.AppendPolicy(buf[:0], m.quoted, q, m.w))}
	m.policy.Store(p)
	return p.s
}

// printable reports whether s is printable ASCII, as an sf-string needs.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
