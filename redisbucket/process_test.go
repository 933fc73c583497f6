package redisbucket_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
)

// childEnv, when set, makes the test binary a load-generating child: it
// reads a childSpec from the variable, runs it and prints the counts.
const childEnv = "REDISBUCKET_CHILD"

type childSpec struct {
	Addr       string
	Prefix     string
	Key        string
	Capacity   int64
	Rate       float64
	Goroutines int
	Duration   time.Duration
	BatchN     int64
	BatchAge   time.Duration
	// Monitor asks the child to print its own client's view of time too.
	PrintClock bool
	// Limits, when set, replace Capacity and Rate: the child decides under
	// all of them, through NewLimits' AllowN, or AllowLimits when PerCall.
	Limits  []admit.Limit
	PerCall bool
	// MinDecisions keeps the child deciding past Duration until it has
	// made that many decisions, so that a machine stalled by other work
	// still drains the key.
	MinDecisions int64
}

type childResult struct {
	Admitted  int64
	Decisions int64
	Errors    int64
	WallNow   time.Time
	// Adm is each admission's interval, [before the call, after it], in
	// Unix ns of the host's real-time clock, the clock TIME reads (the
	// server is on the same host); recorded only with Limits.
	Adm [][2]int64
}

func child() int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	c := redis.NewClient(&redis.Options{Addr: spec.Addr, ContextTimeoutEnabled: true, PoolSize: spec.Goroutines})
	defer c.Close()
	opts := []redisbucket.Option{redisbucket.WithPrefix(spec.Prefix), redisbucket.WithTimeout(testTimeout)}
	if spec.BatchN > 0 {
		opts = append(opts, redisbucket.WithBatch(spec.BatchN, spec.BatchAge))
	}
	var l *redisbucket.Limiter
	var err error
	if len(spec.Limits) > 0 && !spec.PerCall {
		l, err = redisbucket.NewLimits(c, spec.Limits, opts...)
	} else {
		l, err = redisbucket.New(c, spec.Capacity, spec.Rate, opts...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	var res childResult
	var mu sync.Mutex // guards res.Adm
	var wg sync.WaitGroup
	end := time.Now().Add(spec.Duration)
	for range spec.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) || atomic.LoadInt64(&res.Decisions) < spec.MinDecisions {
				lo := time.Now().UnixNano()
				var d admit.Decision
				var err error
				if spec.PerCall {
					d, err = l.AllowLimits(context.Background(), spec.Key, 1, spec.Limits...)
				} else {
					d, err = l.AllowN(context.Background(), spec.Key, 1)
				}
				hi := time.Now().UnixNano()
				atomic.AddInt64(&res.Decisions, 1)
				if err != nil {
					atomic.AddInt64(&res.Errors, 1)
					continue
				}
				if d.Allowed {
					atomic.AddInt64(&res.Admitted, 1)
					if len(spec.Limits) > 0 {
						mu.Lock()
						res.Adm = append(res.Adm, [2]int64{lo, hi})
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	res.WallNow = time.Now()
	out, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(out))
	return 0
}

// runChildren starts procs copies of the test binary with spec and returns
// their results. wrap, if not nil, prefixes the command (unshare, say).
func runChildren(t *testing.T, procs int, spec childSpec, wrap ...string) []childResult {
	t.Helper()
	env, _ := json.Marshal(spec)
	type out struct {
		b   []byte
		err error
	}
	outs := make([]out, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append(append([]string{}, wrap...), os.Args[0], "-test.run=^$")
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), childEnv+"="+string(env))
			outs[i].b, outs[i].err = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	var res []childResult
	for i, o := range outs {
		if o.err != nil {
			t.Fatalf("child %d: %v: %s", i, o.err, o.b)
		}
		var r childResult
		found := false
		for _, line := range readLines(o.b) {
			if s, ok := strings.CutPrefix(line, "RESULT "); ok {
				if err := json.Unmarshal([]byte(s), &r); err != nil {
					t.Fatalf("child %d: %v", i, err)
				}
				found = true
			}
		}
		if !found {
			t.Fatalf("child %d printed no result: %s", i, o.b)
		}
		res = append(res, r)
	}
	return res
}

// Several OS processes, many goroutines each, one key: the total admitted
// never exceeds capacity + rate × elapsed, elapsed measured on the server's
// clock from before the first child starts to after the last one ends.
func TestProcessesShareOneBucket(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rate     float64
		batchN   int64
		batchAge time.Duration
	}{
		{name: "batch=off", rate: 2000},
		{name: "batch=20/age=20ms", rate: 2000, batchN: 20, batchAge: 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client(t, srv)
			const capacity = 100
			spec := childSpec{Addr: srv.Addr, Prefix: "procs:" + tc.name + ":", Key: "hot", Capacity: capacity, Rate: tc.rate,
				Goroutines: 16, Duration: 800 * time.Millisecond, BatchN: tc.batchN, BatchAge: tc.batchAge}
			t0 := serverTime(t, c)
			res := runChildren(t, 3, spec)
			t1 := serverTime(t, c)
			var admitted, decisions, errs int64
			for _, r := range res {
				admitted += r.Admitted
				decisions += r.Decisions
				errs += r.Errors
			}
			elapsed := float64(t1-t0) / 1e6
			bound := capacity + tc.rate*(elapsed+tc.batchAge.Seconds())
			t.Logf("admitted %d of %d decisions (%d errors) in %.3fs server time; bound %.0f", admitted, decisions, errs, elapsed, bound)
			if errs != 0 {
				t.Errorf("%d decisions failed", errs)
			}
			if float64(admitted) > bound {
				t.Errorf("admitted %d > capacity + rate × (elapsed + age) = %.1f", admitted, bound)
			}
			if admitted < capacity || decisions <= admitted {
				t.Errorf("admitted %d of %d: the children did not drain the bucket", admitted, decisions)
			}
		})
	}
}

