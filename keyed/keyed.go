// Package keyed implements per-key token buckets in one process: a separate
// bucket for every client (API key, user, IP address), with memory bounded
// under a key-spraying attack, no background goroutine, and no lock on the
// path of a call for a key already held.
//
// # Buckets
//
// Every key behaves like a mutexbucket.New(capacity, rate) created together
// with the Limiter and left untouched until the key is first seen: it starts
// full, refills lazily with the same integer arithmetic (package
// internal/refill: units of 2^-k tokens, refill V(b) − V(a) on the
// limiter's stream, no drift), and never admits more than
// capacity + rate × T (+1 for rounding) over any span T, under any number of
// goroutines.
//
// A key's bucket is one word, z: the point on the refill stream at which it
// would be empty. At elapsed time t its balance is min(Cap, V(t) − z);
// admitting u units moves z to max(z, V(t) − Cap) + u by one CAS. A bucket
// is full exactly when z <= V(t) − Cap, and a full bucket is
// indistinguishable from one never used, so forgetting a full key is exact.
// z is also the key's full-at time: the bucket is full from the instant the
// stream reaches z + Cap, and z only grows.
//
// # Time
//
// A call is decided at the latest of its clock reading, the key's time
// word (the time of its insertion or of its latest peek, n == 0) and the
// instant the stream reached z, when the bucket was last empty. Only peeks
// store their time, because every other call leaves z > V(t) − Cap for its
// t: an admission stores max(z, V(t) − Cap) + u, and a denial found
// V(t) − max(z, V(t) − Cap) < n <= Cap. A later call with an older reading
// t' therefore finds V(t') − z < V(t) − z: no more than the key held at t,
// so a stale reading adds nothing, and z never moves back. A peek at a full
// bucket changes nothing in z, so it records t instead. Sequentially this
// is mutexbucket's rule (time is the latest reading applied) wherever it
// changes a decision, and FuzzModel checks every Decision against a
// mutexbucket. Under concurrency a call whose reading lost the race to a
// later one on another core applies the older reading, which sees less of
// the stream: never more than a lock would have given.
//
// The third time is what an admission leaves behind without storing its
// time: it sets z <= V(t), so the stream reached z no later than the key's
// latest admission. A reading older than that instant would find a
// negative balance; the call applies the instant instead, where the bucket
// is exactly empty (the stream moves at most one unit per nanosecond). A
// take is denied there as at its own reading, a peek (which promises
// Allowed) is allowed, and the waits are counted from a time the key has
// seen, never inflated by the caller's staleness: a denial of n waits at
// most n/rate, a reset at most capacity/rate, rounded up to the
// nanosecond.
//
// A key not held (never seen, or removed and seen again) starts no
// earlier than the latest time its shard applied to a key it did not hold
// (one word per shard, written under the shard's lock by removals, with
// the removed key's latest time, and by peeks at keys not held, which
// store nothing else), so a stale reading cannot restart a dropped bucket
// in the past, start a bucket before a peek that found it absent, nor give
// an evicted client more than its one extra burst. A key that turns into
// a multi-limit entry (see AllowLimits) takes its latest time with it.
//
// A single-limit key's words record only a lower bound of its latest time
// (the later of its time word and the instant it was last empty), since
// admissions and denials store none. That bound is exact enough for a
// full bucket, which is what a drop removes (every call that found it not
// full came before it was full again), and for the key's own limit, whose
// empty point already records what every call took. It is not for an
// eviction, nor for a conversion to a multi-limit entry, whose new Names
// would refill over time the key had already seen. Those two read the
// clock again once the old entry takes no more calls (after the CAS that
// kills or moves it, a read ordered after that CAS: see internal/refill's
// Clock.Fresh) and apply the later of that reading and the bound. Every
// call decided on the old entry read its clock before the load or CAS
// that decided it, so on a clock that does not run backwards the second
// reading is no earlier than any time the key applied: the conversion
// decides as a lock would at the key's latest time, and the evicted key
// restarts no earlier. A clock that does run backwards (admit.Clock asks
// not to; a test's fake clock may) can make that reading earlier: the
// conversion or the restart then applies the bound, and each Name the
// conversion starts or carries over, or the evicted client, may refill
// over time the key had seen, at most one burst of its capacity. So may a
// key dropped as full: a drop decides at the time the inserting call
// applies, which such a clock can put after the key's own latest time (the
// shard's time for keys it does not hold, set at a reading later than the
// present one), and the key restarts there (TestBackwardClockDrop).
//
// RetryAfter and ResetAfter are counted from the time the call applied,
// exactly to the nanosecond at which the bucket will hold what is asked.
//
// The system clock (the default; admit.WithClock replaces it) is read
// through the processor's timestamp counter where that is safe (linux/amd64
// with an invariant counter that the kernel's clock uses too; see
// internal/tsc): 10.6 ns a reading instead of time.Since's 27–30 on the
// developers' AMD machine, a third of a call (on the Intel machine 12.4
// against 23.3 for the monotonic clock read directly: BenchmarkNow). In
// steady state a reading is never ahead of the monotonic clock and behind it
// by at most the lag internal/tsc states (under half a microsecond): it is
// what the monotonic clock read at most that long before, a stale reading,
// which as above adds nothing (the bound is kept on the readings, as with
// any clock). The one visible effect: a client that sleeps exactly
// RetryAfter may find its next reading up to that much short of the promised
// point, and be told to wait that long again. The promise rests on
// assumptions that internal/tsc states (synchronised counters, a constant
// counter rate, the kernel not slewing its clock by more than 3906 ppm); at
// every renewal of its anchor it checks that no reading was ahead, and falls
// back to the runtime's monotonic clock (what time.Since reads) for good if
// one was (by at most a span times the excess rate). Every other platform,
// and the admit_nocounter build tag, read that monotonic clock on every
// call; the admit_purego tag reads it through time.Since.
//
// # Keys
//
// Every string, the empty one included, is a key. A key of up to 64 bytes
// is held as a copy of its bytes; a longer one (a client can send a
// megabyte in a header) as a 16-byte keyed digest: the first 16 bytes of
// SHA-256(secret ‖ SHA-256(key)), under 16 secret bytes New draws from
// crypto/rand. Two long keys share a bucket only on a SHA-256 collision or
// with a chance of 2^-128 a pair (under q²/2^129 for q long keys held),
// which no client can aim at without the secret; the same holds for a
// 16-byte key that equals a long key's digest (see digest for the
// argument). So a held key costs at most 64 bytes of key, whatever the
// caller sends; digesting a long key costs time in its length, once per
// call (about 200 ns more than a short key's call at 100 bytes).
//
// # The table, without locks for a held key
//
// Keys live in power-of-two many shards picked by the high bits of a
// 64-bit hash of the key. Each shard has a mutex, an open-addressing table
// of pointers to entries (linear probing; sizes 8·2^k and 12·2^k, grown
// at a load of 3/4), one tag byte per slot (a byte of the hash, eight to
// a word; 0 marks an empty slot), and counters. An entry holds the key's
// bytes (immutable), its state word z and its time word (which also
// carries a CLOCK reference bit). A call:
//
//  1. hashes the key (a key of up to 16 bytes by two multiplies of its
//     words with secret seeds, a longer one with maphash; see hasher) and
//     probes its shard's table with atomic loads only, through the shard's
//     view (the table's size and the addresses of its tags and slots,
//     packed 32 bytes per shard in one array that stays in cache): it reads
//     the tags of the eight slots from the key's home on (two words) and
//     follows only a slot whose tag is the key's, so it dereferences no
//     other key's entry but on a tag collision (1 slot in 255);
//  2. asks the CPU to fetch the line of that entry's state word for
//     writing (PREFETCHW), reads the clock while it comes, then compares
//     the key;
//  3. if it is the key's, decides by a CAS on the state word (a denial or
//     a peek at a bucket not full writes nothing, bar the reference bit once
//     per turn of the eviction hand). That CAS is the call's linearization
//     point. No lock, no shared word written: the one line written is the
//     entry's.
//  4. Otherwise (the key is new, or the probe raced a writer) it takes the
//     shard's lock and looks again; only the lock holder inserts, removes
//     or grows, and the count of keys and the hand move under it.
//
// Steps 1 and 2 are what lets a second core add throughput. Every line a
// call reads but does not write (views, tags, slots, the clock's
// calibration) is written only by insertions, removals and clock renewals,
// so it stays shared in every core's cache. Comparing the keys of the
// other entries in its run, as the table did before its tags, read lines
// that other cores write when they call for those keys (the state word
// sits beside the key): on a machine whose cores share no cache, each such
// read is a transfer from the last writer, and the writer's next CAS
// another, which made one Limiter slower at two cores than at one where
// two Limiters were not. And a line read before it is written is fetched
// twice, shared then owned, where PREFETCHW fetches it once, owned, while
// the clock is read. docs/keyed.md lists every store a call makes.
//
// Why a lock-free probe is safe:
//
//   - A miss is never trusted (step 4 looks again under the lock), so a
//     probe that a concurrent backward-shift deletion or a grow made miss
//     (or a tag and its slot that disagree for a moment) costs a lock, not
//     a wrong answer. A hit compares the whole key.
//   - Entries are allocated per insertion and never reused: a pointer names
//     one insertion of one key (no ABA).
//   - Removal (a drop or an eviction) first CASes the state word to dead,
//     under the shard's lock, then unlinks the entry. A call's CAS on a dead
//     entry fails, and the call retries under the lock, where it no longer
//     finds the entry and inserts a fresh one. So every admission that
//     succeeded on an entry happened before its removal, and the removal's
//     CAS saw it: a drop (which CASes from a state it found full) never
//     forgets tokens taken after it looked.
//   - A grow copies the entries into a larger table and publishes it; the
//     old and new tables share the entries, so a reader on either decides
//     on the same words.
//
// # Memory
//
// The limiter holds at most WithMaxKeys keys (default DefaultMaxKeys),
// counted by one atomic word that insertions reserve and removals release,
// so eviction or refusal starts exactly at the bound, whatever the shard
// count. Full buckets go in two ways, without a goroutine:
//
//   - each insertion lets its shard's hand look at two slots and drop the
//     full buckets there, so a shard that keeps receiving new keys drops its
//     full ones in amortised O(1) per insertion;
//   - at the bound, before anything else, room is made from full buckets.
//     Each shard keeps a floor: a lower bound on the full-at time of every
//     bucket it holds (an insertion lowers it to the new bucket's, and so
//     does a carry-over to a faster rate or a smaller capacity, which moves
//     a key's full-at time earlier; otherwise z only grows, so a floor
//     stays a lower bound as calls go on). A shard whose floor is after the
//     call's time holds no full bucket; the others are swept (every full
//     bucket dropped, the floor made exact), own shard first, until one
//     drop makes room. A sweep waits for a multi-limit key that a call is
//     using rather than pass it over. So a live key is never evicted, and
//     a new key never refused, while a full bucket is held anywhere, and a
//     refusal always carries a wait above zero.
//
// Only when no bucket is full does the limiter choose, by WithPolicy:
//
//   - EvictLRU (the default) forgets a live key chosen by a CLOCK hand (a
//     second-chance approximation of least recently used: a key's bit is
//     set by each call after its first and cleared as the hand passes; the
//     hand evicts the first key whose bit it finds clear). Its client then
//     sees a fresh, full bucket: up to one extra burst of capacity for that
//     client, once per eviction, and nothing more. Stats.Evictions counts
//     them; with the bound comfortably above the number of clients active
//     within one refill period (capacity/rate), there are none.
//   - RefuseNew keeps every live bucket and refuses the new key: Allowed is
//     false and the error wraps admit.ErrUnavailable, with RetryAfter until
//     the first held bucket is full (the least floor, exact for every shard
//     just swept). A refused key that waits exactly that long finds that
//     bucket full and dropped, so it finds room, unless new keys took the
//     room first or that bucket's own client spent from it meanwhile (peeks
//     and denied calls do not move a full-at time). No client ever exceeds
//     its bound, but under a key-spraying attack new legitimate clients are
//     refused until the attack's buckets refill. Stats.Refusals counts them.
//
// A sweep costs O(keys in the shard), and it runs only when its shard's
// floor has passed; one that finds nothing full (the bucket that set the
// floor was spent from since) raises the floor to the exact one, so it
// runs again only once time passes that. Memory is held at the peak: a
// shard's table does not shrink when keys are dropped.
//
// # Cost
//
// A held single-limit key costs one allocation, its 32-byte entry with its
// key's form (at most 64 bytes) beside it: 48 bytes for a key of up to 16
// bytes, 96 at most; and its share of its shard's table, 9 bytes a slot
// (a pointer and a tag), a table holding at most twice the keys its shard
// held at its peak (tables grow by 3/2 or 4/3 at a load of 3/4 and do not
// shrink): at most 120 bytes a key in all, and about 12 to 18 of them the
// table's at their peak (the secret hash spreads keys evenly over the
// shards). Measured at 2^20 held keys of 16 bytes: 61.6 heap bytes a key,
// the key's copy and the tables' slack included.
//
// A multi-limit key costs a 168-byte entry with its key instead (192 to
// 240 bytes with the allocator's rounding), holding up to 3 limit Names;
// past 3, its limit states move to an array that grows by doubling up to
// MaxNames states (2 KB, 2.25 with the allocator's header). Each Name it
// holds points to its limit's arithmetic and a copy of its Name (at most
// 208 bytes), which every key and call with the same limit share: a
// server whose limits are a fixed set pays for them once, one whose Names
// come from requests at most 208 bytes a Name. So a multi-limit key costs
// at most 15 856 bytes with MaxNames Names of 128 bytes, no two keys
// sharing a limit, and its share of the table.
//
// Each shard costs 160 bytes (its lock, counters and view) from New on,
// and its first table (136 bytes) once it holds a key, however few keys
// share it; the Limiter itself about 2.7 KB, and its cache of the limits
// calls bring at most 256 of them (53 KB) besides those keys hold. So
// WithMaxKeys(n) and WithShards(s) bound the heap at
// 120·n + 296·s bytes for single-limit keys (TestBytesBound), with
// 15 856 + 24 per multi-limit key instead of 120: the default 256 shards
// add 76 KB, and WithShards(65536) at n = 2^16 keys 19 MB (10.5 of them
// before any key: 294 bytes a key measured, where the default's is 63).
//
// A call on a held key allocates nothing; it reads the clock once (see
// Time), hashes the key once, and does one CAS. See docs/keyed.md and the
// README for measured numbers.
//
// Pick keyed for per-client limits in one process; pick the redisbucket
// module when several processes must share the limits, and mutexbucket or
// shardedbucket for one limit shared by all.
package keyed

