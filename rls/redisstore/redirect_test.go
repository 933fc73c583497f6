package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket/redistest"
	"github.com/admit-go/admit/rls"
	"github.com/admit-go/admit/rls/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// A Cluster whose masters disagree about a key's slot, as they do for a
// moment while a slot moves or a replica takes over: its owner has handed
// it to another master (CLUSTER SETSLOT … NODE, sent to the owner only),
// which still routes it to the owner, so each answers MOVED to the other.
// A Cluster client returns the last MOVED when it runs out of redirects
// (go-redis's MaxRedirects, rueidis's MaxMovedRedirections): an outage,
// admit.ErrUnavailable, for REDIS_FAILURE_MODE_ALLOW (it was a refusal that
// asked whether the client was a single-node one).
func TestClusterRedirectsRunOut(t *testing.T) {
	cl := redistest.NewCluster(t)
	ctx := context.Background()
	p := newPrefix()
	const key = "moving"
	cl.Disagree(t, p+key)

	gr := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	defer gr.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true,
		ClusterOption: rueidis.ClusterOption{MaxMovedRedirections: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	stores := map[string]func() (*redisstore.Store, error){
		"go-redis": func() (*redisstore.Store, error) { return redisstore.New(gr, redisstore.WithPrefix(p)) },
		"rueidis":  func() (*redisstore.Store, error) { return redisstore.NewRueidis(rc, redisstore.WithPrefix(p)) },
	}
	for name, newStore := range stores {
		s, err := newStore()
		if err != nil {
			t.Fatal(err)
		}
		h := rls.Hit{Key: key, Capacity: 5, Count: 1, Period: time.Second, N: 1}
		ok, err := s.Decide(ctx, []rls.Hit{h}, make([]rls.Result, 1))
		t.Logf("%s: %v, %v", name, ok, err)
		if ok || !errors.Is(err, admit.ErrUnavailable) || !strings.Contains(err.Error(), "MOVED") {
			t.Errorf("%s: admitted %v, %v; want an error wrapping admit.ErrUnavailable with the MOVED reply", name, ok, err)
		}
	}
}
