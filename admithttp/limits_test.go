package admithttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/keyedtest"
)

// item is one member of a RateLimit-Policy list.
type item struct {
	name string
	q, w int64 // -1 when absent
}

// listFields is what one response said under several limits, parsed with a
// Structured Field parser.
type listFields struct {
	status     int
	policy     []item // RateLimit-Policy, in order; nil when absent
	name       string // RateLimit's policy; "" when absent
	r, t       int64  // -1 when absent
	retryAfter int64  // -1 when absent
}

func (f listFields) String() string {
	return fmt.Sprintf("{status %d policy %v RateLimit %q r=%d t=%d Retry-After %d}", f.status, f.policy, f.name, f.r, f.t, f.retryAfter)
}

func parseList(t testing.TB, resp *http.Response) listFields {
	t.Helper()
	f := listFields{status: resp.StatusCode, r: -1, t: -1, retryAfter: -1}
	if v := resp.Header.Values("RateLimit-Policy"); len(v) > 0 {
		l, err := httpsfv.UnmarshalList(v)
		if err != nil {
			t.Fatalf("RateLimit-Policy %q: %v", v, err)
		}
		f.policy = []item{}
		for _, m := range l {
			it, ok := m.(httpsfv.Item)
			if !ok {
				t.Fatalf("RateLimit-Policy %q: member %#v is not an Item", v, m)
			}
			s, ok := it.Value.(string)
			if !ok {
				t.Fatalf("RateLimit-Policy %q: %#v is not a String", v, it.Value)
			}
			f.policy = append(f.policy, item{s, param(t, it.Params, "q"), param(t, it.Params, "w")})
		}
	}
	if v := resp.Header.Values("RateLimit"); len(v) > 0 {
		var p *httpsfv.Params
		f.name, p = oneItem(t, v)
		f.r, f.t = param(t, p, "r"), param(t, p, "t")
	}
	// Retry-After is checked the way parse checks it.
	f.retryAfter = parse(t, &http.Response{StatusCode: resp.StatusCode, Header: http.Header{"Retry-After": resp.Header.Values("Retry-After")}}).retryAfter
	return f
}

func getList(t testing.TB, srv *httptest.Server, path string, hdr ...string) listFields {
	t.Helper()
	return parseList(t, fetch(t, srv, path, hdr...))
}

// The tiers of these tests. Their rates are exact in binary and in
// decimal (1/128 and 1/64 per second over a day), so that the model below
// predicts the limiter to the nanosecond.
var (
	freeTier = []admit.Limit{
		admit.Per(time.Second, 2).WithBurst(4).Named("burst"), // 4 at once, 2 a second
		admit.Per(24*time.Hour, 675).Named("daily"),           // 675 a day: one per 128 s
	}
	paidTier = []admit.Limit{
		admit.Per(time.Second, 10).WithBurst(20).Named("burst"),
		admit.Per(24*time.Hour, 1350).Named("daily"), // one per 64 s
	}
	errUnknownTier = errors.New("unknown tier")
)

// tierOf chooses the limits from the X-Tier header (which an
// authenticating proxy sets): free by default, none for /healthz.
func tierOf(r *http.Request) ([]admit.Limit, error) {
	if r.URL.Path == "/healthz" {
		return nil, nil
	}
	switch r.Header.Get("X-Tier") {
	case "", "free":
		return freeTier, nil
	case "paid":
		return paidTier, nil
	}
	return nil, errUnknownTier
}