import (
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/admit-go/admit"
	"github.com/admit-go/admit/internal/refill"
)

// Limiter is a set of token buckets, one per key. It is safe for concurrent
// use. The zero value is not usable; create one with New or NewLimits. A
// Limiter must not be copied after first use.
type Limiter struct {
	_       noCopy
	shards  []shard
	views   []view // views[i] is shards[i]'s table for lock-free readers; see view
	shift   uint   // a key's shard is its hash's top bits: (hash >> 1) >> shift (shardIndex)
	hshift  uint   // log2 of the shard count: hash << hshift is the hash's bits below the shard's (hx)
	hasher  hasher
	dsecret [16]byte      // a long key's digest's secret (digest)
	p       refill.Params // the primary limit's arithmetic; immutable after New
	clk     refill.Clock  // immutable after New
	unit    int64         // p.Units(1)
	test    *hooks        // nil outside tests; set before the limiter is used

	capacity int64         // the primary limit's capacity, in tokens
	name     string        // the primary limit's Name (a field, so that AllowN reads it without a bounds check)
	limits   []admit.Limit // the configured limits (NewLimits); immutable
	lps      []*limParams  // their arithmetic
	prim     bool          // one configured limit, the primary: its state is an entry's word
	maxKeys  int
	refuse   bool
	errFull  error // returned on every refusal; built once so that refusals do not allocate
	// pcache is written when a limit misses it (params): it comes after
	// every field a call only reads, a line away from them, so that those
	// writes never take a line the calls read.
	_      [64]byte
	pcache [paramsCache]atomic.Pointer[limParams]

	_    [64]byte     // keys is written by insertions and removals only, away from the fields every call reads
	keys atomic.Int64 // keys held or reserved by an insertion in progress; at most maxKeys
	_    [56]byte
}

