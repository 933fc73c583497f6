package admithttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"go.uber.org/goleak"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fields is what one response said, parsed with a Structured Field parser.
type fields struct {
	status             int
	policyName, name   string
	q, w, r, t         int64 // -1 when absent
	retryAfter         int64 // -1 when absent
	hasPolicy, hasRate bool
}

func param(t testing.TB, p *httpsfv.Params, k string) int64 {
	v, ok := p.Get(k)
	if !ok {
		return -1
	}
	i, ok := v.(int64)
	if !ok {
		t.Fatalf("parameter %s = %#v, not an Integer", k, v)
	}
	return i
}

// oneItem parses a List field that must hold exactly one String Item.
func oneItem(t testing.TB, lines []string) (string, *httpsfv.Params) {
	t.Helper()
	l, err := httpsfv.UnmarshalList(lines)
	if err != nil {
		t.Fatalf("field %q: %v", lines, err)
	}
	if len(l) != 1 {
		t.Fatalf("field %q: %d members, want 1", lines, len(l))
	}
	it, ok := l[0].(httpsfv.Item)
	if !ok {
		t.Fatalf("field %q: not an Item", lines)
	}
	s, ok := it.Value.(string)
	if !ok {
		t.Fatalf("field %q: value %#v is not a String", lines, it.Value)
	}
	return s, it.Params
}

func parse(t testing.TB, resp *http.Response) fields {
	t.Helper()
	f := fields{status: resp.StatusCode, q: -1, w: -1, r: -1, t: -1, retryAfter: -1}
	if v := resp.Header.Values("RateLimit-Policy"); len(v) > 0 {
		var p *httpsfv.Params
		f.hasPolicy = true
		f.policyName, p = oneItem(t, v)
		f.q, f.w = param(t, p, "q"), param(t, p, "w")
	}
	if v := resp.Header.Values("RateLimit"); len(v) > 0 {
		var p *httpsfv.Params
		f.hasRate = true
		f.name, p = oneItem(t, v)
		f.r, f.t = param(t, p, "r"), param(t, p, "t")
	}
	if v := resp.Header.Values("Retry-After"); len(v) > 0 {
		// delay-seconds = 1*DIGIT (RFC 9110, section 10.2.3).
		if len(v) != 1 || v[0] == "" {
			t.Fatalf("Retry-After %q", v)
		}
		for _, c := range v[0] {
			if c < '0' || c > '9' {
				t.Fatalf("Retry-After %q is not delay-seconds", v[0])
			}
		}
		f.retryAfter, _ = strconv.ParseInt(v[0], 10, 64)
	}
	return f
}

func serve(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	return srv
}

var ok200 = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

func get(t testing.TB, srv *httptest.Server, hdr ...string) fields {
	t.Helper()
	return parse(t, fetch(t, srv, "/", hdr...))
}