func costOf(r *http.Request) int64 {
	if s := r.Header.Get("Cost"); s != "" {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	return 1
}

// policyOf is the RateLimit-Policy list limits must produce.
func policyOf(limits []admit.Limit) []item {
	var out []item
	for _, l := range limits {
		out = append(out, item{l.Name, l.Capacity, ceilDiv(int64(float64(l.Capacity)/l.Rate*1e9+0.5), 1e9)})
	}
	return out
}

// scale is the model's units per token: with it every rate the tests use
// (2, 10 and 100 a second, 1/128 and 1/64) is a whole number of units per
// nanosecond.
const scale = 128e9

// multiModel is an independent model of one key under several limits,
// decided all or nothing (PolicyLimiter's rules 1 and 4), each limit in
// exact integer units.
type multiModel struct {
	limits []admit.Limit
	units  []int64 // balance per limit, in units
	perNs  []int64 // refill per limit, units per nanosecond
	last   int64
}

func newMultiModel(t testing.TB, limits []admit.Limit) *multiModel {
	m := &multiModel{limits: limits}
	for _, l := range limits {
		perNs := l.Rate * scale / 1e9
		if perNs != float64(int64(perNs)) {
			t.Fatalf("limit %+v is not a whole number of units per ns", l)
		}
		m.units = append(m.units, l.Capacity*scale)
		m.perNs = append(m.perNs, int64(perNs))
	}
	return m
}

func (m *multiModel) at(now int64) {
	for i, l := range m.limits {
		m.units[i] = min(l.Capacity*scale, m.units[i]+(now-m.last)*m.perNs[i])
	}
	m.last = now
}

// want returns the fields a request of cost n at now must get, and the
// names RateLimit may carry (several when limits tie); it consumes what it
// admits.
func (m *multiModel) want(now, n int64) (listFields, []string) {
	m.at(now)
	f := listFields{status: 200, policy: policyOf(m.limits), retryAfter: -1}
	for _, l := range m.limits {
		if n > l.Capacity {
			f.status = 413 // the fields of a peek
			n = 0
			break
		}
	}
	ok := true
	for i := range m.limits {
		ok = ok && m.units[i] >= n*scale
	}
	if ok {
		for i := range m.units {
			m.units[i] -= n * scale
		}
	}
	var names []string
	var wait int64 // ns until every limit holds n
	f.r = -1
	for i, l := range m.limits {
		whole := m.units[i] / scale
		full := ceilDiv(l.Capacity*scale-m.units[i], m.perNs[i])
		f.t = max(f.t, ceilDiv(full, 1e9))
		need := max(0, ceilDiv(n*scale-m.units[i], m.perNs[i]))
		switch {
		case ok && (f.r < 0 || whole < f.r): // fewest whole tokens left
			names, f.r = []string{l.Name}, whole
		case ok && whole == f.r:
			names = append(names, l.Name)
		case !ok && need > wait: // needs the longest
			names, wait = []string{l.Name}, need
		case !ok && need == wait && need > 0:
			names = append(names, l.Name)
		}
		if !ok && (f.r < 0 || whole < f.r) {
			f.r = whole
		}
	}
	if !ok {
		f.status = 429
		f.retryAfter = max(1, ceilDiv(wait, 1e9))
	}
	return f, names
}

// check compares a response with the model's prediction.
func (m *multiModel) check(t testing.TB, step string, now, n int64, got listFields) {
	t.Helper()
	want, names := m.want(now, n)
	if !slices.Contains(names, got.name) {
		t.Fatalf("%s: RateLimit names %q, want one of %q (got %v)", step, got.name, names, got)
	}
	got.name, want.name = "", ""
	if got.String() != want.String() {
		t.Fatalf("%s at %v, cost %d:\n got %v\nwant %v", step, time.Duration(now), n, got, want)
	}
}

// TestLimitsTiers: the limits come from a header, per request; each tier
// is listed whole in RateLimit-Policy, RateLimit names the limit that
// decided, and two clients on different tiers are limited separately,
// each by its own tier.
func TestLimitsTiers(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l := newPolicy(t, clk)
	srv := serve(t, admithttp.Middleware(l, admithttp.WithLimits(tierOf),
		admithttp.WithKey(admithttp.KeyByHeader("X-API-Key")))(ok200))
	free, paid := newMultiModel(t, freeTier), newMultiModel(t, paidTier)
	var now int64
	step := func(d time.Duration, who string, m *multiModel, hdr ...string) listFields {
		t.Helper()
		clk.Advance(d)
		now += int64(d)
		got := getList(t, srv, "/", hdr...)
		m.check(t, fmt.Sprintf("%s at %v", who, time.Duration(now)), now, 1, got)
		return got
	}
	// The free client spends its burst of 4 and is refused by "burst";
	// the paid client's burst of 20 is untouched by it.
	for range 4 {
		step(0, "free", free, "X-API-Key", "a")
	}
	if f := step(0, "free", free, "X-API-Key", "a"); f.status != 429 || f.name != "burst" || f.retryAfter != 1 {
		t.Fatalf("free after its burst: %v, want 429 from burst, Retry-After 1", f)
	}
	for range 20 {
		step(0, "paid", paid, "X-API-Key", "b", "X-Tier", "paid")
	}
	if f := step(0, "paid", paid, "X-API-Key", "b", "X-Tier", "paid"); f.status != 429 || f.name != "burst" {
		t.Fatalf("paid after its burst: %v", f)
	}
	step(500*time.Millisecond, "free", free, "X-API-Key", "a", "X-Tier", "free")
	step(0, "paid", paid, "X-API-Key", "b", "X-Tier", "paid")
	// The exact strings, as the draft writes them.
	resp := fetch(t, srv, "/", "X-API-Key", "c", "X-Tier", "paid")
	if p, rl := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"); p != `"burst";q=20;w=2, "daily";q=1350;w=86400` || rl != `"burst";r=19;t=64` {
		t.Fatalf("RateLimit-Policy %q, RateLimit %q", p, rl)
	}
}