var _ admit.KeyedLimiter = (*Limiter)(nil)

// noCopy makes go vet's copylocks check flag copies of a Limiter.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// never is the RetryAfter or ResetAfter of a bucket that will never hold
// what is asked: a zero rate, or a wait past the clock's horizon.
const never = time.Duration(math.MaxInt64)

// DefaultMaxKeys is the key bound without WithMaxKeys: 2^20 keys, about
// 65 MB of heap at the measured 61.6 bytes per single-limit key of 16
// bytes, and at most about 126 MB with keys of 64 bytes or more (120 bytes
// a key and 296 a shard; multi-limit keys cost more: see Cost in the
// package doc).
const DefaultMaxKeys = 1 << 20

// defaultShards is the shard count without WithShards, lowered so that the
// shards hold at least minPerShard keys each on average at the bound.
const (
	defaultShards = 256
	minPerShard   = 64
	maxShards     = 1 << 16
)

// New returns a limiter whose every key holds a bucket of capacity tokens
// refilling at refillPerSecond tokens per second (burst first, as every
// bucket's New; rate.NewLimiter alone keeps x/time/rate's (rate, burst)):
// NewLimits with the one limit {Name: "", Capacity: capacity, Rate:
// refillPerSecond}. It returns an error wrapping admit.ErrInvalidConfig for
// a capacity below 1, a rate that is negative, NaN or infinite, one the
// buckets cannot represent (above 1e9/s, or too small for the capacity), or
// an invalid option; every capacity in [1, 1e9] and every rate 0 or in
// [1e-6, 1e9] is accepted. Options: admit.WithClock, WithMaxKeys,
// WithPolicy, WithShards.
func New(capacity int64, refillPerSecond float64, opts ...admit.Option) (*Limiter, error) {
	return NewLimits([]admit.Limit{{Capacity: capacity, Rate: refillPerSecond}}, opts...)
}