// fetch sends a GET for path with the header fields hdr (name, value, ...)
// and returns the response, its body read and closed.
func fetch(t testing.TB, srv *httptest.Server, path string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// model is an independent token bucket in exact nanosecond-token units
// (tokens × 1e9 at a whole-number rate), used to predict every field.
type model struct {
	capacity, rate int64 // tokens, tokens per second
	units          int64 // balance in 1e-9 tokens
	last           int64 // ns
}

func (m *model) at(now int64) {
	m.units = min(m.capacity*1e9, m.units+(now-m.last)*m.rate)
	m.last = now
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// want returns the fields the middleware must send for a request of cost n
// at time now (ns on the fake clock), and consumes what it admits.
func (m *model) want(now, n int64) fields {
	m.at(now)
	f := fields{status: 200, hasPolicy: true, hasRate: true, policyName: "default", name: "default",
		q: m.capacity, w: ceilDiv(m.capacity, m.rate), retryAfter: -1}
	if m.units >= n*1e9 {
		m.units -= n * 1e9
	} else {
		f.status = 429
		// ns until n tokens exist, then whole seconds rounded up, at least 1.
		f.retryAfter = max(1, ceilDiv(ceilDiv(n*1e9-m.units, m.rate), 1e9))
	}
	f.r = m.units / 1e9
	f.t = ceilDiv(ceilDiv(m.capacity*1e9-m.units, m.rate), 1e9)
	return f
}

// TestFieldsExact steps a fake clock through bursts, partial refills and
// denials, and checks every field of every response against the model.
func TestFieldsExact(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(4, 2, admit.WithClock(clk)) // 4 tokens, 2 per second: w = 2 s
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, admithttp.Middleware(l)(ok200)) // w from keyed's FillTime
	m := &model{capacity: 4, rate: 2, units: 4e9}
	steps := []time.Duration{0, 0, 0, 0, 0, 0, // burst of 4, then two denials
		100 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond, // 0.5 token at 250 ms
		1, 499_999_999, 1, // a nanosecond before and at a whole token
		time.Second, 0, 0, 0, 3 * time.Second, 0, 7 * time.Second}
	var now int64
	for i, d := range steps {
		clk.Advance(d)
		now += int64(d)
		want := m.want(now, 1)
		if got := get(t, srv); got != want {
			t.Fatalf("step %d at %v: got %+v, want %+v", i, time.Duration(now), got, want)
		}
	}
}

// TestRetryAfterNeverEarly: at the instant Retry-After names the request
// succeeds, and a second earlier it does not (so it is rounded up, not
// padded), for waits that do and do not fall on whole seconds.
func TestRetryAfterNeverEarly(t *testing.T) {
	for _, rate := range []float64{1, 0.3, 3, 0.01} {
		t.Run(fmt.Sprint("rate=", rate), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			l, err := keyed.New(2, rate, admit.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, admithttp.Middleware(l)(ok200))
			for range 2 {
				if f := get(t, srv); f.status != 200 {
					t.Fatalf("burst: status %d", f.status)
				}
			}
			clk.Advance(123 * time.Millisecond)
			f := get(t, srv)
			if f.status != 429 || f.retryAfter < 1 {
				t.Fatalf("got %+v, want 429 with Retry-After", f)
			}
			wait := time.Duration(math.Ceil((1 - 0.123*rate) / rate * 1e9)) // ns until one token
			if want := int64(math.Ceil(wait.Seconds())); f.retryAfter != want {
				t.Fatalf("Retry-After %d, want %d (wait %v)", f.retryAfter, want, wait)
			}
			if f.retryAfter > 1 {
				clk.Advance(time.Duration(f.retryAfter-1) * time.Second)
				if g := get(t, srv); g.status != 429 {
					t.Fatalf("admitted a second before Retry-After: %+v", g)
				}
				clk.Advance(time.Second)
			} else {
				clk.Advance(time.Second)
			}
			if g := get(t, srv); g.status != 200 {
				t.Fatalf("denied at Retry-After: %+v", g)
			}
		})
	}
}

// TestConcurrentExact: many clients at once on a frozen clock; exactly the
// capacity is admitted, every denial carries the fields.
func TestConcurrentExact(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(7, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, admithttp.Middleware(l)(ok200))
	const n = 40
	res := make([]fields, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				res[i].status = -1
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			res[i] = parse(t, resp)
		})
	}
	wg.Wait()
	admitted := 0
	seen := map[int64]bool{}
	for _, f := range res {
		switch f.status {
		case 200:
			admitted++
			if seen[f.r] {
				t.Errorf("two admissions reported remaining %d", f.r)
			}
			seen[f.r] = true
		case 429:
			if f.r != 0 || f.retryAfter != 1 || f.t != 7 {
				t.Errorf("denial: %+v", f)
			}
		default:
			t.Errorf("status %d", f.status)
		}
	}
	if admitted != 7 {
		t.Fatalf("admitted %d of %d, want exactly the capacity 7", admitted, n)
	}
}