// TestLimitsBurstDaily spends a daily quota in bursts on a fake clock.
// While the burst runs out first, "burst" decides; once the day's quota is
// the scarcer, "daily" does, with a Retry-After in minutes that is never
// early: a second before it the request is still refused, at it admitted.
func TestLimitsBurstDaily(t *testing.T) {
	limits := []admit.Limit{
		admit.Per(time.Second, 100).WithBurst(200).Named("burst"),
		admit.Per(24*time.Hour, 675).Named("daily"),
	}
	clk := buckettest.NewFakeClock(0)
	l := newPolicy(t, clk)
	srv := serve(t, admithttp.Middleware(l,
		admithttp.WithLimits(func(*http.Request) ([]admit.Limit, error) { return limits, nil }),
		admithttp.WithCost(costOf))(ok200))
	m := newMultiModel(t, limits)
	var now int64
	step := func(d time.Duration, n int64) listFields {
		t.Helper()
		clk.Advance(d)
		now += int64(d)
		got := getList(t, srv, "/", "Cost", strconv.FormatInt(n, 10))
		m.check(t, fmt.Sprintf("cost %d at %v", n, time.Duration(now)), now, n, got)
		return got
	}
	for i := range 3 { // 600 of the day's 675, 200 at a time
		if f := step(2*time.Second*time.Duration(min(i, 1)), 200); f.status != 200 || f.name != "burst" || f.r != 0 {
			t.Fatalf("burst %d: %v", i, f)
		}
		if f := step(0, 1); f.status != 429 || f.name != "burst" {
			t.Fatalf("after burst %d: %v, want 429 from burst", i, f)
		}
	}
	f := step(2*time.Second, 100) // the burst is full again; the day has 75
	if f.status != 429 || f.name != "daily" || f.r != 75 || f.retryAfter < 60 {
		t.Fatalf("past the day's quota: %v, want 429 from daily with r=75", f)
	}
	step(0, 70)
	// 7 s in, the day holds 675 − 670 + 7/128 tokens: 100 is 95 × 128 − 7
	// seconds away.
	f = step(time.Second, 100)
	if f.status != 429 || f.name != "daily" || f.retryAfter != 95*128-7 {
		t.Fatalf("%v, want 429 from daily, Retry-After %d", f, 95*128-7)
	}
	if g := step(time.Duration(f.retryAfter-1)*time.Second, 100); g.status != 429 || g.retryAfter != 1 {
		t.Fatalf("a second before Retry-After: %v", g)
	}
	if g := step(time.Second, 100); g.status != 200 || g.name != "daily" || g.r != 0 {
		t.Fatalf("at Retry-After: %v, want 200 with daily at r=0", g)
	}
	step(0, 201) // above burst's capacity: 413 with the fields of a peek
	step(0, 0)
}

