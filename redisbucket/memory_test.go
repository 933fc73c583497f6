package redisbucket_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/redisbucket"
)

// heapAfterGC returns the live heap after two collections.
func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestLongKeyForm: a key of more than MaxKeyBytes bytes is held in Redis as
// "~" and its SHA-256 in hex, 65 bytes whatever its length, and is decided
// like any key (16 keys of 1 MiB were 20 MB of Redis memory before); a key
// of MaxKeyBytes is held as it is.
func TestLongKeyForm(t *testing.T) {
	c := client(t, srv)
	ctx := context.Background()
	l, err := redisbucket.New(c, 10, 1e-6, redisbucket.WithPrefix("t:longkey"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	short := strings.Repeat("s", redisbucket.MaxKeyBytes)
	if got := redisbucket.RedisKey(l, short); got != "t:longkey|"+short {
		t.Fatalf("a key of %d bytes is named %q", len(short), got)
	}
	var total int64
	for i := range 16 {
		key := strings.Repeat("k", 1<<20) + fmt.Sprint(i)
		name := redisbucket.RedisKey(l, key)
		if len(name) != len("t:longkey|")+65 || name[len("t:longkey|")] != '~' {
			t.Fatalf("a key of %d bytes is named %.40q... (%d bytes)", len(key), name, len(name))
		}
		for want := int64(9); want >= 8; want-- {
			if d, err := l.AllowN(ctx, key, 1); err != nil || !d.Allowed || d.Remaining != want {
				t.Fatalf("%+v %v; want Remaining %d", d, err, want)
			}
		}
		u, err := c.MemoryUsage(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		total += u
	}
	if total > 16*1024 {
		t.Fatalf("Redis holds %d bytes for 16 client keys", total)
	}
}

// TestCallerStringsNotKept: neither WithBatch's lease table nor the cache
// of limit sets keeps a caller's string, which may be a slice of a much
// larger one (a request's buffer): keys of 9 bytes and Names of 10 cut from
// lines of 256 KiB and 1 MiB held those lines (about 130 MiB here) before.
func TestCallerStringsNotKept(t *testing.T) {
	c := client(t, srv)
	ctx := context.Background()
	l, err := redisbucket.New(c, 100, 1, redisbucket.WithPrefix("t:pins"), redisbucket.WithTimeout(testTimeout), redisbucket.WithBatch(10, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	before := heapAfterGC()
	for i := range 512 {
		line := strings.Repeat("x", 256<<10) + fmt.Sprintf("/c-%06d", i)
		if d, err := l.AllowN(ctx, line[len(line)-9:], 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	if grown := heapAfterGC() - before; grown > 16<<20 || redisbucket.Leases(l) != 512 {
		t.Fatalf("%d leases; the heap grew %d MiB", redisbucket.Leases(l), grown>>20)
	}
	runtime.KeepAlive(l)

	p, err := redisbucket.New(c, 10, 1, redisbucket.WithPrefix("t:pins"), redisbucket.WithTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	before = heapAfterGC()
	for i := range 128 {
		line := strings.Repeat("x", 1<<20) + fmt.Sprintf("/route-%03d", i)
		if d, err := p.AllowLimits(ctx, "client", 1, admit.Limit{Name: line[len(line)-10:], Capacity: 10, Rate: 1e-6}); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	if grown := heapAfterGC() - before; grown > 16<<20 || redisbucket.Cached(p) != 128 {
		t.Fatalf("%d cached sets; the heap grew %d MiB", redisbucket.Cached(p), grown>>20)
	}
	runtime.KeepAlive(p)
}