// TestRealClock runs on the system clock: every field is consistent, and
// no more than capacity + rate × elapsed + 1 requests pass.
func TestRealClock(t *testing.T) {
	l, err := keyed.New(5, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, admithttp.Middleware(l)(ok200))
	start := time.Now()
	admitted, denied := 0, 0
	const n = 30
	for range n {
		f := get(t, srv)
		if !f.hasPolicy || f.q != 5 || f.w != 5 || !f.hasRate || f.r < 0 || f.r > 5 || f.t < 0 || f.t > 5 {
			t.Fatalf("fields out of range: %+v", f)
		}
		switch f.status {
		case 200:
			admitted++
			if f.retryAfter != -1 {
				t.Fatalf("Retry-After on an admission: %+v", f)
			}
		case 429:
			denied++
			if f.retryAfter < 1 || f.retryAfter > 1 || f.r != 0 {
				t.Fatalf("denial: %+v", f)
			}
		default:
			t.Fatalf("status %d", f.status)
		}
	}
	elapsed := time.Since(start).Seconds()
	if bound := 5 + elapsed + 1; float64(admitted) > bound {
		t.Fatalf("admitted %d in %.3fs, bound %.3f", admitted, elapsed, bound)
	}
	if admitted < 5 {
		t.Fatalf("admitted %d, want at least the burst of 5", admitted)
	}
	if admitted+denied != n {
		t.Fatalf("%d + %d != %d", admitted, denied, n)
	}
}

// TestKeys: the default key ignores forwarding headers, so rotating a
// spoofed X-Forwarded-For does not escape the limit; behind a trusted
// proxy (the loopback peer) the vouched-for address is the key, and
// spoofed entries to its left change nothing.
func TestKeys(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	t.Run("KeyByIP", func(t *testing.T) {
		l, _ := keyed.New(2, 1, admit.WithClock(clk))
		srv := serve(t, admithttp.Middleware(l)(ok200))
		var codes []int
		for i := range 4 {
			codes = append(codes, get(t, srv, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)).status)
		}
		if fmt.Sprint(codes) != "[200 200 429 429]" {
			t.Fatalf("statuses %v, want [200 200 429 429]", codes)
		}
	})
	t.Run("KeyByForwardedFor", func(t *testing.T) {
		l, _ := keyed.New(2, 1, admit.WithClock(clk))
		key := admithttp.KeyByForwardedFor(netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
		srv := serve(t, admithttp.Middleware(l, admithttp.WithKey(key))(ok200))
		var codes []int
		for i := range 3 {
			codes = append(codes, get(t, srv, "X-Forwarded-For", fmt.Sprintf("6.6.6.%d, 203.0.113.1", i)).status)
		}
		// Another client behind the same proxy has its own bucket.
		codes = append(codes, get(t, srv, "X-Forwarded-For", "203.0.113.2").status)
		if fmt.Sprint(codes) != "[200 200 429 200]" {
			t.Fatalf("statuses %v, want [200 200 429 200]", codes)
		}
		if f := get(t, srv, "X-Forwarded-For", "203.0.113.1, nonsense"); f.status != 400 || f.hasRate || f.hasPolicy {
			t.Fatalf("garbage from a trusted proxy: %+v, want 400 without fields", f)
		}
	})
	t.Run("KeyByHeader", func(t *testing.T) {
		l, _ := keyed.New(1, 1, admit.WithClock(clk))
		srv := serve(t, admithttp.Middleware(l, admithttp.WithKey(admithttp.KeyByHeader("X-API-Key")))(ok200))
		codes := []int{
			get(t, srv, "X-API-Key", "a").status,
			get(t, srv, "X-API-Key", "a").status,
			get(t, srv, "X-API-Key", "b").status,
		}
		f := get(t, srv)
		if fmt.Sprint(codes) != "[200 429 200]" || f.status != 400 || f.hasRate || f.hasPolicy {
			t.Fatalf("statuses %v, missing key %+v", codes, f)
		}
	})
}

