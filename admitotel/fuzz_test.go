package admitotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admitotel"
	"github.com/admit-go/admit/buckettest"
	"github.com/admit-go/admit/keyed"
)

// FuzzCounts drives a wrapped policy limiter with a sequence of calls read
// from the input (key, cost from -1 to 6, one of four limit sets, clock
// steps, collections in between) and checks every collection against a
// model: the tally of what the wrapper returned, by result, tokens and
// deciding policy, and the keys keyed says it holds.
func FuzzCounts(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0x13, 0x27, 0x31, 0x4f, 0x50, 0x66, 0x7a, 0x81, 0x9c, 0xa5, 0xbb, 0xc0, 0xd7, 0xee, 0xff})
	f.Add([]byte{7, 7, 7, 7, 7, 7, 7, 7, 0x70, 0x70, 0x70, 0x70})
	f.Fuzz(func(t *testing.T, ops []byte) {
		clk := buckettest.NewFakeClock(0)
		mp, reader := manualProvider()
		l, err := keyed.New(1, 1, admit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		w, err := admitotel.Wrap(l, mp)
		if err != nil {
			t.Fatal(err)
		}
		sets := [][]admit.Limit{
			{{Name: "burst", Capacity: 3, Rate: 1}, {Name: "daily", Capacity: 5, Rate: 0.01}},
			{{Name: "burst", Capacity: 3, Rate: 1}},
			{{Capacity: 2, Rate: 2}}, // unnamed
			nil,                      // no limits: an error
		}
		want := map[string]int64{}
		const lim = "admit.limiter=default"
		for i, op := range ops {
			if op == 0xff {
				clk.Advance(time.Second)
				continue
			}
			key := fmt.Sprint("k", op&1)
			n := int64(op>>1&7) - 1
			limits := sets[op>>4&3]
			d, err := w.AllowLimits(context.Background(), key, n, limits...)
			result := "denied"
			switch {
			case err != nil:
				result = "error"
			case d.Allowed:
				result = "allowed"
			}
			if err != nil && errors.Is(err, admit.ErrUnavailable) {
				t.Fatalf("op %d: %v", i, err)
			}
			if d.Policy != "" {
				want["admit.decisions{"+lim+",admit.policy="+d.Policy+",admit.result="+result+"}"]++
			} else {
				want["admit.decisions{"+lim+",admit.result="+result+"}"]++
			}
			want["admit.tokens{"+lim+",admit.result="+result+"}"] += max(n, 0)
			if op>>6 == 3 {
				want["admit.keys{"+lim+"}"] = int64(l.Len())
				expect(t, collect(t, reader), want)
			}
		}
		want["admit.keys{"+lim+"}"] = int64(l.Len())
		expect(t, collect(t, reader), want)
	})
}
