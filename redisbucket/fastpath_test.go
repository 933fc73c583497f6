package redisbucket_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
	"github.com/redis/go-redis/v9"
)

// fixedTime is prepended to the script for FuzzFastPath: TIME answers
// ARGV[6] s and ARGV[7] µs, and SET ... PX ms becomes PXAT ARGV[8] + ms,
// so that a call's reply, its stored value and the key's expiry time
// (PEXPIRETIME) are exact functions of its inputs. The rest is the
// script's own source.
const fixedTime = `local realcall, error_reply, unpack = redis.call, redis.error_reply, unpack
local T, base = {ARGV[6], ARGV[7]}, tonumber(ARGV[8])
local redis = {error_reply = error_reply, call = function(cmd, ...)
  if cmd == 'TIME' then return T end
  local a = {...}
  if cmd == 'SET' and a[3] == 'PX' then a[3], a[4] = 'PXAT', base + tonumber(a[4]) end
  return realcall(cmd, unpack(a))
end}
`

// fastOff is the script's fast-path condition, switched off by prefixing
// "false and" so that every call runs the general code.
const fastOn, fastOff = "if #Pc == 32 and (not s or", "if false and #Pc == 32 and (not s or"

var fastRun atomic.Int64

// FuzzFastPath: the one-limit fast path against the script's general code
// (the same source with the fast path switched off), on the same stored
// value at the same server time, over capacities and rates that give every
// unit shape (per and m of 1 and above, coarse ticks, rate 0, an inexact
// rate), debts from 0 to the capacity, stored times behind, at and ahead of
// the clock, peeks, denials, batches (want > n), and values the fast path
// must pass over: another Name's record beside the limit's, the limit's
// Name with other parameters (strict: refused; per call: carried over), an
// old text value. Replies, error replies, stored values and expiry times
// must be identical.
func FuzzFastPath(f *testing.F) {
	// capSel, rateSel, dSel, tSel, n, want (extra), stored, strict
	f.Add(uint8(0), uint8(1), uint64(0), int64(0), uint16(1), uint16(0), uint8(0), true)
	f.Add(uint8(2), uint8(2), uint64(1), int64(5), uint16(3), uint16(0), uint8(1), true)
	f.Add(uint8(2), uint8(2), uint64(2), int64(-5), uint16(1), uint16(0), uint8(1), true)
	f.Add(uint8(3), uint8(3), uint64(7<<2|3), int64(-3_000_000), uint16(4), uint16(50), uint8(1), true)
	f.Add(uint8(4), uint8(4), uint64(1), int64(10), uint16(0), uint16(0), uint8(1), true)
	f.Add(uint8(4), uint8(5), uint64(1), int64(1<<40), uint16(2), uint16(0), uint8(1), false)
	f.Add(uint8(5), uint8(5), uint64(99<<2|3), int64(-1<<40), uint16(1000), uint16(7), uint8(1), true)
	f.Add(uint8(6), uint8(6), uint64(1), int64(2), uint16(1), uint16(0), uint8(1), true)
	f.Add(uint8(1), uint8(7), uint64(2), int64(-1), uint16(1), uint16(3), uint8(1), true)
	f.Add(uint8(3), uint8(8), uint64(12345<<2|3), int64(-77), uint16(2), uint16(0), uint8(1), true)
	f.Add(uint8(2), uint8(0), uint64(1), int64(0), uint16(1), uint16(0), uint8(1), true)
	f.Add(uint8(2), uint8(2), uint64(1), int64(0), uint16(1), uint16(0), uint8(2), true)
	f.Add(uint8(2), uint8(2), uint64(2), int64(-9), uint16(1), uint16(0), uint8(3), true)
	f.Add(uint8(2), uint8(2), uint64(2), int64(-9), uint16(1), uint16(0), uint8(3), false)
	f.Add(uint8(2), uint8(2), uint64(2), int64(-9), uint16(1), uint16(0), uint8(4), true)
	f.Add(uint8(5), uint8(6), uint64(3), int64(-1), uint16(1), uint16(0), uint8(1), true)
	// Capacity 1000 at 1e-6/s: per 1e12, so a drained bucket is 31 years
	// from full, a PX of 1e12 ms.
	f.Add(uint8(4), uint8(5), uint64(999_000_000_000_000<<2|3), int64(0), uint16(1), uint16(0), uint8(1), true)
	if strings.Count(redisbucket.ScriptSource, fastOn) != 1 {
		f.Fatalf("the script's fast-path condition %q is not there once", fastOn)
	}
	fast := redis.NewScript(fixedTime + redisbucket.ScriptSource)
	general := redis.NewScript(fixedTime + strings.Replace(redisbucket.ScriptSource, fastOn, fastOff, 1))
	c := client(f, srv)
	ctx := context.Background()
	now := serverTime(f, c) // the fixed clock starts at the real one
	caps := []int64{1, 2, 3, 10, 1000, 1_000_000_000, 1 << 31}
	rates := []float64{0, 1, 3, 0.5, 1e9, 1e-6, 1.0 / 3, 7.7, 1000}
	f.Fuzz(func(t *testing.T, capSel, rateSel uint8, dSel uint64, tSel int64, nSel, wantSel uint16, stored uint8, strict bool) {
		capacity, rate := caps[int(capSel)%len(caps)], rates[int(rateSel)%len(rates)]
		l, err := redisbucket.New(c, capacity, rate, redisbucket.WithEvictionAccepted())
		if err != nil {
			return // not representable: New's tests cover it
		}
		per, capUnits := redisbucket.Units(l)
		q := redisbucket.Tick(l)
		us := now + int64(uint64(tSel)>>8%1_000_000_000) // the call's clock: now or up to 1000 s later
		var d int64
		switch dSel % 4 {
		case 1:
			d = capUnits
		case 2:
			d = max(capUnits-1, 0)
		case 3:
			d = int64((dSel >> 2) % uint64(capUnits+1))
		}
		// The record's tick: at, behind or ahead of the call's, by up to
		// 2^40 ticks, never negative.
		tick := max(us/q+tSel%(1<<40), 0)
		n := int64(nSel) % (capacity + 1)
		want := n + int64(wantSel)%200
		head, params := redisbucket.Head(l), redisbucket.Params(l)
		var value string
		switch stored % 5 {
		case 1:
			value = redisbucket.Stored(l, d, tick)
		case 2: // another Name's record too
			other, _, _ := redisbucket.Record(admit.Limit{Name: "other", Capacity: 5, Rate: 0}, 2, tick)
			value = redisbucket.Join(redisbucket.Stored(l, d, tick), other)
		case 3: // the Name with another capacity
			lim := admit.Limit{Capacity: capacity + 1, Rate: rate}
			if rec, ok := record(lim, tick); ok {
				value = rec
			}
		case 4: // a value this package did not write
			value = fmt.Sprint(d, " ", tick)
		}
		flag := "0"
		if strict {
			flag = "1"
		}
		// PXAT's base is a day past the call's clock: a base near the
		// real clock put an expiry a few ms ahead, which the real clock
		// reached during a long fuzz run between the two scripts' SETs
		// (one value expired, the other not).
		argv := []any{n, want, flag, head, params, us / 1_000_000, us % 1_000_000, us/1000 + 86_400_000}
		var replies [2]any
		var errs [2]string
		var values [2]string
		var expiry [2]int64
		for i, s := range []*redis.Script{fast, general} {
			key := fmt.Sprint("t:fastpath:", fastRun.Add(1))
			if value != "" {
				if err := c.Set(ctx, key, value, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			replies[i], err = s.Run(ctx, c, []string{key}, argv...).Result()
			if err != nil {
				// An error reply names the script's SHA, which differs.
				errs[i], _, _ = strings.Cut(err.Error(), " script: ")
			}
			values[i] = c.Get(ctx, key).Val()
			expiry[i] = c.PExpireTime(ctx, key).Val().Milliseconds()
			c.Del(ctx, key)
		}
		if !reflect.DeepEqual(replies[0], replies[1]) || errs[0] != errs[1] || values[0] != values[1] || expiry[0] != expiry[1] {
			t.Fatalf("capacity %d, rate %v (per %d, tick %d µs), stored %d (d=%d, t=%d; now %d), n=%d want=%d strict=%v:\nfast:    %v %q, value %x, expires %d\ngeneral: %v %q, value %x, expires %d",
				capacity, rate, per, q, stored%5, d, tick, us/q, n, want, strict,
				replies[0], errs[0], values[0], expiry[0], replies[1], errs[1], values[1], expiry[1])
		}
	})
}

// record is lim's stored record at a debt of 1 unit and tick, or false if
// lim cannot be represented.
func record(lim admit.Limit, tick int64) (rec string, ok bool) {
	defer func() {
		if recover() != nil {
			rec, ok = "", false
		}
	}()
	rec, _, _ = redisbucket.Record(lim, 1, tick)
	return rec, true
}

// A key moves between one limit and several: the limiter's own limit
// through AllowN (the script's fast path while the key holds only its
// record), a second Name added by AllowLimits (two records: AllowN then
// decides on the general code and keeps the other record), and that Name
// clamped full and dropped (one record again). Capacity 5 at 1 per 1000 s,
// so nothing refills a whole token during the test; every Decision and
// stored record is exact.
func TestOneLimitKeySwitches(t *testing.T) {
	ctx := context.Background()
	l, c, _ := newLimiter(t, 5, 0.001)
	own := admit.Limit{Capacity: 5, Rate: 0.001}
	key := redisbucket.RedisKey(l, "k")
	records := func(step string, want map[string]int64) {
		t.Helper()
		v, _ := c.Get(ctx, key).Result()
		recs, ok := redisbucket.Decode(v)
		if !ok || len(recs) != len(want) {
			t.Fatalf("%s: stored %d records (parsed %v), want %v", step, len(recs), ok, want)
		}
		for _, r := range recs {
			tokens, held := want[r.Name]
			if !held || (r.Cap-r.D)/r.Per != tokens {
				t.Fatalf("%s: record %q holds %d whole tokens, want %v", step, r.Name, (r.Cap-r.D)/r.Per, want)
			}
		}
	}
	step := func(name string, d admit.Decision, err error, allowed bool, remaining int64, policy string) {
		t.Helper()
		if err != nil || d.Allowed != allowed || d.Remaining != remaining || d.Policy != policy {
			t.Fatalf("%s: %+v, %v; want allowed=%v, %d left, policy %q", name, d, err, allowed, remaining, policy)
		}
	}
	d, err := l.AllowN(ctx, "k", 1)
	step("AllowN on an absent key", d, err, true, 4, "")
	d, err = l.AllowN(ctx, "k", 1)
	step("AllowN on its own record", d, err, true, 3, "")
	records("one limit", map[string]int64{"": 3})
	d, err = l.AllowLimits(ctx, "k", 1, own, admit.Limit{Name: "daily", Capacity: 10, Rate: 0.001})
	step("AllowLimits adds daily", d, err, true, 2, "")
	records("two limits", map[string]int64{"": 2, "daily": 9})
	d, err = l.AllowN(ctx, "k", 1)
	step("AllowN beside daily", d, err, true, 1, "")
	records("AllowN keeps daily", map[string]int64{"": 1, "daily": 9})
	d, err = l.AllowN(ctx, "k", 2)
	step("AllowN denied beside daily", d, err, false, 1, "")
	if d.RetryAfter <= 999*time.Second || d.RetryAfter > 1000*time.Second {
		t.Errorf("RetryAfter %v, want about one token at 1 per 1000 s", d.RetryAfter)
	}
	// daily at capacity 1: its 9 clamp to 1, full, so its record goes.
	d, err = l.AllowLimits(ctx, "k", 0, admit.Limit{Name: "daily", Capacity: 1, Rate: 0.001})
	step("daily clamped full", d, err, true, 1, "daily")
	records("daily dropped", map[string]int64{"": 1})
	d, err = l.AllowN(ctx, "k", 1)
	step("AllowN on its own record again", d, err, true, 0, "")
	records("one limit again", map[string]int64{"": 0})
	d, err = l.AllowN(ctx, "k", 1)
	step("AllowN drained", d, err, false, 0, "")
	// Another limiter on the prefix with another capacity for the Name:
	// the fast path passes the key over and the general code refuses it.
	other, err := redisbucket.New(c, 7, 0.001, redisbucket.WithPrefix(strings.TrimSuffix(key, redisbucket.Separator+"k")), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := other.AllowN(ctx, "k", 1); d.Allowed || !errors.Is(err, admit.ErrInvalidConfig) {
		t.Errorf("a limiter with capacity 7 on the key: %+v, %v; want a refusal", d, err)
	}
}
