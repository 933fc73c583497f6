package redisbucket

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/admit-go/admit"
	"github.com/redis/go-redis/v9"
)

// A Redis whose maxmemory-policy is not noeviction deletes keys when it
// runs short of memory (volatile-* policies those with a TTL, which is
// every key this package writes but those of rate-0 limits; allkeys-* any).
// An evicted bucket reads as an absent key, a full bucket: a drained key
// admits a whole capacity again, with no error (a review saw capacity 3
// admit 6 under volatile-lru). No failure policy can see it, so New refuses
// such a server, as it refuses a Ring, unless WithEvictionAccepted says the
// risk is known. Under noeviction a full Redis refuses the script's write
// with an OOM reply instead, which is an outage for the failure policy.

// nodePolicy is one node's maxmemory-policy.
type nodePolicy struct {
	addr, policy string
}

// checkEviction returns an error wrapping admit.ErrInvalidConfig if a node
// the transport writes to reports a maxmemory-policy other than noeviction.
// A node that cannot be asked (Redis down at New, CONFIG and INFO both
// refused, as some managed services and ACLs do) is not checked: New does
// not fail because Redis is unreachable, which the failure policy answers.
func checkEviction(ctx context.Context, tr transport) error {
	for _, np := range tr.policies(ctx) {
		if np.policy != "noeviction" {
			return fmt.Errorf("%w: Redis at %s has maxmemory-policy %q: when memory runs short it evicts keys, and an evicted bucket reads as full, so drained keys would admit again with no error; set maxmemory-policy to noeviction (a full Redis then refuses writes, an outage for the failure policy), or pass WithEvictionAccepted()",
				admit.ErrInvalidConfig, np.addr, np.policy)
		}
	}
	return nil
}

// policyFrom reads maxmemory_policy out of INFO memory's text.
func policyFrom(info string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return p, true
		}
	}
	return "", false
}

// policies asks each node go-redis writes to: the client's server, or
// every master and replica of a Cluster (a replica becomes a master on
// failover). CONFIG GET first; where CONFIG is refused (renamed, an ACL,
// a managed service), INFO memory, which reports the same.
func (g *goRedis) policies(ctx context.Context) []nodePolicy {
	ask := func(ctx context.Context, c *redis.Client) (nodePolicy, bool) {
		np := nodePolicy{addr: c.Options().Addr}
		m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if p, ok := m["maxmemory-policy"]; err == nil && ok {
			np.policy = p
			return np, true
		}
		if err != nil && !g.isReply(err) {
			return np, false // unreachable
		}
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return np, false
		}
		p, ok := policyFrom(info)
		np.policy = p
		return np, ok
	}
	switch c := g.c.(type) {
	case *redis.Client:
		if np, ok := ask(ctx, c); ok {
			return []nodePolicy{np}
		}
	case *redis.ClusterClient:
		var mu sync.Mutex
		var out []nodePolicy
		_ = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			if np, ok := ask(ctx, n); ok {
				mu.Lock()
				out = append(out, np)
				mu.Unlock()
			}
			return nil
		})
		return out
	}
	return nil
}

// policies asks every node of the rueidis client, as goRedis's does.
func (r *rueidisT) policies(ctx context.Context) []nodePolicy {
	var out []nodePolicy
	for addr, n := range r.c.Nodes() {
		m, err := n.Do(ctx, n.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		if p, ok := m["maxmemory-policy"]; err == nil && ok {
			out = append(out, nodePolicy{addr: addr, policy: p})
			continue
		}
		if err != nil && !r.isReply(err) {
			continue
		}
		info, err := n.Do(ctx, n.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			continue
		}
		if p, ok := policyFrom(info); ok {
			out = append(out, nodePolicy{addr: addr, policy: p})
		}
	}
	return out
}
