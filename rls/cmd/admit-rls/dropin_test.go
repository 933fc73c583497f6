package main

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit/redisbucket/redistest"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	ratelimit "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The tests of this file are what a team migrating from
// envoyproxy/ratelimit trips on: each runs the admit-rls binary on the
// memory store and on Redis where the backend matters.

// backends returns the environments of the two backends: memory, and a
// Redis server started for the test.
func backends(t *testing.T) map[string][]string {
	s := redistest.New(t)
	return map[string][]string{
		"memory": {"BACKEND_TYPE=memory"},
		"redis":  {"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr},
	}
}

// rewrite replaces the file's content atomically (a rename), as a
// configuration management tool would; the new content is written outside
// the configuration directory, where it would be read as a second file.
func rewrite(t *testing.T, file, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(filepath.Dir(file)), filepath.Base(file)+".tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, file))
}

// TestRaisedLimitApplies: a client drained at 5 an hour, still asking,
// is admitted at the new rate once the rule is raised to 600 a minute by a
// reload: the refused requests after the reload must not undo the
// carry-over of its balance to the new rule.
func TestRaisedLimitApplies(t *testing.T) {
	// 5 an hour: no token comes at the old rate while the test waits for
	// the reload, however slow the machine.
	const low = "domain: r\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	for name, env := range backends(t) {
		t.Run(name, func(t *testing.T) {
			p := startRLS(t, env, map[string]string{"r.yaml": low})
			for range 5 {
				require.Equal(t, ok, p.ask(t, "r", d("client", "c")).OverallCode)
			}
			require.Equal(t, over, p.ask(t, "r", d("client", "c")).OverallCode)
			rewrite(t, filepath.Join(p.configDir, "r.yaml"), strings.Replace(low, "hour, requests_per_unit: 5}", "minute, requests_per_unit: 600}", 1))
			// Refused requests until the new rule is in force (the one that
			// sees it carries the balance over, and is refused: the carried
			// balance holds less than a token).
			deadline := time.Now().Add(30 * time.Second)
			for {
				resp := p.ask(t, "r", d("client", "c"))
				if resp.Statuses[0].CurrentLimit.RequestsPerUnit == 600 {
					break
				}
				require.Equal(t, over, resp.OverallCode)
				require.True(t, time.Now().Before(deadline), "the reload did not apply")
				time.Sleep(20 * time.Millisecond)
			}
			// 150 ms at 10 a second is 1.5 tokens, at 5 an hour 0.0002.
			time.Sleep(150 * time.Millisecond)
			require.Equal(t, ok, p.ask(t, "r", d("client", "c")).OverallCode, "the raised limit did not reach the drained client")
		})
	}
}

// TestZeroRuleAllOrNothing: a request refused by a rule of 0 takes nothing
// from its other descriptors.
func TestZeroRuleAllOrNothing(t *testing.T) {
	const cfg = "domain: z\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n" +
		"  - key: blocked\n    rate_limit: {unit: hour, requests_per_unit: 0}\n"
	for name, env := range backends(t) {
		t.Run(name, func(t *testing.T) {
			p := startRLS(t, env, map[string]string{"z.yaml": cfg})
			for range 3 {
				resp := p.ask(t, "z", d("user", "u"), d("blocked", "x"))
				require.Equal(t, over, resp.OverallCode)
				require.Equal(t, []pb.RateLimitResponse_Code{ok, over}, codes3(resp))
			}
			// An override of 0 refuses the same way.
			zero := d("user", "v")
			zero.Limit = &commonOverride{RequestsPerUnit: 0, Unit: ratelimit.RateLimitUnit_HOUR}
			require.Equal(t, over, p.ask(t, "z", d("user", "u"), zero).OverallCode)
			for range 3 {
				require.Equal(t, ok, p.ask(t, "z", d("user", "u")).OverallCode, "a refused request took from user=u")
			}
			require.Equal(t, over, p.ask(t, "z", d("user", "u")).OverallCode)
		})
	}
}