// TestCost covers the cost edges: 0 peeks, above the capacity is 413,
// negative is 500, a heavy request consumes its cost.
func TestCost(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(10, 1, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	cost := admithttp.WithCost(func(r *http.Request) int64 {
		n, _ := strconv.ParseInt(r.Header.Get("Cost"), 10, 64)
		return n
	})
	srv := serve(t, admithttp.Middleware(l, cost, admithttp.WithPolicyName(`api "v1" \ `))(ok200))
	type c struct {
		cost   string
		status int
		r      int64
	}
	for i, s := range []c{{"0", 200, 10}, {"4", 200, 6}, {"0", 200, 6}, {"7", 429, 6}, {"11", 413, 6}, {"-1", 500, -1}, {"6", 200, 0}} {
		f := get(t, srv, "Cost", s.cost)
		if f.status != s.status || f.r != s.r {
			t.Fatalf("step %d, cost %s: %+v, want status %d and r=%d", i, s.cost, f, s.status, s.r)
		}
		if f.hasRate && (f.name != `api "v1" \ ` || f.policyName != f.name || f.q != 10) {
			t.Fatalf("step %d: policy name %q / %q, q %d", i, f.policyName, f.name, f.q)
		}
		if s.status == 500 && (f.hasRate || f.hasPolicy) {
			t.Fatalf("negative cost carried fields: %+v", f)
		}
		if s.status == 429 && f.retryAfter != 1 {
			t.Fatalf("cost 7 with 6 left at 1/s: Retry-After %d, want 1", f.retryAfter)
		}
	}
	if f := get(t, srv, "Cost", "0"); f.w != 10 {
		t.Fatalf("w = %d, want 10 (capacity 10 at 1/s, from keyed's FillTime)", f.w)
	}
	// WithFillTime overrides the limiter; 0 leaves w out.
	for _, c := range []struct {
		fill time.Duration
		w    int64
	}{{0, -1}, {1500 * time.Millisecond, 2}, {time.Nanosecond, 1}, {7 * time.Second, 7}} {
		srv := serve(t, admithttp.Middleware(l, admithttp.WithFillTime(c.fill))(ok200))
		if f := get(t, srv); f.w != c.w || f.q != 10 {
			t.Fatalf("WithFillTime(%v): q=%d w=%d, want q=10 w=%d", c.fill, f.q, f.w, c.w)
		}
	}
	// A rate of 1/3 per second: keyed reads it as the decimal
	// 0.3333333333333333, so 10 tokens take a hair over 30 s; w is rounded
	// up, never down.
	third, _ := keyed.New(10, 1.0/3)
	srv3 := serve(t, admithttp.Middleware(third)(ok200))
	if f := get(t, srv3); f.w != int64(math.Ceil(third.FillTime().Seconds())) || f.w < 30 || f.w > 31 {
		t.Fatalf("rate 1/3: w=%d for a fill time of %v", f.w, third.FillTime())
	}
}

// TestLimiterError drives a real limiter error: keyed under RefuseNew with
// room for one key refuses a second client with an error wrapping
// admit.ErrUnavailable and a Decision from its policy, RetryAfter and
// ResetAfter until the first client's bucket is full and can be dropped.
// That is a decision, so it is followed, a 429 with its fields (the
// Decision alone: no w), whether or not the middleware fails open; the
// error goes to WithOnError.
func TestLimiterError(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("failOpen=", open), func(t *testing.T) {
			clk := buckettest.NewFakeClock(0)
			l, err := keyed.New(3, 2, admit.WithClock(clk), keyed.WithMaxKeys(1), keyed.WithPolicy(keyed.RefuseNew))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var reported []error
			opts := []admithttp.Option{admithttp.WithKey(admithttp.KeyByHeader("Client")),
				admithttp.WithOnError(func(_ *http.Request, err error) {
					mu.Lock()
					reported = append(reported, err)
					mu.Unlock()
				})}
			if open {
				opts = append(opts, admithttp.WithFailOpen())
			}
			srv := serve(t, admithttp.Middleware(l, opts...)(ok200))
			for range 3 {
				if f := get(t, srv, "Client", "a"); f.status != 200 {
					t.Fatalf("client a: %+v", f)
				}
			}
			clk.Advance(250 * time.Millisecond) // a's bucket is full 1.25 s from now
			f := get(t, srv, "Client", "b")
			// The policy's Decision is shown alone: no w, since it
			// describes no bucket of the limit (the key has none).
			if f.status != 429 || f.retryAfter != 2 || f.q != 3 || f.w != -1 || f.r != 0 || f.t != 2 {
				t.Fatalf("refused: %+v, want 429, Retry-After 2, q=3 and no w, r=0, t=2", f)
			}
			mu.Lock()
			if len(reported) != 1 || !errors.Is(reported[0], admit.ErrUnavailable) {
				t.Fatalf("reported %v, want the one refusal's error", reported)
			}
			mu.Unlock()
			if st := l.Stats(); st.Refusals != 1 {
				t.Fatalf("the limiter refused %d times, want 1", st.Refusals)
			}
			clk.Advance(1250 * time.Millisecond) // a is full and can be dropped
			if f := get(t, srv, "Client", "b"); f.status != 200 || f.r != 2 {
				t.Fatalf("once there is room: %+v, want 200 with r=2", f)
			}
		})
	}
}