// TestLimitsRandomized interleaves three clients on two tiers, costs from 0
// to above a capacity, and random fake-clock steps; every field of every
// response is checked against the model, and every admission is recorded
// so that each limit's bound, at most Capacity + Rate × (t_j − t_i) tokens
// admitted in [t_i, t_j], is checked on every window of every client.
func TestLimitsRandomized(t *testing.T) {
	limits := map[string][]admit.Limit{
		"free": {admit.Per(time.Second, 4).WithBurst(8).Named("burst"), admit.Per(time.Minute, 15).Named("minute"), admit.Per(time.Hour, 225).WithBurst(60).Named("hourly")},
		"paid": {admit.Per(time.Second, 10).WithBurst(8).Named("burst"), admit.Per(24*time.Hour, 1350).Named("daily")},
	}
	clk := buckettest.NewFakeClock(0)
	l := newPolicy(t, clk)
	srv := serve(t, admithttp.Middleware(l, admithttp.WithKey(admithttp.KeyByHeader("Client")), admithttp.WithCost(costOf),
		admithttp.WithLimits(func(r *http.Request) ([]admit.Limit, error) { return limits[r.Header.Get("X-Tier")], nil }))(ok200))
	clients := map[string]string{"a": "free", "b": "free", "c": "paid"}
	models := map[string]*multiModel{}
	type admission struct{ at, n int64 }
	admitted := map[string][]admission{}
	for c, tier := range clients {
		models[c] = newMultiModel(t, limits[tier])
	}
	steps := []time.Duration{0, 1, time.Millisecond, 250 * time.Millisecond, time.Second, 7 * time.Second}
	rng := uint64(0x9e3779b97f4a7c15)
	next := func(n int) int {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	statuses := map[int]int{}
	deciders := map[string]int{}
	var now int64
	for i := range 500 {
		d := steps[next(len(steps))]
		clk.Advance(d)
		now += int64(d)
		c := string(rune('a' + next(3)))
		n := int64(next(10)) // 0 .. 9: above the burst of 8 sometimes
		got := getList(t, srv, "/", "Client", c, "X-Tier", clients[c], "Cost", strconv.FormatInt(n, 10))
		models[c].check(t, fmt.Sprintf("request %d, client %s", i, c), now, n, got)
		if got.status == 200 && n > 0 {
			admitted[c] = append(admitted[c], admission{now, n})
		}
		statuses[got.status]++
		deciders[fmt.Sprint(got.status, got.name)]++
	}
	if statuses[200] < 50 || statuses[429] < 50 || statuses[413] < 20 || deciders["429burst"] < 5 || deciders["429minute"] < 5 || deciders["429hourly"] < 5 {
		t.Fatalf("statuses %v, deciders %v: the sequence does not exercise every outcome", statuses, deciders)
	}
	for c, as := range admitted {
		for _, lim := range limits[clients[c]] {
			perNs := int64(lim.Rate * scale / 1e9)
			for i := range as {
				sum := int64(0)
				for j := i; j < len(as); j++ {
					sum += as[j].n
					if sum*scale > lim.Capacity*scale+perNs*(as[j].at-as[i].at) {
						t.Fatalf("client %s, limit %s: %d admitted in [%v, %v]", c, lim.Name, sum, time.Duration(as[i].at), time.Duration(as[j].at))
					}
				}
			}
		}
	}
}

// onErrors collects what WithOnError reports.
type onErrors struct {
	mu   sync.Mutex
	errs []error
}

func (o *onErrors) option() admithttp.Option {
	return admithttp.WithOnError(func(_ *http.Request, err error) {
		o.mu.Lock()
		o.errs = append(o.errs, err)
		o.mu.Unlock()
	})
}

func (o *onErrors) take() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.errs
	o.errs = nil
	return e
}

// TestLimitsUnlimited: a WithLimits function that returns no limits serves
// the request unlimited, without calling the limiter or setting fields,
// and before the key function runs (a health check sends no API key).
func TestLimitsUnlimited(t *testing.T) {
	l := newPolicy(t, buckettest.NewFakeClock(0))
	srv := serve(t, admithttp.Middleware(l, admithttp.WithLimits(func(r *http.Request) ([]admit.Limit, error) {
		switch r.URL.Path {
		case "/healthz":
			return nil, nil
		case "/internal":
			return []admit.Limit{}, nil
		}
		return []admit.Limit{{Capacity: 1, Rate: 1}}, nil
	}), admithttp.WithKey(admithttp.KeyByHeader("X-API-Key")))(ok200))
	for range 5 {
		for _, p := range []string{"/healthz", "/internal"} {
			if f := getList(t, srv, p); f.status != 200 || f.policy != nil || f.name != "" || f.retryAfter != -1 {
				t.Fatalf("%s: %v, want 200 without fields", p, f)
			}
		}
	}
	if c := l.Calls(); c != 0 {
		t.Fatalf("the limiter was called %d times for unlimited requests", c)
	}
	// One unnamed limit is shown under the default policy name.
	got := []int{getList(t, srv, "/", "X-API-Key", "k").status, getList(t, srv, "/", "X-API-Key", "k").status}
	f := getList(t, srv, "/", "X-API-Key", "k")
	if fmt.Sprint(got) != "[200 429]" || f.name != "default" || fmt.Sprint(f.policy) != "[{default 1 1}]" {
		t.Fatalf("limited route: statuses %v, then %v", got, f)
	}
}