// NewLimits returns a limiter whose Allow and AllowN apply every one of
// limits to the key, all or nothing, as AllowLimits(ctx, key, n,
// limits...) does. The limits must pass admit.ValidateLimits and be
// representable (see New); the error wraps admit.ErrInvalidConfig and names
// the bad value. With one limit, a held key's call is one CAS on one word;
// with several, it takes the key's own lock (see PolicyLimiter's doc on
// AllowLimits). The options are New's.
func NewLimits(limits []admit.Limit, opts ...admit.Option) (*Limiter, error) {
	cfg, err := admit.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := validateLimits(limits); err != nil {
		return nil, err
	}
	lps := make([]*limParams, len(limits))
	own := make([]admit.Limit, len(limits)) // with the copies of the Names
	for i := range limits {
		lp, err := newLimParams(&limits[i])
		if err != nil {
			return nil, err
		}
		lps[i] = lp
		own[i] = limits[i]
		own[i].Name = lp.name
	}
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	n := cfg.Shards
	switch {
	case n == 0:
		n = defaultShards
		for n > 1 && n*minPerShard > maxKeys {
			n >>= 1
		}
	case n > maxKeys:
		return nil, fmt.Errorf("%w: WithShards(%d) exceeds the key bound %d", admit.ErrInvalidConfig, n, maxKeys)
	}
	l := &Limiter{
		shards: make([]shard, n),
		views:  make([]view, n),
		shift:  uint(63 - bits.TrailingZeros(uint(n))),
		hshift: uint(bits.TrailingZeros(uint(n))),
		hasher: newHasher(),

		p:        lps[0].p,
		clk:      refill.NewCounterClock(cfg.Clock),
		unit:     lps[0].p.Units(1),
		capacity: limits[0].Capacity,
		name:     lps[0].name,
		limits:   own,
		lps:      lps,
		prim:     len(limits) == 1,
		maxKeys:  maxKeys,
		refuse:   Policy(cfg.KeyPolicy) == RefuseNew,
	}
	cryptorand.Read(l.dsecret[:]) // never fails (it crashes the program if the system's source does)
	l.errFull = fmt.Errorf("%w: keyed: no room for a new key: the limiter holds WithMaxKeys(%d) live buckets (RefuseNew)", admit.ErrUnavailable, maxKeys)
	for i := range l.shards {
		l.shards[i].floor.Store(math.MaxInt64)
	}
	for _, lp := range lps {
		l.pcache[l.paramsSlot(lp.name, lp.capacity, lp.rate)].Store(lp)
	}
	return l, nil
}