// noDecision is a limiter that breaks admit.Decision's contract: its
// Decisions have Limit 0, and no error comes with them.
type noDecision struct{ allowed bool }

func (n noDecision) AllowN(context.Context, string, int64) (admit.Decision, error) {
	return admit.Decision{Allowed: n.allowed, RetryAfter: 3 * time.Second}, nil
}

// TestNoDecision: a Decision with Limit 0 is no decision, whatever it says
// and even without an error: 503 with Retry-After and no RateLimit fields,
// or with WithFailOpen the next handler, and the breach reported to
// WithOnError.
func TestNoDecision(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		for _, open := range []bool{false, true} {
			var reported atomic.Int64
			opts := []admithttp.Option{admithttp.WithOnError(func(_ *http.Request, err error) { reported.Add(1) })}
			if open {
				opts = append(opts, admithttp.WithFailOpen())
			}
			srv := serve(t, admithttp.Middleware(noDecision{allowed}, opts...)(ok200))
			f := get(t, srv)
			want := map[bool]int{false: 503, true: 200}[open]
			if f.status != want || f.hasPolicy || f.hasRate || (!open && f.retryAfter != 3) || reported.Load() != 1 {
				t.Fatalf("allowed=%v failOpen=%v: %+v, %d reported; want %d, no fields, Retry-After 3 when refused, 1 reported",
					allowed, open, f, reported.Load(), want)
			}
		}
	}
}

