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
// "<len>:<name> <cap> <per> <m> <q>", whose numbers the script matches out
// (measured inside Redis, one argument per limit cost about 1 µs less per
// call under three limits than the head plus four numbers on their own:
// every argument is parsed by Redis and handed to Lua as a string).
//
// The cost is in the server's CPU, which a Redis serves every client with,
// so the common case is kept short (measured per operation inside Redis's
// Lua on the loaded machine: tonumber about 140 ns, a string.match 330 ns,
// string.format 240 ns, a table 60 ns): a key written by the same limits
// holds their records in the call's order, each read with one comparison of
// its head and one match; a limit's parameters are matched out of its head
// once, and m and q of 1 never converted; the state lives in one table. Only a record out of order,
// of another Name or with other parameters makes the script parse the rest
// of the value.
//
// It returns {allowed, remaining, retry, reset, taken, idx}: remaining the
// deciding limit's whole tokens after the decision; retry the µs until every
// limit holds n (0 when allowed, -1 never); reset the µs until every limit is
// full (0 when full, -1 never); taken the tokens consumed from each limit;
// idx the deciding limit's position among the call's limits, from 1.
// Allowed, the deciding limit is the one with the fewest whole tokens left;
// denied, the one that needs the longest (ties: the first). Waits are exact
// to the µs, rounded up.
const src = `
local n = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local strict = ARGV[3] == '1'
local k = #ARGV - 3
local NEVER = 9007199254740992
local function idiv(a, b)
  if b == 1 then return a end
  local r = math.floor(a / b)
  if r * b > a then r = r - 1 elseif (r + 1) * b <= a then r = r + 1 end
  return r
end
local tm = redis.call('TIME')
local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
-- upto is the µs from now until ticks after tick t (t >= now) on ticks of
-- q µs, counted from the current tick's start so that every product stays
-- near the wait itself; NEVER at or beyond 2^53.
local function upto(t, ticks, q)
  local now = idiv(us, q)
  local w = (t - now + ticks) * q - (us - now * q)
  if w >= NEVER then return NEVER end
  return w
end
-- full is the µs until debt d at tick t is gone under (m, q): 0 when full,
-- NEVER when it never is.
local function full(d, t, m, q)
  if d == 0 then return 0 end
  if m == 0 then return NEVER end
  return upto(t, idiv(d + m - 1, m), q)
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
  return d, t
end
-- records parses stored records "<len>:<name> <cap> <per> <m> <q> <d> <t>"
-- joined by newlines into {tag, p (the four parameters), d, t, raw}, or
-- returns nil if one does not parse.
local function records(s)
  local list, i = {}, 1
  while i <= #s do
    local e = string.find(s, '\n', i, true) or #s + 1
    local c = string.find(s, ':', i, true)
    local len = c and c < e and tonumber(string.sub(s, i, c - 1))
    if not len then return nil end
    local p, d, t = string.match(string.sub(s, c + len + 2, e - 1), '^(%d+ %d+ %d+ %d+) (%d+) (%d+)$')
    if not p then return nil end
    list[#list + 1] = {tag = string.sub(s, i, c + len), p = p, d = tonumber(d), t = tonumber(t), raw = string.sub(s, i, e - 1)}
    i = e + 1
  end
  return list
end
local s = redis.call('GET', KEYS[1]) or ''
-- D and T: each limit's debt and time, refilled to now. A key written by
-- the same limits holds their records in the call's order: the cursor i
-- reads them with one comparison of the head each. Anything else (a record
-- out of order, of another Name, with other parameters) parses the rest of
-- the value, from the cursor, into list.
-- L holds six numbers per limit: cap, per, m, q, d, t (constructed for
-- three limits at once; more grow it).
local L = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
local i, list, changed = 1, nil, false
local ok, retry, worst, avail = 1, 0, 1, want
for j = 1, k do
  local h = ARGV[3 + j]
  local cap, per, m, q = string.match(h, ' (%d+) (%d+) (%d+) (%d+)$')
  cap, per = tonumber(cap), tonumber(per)
  -- tonumber costs more than comparing interned strings; 1 is common.
  if m == '1' then m = 1 else m = tonumber(m) end
  if q == '1' then q = 1 else q = tonumber(q) end
  local d, t = 0, idiv(us, q)
  if not list and i <= #s and string.byte(s, i + #h) == 32 and string.sub(s, i, i + #h - 1) == h then
    local sd, st, e = string.match(s, '^(%d+) (%d+)()', i + #h + 1)
    d, t = advance(tonumber(sd), tonumber(st), m, q)
    i = e + 1
  elseif i <= #s then
    -- The records before i are the earlier limits', read in order.
    list = list or records(string.sub(s, i))
    if not list then return redis.error_reply('ADMITFORMAT ' .. s) end
    local c = string.find(h, ':', 1, true)
    local tag = string.sub(h, 1, c + tonumber(string.sub(h, 1, c - 1)))
    for _, r in ipairs(list) do
      if r.tag == tag then
        r.call = true
        if tag .. ' ' .. r.p == h then
          d, t = advance(r.d, r.t, m, q)
        elseif strict then
          return redis.error_reply('ADMITPARAMS ' .. j .. ' ' .. r.p)
        else
          -- Carry over: advanced under the old parameters, converted to
          -- the new units rounding down, clamped to the new capacity.
          local oc, oper, om, oq = string.match(r.p, '^(%d+) (%d+) (%d+) (%d+)$')
          oc, oper, om, oq = tonumber(oc), tonumber(oper), tonumber(om), tonumber(oq)
          local od, ot = advance(r.d, r.t, om, oq)
          local bal = oc - od
          local whole = idiv(bal, oper)
          if whole >= idiv(cap, per) then
            d = 0
          else
            -- The fraction of a token, f/oper·per units, rounded down:
            -- exactly while f·per is exact, else less one unit for the
            -- double's rounding.
            local f = bal - whole * oper
            local part
            if f * per < NEVER then part = idiv(f * per, oper) else part = math.max(0, math.floor(f / oper * per) - 1) end
            d = cap - (whole * per + part)
          end
          t = math.max(idiv(ot * oq + q - 1, q), idiv(us + q - 1, q))
          changed = true
        end
      end
    end
  end
  local x = 6 * (j - 1)
  L[x + 1], L[x + 2], L[x + 3], L[x + 4], L[x + 5], L[x + 6] = cap, per, m, q, d, t
  local a = cap - d
  if a < n * per then
    ok = 0
    local w = NEVER
    if m > 0 then w = upto(t, idiv(n * per - a + m - 1, m), q) end
    if w > retry then retry, worst = w, j end
  else
    avail = math.min(avail, idiv(a, per))
  end
end
local taken = 0
if ok == 1 and n > 0 then taken = avail end
-- Take, the Decision's numbers, and the call's records that are not full.
local rem, fewest, reset, v = nil, 1, 0, nil
for j = 1, k do
  local x = 6 * (j - 1)
  local cap, per, m, q, d, t = L[x + 1], L[x + 2], L[x + 3], L[x + 4], L[x + 5], L[x + 6]
  if taken > 0 then
    d = d + taken * per
    -- Taken inside tick now: the debt refills from the tick's end, so the
    -- next boundary credits nothing for a part of a tick.
    local now = idiv(us, q)
    if t == now and us > now * q then t = now + 1 end
  end
  local w = idiv(cap - d, per)
  if rem == nil or w < rem then rem, fewest = w, j end
  reset = math.max(reset, full(d, t, m, q))
  if d > 0 then
    local r = ARGV[3 + j] .. string.format(' %d %d', d, t)
    if v then v = v .. '\n' .. r else v = r end
  end
end
if ok == 1 then worst = fewest end
-- Write, with the other Names' records that are not full.
if taken > 0 or changed then
  local ttl = reset
  if not list and i <= #s then
    list = records(string.sub(s, i))
    if not list then return redis.error_reply('ADMITFORMAT ' .. s) end
  end
  for _, r in ipairs(list or {}) do
    if not r.call then
      local _, _, m, q = string.match(r.p, '^(%d+) (%d+) (%d+) (%d+)$')
      m, q = tonumber(m), tonumber(q)
      local d, t = advance(r.d, r.t, m, q)
      if d > 0 then
        if v then v = v .. '\n' .. r.raw else v = r.raw end
        ttl = math.max(ttl, full(d, t, m, q))
      end
    end
  end
  if not v then
    redis.call('DEL', KEYS[1])
  elseif ttl < 1125899906842624 then
    redis.call('SET', KEYS[1], v, 'PX', string.format('%d', idiv(ttl + 999, 1000)))
  else
    redis.call('SET', KEYS[1], v)
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