// Limits returns a copy of the limits Allow and AllowN apply (New's one
// limit, or NewLimits' limits).
func (l *Limiter) Limits() []admit.Limit { return append([]admit.Limit(nil), l.limits...) }

// hash is the 64-bit hash of a key's form: its high bits pick the shard,
// its low bits the key's home in the shard's table.
func (l *Limiter) hash(form string) uint64 { return l.hasher.sum(form) }

// shardIndex returns the index of the shard of the key whose hash is h: its
// top log2(shards) bits. The shift is split in two so that one shard (a
// shift of 64, which Go defines as giving 0) needs no special case, and
// both counts are below 64 without a check.
func (l *Limiter) shardIndex(h uint64) uint64 { return h >> 1 >> (l.shift & 63) }

// hx returns h shifted left past its shard bits: what home reduces to a
// slot (see table).
func (l *Limiter) hx(h uint64) uint64 { return h << (l.hshift & 63) }

// shardOf returns the index of key's shard.
func (l *Limiter) shardOf(key string) int {
	var buf [digestBytes]byte
	return int(l.shardIndex(l.hash(l.form(key, &buf))))
}

// Allow reports whether one token was taken from key's bucket (from each of
// its limits): AllowN(ctx, key, 1).Allowed, without a context. It never
// blocks.
func (l *Limiter) Allow(key string) bool {
	t := int64(-1)
	if l.prim {
		o := l.decide(key, l.unit)
		if o.kind != multi {
			return o.kind == allowed
		}
		t = o.t
	}
	var d admit.Decision
	_ = l.allowLimits(&d, key, 1, l.limits, true, t)
	return d.Allowed
}

// AllowN takes n tokens from key's bucket if it holds them, creating the
// bucket full if key is not held, and returns the decision; it never blocks
// and does not consult ctx. Every string, the empty one included, is an
// ordinary key. A limiter from NewLimits takes n from each of its limits,
// all or nothing, and decides as AllowLimits does.
//
// n == 0 is a peek: Allowed is true and nothing is consumed. n < 0 or n
// above the capacity returns Allowed == false and an error wrapping
// admit.ErrUnsatisfiable, and touches no bucket. Under RefuseNew, a new key
// that finds no room returns Allowed == false and an error wrapping
// admit.ErrUnavailable, with RetryAfter and ResetAfter the time until the
// first held bucket is full and can be dropped (see the package doc).
//
// Decision.RetryAfter (denied) and Decision.ResetAfter are exact, counted
// from the time the call applied: the bucket holds n tokens, or is full,
// after exactly that long and not a nanosecond before, unless other calls
// take from it meanwhile. A wait that will never end (a zero rate, or past
// the clock's horizon of about 146 years) is reported as the largest
// time.Duration. Decision.Policy is the limit's Name.
func (l *Limiter) AllowN(_ context.Context, key string, n int64) (d admit.Decision, err error) {
	err = l.allowN(&d, key, n)
	return
}

// AllowNInto is AllowN writing its Decision into *d (which it overwrites
// whole) instead of returning it. It is for wrappers, such as admitotel's:
// a Decision returned through one more function is copied through memory
// by the Go compiler (six fields are too many to stay in registers), which
// costs about 10 ns a call on amd64 (measured; see docs/metrics.md); a
// wrapper that passes its own result's address down copies nothing. d must
// not be nil.
func (l *Limiter) AllowNInto(d *admit.Decision, key string, n int64) error {
	return l.allowN(d, key, n) // one call, so that this inlines into the wrapper
}