// TestUsageDebt: usage reported after the response (Envoy's
// apply_on_stream_done with a hits_addend) is counted on a rule with
// debt: true, into debt that later requests wait out; envoyproxy/ratelimit
// refuses the third of these requests.
func TestUsageDebt(t *testing.T) {
	const cfg = "domain: u\ndescriptors:\n  - key: team\n    rate_limit: {unit: hour, requests_per_unit: 1000, debt: true}\n"
	for name, env := range backends(t) {
		t.Run(name, func(t *testing.T) {
			p := startRLS(t, env, map[string]string{"u.yaml": cfg})
			var codes []pb.RateLimitResponse_Code
			for range 4 {
				check := p.ask(t, "u", addend(d("team", "a"), 0)) // at the request: checks only
				codes = append(codes, check.OverallCode)
				p.ask(t, "u", addend(d("team", "a"), 600)) // at stream done: the usage
			}
			require.Equal(t, []pb.RateLimitResponse_Code{ok, ok, over, over}, codes)
			// 2400 reported on 1000: the debt is bounded by one burst.
			st := p.ask(t, "u", addend(d("team", "a"), 0)).Statuses[0]
			require.Equal(t, uint32(0), st.LimitRemaining)
			require.InDelta(t, 2*time.Hour.Seconds(), st.DurationUntilReset.AsDuration().Seconds(), 10,
				"a full burst of debt, then a full burst to refill: two hours")
		})
	}
}

// TestNegativeHits: a refund is refused by name rather than charged.
func TestNegativeHits(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	ds := addend(d("user", "neg"), 1)
	ds.IsNegativeHits = true
	_, err := p.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*commonDescriptor{ds}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "is_negative_hits")
	require.Equal(t, uint32(3), p.ask(t, "e2e", addend(d("user", "neg"), 0)).Statuses[0].LimitRemaining)
}

// TestNoLimitAnswers: a domain the configuration does not hold applies no
// limit, overrides included, and a descriptor no limit applies to answers
// limit_remaining 0, as envoyproxy/ratelimit does; an unlimited one,
// 4294967295.
func TestNoLimitAnswers(t *testing.T) {
	p := startRLS(t, nil, map[string]string{"e2e.yaml": e2eConfig})
	od := d("user", "o")
	od.Limit = &commonOverride{RequestsPerUnit: 1, Unit: ratelimit.RateLimitUnit_HOUR}
	for range 3 {
		resp := p.ask(t, "nowhere", od, d("user", "o"))
		require.Equal(t, ok, resp.OverallCode)
		for _, st := range resp.Statuses {
			require.Nil(t, st.CurrentLimit)
			require.Equal(t, uint32(0), st.LimitRemaining)
		}
	}
	resp := p.ask(t, "e2e", d("nothing", "x"), d("free", "x"), d("plan", "basic"), d("premium", "p"))
	require.Equal(t, []uint32{0, math.MaxUint32, 0, 99}, []uint32{resp.Statuses[0].LimitRemaining,
		resp.Statuses[1].LimitRemaining, resp.Statuses[2].LimitRemaining, resp.Statuses[3].LimitRemaining})
}

// TestLargeRules: a rule above 1e9 a second loads (hits counting bytes),
// on both backends; a request with many descriptors, few limited, is
// decided.
func TestLargeRules(t *testing.T) {
	const cfg = "domain: b\ndescriptors:\n  - key: bytes\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n" +
		"  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	for name, env := range backends(t) {
		t.Run(name, func(t *testing.T) {
			p := startRLS(t, env, map[string]string{"b.yaml": cfg})
			resp := p.ask(t, "b", addend(d("bytes", "x"), 3000000000))
			require.Equal(t, ok, resp.OverallCode)
			require.Equal(t, uint32(4000000000), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
			require.GreaterOrEqual(t, resp.Statuses[0].LimitRemaining, uint32(1000000000))
			require.Equal(t, over, p.ask(t, "b", addend(d("bytes", "x"), math.MaxUint32)).OverallCode, "a cost above the burst")

			var ds []*commonDescriptor
			for i := range 100 {
				ds = append(ds, d("other", fmt.Sprint(i)))
			}
			ds = append(ds, d("user", "many"))
			for range 2 {
				require.Equal(t, ok, p.ask(t, "b", ds...).OverallCode)
			}
			require.Equal(t, over, p.ask(t, "b", ds...).OverallCode)
		})
	}
}

// TestRedisByDefault: an envoyproxy/ratelimit environment (REDIS_URL, no
// BACKEND_TYPE) runs on Redis, so that two replicas share their limits,
// and the log says which backend is in use.
func TestRedisByDefault(t *testing.T) {
	s := redistest.New(t)
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr}
	files := map[string]string{"e2e.yaml": e2eConfig}
	a, b := startRLS(t, env, files), startRLS(t, env, files)
	admitted := 0
	for i := range 6 {
		p := a
		if i%2 == 1 {
			p = b
		}
		if p.ask(t, "e2e", d("user", "shared")).OverallCode == ok {
			admitted++
		}
	}
	require.Equal(t, 3, admitted, "two replicas on a limit of 3")
	require.Contains(t, a.log(), "backend=redis")
	require.Contains(t, startRLS(t, nil, files).log(), "backend=memory")
}

