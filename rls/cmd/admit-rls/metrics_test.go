package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