// Three OS processes, 16 goroutines each, one key under two limits, a
// burst and a sustained rate, through NewLimits' AllowN and through
// AllowLimits: for each limit the total admitted stays within capacity +
// rate × elapsed on the server's clock (TIME before the first child starts,
// after the last ends), and so does every window between admissions, each
// known to lie between the real-time readings its child took around the
// call (the server reads the same host clock).
func TestProcessesSharePolicy(t *testing.T) {
	limits := []admit.Limit{{Name: "burst", Capacity: 10, Rate: 1000}, {Name: "sustained", Capacity: 100, Rate: 200}}
	for _, perCall := range []bool{false, true} {
		t.Run(fmt.Sprintf("perCall=%v", perCall), func(t *testing.T) {
			c := client(t, srv)
			spec := childSpec{Addr: srv.Addr, Prefix: fmt.Sprintf("procpol:%v:", perCall), Key: "hot", Capacity: 1, Rate: 1,
				Goroutines: 16, Duration: 800 * time.Millisecond, Limits: limits, PerCall: perCall, MinDecisions: 1000}
			t0 := serverTime(t, c)
			res := runChildren(t, 3, spec)
			t1 := serverTime(t, c)
			var admitted, decisions, errs int64
			var adm [][2]int64
			for _, r := range res {
				admitted += r.Admitted
				decisions += r.Decisions
				errs += r.Errors
				adm = append(adm, r.Adm...)
			}
			elapsed := float64(t1-t0) / 1e6
			t.Logf("admitted %d of %d decisions (%d errors) in %.3fs server time", admitted, decisions, errs, elapsed)
			if errs != 0 {
				t.Errorf("%d decisions failed", errs)
			}
			if int64(len(adm)) != admitted {
				t.Fatalf("%d admissions recorded, %d counted", len(adm), admitted)
			}
			slices.SortFunc(adm, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
			for _, lm := range limits {
				if bound := float64(lm.Capacity) + lm.Rate*elapsed; float64(admitted) > bound {
					t.Errorf("limit %s: admitted %d > capacity + rate × elapsed = %.1f", lm.Name, admitted, bound)
				}
				// Sorted by lo; hi made non-decreasing by widening, which
				// only weakens what is checked.
				w := buckettest.NewBound(lm.Capacity, lm.Rate)
				hi := int64(0)
				for i, a := range adm {
					hi = max(hi, a[1])
					if !w.AdmitWithin(a[0], hi, 1) {
						t.Errorf("limit %s: admission %d of %d, in [%d, %d] ns, ends a window over capacity + rate × its length + 1", lm.Name, i, len(adm), a[0], hi)
						break
					}
				}
			}
			if admitted < limits[1].Capacity || decisions <= admitted {
				t.Errorf("admitted %d of %d: the children did not drain the key", admitted, decisions)
			}
		})
	}
}

// tenYearsAhead returns the command prefix that runs a child in a time
// namespace whose monotonic and boot clocks are ten years ahead: unshare
// --time as root, and in a user namespace of its own where root may not
// create a time namespace directly (an unprivileged user, a container's
// root without CAP_SYS_ADMIN). Linux 5.6 or later.
func tenYearsAhead(t *testing.T) []string {
	t.Helper()
	const tenYears = "315360000"
	clocks := []string{"--time", "--monotonic", tenYears, "--boottime", tenYears}
	var errs []string
	for _, pre := range [][]string{{"unshare"}, {"unshare", "--user", "--map-root-user"}} {
		args := append(append(append([]string{}, pre...), clocks...), "true")
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err == nil {
			return args[:len(args)-1]
		}
		errs = append(errs, fmt.Sprintf("%s: %v: %s", strings.Join(args, " "), err, out))
	}
	t.Fatalf("no time namespace (Linux 5.6 and unshare from util-linux needed): %s", strings.Join(errs, "; "))
	return nil
}

// A client whose clock is far off changes nothing: a child whose monotonic
// and boot clocks are ten years ahead (a time namespace) shares the bucket
// with this process and the bound holds; and what a client sends holds no
// time at all (checked on the wire with MONITOR).
func TestClientClockIgnored(t *testing.T) {
	c := client(t, srv)
	ctx := context.Background()
	wrap := tenYearsAhead(t)
	const capacity, rate = 50, 500.0
	spec := childSpec{Addr: srv.Addr, Prefix: "clock:", Key: "k", Capacity: capacity, Rate: rate, Goroutines: 8, Duration: 500 * time.Millisecond}
	l, err := redisbucket.New(c, capacity, rate, redisbucket.WithPrefix("clock:"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t0 := serverTime(t, c)
	var here atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if d, err := l.AllowN(ctx, "k", 1); err == nil && d.Allowed {
				here.Add(1)
			}
		}
	}()
	res := runChildren(t, 1, spec, wrap...)
	close(stop)
	wg.Wait()
	t1 := serverTime(t, c)
	total := here.Load() + res[0].Admitted
	bound := capacity + rate*float64(t1-t0)/1e6
	t.Logf("admitted %d here + %d in the shifted child, bound %.0f", here.Load(), res[0].Admitted, bound)
	if float64(total) > bound || res[0].Admitted == 0 {
		t.Errorf("admitted %d + %d, bound %.1f", here.Load(), res[0].Admitted, bound)
	}

	// On the wire: the arguments are the key, n (twice: asked and wanted),
	// the strict flag and the limit's record head (its name and the four
	// constants of its configuration); nothing derived from the client's
	// clock.
	mon, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	br := bufio.NewReader(mon)
	if _, err := mon.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	// ... and the stored record's head: its name and these constants,
	// packed.
	want := []string{"1", redisbucket.RedisKey(l, "k2"), "3", "3", "1", redisbucket.Head(l), redisbucket.Params(l)}
	if recs, ok := redisbucket.Decode(redisbucket.Head(l) + strings.Repeat("\x00", 16)); !ok || len(recs) != 1 || recs[0].Name != "" || recs[0].M != 1 || recs[0].Q != 1 {
		t.Fatalf("the head does not hold the limit's constants: %+v", recs)
	} else if per, capUnits := redisbucket.Units(l); recs[0].Per != per || recs[0].Cap != capUnits {
		t.Fatalf("the head holds %+v, want cap %d, per %d", recs[0], capUnits, per)
	}
	for i := 0; i < 3; i++ {
		if _, err := l.AllowN(ctx, "k2", 3); err != nil {
			t.Fatal(err)
		}
	}
	_ = mon.SetReadDeadline(time.Now().Add(10 * time.Second))
	seen := 0
	for seen < 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("MONITOR read: %v (saw %d evalsha)", err, seen)
		}
		args := monitorArgs(line)
		if len(args) < 2 || args[0] != "evalsha" {
			continue
		}
		if got := args[2:]; !slices.Equal(got, want) {
			t.Errorf("script called with %q, want %q", got, want)
		}
		seen++
	}
}

// monitorArgs returns the arguments of one MONITOR line, `+<time> [<db>
// <client>] "arg" "arg" ...`, unquoted: Redis writes each between double
// quotes, with \\, \", \n, \r, \t, \a, \b and \xHH escapes.
func monitorArgs(line string) []string {
	var out []string
	i := strings.IndexByte(line, ']')
	if i < 0 {
		return nil
	}
	for i++; i < len(line); i++ {
		if line[i] != '"' {
			continue
		}
		var b []byte
		for i++; i < len(line) && line[i] != '"'; i++ {
			if line[i] != '\\' || i+1 >= len(line) {
				b = append(b, line[i])
				continue
			}
			i++
			switch c := line[i]; c {
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'a':
				b = append(b, '\a')
			case 'b':
				b = append(b, '\b')
			case 'x':
				if i+2 < len(line) {
					v, err := strconv.ParseUint(line[i+1:i+3], 16, 8)
					if err == nil {
						b = append(b, byte(v))
						i += 2
						continue
					}
				}
				b = append(b, c)
			default:
				b = append(b, c)
			}
		}
		out = append(out, string(b))
	}
	return out
}