// TestSkip: WithSkip exempts requests before anything else runs, for a
// plain keyed.Limiter and under WithLimits; skipped requests consume
// nothing and carry no fields.
func TestSkip(t *testing.T) {
	skip := admithttp.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" })
	clk := buckettest.NewFakeClock(0)
	k, err := keyed.New(2, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	pl := newPolicy(t, clk)
	for name, mw := range map[string]func(http.Handler) http.Handler{
		"keyed": admithttp.Middleware(k, skip, admithttp.WithKey(admithttp.KeyByHeader("X-API-Key"))),
		"WithLimits": admithttp.Middleware(pl, skip, admithttp.WithKey(admithttp.KeyByHeader("X-API-Key")),
			admithttp.WithLimits(func(*http.Request) ([]admit.Limit, error) { return freeTier[:1], nil })),
	} {
		t.Run(name, func(t *testing.T) {
			srv := serve(t, mw(ok200))
			for range 10 { // no key: a 400 if the key function ran
				if f := getList(t, srv, "/healthz"); f.status != 200 || f.policy != nil || f.name != "" {
					t.Fatalf("skipped: %v", f)
				}
			}
			var codes []int
			for range 3 {
				codes = append(codes, getList(t, srv, "/", "X-API-Key", "a").status)
			}
			codes = append(codes, getList(t, srv, "/healthz", "X-API-Key", "a").status)
			want := "[200 200 429 200]"
			if name == "WithLimits" {
				want = "[200 200 200 200]" // a burst of 4
			}
			if fmt.Sprint(codes) != want {
				t.Fatalf("statuses %v, want %s", codes, want)
			}
		})
	}
	if pl.Calls() != 3 {
		t.Fatalf("the PolicyLimiter was called %d times, want 3", pl.Calls())
	}
}

// TestLimitsErrors: a WithLimits error is 400 and invalid limits are 500,
// both reported to WithOnError without a limiter call; a limit the limiter
// itself rejects is 500 too, whatever WithFailOpen says; a cost above one
// limit's capacity is 413 with the fields of a peek.
func TestLimitsErrors(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("failOpen=", open), func(t *testing.T) {
			l := newPolicy(t, buckettest.NewFakeClock(0))
			var reported onErrors
			opts := []admithttp.Option{reported.option(), admithttp.WithCost(costOf), admithttp.WithPolicyName("api"),
				admithttp.WithLimits(func(r *http.Request) ([]admit.Limit, error) {
					switch r.URL.Path {
					case "/zero":
						return []admit.Limit{{Name: "z", Capacity: 0, Rate: 1}}, nil
					case "/twice":
						return []admit.Limit{{Name: "x", Capacity: 1, Rate: 1}, {Name: "x", Capacity: 2, Rate: 1}}, nil
					case "/clash": // the unnamed limit would be shown as "api"
						return []admit.Limit{{Capacity: 1, Rate: 1}, {Name: "api", Capacity: 2, Rate: 1}}, nil
					case "/tiny": // valid, but too slow for keyed to represent at that capacity
						return []admit.Limit{{Name: "tiny", Capacity: 1 << 40, Rate: 1e-9}}, nil
					}
					return tierOf(r)
				})}
			if open {
				opts = append(opts, admithttp.WithFailOpen())
			}
			srv := serve(t, admithttp.Middleware(l, opts...)(ok200))
			if f := getList(t, srv, "/", "X-Tier", "gold"); f.status != 400 || f.policy != nil || f.name != "" {
				t.Fatalf("unknown tier: %v, want 400 without fields", f)
			}
			if errs := reported.take(); len(errs) != 1 || !errors.Is(errs[0], errUnknownTier) {
				t.Fatalf("reported %v, want the tier error", errs)
			}
			for _, p := range []string{"/zero", "/twice", "/clash"} {
				if f := getList(t, srv, p); f.status != 500 || f.policy != nil || f.name != "" {
					t.Fatalf("%s: %v, want 500 without fields", p, f)
				}
				if errs := reported.take(); len(errs) != 1 || !errors.Is(errs[0], admit.ErrInvalidConfig) {
					t.Fatalf("%s: reported %v, want one error wrapping ErrInvalidConfig", p, errs)
				}
			}
			if c := l.Calls(); c != 0 {
				t.Fatalf("the limiter was called %d times", c)
			}
			if f := getList(t, srv, "/tiny"); f.status != 500 || f.name != "" {
				t.Fatalf("/tiny: %v, want 500 without fields", f)
			}
			if errs := reported.take(); len(errs) != 1 || !errors.Is(errs[0], admit.ErrInvalidConfig) {
				t.Fatalf("/tiny: reported %v", errs)
			}
			// Cost 5 is above the free burst of 4, within the day's 675.
			f := getList(t, srv, "/", "Cost", "5")
			if f.status != 413 || fmt.Sprint(f.policy) != fmt.Sprint(policyOf(freeTier)) || f.r != 4 || f.t != 0 {
				t.Fatalf("cost above the burst: %v, want 413 with the fields of a full key", f)
			}
			if errs := reported.take(); len(errs) != 1 || !errors.Is(errs[0], admit.ErrUnsatisfiable) {
				t.Fatalf("cost above the burst: reported %v", errs)
			}
			if f := getList(t, srv, "/", "Cost", "-1"); f.status != 500 || f.name != "" {
				t.Fatalf("negative cost: %v", f)
			}
		})
	}
}

