package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// hit sends one request to url through a vegeta attacker with the given
// client timeout, as attack does, and returns its result.
func hit(t *testing.T, url string, timeout time.Duration) *vegeta.Result {
	t.Helper()
	atk := vegeta.NewAttacker(vegeta.Timeout(timeout), vegeta.KeepAlive(false))
	tr := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: url})
	var got []*vegeta.Result
	// One hit, however late the attack's goroutine runs: a rate over a
	// 1 ms duration sent none when it started more than 1 ms late.
	for res := range atk.Attack(tr, oneHit{}, 0, "t") {
		got = append(got, res)
	}
	if len(got) != 1 {
		t.Fatalf("%d results, want 1", len(got))
	}
	return got[0]
}

// oneHit is a vegeta pacer that sends one hit at once, then stops.
type oneHit struct{}

func (oneHit) Pace(_ time.Duration, hits uint64) (time.Duration, bool) { return 0, hits >= 1 }
func (oneHit) Rate(time.Duration) float64                              { return 0 }

// TestClassify checks that only 200, 503 and the client's own timeout are
// filed as done, shed and timeout: another status or a connection error is
// an error, not a timeout.
func TestClassify(t *testing.T) {
	var status atomic.Int64
	unblock := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status.Load() == 0 {
			<-unblock // past the client's deadline
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	defer close(unblock)
	for _, tc := range []struct {
		status int
		want   outcome
	}{
		{http.StatusOK, done},
		{http.StatusServiceUnavailable, shed},
		{http.StatusTooManyRequests, failed},
		{http.StatusInternalServerError, failed},
		{0, timeout},
	} {
		status.Store(int64(tc.status))
		res := hit(t, srv.URL, 50*time.Millisecond)
		if got := classify(res); got != tc.want {
			t.Errorf("status %d: code %d error %q filed as %d, want %d", tc.status, res.Code, res.Error, got, tc.want)
		}
	}

	// A refused connection: a port nothing listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	res := hit(t, "http://"+addr+"/", time.Second)
	if got := classify(res); got != failed {
		t.Errorf("connection refused: code %d error %q filed as %d, want %d (failed)", res.Code, res.Error, got, failed)
	}
}

// TestSummaryGivesInRun checks that the line heading a capacity-step or a
// sustained run gives its goodput counted by the requests that finished
// within the run too, as the load table does: the goodput alone credits a
// limiter with a higher limit for the calls it still holds at the end.
func TestSummaryGivesInRun(t *testing.T) {
	r := run{goodput: 0.988, doneIn: 0.982, p50: 129 * time.Millisecond, p99: 280 * time.Millisecond, cpu: 0.1}
	got := summary("failsafe-default", r)
	for _, want := range []string{"goodput 0.988", "in-run 0.982", "p50 129ms", "p99 280ms", "cpu 0.10"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
}
