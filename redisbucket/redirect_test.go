package redisbucket_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/keyed"
	"github.com/admit-go/admit/redisbucket"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

const redirectPrefix = "redirect:"

// redisKey is key's name in Redis under redirectPrefix.
func redisKey(t *testing.T, key string) string {
	t.Helper()
	l, err := redisbucket.New(client(t, srv), 1, 1, redisbucket.WithPrefix(redirectPrefix))
	if err != nil {
		t.Fatal(err)
	}
	return redisbucket.RedisKey(l, key)
}

// A Cluster whose masters disagree about a slot, as they do for a moment
// while a slot moves or a replica takes over: its owner has handed it to
// another master (CLUSTER SETSLOT … NODE, sent to the owner only), which
// still routes it to the owner, so each answers MOVED to the other. A
// Cluster client follows MOVED up to its redirect limit (go-redis's
// MaxRedirects, 3 by default; rueidis's MaxMovedRedirections), then returns
// the last MOVED: Redis cannot decide now, an outage, so the failure policy
// applies (it was refused as a configuration error, and WithFailOpen and
// WithFallback never applied).
func TestClusterRedirectsRunOut(t *testing.T) {
	cl := redistest.NewCluster(t)
	ctx := context.Background()
	gr := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer gr.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true,
		ClusterOption: rueidis.ClusterOption{MaxMovedRedirections: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if rc.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("rueidis client in mode %s", rc.Mode())
	}
	const key = "moving"
	cl.Disagree(t, redisKey(t, key))

	for name, newL := range limiters(gr, rc) {
		fb, err := keyed.New(1, 0.001)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			name  string
			opt   redisbucket.Option
			allow bool
		}{
			{"fail closed", redisbucket.WithTimeout(testTimeout), false},
			{"fail open", redisbucket.WithFailOpen(), true},
			{"fallback", redisbucket.WithFallback(fb), true},
		} {
			l, err := newL(redisbucket.WithPrefix(redirectPrefix), redisbucket.WithTimeout(testTimeout), p.opt)
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.AllowN(ctx, key, 1)
			t.Logf("%s, %s: %+v, %v", name, p.name, d, err)
			if d.Allowed != p.allow || !errors.Is(err, admit.ErrUnavailable) || errors.Is(err, admit.ErrInvalidConfig) ||
				!strings.Contains(err.Error(), "MOVED") {
				t.Errorf("%s, %s: %+v, %v; want allowed %v, an error wrapping ErrUnavailable with the MOVED reply", name, p.name, d, err, p.allow)
			}
		}
		if d, err := fb.AllowN(ctx, key, 1); d.Allowed || err != nil {
			t.Errorf("%s: the fallback was not asked: %+v, %v", name, d, err)
		}
	}
}

// A Cluster client that follows no redirects (go-redis's MaxRedirects -1)
// returns MOVED or ASK for every key of a slot that moves on a healthy
// Cluster: a configuration error, as for a single-node client, not an
// outage that a fail-open policy admits on.
func TestClusterNoRedirects(t *testing.T) {
	cl := redistest.NewCluster(t)
	gr := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, MaxRedirects: -1})
	defer gr.Close()
	const key = "noredirects"
	cl.Disagree(t, redisKey(t, key))
	l, err := redisbucket.New(gr, 2, 0.001, redisbucket.WithPrefix(redirectPrefix), redisbucket.WithTimeout(testTimeout), redisbucket.WithFailOpen())
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(context.Background(), key, 1)
	if d.Allowed || !errors.Is(err, admit.ErrInvalidConfig) || errors.Is(err, admit.ErrUnavailable) {
		t.Errorf("MaxRedirects -1, fail open: %+v, %v; want refused, an error wrapping ErrInvalidConfig", d, err)
	}
}

// A single-node client on one master of a Cluster gets MOVED for every key
// of the other masters' slots: a configuration error, whatever the failure
// policy, whose message points to a Cluster client.
func TestSingleNodeOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	const key = "single"
	_, _, other := cl.Owners(t, redisKey(t, key))
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{other.Options().Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if rc.Mode() == rueidis.ClientModeCluster {
		t.Fatalf("rueidis client in mode %s", rc.Mode())
	}
	for name, newL := range limiters(other, rc) {
		fb, err := keyed.New(1, 0.001)
		if err != nil {
			t.Fatal(err)
		}
		for _, opt := range []redisbucket.Option{redisbucket.WithFailOpen(), redisbucket.WithFallback(fb)} {
			l, err := newL(redisbucket.WithPrefix(redirectPrefix), redisbucket.WithTimeout(testTimeout), opt)
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.AllowN(ctx, key, 1)
			t.Logf("%s: %+v, %v", name, d, err)
			if d.Allowed || !errors.Is(err, admit.ErrInvalidConfig) || errors.Is(err, admit.ErrUnavailable) ||
				!strings.Contains(err.Error(), "MOVED") || !strings.Contains(err.Error(), "Cluster client") {
				t.Errorf("%s: %+v, %v; want a denial wrapping ErrInvalidConfig that names MOVED and suggests a Cluster client", name, d, err)
			}
		}
		if d, err := fb.AllowN(ctx, key, 1); !d.Allowed || err != nil {
			t.Errorf("%s: the fallback was asked: %+v, %v", name, d, err)
		}
	}
}

// limiters returns constructors of limiters of 2 tokens at 0.001/s through
// the go-redis client gr and the rueidis client rc.
func limiters(gr redis.UniversalClient, rc rueidis.Client) map[string]func(...redisbucket.Option) (*redisbucket.Limiter, error) {
	return map[string]func(...redisbucket.Option) (*redisbucket.Limiter, error){
		"go-redis": func(o ...redisbucket.Option) (*redisbucket.Limiter, error) {
			return redisbucket.New(gr, 2, 0.001, o...)
		},
		"rueidis": func(o ...redisbucket.Option) (*redisbucket.Limiter, error) {
			return redisbucket.NewRueidis(rc, 2, 0.001, o...)
		},
	}
}