// TestRedisURL: REDIS_URL as envoyproxy/ratelimit's Redis client (radix)
// takes it, on a redis-server that requires a password: in the URL with a
// database in its path or in its query (?db=, ?password=), and with
// REDIS_AUTH, which wins over the URL's password, also when the URL names a
// user alone. The password never reaches the log, not even when a URL that
// holds it cannot be parsed.
func TestRedisURL(t *testing.T) {
	const pw = "s3cr3t,#/?x"
	s := redistest.New(t)
	require.NoError(t, redisClient(t, s.Addr, "", 0).ConfigSet(context.Background(), "requirepass", pw).Err())
	enc := url.QueryEscape(pw)
	for i, tc := range []struct {
		env []string
		db  int
	}{
		{[]string{"REDIS_URL=redis://" + url.UserPassword("", pw).String() + "@" + s.Addr + "/3"}, 3},
		{[]string{"REDIS_URL=redis://" + s.Addr + "?db=4&password=" + enc}, 4},
		{[]string{"REDIS_URL=redis://:wrong@" + s.Addr + "/5", "REDIS_AUTH=" + pw}, 5},
		{[]string{"REDIS_URL=redis://default@" + s.Addr + "?db=6", "REDIS_AUTH=" + pw}, 6},
	} {
		p := startRLS(t, append([]string{"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp"}, tc.env...), map[string]string{"e2e.yaml": e2eConfig})
		require.Equal(t, ok, p.ask(t, "e2e", d("user", fmt.Sprint("url", i))).OverallCode)
		keys, err := redisClient(t, s.Addr, pw, tc.db).Keys(context.Background(), "admit-rls:*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 1, "%v: the bucket is in database %d", tc.env, tc.db)
		require.NotContains(t, p.log(), "s3cr3t")
		require.NotContains(t, p.log(), "wrong")
	}
	for _, u := range []string{"redis://:" + pw + "@" + s.Addr, "redis://u:s3cr3t%zz@" + s.Addr} {
		log := refuse(t, []string{"BACKEND_TYPE=redis", "REDIS_URL=" + u}, map[string]string{"e2e.yaml": e2eConfig})
		require.Contains(t, log, "REDIS_URL")
		require.NotContains(t, log, "s3cr3t")
	}
}

func redisClient(t *testing.T, addr, password string, db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, DB: db})
	t.Cleanup(func() { c.Close() })
	return c
}

// twiceConfig: 10 a minute, one token every 6 s.
const twiceConfig = "domain: twice\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"

// TestSameDescriptorTwice: a request naming one descriptor twice reports
// each status after its own hit, as envoyproxy/ratelimit does (its
// pipelined INCRBYs answer the first increment, then the sum): 9 then 8
// remaining of 10, each with its own reset. A refused request takes
// nothing, so its statuses report what is really left, and the one over
// its limit, whose bucket is full, answers a reset of one unit (the
// request's costs exceed the burst: no wait makes it pass).
func TestSameDescriptorTwice(t *testing.T) {
	for name, env := range backends(t) {
		t.Run(name, func(t *testing.T) {
			p := startRLS(t, append(env, "LIMIT_RESPONSE_HEADERS_ENABLED=true"), map[string]string{"twice.yaml": twiceConfig})
			resp := p.ask(t, "twice", d("user", "a"), d("user", "a"))
			require.Equal(t, []pb.RateLimitResponse_Code{ok, ok}, codes3(resp))
			require.Equal(t, uint32(9), resp.Statuses[0].LimitRemaining)
			require.Equal(t, uint32(8), resp.Statuses[1].LimitRemaining)
			r0, r1 := resp.Statuses[0].DurationUntilReset.AsDuration(), resp.Statuses[1].DurationUntilReset.AsDuration()
			require.True(t, r0 > 0 && r0 <= 6*time.Second, "first reset %v", r0)
			require.True(t, r1 > 6*time.Second && r1 <= 12*time.Second, "second reset %v", r1)
			require.Equal(t, "8", header(resp, "RateLimit-Remaining"))

			resp = p.ask(t, "twice", addend(d("user", "b"), 6), addend(d("user", "b"), 6))
			require.Equal(t, []pb.RateLimitResponse_Code{ok, over}, codes3(resp))
			require.Equal(t, uint32(10), resp.Statuses[0].LimitRemaining, "refused: nothing taken")
			require.Equal(t, uint32(0), resp.Statuses[1].LimitRemaining)
			require.Equal(t, time.Minute, resp.Statuses[1].DurationUntilReset.AsDuration())
			require.Equal(t, "60", header(resp, "RateLimit-Reset"))
		})
	}
}