// allowN is AllowN's body.
func (l *Limiter) allowN(d *admit.Decision, key string, n int64) error {
	if !l.prim {
		return l.allowLimits(d, key, n, l.limits, true, -1)
	}
	return l.allowPrimary(d, key, n)
}

// allowPrimary is AllowN for a limiter with one limit. It writes every
// field of *d.
//
// Every function that builds a Decision here writes it through a pointer
// to the caller's result: a Decision returned from a call and returned
// again is copied through the stack with wide loads of narrow stores,
// which defeats store-to-load forwarding (about 10 ns each time on the
// project's machine).
func (l *Limiter) allowPrimary(d *admit.Decision, key string, n int64) error {
	name := l.name
	if n < 0 || n > l.capacity {
		setDecision(d, false, l.capacity, 0, 0, 0, name)
		return fmt.Errorf("%w: n=%d is outside [0, capacity %d]", admit.ErrUnsatisfiable, n, l.capacity)
	}
	need := l.p.Units(n)
	o := l.decide(key, need)
	if o.kind == multi {
		return l.allowLimits(d, key, n, l.limits, true, o.t)
	}
	if o.kind == refused {
		w := l.until(o.t, o.z)
		setDecision(d, false, l.capacity, 0, w, w, name)
		return l.errFull
	}
	// The clamp at 0: a call whose reading raced a later one may see the
	// stream before z.
	var reset, retry time.Duration
	if o.z > o.v-l.p.Cap { // not full
		reset = l.after(o.t, o.z+l.p.Cap)
	}
	if o.kind != allowed {
		retry = l.after(o.t, o.z+need)
	}
	setDecision(d, o.kind == allowed, l.capacity, max(o.v-o.z, 0)>>l.p.Shift, retry, reset, name)
	return nil
}

// outcome is what one call did, for the Decision built after it. It has
// four fields, the most the compiler keeps in registers (a struct of more
// is spilled to the stack and copied on every return: about a tenth of a
// held-key Allow, store-forwarding stalls on its bool fields).
type outcome struct {
	t, v int64 // the elapsed time of the call's reading and V(t); for multi, the reading
	z    int64 // the key's empty point after the call, clamped to v − Cap; for a refusal, the elapsed time at which room comes
	kind kind
}

// kind is how a call ended.
type kind uint8

const (
	denied  kind = iota
	allowed      // the tokens were taken (or a peek)
	refused      // a new key found no room (RefuseNew)
	multi        // the key holds several limits: decide with allowLimits
)

// decide runs one call: need units, 0 <= need <= Cap, from key's bucket.
//
// The hot path, for a held key: hash, probe the shard's tags and slots
// without a lock, prefetch the line of the entry's state word for writing,
// read the clock, compare the key, and decide on the state word with one
// CAS (take). Anything else (a key not found, an entry removed meanwhile)
// goes to slow, under the shard's lock.
func (l *Limiter) decide(key string, need int64) outcome {
	if len(key) > maxKeyBytes {
		var buf [digestBytes]byte
		key = l.digest(key, &buf) // its form (see form), here without a call for a short key
	}
	h := l.hash(key)
	// The first entry whose tag matches, almost always the key's own, is found
	// from the tags and slots alone, and the line of its state word is fetched
	// for writing before anything on it is read: a load first would bring the
	// line in shared, and the CAS would then need a second transfer to own it.
	// (The state word's line, not the entry's first: an entry with a key of up
	// to 16 bytes is 48, so a quarter of them start 48 bytes into a line, and
	// their st and at lie in the next one; st and at, 16 bytes at offset 16 of
	// a 16-byte-aligned object, never straddle two lines.) The clock is read
	// while the line comes (the counter's read does not wait for a prefetch),
	// and the key is compared after. The common case, a match among the eight
	// slots from the home one on before any empty slot, is written out here (a
	// call would cost more than it does); the rest (a longer run, a miss, a
	// slot in flux) is probe's.
	var e *entry
	v := &l.views[l.shardIndex(h)]
	if n := v.n.Load(); n != 0 {
		hx, tg := l.hx(h), tagOf(h)
		tags, slots := v.tags.Load(), v.slots.Load()
		i := home(hx, n)
		// The home slot is loaded before the tags, not after them, so that
		// on a large table its line and the tags' line are fetched at once
		// rather than one after the other: the key is usually in it (a tag
		// match at m = 0). Read first, it may be older than the tags; that
		// is safe, as any slot value is by the time the entry is used: a
		// nil sends the call to probe, another key's entry to find, and
		// the entry's own words decide whether it is still live.
		home0 := slotAt(slots, i).Load()
		// The home slot's tag first: when it is the key's (the common
		// case), the slot is the first tag match and the SWAR search below
		// would find m = 0; comparing one byte shortens the chain before
		// the entry. Otherwise the tags of slots i to i+7, from i's word and
		// the next one (the first after the last), in the low bytes first.
		// firstZero's lowest flag is exact, which is all this needs.
		g, sh := i/8, i%8*8
		w0 := tagAt(tags, g).Load()
		if uint8(w0>>sh) == uint8(tg) {
			e = home0
		} else {
			g2 := g + 1
			if g2*8 == n {
				g2 = 0
			}
			w := w0>>sh | tagAt(tags, g2).Load()<<(64-sh)
			if m := uint64(bits.TrailingZeros64(firstZero(w ^ tg*lsb))); m < uint64(bits.TrailingZeros64(firstZero(w))) {
				j := i + m/8
				if j >= n {
					j -= n
				}
				e = slotAt(slots, j).Load()
			}
		}
		if e == nil {
			e = probe(n, tags, slots, hx, tg, "", true, l.test)
		}
		if e != nil {
			prefetchw(unsafe.Pointer(&e.st))
		}
	}
	t := l.clk.Now()
	if e != nil {
		same := false
		switch k := e.key; {
		case len(k) != len(key):
		case uint(len(key)-8) <= 8: // 8 to 16 bytes
			same = sameShort(k, key)
		default:
			same = k == key
		}
		if !same {
			l.test.collision()
			e = l.views[l.shardIndex(h)].find(l.hx(h), tagOf(h), key, l.test) // a tag collision: the key's entry, if any, is further on
		}
	}
	if e != nil {
		// take's admission, written out here so that the common call is
		// one function: the key's time word is not after t (no peek from
		// the future), the reference bit is set, and the CAS wins.
		a := e.at.Load()
		if st := e.st.Load(); st < multiTag && need > 0 && a&refBit != 0 && int64(a&^refBit) <= t {
			v := l.p.V(t)
			z := max(dec(st), v-l.p.Cap)
			if v-z >= need && e.st.CompareAndSwap(st, enc(z+need)) {
				return outcome{t: t, v: v, z: z + need, kind: allowed}
			}
		}
		if o, live := l.take(e, t, need); live {
			return o
		}
		if e.st.Load() == multiTag {
			return outcome{t: t, kind: multi}
		}
	}
	return l.slow(&l.shards[l.shardIndex(h)], key, h, need, t)
}

