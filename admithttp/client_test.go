package admithttp_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/admithttp"
	"github.com/admit-go/admit/buckettest"
)

// TestUnknownClient: the tier comes from the authenticated API key, not a
// header the client writes; a key the server does not know is an unknown
// client, said by wrapping admit.ErrUnknownClient, and answered 403
// Forbidden, apart from a request that does not say who sent it (no key:
// 400) or which limits apply. The limiter is never asked about either, so
// unknown keys never become buckets.
func TestUnknownClient(t *testing.T) {
	free := []admit.Limit{admit.Per(time.Second, 1).WithBurst(2).Named("burst")}
	paid := []admit.Limit{admit.Per(time.Second, 50).WithBurst(100).Named("burst")}
	accounts := map[string][]admit.Limit{"alice": free, "bob": paid}
	apiKey := admithttp.KeyByHeader("X-API-Key")
	tierOf := func(r *http.Request) ([]admit.Limit, error) {
		key, err := apiKey(r)
		if err != nil {
			return nil, err // no key: 400
		}
		if limits, ok := accounts[key]; ok {
			return limits, nil
		}
		return nil, fmt.Errorf("%w: API key sha256:%.4x", admit.ErrUnknownClient, sha256.Sum256([]byte(key)))
	}
	l := newPolicy(t, buckettest.NewFakeClock(0))
	var errs onErrors
	srv := serve(t, admithttp.Middleware(l, admithttp.WithKey(apiKey), admithttp.WithLimits(tierOf), errs.option())(ok200))
	for _, c := range []struct {
		hdr    []string
		status int
	}{
		{[]string{"X-API-Key", "alice"}, 200},
		{[]string{"X-API-Key", "bob", "X-Tier", "free"}, 200}, // a header the client writes changes nothing
		{[]string{"X-API-Key", "mallory", "X-Tier", "paid"}, 403},
		{nil, 400},
	} {
		if f := getList(t, srv, "/", c.hdr...); f.status != c.status {
			t.Errorf("%q: %d; want %d", c.hdr, f.status, c.status)
		}
	}
	got := errs.take()
	if len(got) != 2 || !errors.Is(got[0], admit.ErrUnknownClient) || errors.Is(got[1], admit.ErrUnknownClient) {
		t.Errorf("reported %v; want the unknown client's error, then the missing key's", got)
	}
	if c := l.Calls(); c != 2 {
		t.Errorf("the limiter was called %d times; want 2 (alice's and bob's)", c)
	}
	// A key function may say it too: 403 again.
	keySrv := serve(t, admithttp.Middleware(l, admithttp.WithKey(func(r *http.Request) (string, error) {
		return "", fmt.Errorf("%w: revoked", admit.ErrUnknownClient)
	}))(ok200))
	if f := getList(t, keySrv, "/"); f.status != 403 {
		t.Errorf("key function's unknown client: %d; want 403", f.status)
	}
}
