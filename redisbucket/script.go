package redisbucket

import "github.com/redis/go-redis/v9"

// src is the one script every decision runs, atomically, on the node that
// owns the key.
//
// The key holds a string of one record per limit; this version writes one,
// named "": "<len(name)>:<name> <cap> <per> <m> <q> <d> <t>" (records for
// several named limits on one key would be joined by newlines). The
// parameters, cap (capacity in units), per (units per token), m (units per
// tick) and q (µs per tick), are the limiter's own, so that a limiter with
// other parameters on the same key is detected rather than misreading the
// debt: the script compares the stored head "0: cap per m q " with ARGV[7]
// and, when they differ, returns an ADMITPARAMS error reply with the stored
// value and writes nothing. d is the bucket's debt, capacity minus balance,
// in units, as of t, the server time in ticks of q microseconds at which it
// was last written. Debt shrinks by m units per tick of server time; an
// absent key has no debt (a full bucket). Refill happens at whole ticks, so
// a reading inside a tick counts only up to its start, and an admission
// inside a tick is booked at the tick's end (t = now+1): the next boundary,
// a part of a tick later, credits nothing. Refill is never more than the
// true one; on ticks coarser than 1 µs each admission forgoes under one tick
// of it. (On 1 µs ticks TIME's reading is the tick's start, sub is 0, and
// nothing is lost.)
// Every value the script stores or computes is an integer below 2^53, which
// a Lua double holds exactly; New guarantees cap + 2·m < 2^53 (see params.go):
//   - the time in µs is about 1.8e15, below 2^53 until the year 2255;
//   - 0 <= d <= cap <= 2^52;
//   - dt·m is computed only for dt <= ⌊d/m⌋+2, so it is at most d + 2m;
//   - idiv's q·b and (q+1)·b are at most a + b <= 2·cap.
//
// A clock reading at or before t refills nothing and never moves t back, so
// a server clock stepped backwards (or a failover to a node whose clock is
// behind) cannot add tokens. A reject writes nothing: the next call
// recomputes the same refill from the same (d, t). Numbers are written
// through string.format('%d'), never Lua's default number formatting, which
// may use an exponent.
//
//   - the expiry is set only when it is below 2^50 µs; a key full further
//     away than that (35 years) gets no TTL (a plain SET clears one an
//     earlier write set), which is exact too.
//
// One GET and one SET with PX: a hash and a separate PEXPIRE cost two more
// commands per decision.
//
// ARGV: cap, per, m (0 for no refill), n (tokens asked; 0 peeks), want
// (tokens to take when at least n are there, >= n; batching asks for more
// than n), q, head (the record's name and parameters, as stored).
//
// It returns {allowed, remaining, retry, reset, taken, sub}: remaining in
// whole tokens after the decision; retry the ticks from the current tick's
// start until n tokens exist (0 when allowed, -1 never); reset the same
// until full (0 when full, -1 never); taken the tokens consumed; sub the µs
// already gone of the current tick. A wait in µs is then ticks·q − sub.
const src = `
local cap = tonumber(ARGV[1])
local per = tonumber(ARGV[2])
local m = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local q = tonumber(ARGV[6])
local head = ARGV[7]
local function idiv(a, b)
  local r = math.floor(a / b)
  if r * b > a then r = r - 1 elseif (r + 1) * b <= a then r = r + 1 end
  return r
end
local function cdiv(a, b) return idiv(a + b - 1, b) end
local tm = redis.call('TIME')
local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local now = idiv(us, q)
local sub = us - now * q
local d, t = 0, now
local s = redis.call('GET', KEYS[1])
if s then
  if string.sub(s, 1, #head) ~= head then
    return redis.error_reply('ADMITPARAMS ' .. s)
  end
  local sp = string.find(s, ' ', #head + 1, true)
  d = tonumber(string.sub(s, #head + 1, sp - 1))
  t = tonumber(string.sub(s, sp + 1))
  if now > t then
    if m > 0 then
      local dt = now - t
      if dt > math.floor(d / m) + 1 then d = 0 else d = math.max(0, d - dt * m) end
    end
    t = now
  end
end
local ok, taken, retry = 1, 0, 0
if n > 0 then
  local avail = cap - d
  if avail >= n * per then
    taken = math.min(want, idiv(avail, per))
    d = d + taken * per
    -- Taken sub µs into tick now: the debt refills from the tick's end,
    -- so the next boundary credits nothing for a part of a tick.
    if sub > 0 and t == now then t = now + 1 end
    local v = head .. string.format('%d %d', d, t)
    local full = t - now + cdiv(d, m)
    if m > 0 and full < 1125899906842624 / q then
      redis.call('SET', KEYS[1], v, 'PX', string.format('%d', cdiv(full * q - sub, 1000)))
    else
      redis.call('SET', KEYS[1], v)
    end
  else
    ok = 0
    if m > 0 then retry = t - now + cdiv(n * per - avail, m) else retry = -1 end
  end
end
local reset = 0
if d > 0 then
  if m > 0 then reset = t - now + cdiv(d, m) else reset = -1 end
end
return {ok, idiv(cap - d, per), retry, reset, taken, sub}
`

// script is shared by every Limiter: go-redis runs it with EVALSHA and, on
// NOSCRIPT (a restarted or flushed server, a new Cluster node), with EVAL,
// which also loads it.
var script = redis.NewScript(src)