// TestLimitLister: without WithLimits, a limiter that lists its limits
// (keyed.NewLimits's) gets them all in RateLimit-Policy; one named limit
// gives the fields its name; an unnamed one WithPolicyName's.
func TestLimitLister(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	ll := newListed(t, clk, freeTier)
	srv := serve(t, admithttp.Middleware(ll)(ok200))
	m := newMultiModel(t, freeTier)
	for i := range 6 {
		m.check(t, fmt.Sprint("request ", i), 0, 1, getList(t, srv, "/"))
	}
	for _, c := range []struct {
		limit admit.Limit
		opts  []admithttp.Option
		want  string
	}{
		{admit.Per(time.Minute, 15).Named("minute"), nil, `"minute";q=15;w=60`},
		{admit.Per(time.Minute, 15).Named("minute"), []admithttp.Option{admithttp.WithPolicyName("api")}, `"minute";q=15;w=60`},
		{admit.Per(time.Minute, 15), []admithttp.Option{admithttp.WithPolicyName("api")}, `"api";q=15;w=60`},
		{admit.Per(time.Minute, 15), nil, `"default";q=15;w=60`},
		{admit.Per(time.Minute, 15), []admithttp.Option{admithttp.WithFillTime(time.Second)}, `"default";q=15;w=1`},
		{admit.Limit{Name: "once", Capacity: 3}, nil, `"once";q=3`},
	} {
		srv := serve(t, admithttp.Middleware(newListed(t, clk, []admit.Limit{c.limit}), c.opts...)(ok200))
		resp := fetch(t, srv, "/")
		name := strings.SplitN(c.want, ";", 2)[0]
		if p, rl := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"); p != c.want || !strings.HasPrefix(rl, name+";r=") {
			t.Fatalf("%+v: RateLimit-Policy %q, RateLimit %q; want %s", c.limit, p, rl, c.want)
		}
	}
}

// TestPolicyRendering: RateLimit-Policy's w is Capacity ÷ Rate to the
// nanosecond, rounded up to whole seconds, so a day is 86400 though
// 11/86400 is not exact in binary; a rate of 0 leaves w out; a name is
// escaped as a Structured Field String.
func TestPolicyRendering(t *testing.T) {
	for _, c := range []struct {
		limits []admit.Limit
		want   string
	}{
		{[]admit.Limit{admit.Per(time.Second, 10).WithBurst(20).Named("burst"), admit.Per(24*time.Hour, 1000).Named("daily")},
			`"burst";q=20;w=2, "daily";q=1000;w=86400`},
		{[]admit.Limit{admit.Per(time.Hour, 7).Named("hourly")}, `"hourly";q=7;w=3600`},
		// 11 / (11 / 86400) is 86400.00000000002 in float64.
		{[]admit.Limit{admit.Per(24*time.Hour, 11).Named("daily")}, `"daily";q=11;w=86400`},
		{[]admit.Limit{{Name: "third", Capacity: 10, Rate: 1.0 / 3}}, `"third";q=10;w=30`},
		{[]admit.Limit{{Name: "a bit over", Capacity: 10, Rate: 0.333}}, `"a bit over";q=10;w=31`},
		{[]admit.Limit{{Name: `say "hi" \o/`, Capacity: 1, Rate: 0}, {Name: "x", Capacity: 1e9, Rate: 1e-6}},
			`"say \"hi\" \\o/";q=1, "x";q=1000000000;w=999999999999999`},
	} {
		l := newPolicy(t, buckettest.NewFakeClock(0))
		h := admithttp.Middleware(l, admithttp.WithLimits(func(*http.Request) ([]admit.Limit, error) { return c.limits, nil }))(ok200)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if got := rec.Header().Get("RateLimit-Policy"); got != c.want {
			t.Errorf("%+v: RateLimit-Policy %q, want %q (status %d)", c.limits, got, c.want, rec.Code)
		}
	}
}

