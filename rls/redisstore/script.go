package redisstore

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// src decides a request's buckets in one atomic step on one Redis node.
//
// KEYS are the buckets; ARGV holds nine values per key: capU (capacity in
// units), per (units per token), m (units refilled per tick, 0 for none), q
// (microseconds per tick), n (tokens asked: 0 checks, a negative n gives
// tokens back), shadow (1 when the key may lack n without refusing), sig,
// the four parameters as "capU:per:m:q", and, for a give-back only, d1 and
// t1: the debt the take left and its tick.
//
// A give-back returns what the take still accounts for: refill alone
// would have brought the debt d1 down to left = max(0, d1 − m·(now − t1))
// by now, and whatever else happened since only added debt, so the take's
// -n·per units are still distinguishable from a full bucket only up to
// left. Returning min(-n·per, left) restores the bucket the request would
// have left had it not taken, or less (when the bucket was within the
// round trip's refill of full); returning all -n·per could lift a bucket
// that a refill had filled, and someone had drained since, above its bound.
// A bucket whose parameters changed since is given nothing back.
//
// A bucket is stored as the string "d t sig": its debt d (capacity minus
// balance, in units) as of tick t of the server clock (TIME), and the
// parameters it was written with (compared as a string, parsed only when
// they differ: the common case costs two string.find). An absent key has no
// debt: a full bucket. Debt shrinks by m units per tick; a clock reading
// at or before t refills nothing and never moves t back. Every number is
// an integer below 2^53 (the Go side checks capU + 2·m < 2^53 and n ≤
// capacity), so Lua's doubles hold them exactly; the refill computes dt·m
// only for dt ≤ ⌈d/m⌉, so the product stays below d + m.
//
// A key whose stored parameters differ (a changed rule or override) is
// carried over: refilled under the old ones, its whole tokens kept and
// clamped to the new capacity.
//
// All or nothing: every key is read and refilled, then each hit takes its
// n from the running balance (so two hits of one key take both) or, if it
// lacks them and is not shadow, refuses the request. Only when the request
// is admitted are changed buckets written back (SET with PX until the
// bucket is full again, or DEL when it is full); a refused request writes
// nothing. The script runs atomically, so no other request sees a state
// in between.
//
// It returns {admitted, then per hit: ok, remaining, reset, sub, d, t}:
// remaining in whole tokens after the decision, reset the ticks from the
// current tick's start until the bucket is full (0 when full, -1 never),
// sub the microseconds already gone of the current tick, d and t the
// bucket's debt and tick after the decision (a give-back's d1 and t1).
const src = `
local function idiv(a, b)
  local r = math.floor(a / b)
  if r * b > a then r = r - 1 elseif (r + 1) * b <= a then r = r + 1 end
  return r
end
local function cdiv(a, b) return idiv(a + b - 1, b) end
local function refill(d, t, m, now)
  if now > t then
    if m > 0 then
      local dt = now - t
      if dt > cdiv(d, m) then d = 0 else d = math.max(0, d - dt * m) end
    end
    t = now
  end
  return d, t
end
local tm = redis.call('TIME')
local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local st, okv, all = {}, {}, 1
for i = 1, #KEYS do
  local b = (i - 1) * 9
  local capU, per, m, q = tonumber(ARGV[b+1]), tonumber(ARGV[b+2]), tonumber(ARGV[b+3]), tonumber(ARGV[b+4])
  local n, shadow, sig = tonumber(ARGV[b+5]), ARGV[b+6] == '1', ARGV[b+7]
  local k = KEYS[i]
  local s = st[k]
  if not s then
    local now = idiv(us, q)
    s = {d = 0, t = now, capU = capU, per = per, m = m, q = q, sig = sig, now = now, sub = us - now * q}
    local v = redis.call('GET', k)
    if v then
      local a = string.find(v, ' ', 1, true)
      local c = string.find(v, ' ', a + 1, true)
      local d, t = tonumber(string.sub(v, 1, a - 1)), tonumber(string.sub(v, a + 1, c - 1))
      local vsig = string.sub(v, c + 1)
      if vsig == sig then
        s.d, s.t = refill(d, t, m, now)
      else
        local f = {}
        for w in string.gmatch(vsig, '%d+') do f[#f + 1] = tonumber(w) end
        d = refill(d, t, f[3], idiv(us, f[4]))
        local whole = math.min(idiv(f[1] - d, f[2]), idiv(capU, per))
        s.d, s.dirty, s.carried = capU - whole * per, true, true
      end
    end
    s.d0 = s.d
    st[k] = s
  end
  local ok = 0
  if n < 0 then
    ok = 1
    if not s.carried then
      local left = refill(tonumber(ARGV[b+8]), tonumber(ARGV[b+9]), s.m, s.now)
      s.d, s.dirty = math.max(0, s.d - math.min(-n * s.per, left)), true
    end
  elseif n * s.per <= s.capU - s.d then
    ok = 1
    if n > 0 then s.d, s.dirty = s.d + n * s.per, true end
  elseif not shadow then
    all = 0
  end
  okv[i] = ok
end
if all == 1 then
  for k, s in pairs(st) do
    if s.dirty then
      if s.d == 0 then
        redis.call('DEL', k)
      else
        local v = string.format('%d %d ', s.d, s.t) .. s.sig
        local full = 0
        if s.m > 0 then full = s.t - s.now + cdiv(s.d, s.m) end
        if s.m > 0 and full < 1125899906842624 / s.q then
          redis.call('SET', k, v, 'PX', string.format('%d', cdiv(full * s.q - s.sub, 1000)))
        else
          redis.call('SET', k, v)
        end
      end
    end
  end
else
  for _, s in pairs(st) do s.d = s.d0 end
end
local out = {all}
for i = 1, #KEYS do
  local s = st[KEYS[i]]
  local reset = 0
  if s.d > 0 then
    if s.m > 0 then reset = s.t - s.now + cdiv(s.d, s.m) else reset = -1 end
  end
  out[#out + 1] = okv[i]
  out[#out + 1] = idiv(s.capU - s.d, s.per)
  out[#out + 1] = reset
  out[#out + 1] = s.sub
  out[#out + 1] = s.d
  out[#out + 1] = s.t
end
return out
`

// script and rueidisScript run src with EVALSHA, and EVAL (which loads it)
// on NOSCRIPT, through go-redis and rueidis.
var (
	script        = redis.NewScript(src)
	rueidisScript = rueidis.NewLuaScript(src)
)
