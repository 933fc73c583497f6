package rls_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/memstore"
	"github.com/stretchr/testify/require"
)

// TestHTTPErrors: the answers of HTTPHandler that differ from a decision,
// on a real server: a method other than POST on /json is 405 naming POST,
// a body that is not a RateLimitRequest (an unknown field included, as
// protojson refuses it in envoyproxy/ratelimit too) or above 1 MiB is 400,
// a request refused by the service is 400, no configuration is 503, and a
// failing Health is a 500 carrying its reason.
func TestHTTPErrors(t *testing.T) {
	const req = `{"domain": "d", "descriptors": [{"entries": [{"key": "user", "value": "u"}]}]}`
	do := func(h http.Handler, method, path, body string) (int, http.Header, string) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		r, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, res.Header, string(b)
	}
	h := newService(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n", rls.Options{}).HTTPHandler()

	code, hdr, body := do(h, http.MethodPost, "/json", req)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	code, hdr, _ = do(h, http.MethodGet, "/json", "")
	require.Equal(t, http.StatusMethodNotAllowed, code)
	require.Equal(t, http.MethodPost, hdr.Get("Allow"))
	for _, bad := range []string{"", `{"domain": `, strings.TrimSuffix(req, "}") + `, "bogus": 1}`,
		`{"domain": "d"}`, `{"descriptors": [{}]}`, req + strings.Repeat(" ", 1<<20)} {
		code, _, _ = do(h, http.MethodPost, "/json", bad)
		require.Equal(t, http.StatusBadRequest, code, "%.60q", bad)
	}
	code, _, _ = do(rls.New(memstore.New(), rls.Options{}).HTTPHandler(), http.MethodPost, "/json", req)
	require.Equal(t, http.StatusServiceUnavailable, code, "no configuration loaded")

	code, _, body = do(h, http.MethodGet, "/healthcheck", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "OK", body)
	sick := rls.New(memstore.New(), rls.Options{Health: func() error { return errors.New("no connection to redis is open") }})
	code, _, body = do(sick.HTTPHandler(), http.MethodGet, "/healthcheck", "")
	require.Equal(t, http.StatusInternalServerError, code)
	require.Contains(t, body, "no connection to redis is open")
}
