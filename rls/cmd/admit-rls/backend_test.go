package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/stretchr/testify/require"
)

// outageLog is a backend on a fake clock whose log lines are kept.
type outageLog struct {
	b   *backend
	now time.Time
	buf bytes.Buffer
}

func newOutageLog() *outageLog {
	o := &outageLog{now: time.Unix(1e9, 0)}
	o.b = &backend{name: "redis", now: func() time.Time { return o.now }, log: slog.New(slog.NewTextHandler(&o.buf, nil))}
	return o
}

// step advances the clock by d and reports a call's outcome.
func (o *outageLog) step(d time.Duration, fail bool) {
	o.now = o.now.Add(d)
	if fail {
		o.b.failed(fmt.Errorf("%w: redis: down", admit.ErrUnavailable))
	} else if o.b.down.Load() {
		o.b.succeeded()
	}
}

// count returns how many lines hold msg.
func (o *outageLog) count(msg string) int { return strings.Count(o.buf.String(), "msg=\""+msg+"\"") }

// TestOutageLog: an outage is logged when it starts, then at most once
// every logEvery however its failures and successes interleave (a
// partial outage: a Cluster with a node down), and ends once no call has
// failed for quiet; a success alone ends nothing. (Before, every success
// ended the outage and the next failure began a new one: two lines per
// alternation.)
func TestOutageLog(t *testing.T) {
	o := newOutageLog()
	// A minute of calls every 10 ms, every third failing, the last one
	// included.
	for i := range 6000 {
		o.step(10*time.Millisecond, i%3 == 2)
	}
	require.Equal(t, 1, o.count("backend unavailable"), o.buf.String())
	still := o.count("backend still unavailable")
	require.True(t, still >= 5 && still <= 6, "one line every 10 s of a minute: %d\n%s", still, o.buf.String())
	require.Zero(t, o.count("backend recovered"))

	// Successes only: the outage ends once quiet has passed since the last
	// failure, not before.
	for range int(quiet/(10*time.Millisecond)) - 1 {
		o.step(10*time.Millisecond, false)
	}
	require.Zero(t, o.count("backend recovered"), "ended before quiet had passed")
	o.step(10*time.Millisecond, false)
	require.Equal(t, 1, o.count("backend recovered"), o.buf.String())
	require.Contains(t, o.buf.String(), "failures=2000 successes=")

	// A new failure is a new outage, logged at once.
	o.step(time.Millisecond, true)
	require.Equal(t, 2, o.count("backend unavailable"))
	lines := strings.Count(o.buf.String(), "\n")
	for range 1000 { // failures and successes within one logEvery
		o.step(time.Millisecond, true)
		o.step(time.Millisecond, false)
	}
	require.Equal(t, lines, strings.Count(o.buf.String(), "\n"), "no line within logEvery of the outage's start")
}

// TestBackoff: REDIS_STARTUP_*'s waits as envoyproxy/ratelimit draws them
// (jpillora/backoff, factor 2, jitter): uniform between the initial
// interval and initial·2^n, capped at the maximum.
func TestBackoff(t *testing.T) {
	lo := backoff{min: time.Second, max: 30 * time.Second}
	hi := lo
	for n := range 8 {
		require.Equal(t, time.Second, lo.next(func() float64 { return 0 }), "attempt %d, lowest draw", n)
		want := min(30*time.Second, time.Second<<n)
		got := hi.next(func() float64 { return 0.999999 })
		require.True(t, got <= want && got > want-want/1000, "attempt %d, highest draw: %v, want about %v", n, got, want)
	}
	half := backoff{min: time.Second, max: 30 * time.Second, n: 3}
	require.Equal(t, 4500*time.Millisecond, half.next(func() float64 { return 0.5 }), "between 1 s and 8 s")
}

// TestConns: health follows the count of open connections: failing when
// the last closes, healthy when one opens, each change told once.
func TestConns(t *testing.T) {
	var changes []bool
	c := &conns{onChange: func(h bool) { changes = append(changes, h) }}
	require.False(t, c.healthy())
	c.add(1)
	c.add(1)
	c.add(-1)
	require.True(t, c.healthy())
	c.add(-1)
	require.False(t, c.healthy())
	c.add(1)
	require.Equal(t, []bool{true, false, true}, changes)
}

// TestLogger: levels carry logrus's names; JSON lines carry
// envoyproxy/ratelimit's keys, @timestamp and @message; LOG_LEVEL filters.
func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger([]string{"LOG_FORMAT=json", "LOG_LEVEL=warning"}, &buf)
	l.Info("hidden")
	l.Warn("shown", "k", 1)
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m), buf.String())
	require.Equal(t, "shown", m["@message"])
	require.Equal(t, "warning", m["level"])
	_, err := time.Parse(time.RFC3339Nano, m["@timestamp"].(string))
	require.NoError(t, err)
	require.NotContains(t, m, "msg")

	buf.Reset()
	newLogger([]string{"LOG_LEVEL=debug"}, &buf).Debug("x")
	require.True(t, strings.HasPrefix(buf.String(), "time="), buf.String())
	require.Contains(t, buf.String(), " level=debug msg=x")
}

// TestGRPCLogger: grpc-go's own lines come through slog, in LOG_FORMAT:
// its errors as errors, its infos and warnings as debug lines.
func TestGRPCLogger(t *testing.T) {
	var buf bytes.Buffer
	g := grpcLogger{newLogger([]string{"LOG_FORMAT=json", "LOG_LEVEL=info"}, &buf)}
	g.Warningf("hidden %d", 1)
	g.Errorln("transport:", "broken")
	var m map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &m), buf.String())
	require.Equal(t, "transport: broken", m["@message"])
	require.Equal(t, "error", m["level"])
	require.Equal(t, "grpc", m["source"])
	require.True(t, g.V(0))
	require.False(t, g.V(2))
}