// take decides need units on e's bucket and reports false (live) if e is
// no longer in its table or its state lives elsewhere (dead, moved): the
// caller must look the key up again under the lock.
//
// Linearizable: the decision is the CAS that stores it, or for a denial or
// a peek the load it read. The call is decided at elapsed time
// max(t, e's peek time); the new empty point is max(z, V(t) − Cap) + need,
// so z never decreases. See "Time" in the package doc for why a stale
// reading adds nothing and why only peeks store their time.
func (l *Limiter) take(e *entry, t, need int64) (outcome, bool) {
	a := e.at.Load()
	t = max(t, int64(a&^refBit))
	for {
		s := e.st.Load()
		if s >= multiTag {
			return outcome{}, false
		}
		tk, v := l.keyTime(t, dec(s))
		z := max(dec(s), v-l.p.Cap)
		ok := v-z >= need
		if ok && need > 0 {
			if !e.st.CompareAndSwap(s, enc(z+need)) {
				continue
			}
			z += need
		}
		if need == 0 {
			e.touch(a, tk)
		} else if a&refBit == 0 {
			// The CLOCK bit: one write per turn of the eviction hand, not
			// per call. Losing the CAS is fine: the winner set it, or
			// stored a later peek time with it.
			e.at.CompareAndSwap(a, a|refBit)
		}
		o := outcome{t: tk, v: v, z: z}
		if ok {
			o.kind = allowed
		}
		return o, true
	}
}

// keyTime returns the elapsed time a call decides at and V there: t, or,
// when the key's empty point z is past V(t), the instant the stream reached
// z. Every admission leaves z <= V of its own time, so that instant is no
// later than the key's latest admission: a call whose reading is older
// (it lost a race to a later one) applies it, which sees exactly an empty
// bucket (the stream moves at most one unit per ns, so V there is z): a
// peek is allowed, a take of n > 0 denied, as at the older reading, and
// the waits are counted from a time the key has seen, never inflated by
// the caller's staleness (at most n/rate for n tokens).
func (l *Limiter) keyTime(t, z int64) (int64, int64) {
	v := l.p.V(t)
	if z > v {
		t = l.p.Reach(t, z)
		v = l.p.V(t)
	}
	return t, v
}