// TestCostAboveBurst: a hits_addend above the burst is never admitted, so
// its reset is at least one unit of its rule (envoyproxy/ratelimit answers
// its window's end), never 0, which would tell a client to retry at once,
// for ever; also where the request's costs on one key exceed it.
func TestCostAboveBurst(t *testing.T) {
	for name, env := range backends(t) {
		t.Run(name, func(t *testing.T) {
			p := startRLS(t, append(env, "LIMIT_RESPONSE_HEADERS_ENABLED=true"), map[string]string{"twice.yaml": twiceConfig})
			resp := p.ask(t, "twice", addend(d("user", "c"), 11))
			require.Equal(t, over, resp.OverallCode)
			require.Equal(t, time.Minute, resp.Statuses[0].DurationUntilReset.AsDuration())
			require.Equal(t, "60", header(resp, "RateLimit-Reset"))
			// A full bucket beside it still answers 0: it holds its cost.
			resp = p.ask(t, "twice", addend(d("user", "d"), 0), addend(d("user", "c"), 11))
			require.Equal(t, []pb.RateLimitResponse_Code{ok, over}, codes3(resp))
			require.Zero(t, resp.Statuses[0].DurationUntilReset.AsDuration())
			// Costs of 3 and 8 on one key, half drained: 11 > 10, so one
			// unit, not the 30 s until full.
			require.Equal(t, ok, p.ask(t, "twice", addend(d("user", "e"), 5)).OverallCode)
			resp = p.ask(t, "twice", addend(d("user", "e"), 3), addend(d("user", "e"), 8))
			require.Equal(t, []pb.RateLimitResponse_Code{ok, over}, codes3(resp))
			require.Equal(t, time.Minute, resp.Statuses[1].DurationUntilReset.AsDuration())
			// One key under two limits: 4 of an override's 5, then the 1
			// left lacks the rule's 2; the bucket stays full, and no wait
			// changes that answer.
			od := addend(d("user", "f"), 4)
			od.Limit = &commonOverride{RequestsPerUnit: 5, Unit: ratelimit.RateLimitUnit_MINUTE}
			resp = p.ask(t, "twice", od, addend(d("user", "f"), 2))
			require.Equal(t, []pb.RateLimitResponse_Code{ok, over}, codes3(resp))
			require.Equal(t, time.Minute, resp.Statuses[1].DurationUntilReset.AsDuration())
		})
	}
}

func header(resp *pb.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

// TestAppDirectorySiblings: under envoyproxy/ratelimit's default
// RUNTIME_WATCH_ROOT=true its runtime loader reads every file under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY and keeps those whose path there, with
// "/" read as ".", starts with RUNTIME_APPDIRECTORY + ".": the files of the
// config directory, and also a config.yaml beside it (a Helm chart that
// mounts one file with subPath at $RUNTIME_ROOT/ratelimit/config.yaml
// relies on it). Such a file's rules must apply here too; with
// RUNTIME_WATCH_ROOT=false envoyproxy/ratelimit reads the config directory
// only.
func TestAppDirectorySiblings(t *testing.T) {
	const beside = `
domain: beside
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	files := map[string]string{
		"a.yaml":             "domain: a\n",
		"../config.yaml":     beside,
		"../config.d/x.yaml": "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"../other.yaml":      "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
	}
	p := startRLS(t, nil, files)
	require.Equal(t, ok, p.ask(t, "beside", d("k", "v")).OverallCode)
	require.Equal(t, over, p.ask(t, "beside", d("k", "v")).OverallCode, "config.yaml beside the config directory was not loaded")
	require.Equal(t, ok, p.ask(t, "x", d("k", "v")).OverallCode)
	require.Equal(t, over, p.ask(t, "x", d("k", "v")).OverallCode, "config.d/x.yaml was not loaded")
	require.Equal(t, ok, p.ask(t, "other", d("k", "v")).OverallCode)
	require.Equal(t, ok, p.ask(t, "other", d("k", "v")).OverallCode, "other.yaml was loaded")

	q := startRLS(t, []string{"RUNTIME_WATCH_ROOT=false"}, files)
	require.Equal(t, ok, q.ask(t, "beside", d("k", "v")).OverallCode)
	require.Equal(t, ok, q.ask(t, "beside", d("k", "v")).OverallCode, "RUNTIME_WATCH_ROOT=false read beside the config directory")
}
