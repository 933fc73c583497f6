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

// TestMetrics: USE_PROMETHEUS serves decisions per domain and code, shadow
// mode's let-throughs, and configuration loads, on PROMETHEUS_ADDR.
func TestMetrics(t *testing.T) {
	p := startRLS(t, []string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_PATH=/m"},
		map[string]string{"e2e.yaml": e2eConfig})
	require.NotEmpty(t, p.addrs["prometheus"])
	require.Equal(t, ok, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
	require.Equal(t, over, p.ask(t, "e2e", d("plan", "basic")).OverallCode)
	require.Equal(t, ok, p.ask(t, "e2e", d("shadow", "x")).OverallCode)
	require.Equal(t, ok, p.ask(t, "e2e", d("shadow", "x")).OverallCode)
	require.Equal(t, ok, p.ask(t, "nowhere", d("plan", "basic")).OverallCode)
	require.NoError(t, os.WriteFile(filepath.Join(p.configDir, "bad.yaml"), []byte("domain: x\nnope: 1\n"), 0o644))

	want := []string{
		`admit_rls_decisions_total{code="OK",domain="e2e"} 3`,
		`admit_rls_decisions_total{code="OVER_LIMIT",domain="e2e"} 2`,
		`admit_rls_decisions_total{code="OK",domain=""} 1`,
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
		if strings.Contains(body, `result="error"`) {
			break
		}
	}
	for _, w := range want {
		require.Contains(t, body, w)
	}
}
