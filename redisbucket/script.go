package redisbucket

import "github.com/redis/go-redis/v9"

// src is the one script every decision runs, atomically, on the node that
// owns the key. It decides all of the call's limits together: one key, one
// round trip, the server's clock.
//
// The key holds a string of records, one per limit Name the key is not full
// under, joined by newlines:
//
//	<len(name)>:<name> <cap> <per> <m> <q> <d> <t>
//
// (Names are printable ASCII, so never hold a newline; the length prefix lets
// them hold spaces and colons.) cap (capacity in units), per (units per
// token), m (units per tick) and q (µs per tick) are the limit's parameters,
// so a record is never misread by a call that brings other ones for its Name.
// d is the bucket's debt, capacity minus balance, in units, as of t, the
// server time in ticks of q microseconds at which it was last written. Debt
// shrinks by m units per tick of server time; a Name without a record has no
// debt (a full bucket). Refill happens at whole ticks, so a reading inside a
// tick counts only up to its start, and an admission inside a tick is booked
// at the tick's end (t = now+1): the next boundary, a part of a tick later,
// credits nothing. Refill is never more than the true one; on ticks coarser
// than 1 µs each admission forgoes under one tick of it.
//
// Every value the script stores or computes is an integer below 2^53, which
// a Lua double holds exactly; newParams guarantees cap + 2·m < 2^53:
//   - the time in µs is about 1.8e15, below 2^53 until the year 2255;
//   - 0 <= d <= cap <= 2^52;
//   - dt·m is computed only for dt <= ⌊d/m⌋+2, so it is at most d + 2m;
//   - idiv's q·b and (q+1)·b are at most a + b <= 2·cap;
//   - a wait in µs at or above 2^53 (285 years) is returned as -1, never.
//
// A call's limit whose Name has a record with other parameters either
// refuses (strict, the limiter's own fixed limits: an ADMITPARAMS error
// reply naming the limit's index and the stored parameters, nothing written)
// or carries the balance over (limits chosen per call): the record is
// advanced to now under its old parameters, its balance converted to the new
// units rounding down, clamped to the new capacity, and its time moved to the
// new tick's end. A conversion is written even by a peek or a denial, so
// that the old parameters stop applying at the call that changed them.
//
// A clock reading at or before t refills nothing and never moves t back, so
// a server clock stepped backwards (or a failover to a node whose clock is
// behind) cannot add tokens. A reject writes nothing but conversions: the
// next call recomputes the same refill from the same (d, t). Numbers are
// written through string.format('%d'), never Lua's default number
// formatting, which may use an exponent.
//
// A write drops the records that are full, which is exact (a full bucket and
// a Name without a record answer alike), deletes the key when none is left,
// and sets PX to the moment the last record would be full; a record with no
// refill, or a moment 2^50 µs (35 years) or more away, leaves no TTL (a
// plain SET clears one an earlier write set), which is exact too. One GET
// and one SET with PX: a hash and a separate PEXPIRE cost more commands per
// decision.
//
// ARGV: n (tokens asked; 0 peeks), want (tokens to take from every limit
// when each holds at least n, >= n; batching asks for more than n), strict
// ("1" or "0"), then one argument per limit, its record's head
// "<len>:<name> <cap> <per> <m> <q>".
//
// It returns {allowed, remaining, retry, reset, taken, idx}: remaining the
// deciding limit's whole tokens after the decision; retry the µs until every
// limit holds n (0 when allowed, -1 never); reset the µs until every limit is
// full (0 when full, -1 never); taken the tokens consumed from each limit;
// idx the deciding limit's position in ARGV, from 1. Allowed, the deciding
// limit is the one with the fewest whole tokens left; denied, the one that
// needs the longest (ties: the first). Waits are exact to the µs, rounded
// up.
const src = `
local n = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local strict = ARGV[3] == '1'
local k = #ARGV - 3
local NEVER = 9007199254740992
local function idiv(a, b)
  local r = math.floor(a / b)
  if r * b > a then r = r - 1 elseif (r + 1) * b <= a then r = r + 1 end
  return r
end
local function cdiv(a, b) return idiv(a + b - 1, b) end
local tm = redis.call('TIME')
local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
-- head splits "<len>:<name> <rest>" at position i into the tag
-- "<len>:<name>", the rest up to the next newline, and where the next
-- record starts.
local function head(s, i)
  local c = string.find(s, ':', i, true)
  if not c then return nil end
  local len = tonumber(string.sub(s, i, c - 1))
  if not len then return nil end
  local e = c + len
  local nl = string.find(s, '\n', e + 1, true)
  if nl then return string.sub(s, i, e), string.sub(s, e + 2, nl - 1), nl + 1 end
  return string.sub(s, i, e), string.sub(s, e + 2), #s + 1
end
-- numbers parses "cap per m q".
local function numbers(p)
  local c, per, m, q = string.match(p, '^(%d+) (%d+) (%d+) (%d+)$')
  return tonumber(c), tonumber(per), tonumber(m), tonumber(q)
end
-- advance refills debt d from tick t to now under (m, q).
local function advance(d, t, m, q)
  local now = idiv(us, q)
  if now > t then
    if m > 0 then
      local dt = now - t
      if dt > math.floor(d / m) + 1 then d = 0 else d = math.max(0, d - dt * m) end
    end
    t = now
  end
  return d, t, now
end
-- upto is the µs from now until ticks after tick t (t >= now), on ticks of
-- q µs: counted from the current tick's start, now, so that every product
-- stays near the wait itself; NEVER at or beyond 2^53.
local function upto(t, ticks, q)
  local now = idiv(us, q)
  local w = (t - now + ticks) * q - (us - now * q)
  if w >= NEVER then return NEVER end
  return w
end
-- full is the µs from now until debt d at tick t is gone under (m, q):
-- 0 when full, NEVER when it never is.
local function full(d, t, m, q)
  if d == 0 then return 0 end
  if m == 0 then return NEVER end
  return upto(t, cdiv(d, m), q)
end
-- The stored records, by tag, in order.
local stored, order = {}, {}
local s = redis.call('GET', KEYS[1])
if s then
  local i = 1
  while i <= #s do
    local tag, rest, nx = head(s, i)
    local p, d, t
    if tag then p, d, t = string.match(rest, '^(%d+ %d+ %d+ %d+) (%d+) (%d+)$') end
    if not p then return redis.error_reply('ADMITFORMAT ' .. s) end
    stored[tag] = {p = p, d = tonumber(d), t = tonumber(t)}
    order[#order + 1] = tag
    i = nx
  end
end
-- The call's limits, refilled to now.
local L = {}
local changed = false
for j = 1, k do
  local tag, p = head(ARGV[3 + j], 1)
  local cap, per, m, q = numbers(p)
  local r = {tag = tag, p = p, cap = cap, per = per, m = m, q = q, d = 0, t = idiv(us, q)}
  local st = stored[tag]
  if st and st.p == p then
    r.d, r.t = advance(st.d, st.t, m, q)
  elseif st then
    if strict then return redis.error_reply('ADMITPARAMS ' .. j .. ' ' .. st.p) end
    -- Carry over: advanced under the old parameters, converted to the new
    -- units rounding down, clamped to the new capacity.
    local oc, oper, om, oq = numbers(st.p)
    local od, ot = advance(st.d, st.t, om, oq)
    local bal = oc - od
    local whole = idiv(bal, oper)
    if whole >= idiv(cap, per) then
      r.d = 0
    else
      -- The fraction of a token, f/oper·per units, rounded down: exactly
      -- while f·per is exact, else less one unit for the double's rounding.
      local f = bal - whole * oper
      local part
      if f * per < NEVER then part = idiv(f * per, oper) else part = math.max(0, math.floor(f / oper * per) - 1) end
      r.d = cap - (whole * per + part)
    end
    r.t = math.max(cdiv(ot * oq, q), cdiv(us, q))
    changed = true
  end
  L[j] = r
end
-- Decide.
local ok, taken = 1, 0
local retry, worst = 0, 1
local avail = want
for j = 1, k do
  local r = L[j]
  local a = r.cap - r.d
  if a < n * r.per then
    ok = 0
    local w = NEVER
    if r.m > 0 then w = upto(r.t, cdiv(n * r.per - a, r.m), r.q) end
    if w > retry then retry, worst = w, j end
  else
    avail = math.min(avail, idiv(a, r.per))
  end
end
if ok == 1 and n > 0 then
  taken = avail
  for j = 1, k do
    local r = L[j]
    r.d = r.d + taken * r.per
    -- Taken inside tick now: the debt refills from the tick's end, so the
    -- next boundary credits nothing for a part of a tick.
    local now = idiv(us, r.q)
    if r.t == now and us > now * r.q then r.t = now + 1 end
  end
end
-- The Decision's numbers.
local rem, fewest, reset = nil, 1, 0
for j = 1, k do
  local r = L[j]
  local w = idiv(r.cap - r.d, r.per)
  if rem == nil or w < rem then rem, fewest = w, j end
  reset = math.max(reset, full(r.d, r.t, r.m, r.q))
end
if ok == 1 then worst = fewest end
-- Write: the call's records and the other stored ones, full ones dropped.
if taken > 0 or changed then
  local out, ttl = {}, 0
  local inCall = {}
  for j = 1, k do inCall[L[j].tag] = L[j] end
  local function put(tag, p, d, t, m, q)
    if d > 0 then
      out[#out + 1] = tag .. ' ' .. p .. string.format(' %d %d', d, t)
      ttl = math.max(ttl, full(d, t, m, q))
    end
  end
  for _, tag in ipairs(order) do
    local r = inCall[tag]
    if r then
      put(tag, r.p, r.d, r.t, r.m, r.q)
      inCall[tag] = nil
    else
      local st = stored[tag]
      local _, _, m, q = numbers(st.p)
      local d, t = advance(st.d, st.t, m, q)
      put(tag, st.p, d, t, m, q)
    end
  end
  for j = 1, k do
    local r = L[j]
    if inCall[r.tag] then put(r.tag, r.p, r.d, r.t, r.m, r.q) end
  end
  if #out == 0 then
    redis.call('DEL', KEYS[1])
  elseif ttl < 1125899906842624 then
    redis.call('SET', KEYS[1], table.concat(out, '\n'), 'PX', string.format('%d', cdiv(ttl, 1000)))
  else
    redis.call('SET', KEYS[1], table.concat(out, '\n'))
  end
end
if retry >= NEVER then retry = -1 end
if reset >= NEVER then reset = -1 end
return {ok, rem, retry, reset, taken, worst}
`

// script is shared by every Limiter: go-redis runs it with EVALSHA and, on
// NOSCRIPT (a restarted or flushed server, a new Cluster node), with EVAL,
// which also loads it.
var script = redis.NewScript(src)