// TestLimitsMisuse: the panics of a misconfigured middleware, each with a
// message that names the mistake.
func TestLimitsMisuse(t *testing.T) {
	k, _ := keyed.New(1, 1)
	pl := newPolicy(t, admit.SystemClock())
	tiers := admithttp.WithLimits(tierOf)
	for _, c := range []struct {
		name, msg string
		f         func()
	}{
		// struct{admit.KeyedLimiter} has AllowN only, whatever keyed has.
		{"not a PolicyLimiter", "admit.PolicyLimiter", func() { admithttp.Middleware(struct{ admit.KeyedLimiter }{k}, tiers) }},
		// A wrapper (admitotel's, say) has AllowLimits whatever it wraps.
		{"a wrapper of a limiter that is not a PolicyLimiter", "admit.PolicyLimiter", func() {
			admithttp.Middleware(keyedtest.Wrapper{L: struct{ admit.KeyedLimiter }{k}}, tiers)
		}},
		{"nil limits", "WithLimits(nil)", func() { admithttp.Middleware(pl, admithttp.WithLimits(nil)) }},
		{"nil skip", "WithSkip(nil)", func() { admithttp.Middleware(pl, admithttp.WithSkip(nil)) }},
		{"fill time with limits", "WithFillTime", func() { admithttp.Middleware(pl, tiers, admithttp.WithFillTime(time.Second)) }},
		{"fill time with listed limits", "WithFillTime", func() {
			admithttp.Middleware(newListed(t, admit.SystemClock(), freeTier), admithttp.WithFillTime(time.Second))
		}},
		{"invalid listed limits", "capacity 0", func() {
			admithttp.Middleware(lister{k, []admit.Limit{{Name: "a", Capacity: 0, Rate: 1}, {Name: "b", Capacity: 1}}})
		}},
		{"listed limits clash", `"default"`, func() {
			admithttp.Middleware(lister{k, []admit.Limit{{Capacity: 1}, {Name: "default", Capacity: 1}}})
		}},
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, c.msg) {
					t.Errorf("%s: panic %v, want a message containing %q", c.name, r, c.msg)
				}
			}()
			c.f()
		}()
	}
	admithttp.Middleware(pl, tiers)                       // a PolicyLimiter: no panic
	admithttp.Middleware(keyedtest.Wrapper{L: pl}, tiers) // nor a wrapper of one
}

// TestLimitsAllocs: once a tier's fields are cached, the middleware
// allocates no more under WithLimits than under a single limit: the
// allocations per request, less the limiter's own per call, are equal.
func TestLimitsAllocs(t *testing.T) {
	k, err := keyed.New(1<<40, 1e9)
	if err != nil {
		t.Fatal(err)
	}
	pl := newPolicy(t, admit.SystemClock())
	big := []admit.Limit{
		admit.Per(time.Second, 1e9).WithBurst(1 << 40).Named("burst"),
		admit.Per(24*time.Hour, 1<<45).Named("daily"),
	}
	bigger := slices.Clone(big)
	bigger[0].Capacity++
	tier := func(r *http.Request) ([]admit.Limit, error) {
		if r.Header.Get("X-Tier") == "paid" {
			return bigger, nil
		}
		return big, nil
	}
	count := func(h http.Handler, r *http.Request) float64 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != 200 {
			t.Fatalf("status %d", rec.Code)
		}
		return testing.AllocsPerRun(100, func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
		})
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	paid := httptest.NewRequest(http.MethodGet, "/", nil)
	paid.Header.Set("X-Tier", "paid")
	one := count(admithttp.Middleware(k)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})), r)
	mw := admithttp.Middleware(pl, admithttp.WithLimits(tier))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	count(mw, paid) // both tiers cached
	ctx := context.Background()
	own := func(limits []admit.Limit) float64 {
		return testing.AllocsPerRun(100, func() { pl.AllowLimits(ctx, "192.0.2.1", 1, limits...) })
	}
	keyedOwn := testing.AllocsPerRun(100, func() { k.AllowN(ctx, "192.0.2.1", 1) })
	if got := count(mw, r) - own(big); got != one-keyedOwn {
		t.Fatalf("%v allocations per request under WithLimits, %v under one limit (the limiters' own left out)", got, one-keyedOwn)
	}
	alternating := testing.AllocsPerRun(100, func() {
		mw.ServeHTTP(httptest.NewRecorder(), r)
		mw.ServeHTTP(httptest.NewRecorder(), paid)
	}) - own(big) - own(bigger)
	if alternating != 2*(one-keyedOwn) {
		t.Fatalf("%v allocations per two requests alternating tiers, want %v", alternating, 2*(one-keyedOwn))
	}
}

// TestLimitsTierChange: a key's state is per limit Name, so a client moved
// from free to paid keeps its balance (PolicyLimiter's rule 3): with its
// free burst spent, its first paid request is refused by "burst", and it
// waits the paid rate's 0.1 s for a token, not the free rate's 0.5 s.
func TestLimitsTierChange(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	srv := serve(t, admithttp.Middleware(newPolicy(t, clk), admithttp.WithLimits(tierOf),
		admithttp.WithKey(admithttp.KeyByHeader("X-API-Key")))(ok200))
	for range 4 {
		if f := getList(t, srv, "/", "X-API-Key", "a"); f.status != 200 {
			t.Fatalf("free burst: %v", f)
		}
	}
	f := getList(t, srv, "/", "X-API-Key", "a", "X-Tier", "paid")
	if f.status != 429 || f.name != "burst" || f.r != 0 || fmt.Sprint(f.policy) != fmt.Sprint(policyOf(paidTier)) {
		t.Fatalf("first paid request: %v, want 429 from burst under the paid policy", f)
	}
	clk.Advance(100 * time.Millisecond)
	if f := getList(t, srv, "/", "X-API-Key", "a", "X-Tier", "paid"); f.status != 200 || f.name != "burst" || f.r != 0 {
		t.Fatalf("0.1 s later: %v, want 200 with burst at r=0", f)
	}
	if f := getList(t, srv, "/", "X-API-Key", "a"); f.status != 429 || f.name != "burst" {
		t.Fatalf("back on free: %v, want 429 from burst", f)
	}
}

