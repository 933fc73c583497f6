package admitotel

import (
	"fmt"
	"testing"
	"time"
)

// TestPolicyFullTakesNoLock: once maxPolicies names are counted, a
// decision under another name counts without a policy and takes no lock
// (a client may bring a new name on every call): with the wrapper's mutex
// held, it still completes.
func TestPolicyFullTakesNoLock(t *testing.T) {
	c := newCounters()
	for i := range maxPolicies {
		c.add(allowed, 1, false, fmt.Sprint("p", i))
	}
	c.mu.Lock()
	done := make(chan struct{})
	go func() {
		c.add(allowed, 1, false, "one more")
		close(done)
	}()
	select {
	case <-done:
		c.mu.Unlock()
	case <-time.After(10 * time.Second): // a deadlock guard: it takes microseconds
		c.mu.Unlock()
		<-done
		t.Fatal("a decision under a name past maxPolicies waited for the wrapper's mutex")
	}
	if n := len(*c.policies.Load()); n != maxPolicies {
		t.Fatalf("%d policies, want %d", n, maxPolicies)
	}
}