// retiredTime returns the latest elapsed time a single-limit entry has
// seen, or a lower bound of it, once the caller's CAS of its state word
// (from s, below multiTag, to moved or dead) has stopped it deciding
// calls; a is its time word, loaded after that CAS. The entry's words
// record only a lower bound (the time word: insertion, peeks; and the
// instant the stream reached its empty point, no later than its latest
// admission), as admissions and denials store no time, which keeps them
// to one CAS. So it also reads the clock (Clock.Fresh, ordered after the
// CAS): every call decided on the entry read its clock before the load or
// CAS that decided it, which precedes the caller's CAS, so on a clock that
// does not run backwards that reading is no earlier than any of theirs. On
// a clock that does run backwards (which admit.Clock asks not to) the
// words' bound is what holds.
func (l *Limiter) retiredTime(a, s uint64) int64 {
	return max(int64(a&^refBit), l.p.Reach(0, dec(s)), l.clk.Fresh())
}

// slow decides for a key the lock-free probe did not find live: under the
// shard's lock it looks again (the probe may have raced a grow or a
// shift), decides on the entry if there is one, and otherwise stores a new
// full bucket, making room first if the limiter holds maxKeys keys.
func (l *Limiter) slow(s *shard, key string, h uint64, need, t int64) outcome {
	for {
		s.mu.Lock()
		if tb := s.tab.Load(); tb != nil {
			if e := tb.find(l.hx(h), tagOf(h), key, l.test); e != nil {
				// Not dead nor moved: removals and replacements hold this
				// lock from their CAS to their unlink.
				o, live := l.take(e, t, need)
				s.mu.Unlock()
				if live {
					return o
				}
				return outcome{t: t, kind: multi}
			}
		}
		// A new bucket starts no earlier than the latest time applied to a
		// key of this shard it does not hold, so that a key dropped and
		// seen again with an older reading finds no more than it left (see
		// shardState.absentAt).
		t := max(t, s.absentAt)
		v := l.p.V(t)
		full := v - l.p.Cap
		if need == 0 {
			// A peek at a key not held: a full bucket, and nothing to store
			// but its time, so that a later call with an older reading does
			// not create the bucket before it.
			s.absentAt = t
			s.mu.Unlock()
			return outcome{t: t, v: v, z: full, kind: allowed}
		}
		if l.reserve() {
			if t2 := s.handBefore(l, t); t2 != t {
				t, v = t2, l.p.V(t2)
			}
			z := v - l.p.Cap + need // need <= Cap: a new bucket always has it
			s.insert(l, newEntry(key, z, t), h, l.p.Reach(t, z+l.p.Cap))
			s.mu.Unlock()
			return outcome{t: t, v: v, z: z, kind: allowed}
		}
		s.mu.Unlock()
		if at, ok := l.makeRoom(int(l.shardIndex(h)), t); !ok {
			s.mu.Lock()
			s.refusals++
			s.mu.Unlock()
			return outcome{t: t, z: at, kind: refused}
		}
	}
}

// drop removes e if its bucket is full at t (exact: a full bucket equals
// an absent one), and reports whether it did. The CAS fails if a call took
// from the bucket meanwhile. The caller holds e's shard's lock and unlinks
// e after.
func (l *Limiter) drop(e *entry, t int64) bool {
	full := l.p.V(t) - l.p.Cap
	for {
		s := e.st.Load()
		if s == multiTag {
			return l.dropMulti(asMulti(e), t)
		}
		if s >= multiTag || dec(s) > full {
			return false
		}
		if e.st.CompareAndSwap(s, dead) {
			return true
		}
	}
}

// kill marks e dead for an eviction if its state is still s, and reports
// whether it did. The caller holds e's shard's lock and unlinks e after.
func (l *Limiter) kill(e *entry, s uint64) bool {
	if s == multiTag {
		return l.killMulti(asMulti(e))
	}
	return e.st.CompareAndSwap(s, dead)
}

// fullAt returns the elapsed time at which e's bucket is full, as of now
// (later calls can only move it later).
func (l *Limiter) fullAt(e *entry) int64 {
	s := e.st.Load()
	if s == multiTag {
		return l.fullAtMulti(asMulti(e))
	}
	if s >= multiTag {
		return 0
	}
	return l.p.Reach(0, dec(s)+l.p.Cap)
}

// after returns how long from elapsed time t until the stream reaches v.
func (l *Limiter) after(t, v int64) time.Duration {
	return l.until(t, l.p.Reach(t, v))
}

// until returns how long from elapsed time t until elapsed time at, never
// for a time past the horizon.
func (l *Limiter) until(t, at int64) time.Duration {
	if at > refill.Horizon {
		return never
	}
	return time.Duration(max(at-t, 0))
}

// Len returns the number of keys held now. Keys whose buckets are full but
// not yet dropped are counted. It is one atomic load: the count the bound
// is enforced on, never above WithMaxKeys.
func (l *Limiter) Len() int { return int(l.keys.Load()) }

// setDecision writes every field of *d with one store each: assigning a
// composite literal to *d builds it on the stack and copies it with wide
// loads of the narrow stores just made, the copy every Decision-building
// function here avoids (see allowPrimary).
func setDecision(d *admit.Decision, allowed bool, limit, remaining int64, retry, reset time.Duration, policy string) {
	d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter, d.Policy = allowed, limit, remaining, retry, reset, policy
}
