package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/rls/settings"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
)

// TestMetrics: USE_PROMETHEUS serves, on PROMETHEUS_ADDR, decisions per
// domain and result through admitotel (one per request, however many
// descriptors; an unconfigured domain counts as ""), the tokens they asked
// for (the costs of their limited descriptors), shadow mode's
// let-throughs, and configuration loads.
func TestMetrics(t *testing.T) {
	p := startRLS(t, []string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_PATH=/m"},
		map[string]string{"e2e.yaml": e2eConfig})
	require.NotEmpty(t, p.addrs["prometheus"])
	require.Equal(t, ok, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
	// Over on plan, so nothing is taken from user; it asked for 1 + 3.
	require.Equal(t, over, p.ask(t, "e2e", d("plan", "basic"), addend(d("user", "u"), 3)).OverallCode)
	require.Equal(t, ok, p.ask(t, "e2e", d("shadow", "x")).OverallCode)
	require.Equal(t, ok, p.ask(t, "e2e", d("shadow", "x")).OverallCode)
	// Unlimited and unmatched descriptors cost nothing: 2 tokens.
	require.Equal(t, ok, p.ask(t, "e2e", addend(d("user", "u"), 2), d("free", "x"), d("nothing", "y")).OverallCode)
	require.Equal(t, ok, p.ask(t, "nowhere", d("plan", "basic")).OverallCode)
	require.NoError(t, os.WriteFile(filepath.Join(p.configDir, "bad.yaml"), []byte("domain: x\nnope: 1\n"), 0o644))

	want := []string{
		`admit_decisions_total{admit_limiter="e2e",admit_result="allowed"} 4`,
		`admit_decisions_total{admit_limiter="e2e",admit_result="denied"} 2`,
		`admit_decisions_total{admit_limiter="e2e",admit_result="error"} 0`,
		`admit_tokens_total{admit_limiter="e2e",admit_result="allowed"} 5`,
		`admit_tokens_total{admit_limiter="e2e",admit_result="denied"} 5`,
		`admit_decisions_total{admit_limiter="",admit_result="allowed"} 1`,
		`admit_tokens_total{admit_limiter="",admit_result="allowed"} 0`,
		`admit_backend_errors_total{admit_limiter="e2e"} 0`,
		`admit_rls_shadow_over_limit_total{domain="e2e"} 1`,
		`admit_rls_config_loads_total{result="ok"} 1`,
		`admit_rls_config_loads_total{result="error"} 1`,
	}
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		res, err := http.Get("http://" + p.addrs["prometheus"] + "/m")
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		body = string(b)
		if strings.Contains(body, `admit_rls_config_loads_total{result="error"}`) { // the reload failed
			break
		}
	}
	for _, w := range want {
		require.Contains(t, body, w+"\n")
	}
}

// TestMetricsDomainsConcurrently: goroutines that start at once report
// decisions and store failures on domains none has seen, in the same order,
// so that several race to create each domain's metrics; a scrape of the
// served registry must then hold, once per domain, exactly what they
// reported.
func TestMetricsDomainsConcurrently(t *testing.T) {
	m, err := newMetrics(&settings.Settings{})
	require.NoError(t, err)
	defer m.close()
	const goroutines, perG = 8, 400
	domains := []string{""}
	for i := range 39 {
		domains = append(domains, fmt.Sprint("d", i))
	}
	down := fmt.Errorf("redis: %w", admit.ErrUnavailable)
	// want tallies every series the calls below should produce.
	want := map[string]int64{}
	var mu sync.Mutex
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := map[string]int64{}
			<-start
			for i := range perG {
				dom := domains[i%len(domains)]
				lim := fmt.Sprintf("admit_limiter=%q", dom)
				switch (g + i/len(domains)) % 4 {
				case 0, 1:
					m.Decided(dom, pb.RateLimitResponse_OK, 2, 0)
					mine[`admit_decisions_total{`+lim+`,admit_result="allowed"}`]++
					mine[`admit_tokens_total{`+lim+`,admit_result="allowed"}`] += 2
				case 2:
					m.Decided(dom, pb.RateLimitResponse_OVER_LIMIT, 3, 1)
					mine[`admit_decisions_total{`+lim+`,admit_result="denied"}`]++
					mine[`admit_tokens_total{`+lim+`,admit_result="denied"}`] += 3
					mine[fmt.Sprintf("admit_rls_shadow_over_limit_total{domain=%q}", dom)]++
				default:
					m.StoreFailed(dom, 1, down)
					mine[`admit_decisions_total{`+lim+`,admit_result="error"}`]++
					mine[`admit_tokens_total{`+lim+`,admit_result="error"}`]++
					mine[`admit_backend_errors_total{`+lim+`}`]++
					mine[fmt.Sprintf("admit_rls_backend_errors_total{domain=%q}", dom)]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k, v := range mine {
				want[k] += v
			}
		}()
	}
	close(start)
	wg.Wait()

	srv := httptest.NewServer(m.handler())
	defer srv.Close()
	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	got := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var v int64
		i := strings.LastIndexByte(line, ' ')
		_, err := fmt.Sscan(line[i+1:], &v)
		require.NoError(t, err, line)
		_, dup := got[line[:i]]
		require.False(t, dup, "series %s twice", line[:i])
		got[line[:i]] = v
	}
	for k, v := range want {
		require.Equal(t, v, got[k], k)
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			require.Zero(t, v, k)
		}
	}
}