// TestLimitsStormRealClock: goroutines per client hammer the loopback
// server on the system clock under two limits; per client, admissions
// never exceed either limit's Capacity + Rate × elapsed + 1, with elapsed
// measured around the whole storm, and every response names one of them.
func TestLimitsStormRealClock(t *testing.T) {
	limits := []admit.Limit{
		admit.Per(time.Second, 100).WithBurst(5).Named("burst"),
		admit.Per(time.Second, 20).WithBurst(8).Named("sustained"),
	}
	l := newPolicy(t, admit.SystemClock())
	srv := serve(t, admithttp.Middleware(l, admithttp.WithKey(admithttp.KeyByHeader("Client")),
		admithttp.WithLimits(func(*http.Request) ([]admit.Limit, error) { return limits, nil }))(ok200))
	clients := []string{"a", "b"}
	var mu sync.Mutex
	admitted := map[string]int{}
	names := map[string]int{}
	start := time.Now()
	deadline := start.Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 3 {
			wg.Go(func() {
				for i := 0; i < 3 || time.Now().Before(deadline); i++ {
					resp := fetch(t, srv, "/", "Client", c)
					if resp.StatusCode != 200 && resp.StatusCode != 429 {
						t.Errorf("status %d", resp.StatusCode)
						return
					}
					f := parseList(t, resp)
					mu.Lock()
					if f.status == 200 {
						admitted[c]++
					}
					names[f.name]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	for _, c := range clients {
		for _, lim := range limits {
			if bound := float64(lim.Capacity) + lim.Rate*elapsed + 1; float64(admitted[c]) > bound {
				t.Errorf("client %s: admitted %d in %.3fs, above %s's bound %.1f", c, admitted[c], elapsed, lim.Name, bound)
			}
		}
		if admitted[c] < 5 {
			t.Errorf("client %s: admitted %d, want at least the burst of 5", c, admitted[c])
		}
	}
	if len(names) > 2 || names["burst"]+names["sustained"] == 0 {
		t.Fatalf("RateLimit named %v", names)
	}
}

// TestLimitsRefuseNew: a keyed.Limiter under RefuseNew, full with one key,
// refuses a second client under WithLimits with an error wrapping
// admit.ErrUnavailable and a Decision of that failure policy; that
// decision is followed, a 429 with Retry-After until the first client's
// buckets are full (its daily token, 128 s), its fields showing the
// Decision alone (the limit it names and its q, no w: a failure policy's
// Decision describes no bucket of the tier's), and the error goes to
// WithOnError, whether or not the middleware fails open.
func TestLimitsRefuseNew(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("failOpen=", open), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			l, err := keyed.New(1, 1, admit.WithClock(clk), keyed.WithMaxKeys(1), keyed.WithPolicy(keyed.RefuseNew))
			if err != nil {
				t.Fatal(err)
			}
			var reported onErrors
			opts := []admithttp.Option{reported.option(), admithttp.WithLimits(tierOf), admithttp.WithKey(admithttp.KeyByHeader("X-API-Key"))}
			if open {
				opts = append(opts, admithttp.WithFailOpen())
			}
			srv := serve(t, admithttp.Middleware(l, opts...)(ok200))
			if f := getList(t, srv, "/", "X-API-Key", "a"); f.status != 200 {
				t.Fatalf("first client: %v", f)
			}
			f := getList(t, srv, "/", "X-API-Key", "b")
			var want []item
			for _, l := range freeTier {
				if l.Name == f.name {
					want = []item{{l.Name, l.Capacity, -1}}
				}
			}
			if f.status != 429 || want == nil || fmt.Sprint(f.policy) != fmt.Sprint(want) || f.retryAfter != 128 {
				t.Fatalf("refused: %v, want 429 naming a limit of the free tier alone, no w, and Retry-After 128", f)
			}
			if errs := reported.take(); len(errs) != 1 || !errors.Is(errs[0], admit.ErrUnavailable) {
				t.Fatalf("reported %v, want the refusal", errs)
			}
		})
	}
}