func TestDenied(t *testing.T) {
	clk := buckettest.NewFakeClock(0)
	l, _ := keyed.New(1, 0.5, admit.WithClock(clk))
	denied := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if w.Header().Get("Retry-After") == "" {
			http.Error(w, "no Retry-After set before the denied handler", 500)
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"title":"slow down"}`)
	})
	srv := serve(t, admithttp.Middleware(l, admithttp.WithDenied(denied))(ok200))
	get(t, srv)
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f := parse(t, resp)
	if f.status != 429 || string(body) != `{"title":"slow down"}` || f.retryAfter != 2 || f.t != 2 || f.q != 1 {
		t.Fatalf("got %+v, body %q", f, body)
	}
}

// TestDeniedStatusDefault: a WithDenied handler that writes no status, or
// only a body, or flushes, or hijacks the connection, still answers 429; one
// that chooses a status keeps it. Over HTTP/2, where a hijack is not
// supported, a handler told so can still choose its status.
func TestDeniedStatusDefault(t *testing.T) {
	flush := func(t *testing.T, w http.ResponseWriter) {
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
	}
	for _, c := range []struct {
		name  string
		h     func(*testing.T, http.ResponseWriter)
		want  int
		http2 bool
	}{
		{"nothing", func(*testing.T, http.ResponseWriter) {}, 429, false},
		{"body only", func(_ *testing.T, w http.ResponseWriter) { io.WriteString(w, "slow down") }, 429, false},
		{"own status", func(_ *testing.T, w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }, 503, false},
		{"flush", func(t *testing.T, w http.ResponseWriter) { flush(t, w) }, 429, false},
		{"flush then body", func(t *testing.T, w http.ResponseWriter) { flush(t, w); io.WriteString(w, "slow down") }, 429, false},
		{"flush over HTTP/2", func(t *testing.T, w http.ResponseWriter) { flush(t, w) }, 429, true},
		{"own status then flush", func(t *testing.T, w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
			flush(t, w)
		}, 503, false},
		{"hijack and close", func(t *testing.T, w http.ResponseWriter) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			conn.Close()
		}, 429, false},
		{"hijack unsupported, then own status", func(t *testing.T, w http.ResponseWriter) {
			if _, _, err := http.NewResponseController(w).Hijack(); !errors.Is(err, http.ErrNotSupported) {
				t.Errorf("Hijack over HTTP/2: %v, want http.ErrNotSupported", err)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}, 503, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, _ := keyed.New(1, 1, admit.WithClock(buckettest.NewFakeClock(0)))
			h := admithttp.Middleware(l, admithttp.WithDenied(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				c.h(t, w)
			})))(ok200)
			srv := httptest.NewUnstartedServer(h)
			var logged syncBuffer // what the server logs: a write after a hijack, say
			srv.Config.ErrorLog = log.New(&logged, "", 0)
			if c.http2 {
				srv.EnableHTTP2 = true
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			get(t, srv)
			f, proto := getProto(t, srv)
			if f.status != c.want || f.retryAfter != 1 || !f.hasRate {
				t.Fatalf("got %+v, want status %d with the fields", f, c.want)
			}
			if c.http2 != (proto == 2) {
				t.Fatalf("served over HTTP/%d", proto)
			}
			srv.Close() // waits for the handlers
			if s := logged.String(); s != "" {
				t.Fatalf("the server logged %q", s)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer for a server's ErrorLog, which its
// connections' goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// getProto is get that also returns the response's major HTTP version.
func getProto(t testing.TB, srv *httptest.Server) (fields, int) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return parse(t, resp), resp.ProtoMajor
}

func TestMisuse(t *testing.T) {
	l, _ := keyed.New(1, 1)
	for name, f := range map[string]func(){
		"nil limiter":   func() { admithttp.Middleware(nil) },
		"nil option":    func() { admithttp.Middleware(l, nil) },
		"nil key":       func() { admithttp.Middleware(l, admithttp.WithKey(nil)) },
		"nil cost":      func() { admithttp.Middleware(l, admithttp.WithCost(nil)) },
		"nil denied":    func() { admithttp.Middleware(l, admithttp.WithDenied(nil)) },
		"nil onError":   func() { admithttp.Middleware(l, admithttp.WithOnError(nil)) },
		"bad name":      func() { admithttp.Middleware(l, admithttp.WithPolicyName("é")) },
		"control name":  func() { admithttp.Middleware(l, admithttp.WithPolicyName("a\nb")) },
		"negative fill": func() { admithttp.Middleware(l, admithttp.WithFillTime(-1)) },
		"nil handler":   func() { admithttp.Middleware(l)(nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestFieldsRandomized interleaves requests from three clients, with costs
// from 0 to above the capacity, on random fake-clock steps (whole and
// fractional seconds, nanoseconds, none). Every field of every response is
// checked against an independent model per client, and every admission is
// recorded at its time so that the window bound, at most capacity + rate ×
// (t_j − t_i) tokens admitted in [t_i, t_j], is checked on every window.
func TestFieldsRandomized(t *testing.T) {
	const capacity, rate = 5, 2
	clk := buckettest.NewFakeClock(0)
	l, err := keyed.New(capacity, rate, admit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mw := admithttp.Middleware(l, admithttp.WithKey(admithttp.KeyByHeader("Client")),
		admithttp.WithCost(func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.Header.Get("Cost"), 10, 64)
			return n
		}))
	srv := serve(t, mw(ok200))
	clients := []string{"a", "b", "c"}
	models := map[string]*model{}
	type admission struct{ at, n int64 }
	admitted := map[string][]admission{}
	statuses := map[int]int{}
	for _, c := range clients {
		models[c] = &model{capacity: capacity, rate: rate, units: capacity * 1e9}
	}
	steps := []time.Duration{0, 1, time.Millisecond, 250 * time.Millisecond, 499 * time.Millisecond, time.Second, 3 * time.Second}
	rng := uint64(0x9e3779b97f4a7c15)
	next := func(n int) int { // xorshift: a fixed sequence, no shared global state
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	var now int64
	for i := range 400 {
		d := steps[next(len(steps))]
		clk.Advance(d)
		now += int64(d)
		c := clients[next(len(clients))]
		n := int64(next(capacity + 2)) // 0 .. capacity+1
		got := get(t, srv, "Client", c, "Cost", strconv.FormatInt(n, 10))
		m := models[c]
		var want fields
		if n > capacity {
			m.at(now)
			want = fields{status: 413, hasPolicy: true, hasRate: true, policyName: "default", name: "default",
				q: capacity, w: ceilDiv(capacity, rate), r: m.units / 1e9,
				t: ceilDiv(ceilDiv(capacity*1e9-m.units, rate), 1e9), retryAfter: -1}
		} else {
			want = m.want(now, n)
		}
		if got != want {
			t.Fatalf("request %d (client %s, cost %d, t=%v): got %+v, want %+v", i, c, n, time.Duration(now), got, want)
		}
		if got.status == 200 && n > 0 {
			admitted[c] = append(admitted[c], admission{now, n})
		}
		statuses[got.status]++
	}
	if statuses[200] < 50 || statuses[429] < 50 || statuses[413] < 20 {
		t.Fatalf("statuses %v: the sequence does not exercise every outcome", statuses)
	}
	for c, as := range admitted {
		for i := range as {
			sum := int64(0)
			for j := i; j < len(as); j++ {
				sum += as[j].n
				// tokens × 1e9 ≤ capacity × 1e9 + rate × ns
				if sum*1e9 > capacity*1e9+rate*(as[j].at-as[i].at) {
					t.Fatalf("client %s: %d tokens admitted in [%v, %v], bound %d + %d/s × elapsed",
						c, sum, time.Duration(as[i].at), time.Duration(as[j].at), capacity, rate)
				}
			}
		}
	}
}

// TestStormRealClock: several goroutines per client hammer the real server
// on the system clock; per client, admissions never exceed capacity +
// rate × elapsed + 1, with elapsed measured around the whole storm.
func TestStormRealClock(t *testing.T) {
	const capacity, rate = 5, 50.0
	l, err := keyed.New(capacity, rate)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, admithttp.Middleware(l, admithttp.WithKey(admithttp.KeyByHeader("Client")))(ok200))
	clients := []string{"a", "b", "c"}
	var mu sync.Mutex
	admitted := map[string]int{}
	start := time.Now()
	deadline := start.Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 3 {
			wg.Go(func() {
				// At least two requests each, so that every client sends
				// more than its burst however late a goroutine starts.
				for i := 0; i < 2 || time.Now().Before(deadline); i++ {
					req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
					req.Header.Set("Client", c)
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						mu.Lock()
						admitted[c]++
						mu.Unlock()
					} else if resp.StatusCode != 429 {
						t.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	for _, c := range clients {
		if bound := capacity + rate*elapsed + 1; float64(admitted[c]) > bound || admitted[c] < capacity {
			t.Errorf("client %s: admitted %d in %.3fs; want between the burst %d and the bound %.1f", c, admitted[c], elapsed, capacity, bound)
		}
	}
}
